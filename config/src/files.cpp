// Directory creation and atomic file writes. See acc/files.hpp.
#include "acc/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <ios>
#include <system_error>

namespace acc::config {
namespace {

[[noreturn]] void fail(const char* what, const std::string& path, int err) {
  throw std::ios_base::failure(std::string(what) + " '" + path + "'", std::error_code(err, std::generic_category()));
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

// The renames in a directory are durable only once it is synced. Some filesystems cannot sync a directory
// (EINVAL); the entries are in place there all the same.
void sync_directory(const std::string& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail_errno("cannot sync directory", dir);
  int rc = ::fsync(dfd), err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL) fail("cannot sync directory", dir, err);
}

}  // namespace

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
  // A hidden name in the same directory (rename is atomic only within one filesystem), unique per process and call;
  // O_EXCL skips a leftover of a crashed process that had the same pid.
  static std::atomic<unsigned> counter{0};
  TempFile tmp;
  for (int attempt = 0; tmp.fd < 0; ++attempt) {
    tmp.path = dir + "/." + base + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    const int err = errno;
    if (tmp.fd < 0 && (err != EEXIST || attempt >= 100)) {
      tmp.done = true;  // nothing was created
      fail("cannot write", path, err);
    }
  }
  for (std::string_view piece : pieces) {
    while (!piece.empty()) {
      ssize_t n = ::write(tmp.fd, piece.data(), piece.size());
      const int err = n < 0 ? errno : EIO;
      if (n < 0 && err == EINTR) continue;
      if (n <= 0) fail("cannot write", path, err);
      piece.remove_prefix(static_cast<size_t>(n));
    }
  }
  // The data must be on disk before the rename makes it visible under path.
  if (::fsync(tmp.fd) != 0) fail_errno("cannot write", path);
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) fail_errno("cannot write", path);
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) fail_errno("cannot write", path);
  tmp.done = true;
  sync_directory(dir);
}

void replace_directory(const std::string& staged, const std::string& dir) {
  std::error_code ec;
  const std::filesystem::path target(dir);
  const std::string parent = target.has_parent_path() ? target.parent_path().string() : ".";
  const std::string aside = dir + ".old." + std::to_string(::getpid());
  const bool existed = std::filesystem::exists(target, ec);
  if (existed && ::rename(dir.c_str(), aside.c_str()) != 0) fail_errno("cannot move aside", dir);
  if (::rename(staged.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    if (existed) (void)::rename(aside.c_str(), dir.c_str());  // put the old one back
    fail(("cannot rename '" + staged + "' to").c_str(), dir, err);
  }
  sync_directory(parent);
  if (existed) std::filesystem::remove_all(aside, ec);  // best effort: the new directory is in place
}

}  // namespace acc::config
