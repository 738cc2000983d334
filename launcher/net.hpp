// Port helpers for the rendezvous address, and the owner of a socket.
#pragma once

#include <unistd.h>

#include <utility>

namespace acc::launcher {

// A port the kernel considers free on 127.0.0.1: bind port 0, read it, close. Throws std::runtime_error.
int free_port();

// Whether something accepts connections on 127.0.0.1:port (Accelerate's is_port_in_use).
bool port_in_use(int port);

// Owns a file descriptor (a socket): closed when the owner goes, whichever way it goes.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace acc::launcher
