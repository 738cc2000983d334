// Directory creation and atomic file writes. See acc/files.hpp.
#include "acc/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <ios>
#include <sstream>
#include <memory>
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

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::ios_base::failure("cannot read '" + path + "'");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
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
  size_t total = 0;
  for (std::string_view piece : pieces) total += piece.size();
  write_pieces(tmp.fd, pieces, total, path);
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
