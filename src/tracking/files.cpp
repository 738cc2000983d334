// File helpers of the trackers: append-only record files, clocks, paths.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ios>
#include <stdexcept>
#include <system_error>

#include <acc/files.hpp>

#include "tracking/tracking.hpp"

#include "acc/config.hpp"

namespace acc::tracking {

void io_error(const std::string& what, const std::string& path, int err) {
  throw std::ios_base::failure(what + " '" + path + "': " + std::strerror(err),
                               std::error_code(err, std::generic_category()));
}

double wall_time() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

int64_t wall_time_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string name_path(const std::string& dir, std::string_view relative, const std::string& what, bool nested) {
  try {
    return nested ? config::inside_path(dir, relative, what) : config::child_path(dir, relative, what);
  } catch (const config::FileError& e) {
    throw std::invalid_argument(e.what());  // a bad name, not an I/O failure
  }
}

void check_project_name(const std::string& project_name) {
  name_path("logging_dir", project_name, "project_name (one plain name)", /*nested=*/false);
}

void refuse_unless_regular(const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return;  // absent: it will be made
  if (S_ISLNK(st.st_mode))
    throw std::invalid_argument("'" + path +
                                "' is a symbolic link; trackers write only files they made, not through links");
  if (!S_ISREG(st.st_mode))
    throw std::invalid_argument("'" + path + "' is not a regular file; trackers write only files they made");
}

AppendFile::AppendFile(const std::string& path, int flags) : path_(path) {
  if (!(flags & O_EXCL)) refuse_unless_regular(path);  // O_EXCL refuses any existing name itself
  // O_NOFOLLOW and O_NONBLOCK keep a link or a FIFO swapped in after the check from being followed or waited on.
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | flags, 0644);
  if (fd_ < 0) io_error("cannot open", path, errno);
  struct stat st{};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    close();
    throw std::invalid_argument("'" + path + "' is not a regular file; trackers write only files they made");
  }
  ::fcntl(fd_, F_SETFL, O_APPEND);
}

AppendFile AppendFile::create(const std::string& path) { return AppendFile(path, O_EXCL); }

AppendFile AppendFile::lines(const std::string& path, Recognise ours, const char* kind) {
  AppendFile f(path, 0);
  struct stat st{};
  if (::fstat(f.fd_, &st) != 0) io_error("cannot stat", path, errno);
  if (st.st_size == 0) return f;
  int rfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (rfd < 0) io_error("cannot read", path, errno);
  // The first line tells whose file it is; nothing is cut from a file that is not the tracker's.
  char head[4096];
  const ssize_t got = ::pread(rfd, head, sizeof head, 0);
  if (got < 0) {
    const int e = errno;
    ::close(rfd);
    io_error("cannot read", path, e);
  }
  std::string_view first(head, static_cast<size_t>(got));
  if (const size_t nl = first.find('\n'); nl != std::string_view::npos) first = first.substr(0, nl);
  if (!ours(first)) {
    ::close(rfd);
    throw std::invalid_argument("'" + path + "' exists and is not a libacc " + kind +
                                " file; trackers do not write into a file they did not make (move it, or choose "
                                "another project_name or logging_dir)");
  }
  // A crash may have cut the last line short: drop the bytes after the final newline.
  off_t end = st.st_size;
  char buf[4096];
  off_t keep = 0;
  while (end > 0) {
    off_t start = end > static_cast<off_t>(sizeof buf) ? end - static_cast<off_t>(sizeof buf) : 0;
    ssize_t n = ::pread(rfd, buf, static_cast<size_t>(end - start), start);
    if (n <= 0) break;
    for (ssize_t i = n - 1; i >= 0; --i)
      if (buf[i] == '\n') {
        keep = start + i + 1;
        end = 0;
        break;
      }
    if (end != 0) end = start;
  }
  ::close(rfd);
  if (keep != st.st_size && ::ftruncate(f.fd_, keep) != 0) io_error("cannot truncate", path, errno);
  return f;
}

AppendFile::~AppendFile() { close(); }

AppendFile::AppendFile(AppendFile&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_) { o.fd_ = -1; }

AppendFile& AppendFile::operator=(AppendFile&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void AppendFile::append(std::string_view record) {
  if (fd_ < 0) throw std::ios_base::failure("write to closed file '" + path_ + "'");
  const char* p = record.data();
  size_t left = record.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      io_error("cannot write", path_, errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void AppendFile::sync() {
  if (fd_ >= 0 && ::fsync(fd_) != 0 && errno != EINVAL) io_error("cannot sync", path_, errno);
}

void AppendFile::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

bool exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

std::string absolute_path(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf)) return buf;
  if (!path.empty() && path[0] == '/') return path;
  if (!::getcwd(buf, sizeof buf)) io_error("cannot resolve", path, errno);
  return std::string(buf) + "/" + path;
}

}  // namespace acc::tracking
