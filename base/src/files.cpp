// Directory creation and atomic file writes. See acc/files.hpp.
#include "acc/files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <filesystem>
#include <ios>
#include <memory>
#include <system_error>

namespace acc::config {

FileError::FileError(const std::string& action, std::string path_, std::string reason_, int err)
    : std::ios_base::failure(action, std::error_code(err, std::generic_category())),
      path(std::move(path_)),
      reason(std::move(reason_)),
      message_(action + " '" + path + "': " + reason) {}

namespace {

[[noreturn]] void fail(const char* what, const std::string& path, int err) {
  throw FileError(what, path, std::strerror(err), err);
}

// After a failed system call: errno is read first, before anything (building a message) can change it.
[[noreturn]] void fail_errno(const char* what, const std::string& path) { fail(what, path, errno); }

// Closes the descriptor and removes the temporary file unless the write completed.
struct TempFile {
  std::string path;
  int fd = -1;
  bool done = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!done) ::unlink(path.c_str());
  }
};

// Writes everything from `pieces` at the descriptor's position, retrying short and interrupted writes.
void write_all(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    // At most 1 MiB a call: larger buffered writes from big buffers were measured several times slower into
    // Linux's page cache (bench/checkpoint.py); 1 MiB calls run at memory speed.
    constexpr size_t kMaxWrite = size_t{1} << 20;
    ssize_t n = ::write(fd, bytes.data(), std::min(bytes.size(), kMaxWrite));
    const int err = n < 0 ? errno : EIO;
    if (n < 0 && err == EINTR) continue;
    if (n <= 0) fail("cannot write", path, err);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

bool set_direct(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, on ? flags | O_DIRECT : flags & ~O_DIRECT) == 0;
}

// Files of 64 MiB and more (checkpoints) go around the page cache (O_DIRECT), through an aligned buffer: that
// runs at the disk's sequential bandwidth, where buffered writes stall in the kernel's dirty-page throttling,
// and a checkpoint does not push the training process's memory out of the cache. Filesystems without O_DIRECT
// (tmpfs), and the unaligned tail, are written buffered.
void write_pieces(int fd, const std::vector<std::string_view>& pieces, size_t total, const std::string& path) {
  constexpr size_t kDirectMin = size_t{64} << 20, kAlign = 4096, kBuffer = size_t{16} << 20;
  std::unique_ptr<char, decltype(&std::free)> buffer(nullptr, &std::free);
  if (total >= kDirectMin && set_direct(fd, true))
    buffer.reset(static_cast<char*>(std::aligned_alloc(kAlign, kBuffer)));
  if (!buffer) {
    for (std::string_view piece : pieces) write_all(fd, piece, path);
    return;
  }
  bool direct = true;
  size_t used = 0;
  const auto flush = [&](size_t n) {
    std::string_view block(buffer.get(), n);
    while (direct && !block.empty()) {
      ssize_t w = ::write(fd, block.data(), block.size());
      if (w < 0 && errno == EINTR) continue;
      // The filesystem refused direct I/O, or wrote a part that leaves the position unaligned: go on buffered.
      if (w < 0 && errno != EINVAL) fail_errno("cannot write", path);
      if (w <= 0 || static_cast<size_t>(w) % kAlign != 0) {
        if (w > 0) block.remove_prefix(static_cast<size_t>(w));
        direct = false;
        if (!set_direct(fd, false)) fail_errno("cannot write", path);
        break;
      }
      block.remove_prefix(static_cast<size_t>(w));
    }
    write_all(fd, block, path);
  };
  for (std::string_view piece : pieces)
    while (!piece.empty()) {
      const size_t n = std::min(piece.size(), kBuffer - used);
      std::memcpy(buffer.get() + used, piece.data(), n);
      used += n;
      piece.remove_prefix(n);
      if (used == kBuffer) {
        flush(used);
        used = 0;
      }
    }
  const size_t aligned = used / kAlign * kAlign;
  flush(aligned);
  if (direct && !set_direct(fd, false)) fail_errno("cannot write", path);
  write_all(fd, std::string_view(buffer.get() + aligned, used - aligned), path);
}

}  // namespace

// Some filesystems cannot sync a directory (EINVAL); the entries are in place there all the same.
void sync_directory(const std::string& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail_errno("cannot sync directory", dir);
  int rc = ::fsync(dfd), err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL) fail("cannot sync directory", dir, err);
}

std::string read_file(const std::string& path, size_t max_bytes) {
  // Non-blocking: opening a FIFO with no writer must not wait (the descriptor is refused just below anyway).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail_errno("cannot read", path);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st{};
  if (::fstat(fd, &st) != 0) fail_errno("cannot read", path);
  // Only regular files: a FIFO blocks, a device such as /dev/zero never ends, a directory has no bytes.
  if (!S_ISREG(st.st_mode))
    throw FileError("cannot read", path, S_ISDIR(st.st_mode) ? "it is a directory" : "it is not a regular file",
                    S_ISDIR(st.st_mode) ? EISDIR : EINVAL);
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    throw FileError("cannot read", path,
                    "it holds " + std::to_string(st.st_size) + " bytes, more than the limit of " +
                        std::to_string(max_bytes),
                    EFBIG);
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno("cannot read", path);
    if (n == 0) break;  // shrank while read
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

namespace {

// Why `name` cannot be one component of a path ("" when it can).
std::string bad_component(std::string_view name) {
  if (name.empty()) return "it is empty";
  if (name == "." || name == "..") return "'" + std::string(name) + "' names a folder, not a file in it";
  if (name.find('/') != std::string_view::npos) return "it holds a '/'";
  if (name.find('\0') != std::string_view::npos) return "it holds a NUL character";
  if (name.size() > 255) return "it is longer than 255 bytes (NAME_MAX)";
  return "";
}

[[noreturn]] void outside(const std::string& what, const std::string& dir, std::string_view name,
                          const std::string& why) {
  std::string shown(name.substr(0, 300));
  for (char& c : shown)
    if (c == '\0') c = '?';
  throw FileError("refusing " + what, dir + "/" + shown, why + ": it must stay inside '" + dir + "'", EINVAL);
}

}  // namespace

std::string child_path(const std::string& dir, std::string_view name, const std::string& what) {
  if (const std::string why = bad_component(name); !why.empty()) outside(what, dir, name, why);
  return dir + "/" + std::string(name);
}

std::string inside_path(const std::string& dir, std::string_view relative, const std::string& what) {
  if (relative.empty()) outside(what, dir, relative, "it is empty");
  if (relative.front() == '/') outside(what, dir, relative, "it is an absolute path");
  for (size_t start = 0; start <= relative.size();) {
    const size_t slash = std::min(relative.find('/', start), relative.size());
    if (const std::string why = bad_component(relative.substr(start, slash - start)); !why.empty())
      outside(what, dir, relative, "a part of it is not a plain name (" + why + ")");
    start = slash + 1;
  }
  return dir + "/" + std::string(relative);
}

void make_directories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create directory", dir, ec.value());
  // create_directories reports success when dir exists, even as a file.
  if (!std::filesystem::is_directory(dir, ec)) fail("cannot create directory", dir, ENOTDIR);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, std::vector<std::string_view>{bytes});
}

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  size_t total = 0;
  for (std::string_view piece : pieces) total += piece.size();
  // A hidden name in the same directory (rename is atomic only within one filesystem), unique per process and call
  // (threads saving at once never share one); O_EXCL skips a leftover of a crashed process that had the same pid.
  static std::atomic<unsigned> counter{0};
  const auto temp_name = [&] {
    return dir + "/." + base + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  };
  TempFile tmp;
  // First choice: an unnamed file (O_TMPFILE), given a name only once complete and synced, so a process killed
  // while writing leaves nothing behind. Filesystems without O_TMPFILE get a named temporary file from the start.
  tmp.fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  tmp.done = true;  // nothing named yet
  for (int attempt = 0; tmp.fd < 0; ++attempt) {
    tmp.path = temp_name();
    tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    const int err = errno;
    tmp.done = tmp.fd < 0;
    if (tmp.fd < 0 && (err != EEXIST || attempt >= 100)) fail("cannot write", path, err);
  }
  const bool unnamed = tmp.path.empty();
  write_pieces(tmp.fd, pieces, total, path);
  // The data must be on disk before the rename makes it visible under path.
  if (::fsync(tmp.fd) != 0) fail_errno("cannot write", path);
  for (int attempt = 0; unnamed && tmp.path.empty(); ++attempt) {
    const std::string name = temp_name();
    const std::string proc = "/proc/self/fd/" + std::to_string(tmp.fd);
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      tmp.path = name;
      tmp.done = false;
    } else if (errno != EEXIST || attempt >= 100) {
      fail_errno("cannot write", path);
    }
  }
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) fail_errno("cannot write", path);
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) fail_errno("cannot write", path);
  tmp.done = true;
  sync_directory(dir);
}

void rename_no_replace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
  int err = errno;
  // Filesystems without the flag: a plain rename, which cannot replace a file by a folder nor a non-empty folder.
  if (err == EINVAL || err == ENOSYS) {
    struct stat st{};
    if (::lstat(to.c_str(), &st) == 0) fail("cannot rename into place", to, EEXIST);
    if (::rename(from.c_str(), to.c_str()) == 0) return;
    err = errno;
  }
  if (err == EEXIST || err == ENOTEMPTY)
    throw FileError("cannot rename into place", to, "it exists already (made by another process meanwhile?)", EEXIST);
  fail("cannot rename into place", to, err);
}

bool exchange_paths(const std::string& a, const std::string& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  const int err = errno;
  if (err == EINVAL || err == ENOSYS) return false;
  fail(("cannot exchange '" + a + "' with").c_str(), b, err);
}

void remove_files(const std::string& dir, const std::vector<std::string>& names, const std::string& what) {
  for (const std::string& name : names) {
    const std::string path = child_path(dir, name, what);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail_errno("cannot remove", path);
  }
}

void remove_files_then_folder(const std::string& dir, const std::vector<std::string>& names, const std::string& what) {
  remove_files(dir, names, what);
  // ENOTEMPTY / EEXIST: somebody else's files are in it, and they stay, with the folder.
  if (::rmdir(dir.c_str()) != 0 && errno != ENOTEMPTY && errno != EEXIST && errno != ENOENT)
    fail_errno("cannot remove", dir);
}

StagingFolder::StagingFolder(std::string dir) : dir_(std::move(dir)) {
  // The name is libacc's own; whether a writer is alive in it says the lock (a dead writer's is let go).
  if (::mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) fail_errno("cannot create directory", dir_);
  struct stat st{};
  if (::lstat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw FileError("cannot use", dir_, "it exists and is not a folder: move it away", ENOTDIR);
  const std::string lock = dir_ + "/" + kLockName;
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (lock_fd_ < 0) fail_errno("cannot create", lock);
  const bool locked = ::flock(lock_fd_, LOCK_EX | LOCK_NB) == 0;
  const int err = errno;
  // A writer that has just finished renamed the folder away, or unlinked the lock, before letting go of it.
  struct stat held{}, named{};
  const bool same = ::fstat(lock_fd_, &held) == 0 && ::lstat(lock.c_str(), &named) == 0 && held.st_ino == named.st_ino;
  if (!locked || !same) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (!locked && err != EWOULDBLOCK) fail("cannot lock", lock, err);
    throw FileError("cannot use", dir_, "another process is saving into it right now", EBUSY);
  }
  // Ours now: what a writer that died here left goes, the lock stays.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec))
    if (e.path().filename() != kLockName) std::filesystem::remove_all(e.path(), ec);
  if (ec) fail("cannot empty the leftover", dir_, ec.value());
}

StagingFolder::~StagingFolder() {
  if (!moved_) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);  // all of it is this writer's
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void StagingFolder::moved_to(const std::string& place) {
  moved_ = true;
  // Unlinked while still locked: nobody can take the folder for a leftover before it is in place.
  const std::string lock = place + "/" + kLockName;
  if (::unlink(lock.c_str()) != 0) fail_errno("cannot remove", lock);
  ::close(lock_fd_);
  lock_fd_ = -1;
}

}  // namespace acc::config
