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
#include <system_error>

#include "tracking/tracking.hpp"

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

AppendFile::AppendFile(const std::string& path, bool lines) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) io_error("cannot open", path, errno);
  if (!lines) return;
  // A crash may have cut the last line short: drop the bytes after the final newline.
  struct stat st {};
  if (fstat(fd_, &st) != 0 || st.st_size == 0) return;
  int rfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (rfd < 0) io_error("cannot read", path, errno);
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
  if (keep != st.st_size && ::ftruncate(fd_, keep) != 0) io_error("cannot truncate", path, errno);
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

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_error("cannot read", path, errno);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      io_error("cannot read", path, e);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string absolute_path(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf)) return buf;
  if (!path.empty() && path[0] == '/') return path;
  if (!::getcwd(buf, sizeof buf)) io_error("cannot resolve", path, errno);
  return std::string(buf) + "/" + path;
}

std::string host_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) return "localhost";
  return host;
}

}  // namespace acc::tracking
