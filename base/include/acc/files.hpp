// Creating directories and writing files so that a crash never leaves a half-written one. Torch-free; used by the
// launcher (config files, log directories), the config library (the run record) and libacc (checkpoints).
// Failures throw FileError (a std::ios_base::failure) naming the path, with code() holding the errno (libacc maps it
// to ACC_ERR_IO).
#pragma once

#include <cstdint>
#include <ios>
#include <string>
#include <string_view>
#include <vector>

namespace acc::config {

// What these functions throw: "<action> '<path>': <reason>", with code() holding the errno.
struct FileError : std::ios_base::failure {
  FileError(const std::string& action, std::string path, std::string reason, int err);
  const char* what() const noexcept override { return message_.c_str(); }
  std::string path, reason;

 private:
  std::string message_;
};

// A whole regular file's bytes; std::ios_base::failure naming it when it cannot be read, is not a regular file (a
// FIFO, a device, a directory: never a blocking or endless read) or is larger than max_bytes.
std::string read_file(const std::string& path, size_t max_bytes = SIZE_MAX);

// Paths libacc derives from data (a tracker's metric name, a checkpoint manifest's entry, a shard named by an index)
// stay inside the folder they were given: child_path accepts one plain name (not empty, no '/', not "." or "..", no
// NUL, at most 255 bytes) and inside_path a relative path of such names ("train/loss"). Both return dir + "/" + name
// or throw FileError naming `what`, the folder and the name.
std::string child_path(const std::string& dir, std::string_view name, const std::string& what);
std::string inside_path(const std::string& dir, std::string_view relative, const std::string& what);

// Creates dir and its missing parents; an existing directory is fine, an existing file is not.
void make_directories(const std::string& dir);

// Replaces path with bytes atomically: writes a temporary file in the same directory, fsyncs it, renames it over
// path, and fsyncs the directory, so readers see the old file or the new one, never a part. The directory must
// exist (make_directories). The file is created with mode 0644 less the umask.
void write_file_atomic(const std::string& path, std::string_view bytes);
// The same, for a file made of several pieces written in order (a header and tensor data: no copy into one buffer).
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);

// fsyncs a directory, so that the renames in it are durable (a filesystem that cannot sync one, EINVAL, is fine).
void sync_directory(const std::string& dir);

// rename(2) that never replaces what is at `to` (renameat2's RENAME_NOREPLACE): FileError (EEXIST) naming `to`
// when something is there already, so two writers can never both believe a name is theirs.
void rename_no_replace(const std::string& from, const std::string& to);

// Swaps two paths atomically (renameat2's RENAME_EXCHANGE); false where the filesystem cannot (then nothing moved).
bool exchange_paths(const std::string& a, const std::string& b);

// Removes the files named (each a plain name inside dir: child_path); one already gone is fine.
void remove_files(const std::string& dir, const std::vector<std::string>& names, const std::string& what);
// How libacc deletes a folder it made without touching what anybody else put there: removes only the files named,
// then the folder itself if nothing else is left in it.
void remove_files_then_folder(const std::string& dir, const std::vector<std::string>& names, const std::string& what);

// A folder that one writer at a time fills before it gets its final name (a checkpoint being saved). The name is
// libacc's own temporary one; the constructor makes the folder (its parent must exist) with a lock file in it,
// locked (flock) while this object lives. A folder of that name whose lock nobody holds is a dead writer's: emptied
// and reused; one a live writer holds is refused with a FileError (EBUSY) naming it. Rename the folder (lock file
// and all) to its place, then call moved_to(place): the lock file goes from there. Unless moved, the destructor
// removes the folder.
class StagingFolder {
 public:
  explicit StagingFolder(std::string dir);
  ~StagingFolder();
  StagingFolder(const StagingFolder&) = delete;
  StagingFolder& operator=(const StagingFolder&) = delete;
  const std::string& path() const { return dir_; }
  void moved_to(const std::string& place);

  // The name of the lock file inside (never a file of the folder's contents).
  static constexpr const char* kLockName = ".acc-staging-lock";

 private:
  std::string dir_;
  int lock_fd_ = -1;
  bool moved_ = false;
};

}  // namespace acc::config
