#include "agent.hpp"

#include <arpa/inet.h>
#include <signal.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include "acc/config.hpp"
#include "net.hpp"
#include "supervisor.hpp"

namespace acc::launcher {
namespace {

constexpr const char* kMe = "acc launch";

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

std::vector<std::string> words(const std::string& line, size_t max_words) {
  // The first max_words - 1 words split on spaces; the last one is the rest of the line.
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < line.size() && out.size() + 1 < max_words) {
    size_t sp = line.find(' ', pos);
    if (sp == std::string::npos) break;
    out.push_back(line.substr(pos, sp - pos));
    pos = sp + 1;
  }
  if (pos <= line.size()) out.push_back(line.substr(pos));
  return out;
}

bool to_int(const std::string& s, int& v) {
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || errno) return false;
  v = static_cast<int>(x);
  return true;
}

// Reads a pending signal from the signalfd; 0 if none.
int take_signal(int sigfd) {
  signalfd_siginfo si{};
  ssize_t n = read(sigfd, &si, sizeof si);
  if (n != static_cast<ssize_t>(sizeof si)) return 0;
  return static_cast<int>(si.ssi_signo);
}

struct Address {
  sockaddr_storage addr{};
  socklen_t len = 0;
  int family = AF_INET;
};

Address resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) throw AgentError("cannot resolve main_process_ip '" + host + "': " + gai_strerror(rc), 1);
  Address a;
  std::memcpy(&a.addr, res->ai_addr, res->ai_addrlen);
  a.len = res->ai_addrlen;
  a.family = res->ai_family;
  freeaddrinfo(res);
  return a;
}

Address any_address(int family, int port) {
  Address a;
  a.family = family;
  if (family == AF_INET6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&a.addr);
    s->sin6_family = AF_INET6;
    s->sin6_addr = in6addr_any;
    s->sin6_port = htons(static_cast<uint16_t>(port));
    a.len = sizeof *s;
  } else {
    auto* s = reinterpret_cast<sockaddr_in*>(&a.addr);
    s->sin_family = AF_INET;
    s->sin_addr.s_addr = htonl(INADDR_ANY);
    s->sin_port = htons(static_cast<uint16_t>(port));
    a.len = sizeof *s;
  }
  return a;
}

// Whether a port can be bound on every interface (nothing listens on it, no connection holds it).
bool bindable(int family, int port) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  Address a = any_address(family, port);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a.addr), a.len) == 0;
  close(fd);
  return ok;
}

int any_free_port(int family) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw AgentError(std::string("cannot pick a port: ") + std::strerror(errno), 1);
  Address a = any_address(family, 0);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a.addr), a.len) != 0) {
    int e = errno;
    close(fd);
    throw AgentError(std::string("cannot pick a port: ") + std::strerror(e), 1);
  }
  sockaddr_storage got{};
  socklen_t len = sizeof got;
  getsockname(fd, reinterpret_cast<sockaddr*>(&got), &len);
  close(fd);
  if (got.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&got)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&got)->sin_port);
}

}  // namespace

struct Agent::Peer {
  UniqueFd sock;
  int machine_rank = -1;
  std::string host;
  std::string buf;
  bool hello = false;
  bool result = false;  // reported its outcome for this attempt
  bool lost = false;
  double last_seen = monotonic_now();  // anything received
  double last_sent = 0;
};

Agent::Agent(AgentOptions o) : o_(std::move(o)) {}

Agent::~Agent() = default;

void Agent::send(Peer& p, const std::string& line) {
  if (!p.sock.valid()) return;
  std::string text = one_line(line) + "\n";
  const char* d = text.data();
  size_t n = text.size();
  while (n > 0) {
    ssize_t w = ::send(p.sock.get(), d, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{p.sock.get(), POLLOUT, 0};
      ::poll(&pf, 1, 1000);
      continue;
    }
    if (w <= 0) {
      p.lost = true;
      return;
    }
    d += w;
    n -= static_cast<size_t>(w);
  }
  p.last_sent = monotonic_now();
}

void Agent::broadcast(const std::string& line, const Peer* except) {
  for (const auto& p : peers_)
    if (p.get() != except && !p->lost) send(*p, line);
}

bool Agent::read_lines(Peer& p, std::vector<std::string>& lines) {
  char buf[4096];
  for (;;) {
    ssize_t n = recv(p.sock.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      p.last_seen = monotonic_now();
      p.buf.append(buf, static_cast<size_t>(n));
      if (p.buf.size() > (1 << 20)) return false;  // not a peer speaking this protocol
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    bool open = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    size_t start = 0;
    for (size_t nl; (nl = p.buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string line = p.buf.substr(start, nl - start);
      if (line != "PING") lines.push_back(std::move(line));
    }
    p.buf.erase(0, start);
    return open;
  }
}

int Agent::pick_worker_port() const {
  Address a = resolve(o_.main_ip, o_.main_port);
  int want = o_.main_port + 1;
  if (want <= 65535 && bindable(a.family, want)) return want;
  return any_free_port(a.family);
}

std::string Agent::main_address() const { return o_.main_ip + ":" + std::to_string(o_.main_port); }

std::string Agent::rendezvous_hint() const {
  return "check that every machine runs acc launch with --num_machines " + std::to_string(o_.num_machines) +
         " --main_process_ip " + o_.main_ip + " --main_process_port " + std::to_string(o_.main_port) +
         ", and that machine 0 can be reached on that port";
}

void Agent::check_signal(int sigfd, const pollfd& pf) {
  if (sigfd < 0 || !(pf.revents & POLLIN)) return;
  const int sig = take_signal(sigfd);
  if (!sig || sig == SIGCHLD) return;
  broadcast("ERROR the rendezvous was interrupted on machine " + std::to_string(o_.machine_rank) + " by " +
            signal_name(sig));
  throw AgentError("interrupted by " + signal_name(sig) + " during the rendezvous", 128 + sig);
}

int Agent::rendezvous(int sigfd) {
  const double deadline = monotonic_now() + o_.join_timeout;
  return o_.machine_rank == 0 ? host_rendezvous(sigfd, deadline) : join_rendezvous(sigfd, deadline);
}

namespace {

// Machine 0's listening socket, only on the address the user named (main_process_ip), not on every interface
// (docs/security.md).
UniqueFd listen_on(const std::string& ip, int port) {
  Address me = resolve(ip, port);
  UniqueFd lfd(socket(me.family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!lfd.valid()) throw AgentError(std::string("rendezvous: socket: ") + std::strerror(errno), 1);
  int one = 1;
  setsockopt(lfd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(lfd.get(), reinterpret_cast<sockaddr*>(&me.addr), me.len) != 0 || listen(lfd.get(), 128) != 0) {
    const int e = errno;
    throw AgentError("rendezvous: cannot listen on " + ip + ":" + std::to_string(port) + ": " + std::strerror(e) +
                         (e == EADDRNOTAVAIL ? " (main_process_ip must be an address of machine 0, this machine)"
                          : e == EADDRINUSE  ? " (something else uses it; choose another main_process_port)"
                                             : ""),
                     1);
  }
  return lfd;
}

void keep_alive(int fd) {
  int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
}

}  // namespace

int Agent::host_rendezvous(int sigfd, double deadline) {
  UniqueFd lfd = listen_on(o_.main_ip, o_.main_port);
  if (!o_.quiet)
    std::fprintf(stderr, "%s: machine 0 of %d: waiting for the other machines on port %d (timeout %.0f s)\n", kMe,
                 o_.num_machines, o_.main_port, o_.join_timeout);
  // Connections that have not said hello yet; closed when dropped, so every way out of here closes them.
  std::vector<std::unique_ptr<Peer>> pending;
  const auto fail_all = [&](const std::string& msg, int code) {
    for (const auto& p : pending) send(*p, "ERROR " + msg);
    broadcast("ERROR " + msg);
    throw AgentError(msg, code);
  };
  while (static_cast<int>(peers_.size()) < o_.num_machines - 1) {
    const double left = deadline - monotonic_now();
    if (left <= 0)
      fail_all("rendezvous timed out after " + std::to_string(static_cast<int>(o_.join_timeout)) +
                   " s: " + std::to_string(peers_.size() + 1) + " of " + std::to_string(o_.num_machines) +
                   " machines joined (missing machine rank " + missing_machines() + "); " + rendezvous_hint(),
               1);
    std::vector<pollfd> fds{{lfd.get(), POLLIN, 0}};
    if (sigfd >= 0) fds.push_back({sigfd, POLLIN, 0});
    for (const auto& p : pending) fds.push_back({p->sock.get(), POLLIN, 0});
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::ceil(std::min(left, 1.0) * 1000)));
    if (rc < 0 && errno != EINTR) fail_all(std::string("rendezvous: poll: ") + std::strerror(errno), 1);
    if (rc <= 0) continue;
    if (sigfd >= 0) {
      try {
        check_signal(sigfd, fds[1]);
      } catch (const AgentError&) {
        for (const auto& p : pending) send(*p, "ERROR machine 0 was interrupted");
        throw;
      }
    }
    if (fds[0].revents & POLLIN) {
      UniqueFd cfd(accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (cfd.valid()) {
        keep_alive(cfd.get());
        auto p = std::make_unique<Peer>();
        p->sock = std::move(cfd);
        send(*p, "ACC1 WELCOME");  // tells the other machines that an acc launcher answers here
        pending.push_back(std::move(p));
      }
    }
    for (size_t k = sigfd >= 0 ? 2 : 1; k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      auto it = std::find_if(pending.begin(), pending.end(), [&](const auto& p) { return p->sock.get() == fds[k].fd; });
      if (it == pending.end()) continue;
      std::vector<std::string> lines;
      const bool open = read_lines(**it, lines);
      if (lines.empty()) {
        if (!open) pending.erase(it);  // a probe, or a peer that gave up
        continue;
      }
      std::unique_ptr<Peer> p = std::move(*it);
      pending.erase(it);
      try {
        admit(std::move(p), lines.front());
      } catch (const AgentError& e) {
        if (e.code != 2) throw;
        fail_all(e.what(), 2);  // the machines disagree: every one is told
      }
    }
  }
  pending.clear();  // late probes
  lfd.reset();
  int port = pick_worker_port();
  broadcast("GO 0 " + std::to_string(port));
  return port;
}

std::string Agent::missing_machines() const {
  std::string m;
  for (int r = 1; r < o_.num_machines; ++r)
    if (std::none_of(peers_.begin(), peers_.end(), [&](const auto& p) { return p->machine_rank == r; }))
      m += (m.empty() ? "" : ", ") + std::to_string(r);
  return m;
}

void Agent::admit(std::unique_ptr<Peer> p, const std::string& hello) {
  // "ACC1 HELLO <machine_rank> <num_machines> <num_processes> <host>"
  auto w = words(hello, 6);
  int mr = -1, nm = -1, np = -1;
  if (w.size() != 6 || w[0] != "ACC1" || w[1] != "HELLO" || !to_int(w[2], mr) || !to_int(w[3], nm) ||
      !to_int(w[4], np)) {
    send(*p, "ERROR not an acc launch rendezvous message");
    if (!o_.quiet)
      std::fprintf(stderr, "%s: ignoring a connection that is not an acc launch (port %d)\n", kMe, o_.main_port);
    return;
  }
  p->machine_rank = mr;
  p->host = w[5];
  const std::string who = "machine rank " + std::to_string(mr) + " (" + p->host + ")";
  const auto refuse = [&](const std::string& msg) {
    send(*p, "ERROR " + msg);
    throw AgentError(msg, 2);
  };
  if (nm != o_.num_machines)
    refuse(who + " has num_machines " + std::to_string(nm) + ", machine 0 has " + std::to_string(o_.num_machines));
  if (np != o_.num_processes)
    refuse(who + " has num_processes " + std::to_string(np) + ", machine 0 has " + std::to_string(o_.num_processes));
  if (mr <= 0 || mr >= o_.num_machines)
    refuse("a machine joined with machine_rank " + std::to_string(mr) + " (" + p->host + "); the others are 1.." +
           std::to_string(o_.num_machines - 1) + " (machine 0 is the one at " + main_address() + ")");
  for (const auto& q : peers_)
    if (q->machine_rank == mr)
      refuse("two machines joined with machine_rank " + std::to_string(mr) + " (" + q->host + " and " + p->host +
             "); give each machine its own --machine_rank");
  p->hello = true;
  peers_.push_back(std::move(p));
  if (!o_.quiet)
    std::fprintf(stderr, "%s: machine rank %d (%s) joined (%zu of %d)\n", kMe, mr, peers_.back()->host.c_str(),
                 peers_.size() + 1, o_.num_machines);
}

// One try at reaching machine 0: the connected socket, or none with why in `error`.
UniqueFd Agent::connect_to_main(double left, std::string& error) const {
  const Address to = resolve(o_.main_ip, o_.main_port);
  UniqueFd fd(socket(to.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) throw AgentError(std::string("rendezvous: socket: ") + std::strerror(errno), 1);
  int err = connect(fd.get(), reinterpret_cast<const sockaddr*>(&to.addr), to.len) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    pollfd pf{fd.get(), POLLOUT, 0};
    if (::poll(&pf, 1, static_cast<int>(std::ceil(std::min(left, 2.0) * 1000))) <= 0) {
      err = ETIMEDOUT;
    } else {
      socklen_t len = sizeof err;
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
  }
  if (err == 0) return fd;
  error = std::strerror(err);
  return UniqueFd();
}

// Machines 1..n-1: connect to machine 0, retrying until an acc launcher answers there (until join_timeout: the port
// may be closed, or held for a while by something else).
int Agent::join_rendezvous(int sigfd, double deadline) {
  peers_.push_back(std::make_unique<Peer>());
  Peer& server = *peers_.back();
  server.machine_rank = 0;
  std::string last_error = "no answer";
  bool said_waiting = false;
  const auto timed_out = [&](const std::string& why) {
    return AgentError("rendezvous timed out after " + std::to_string(static_cast<int>(o_.join_timeout)) + " s: " + why +
                          "; " + rendezvous_hint(),
                      1);
  };
  const auto pause = [&] {
    if (!said_waiting && !o_.quiet) {
      std::fprintf(stderr, "%s: machine %d of %d: waiting for machine 0 at %s (%s; timeout %.0f s)\n", kMe,
                   o_.machine_rank, o_.num_machines, main_address().c_str(), last_error.c_str(), o_.join_timeout);
      said_waiting = true;
    }
    pollfd sp{sigfd, POLLIN, 0};
    if (::poll(&sp, sigfd >= 0 ? 1 : 0, 250) > 0) check_signal(sigfd, sp);
  };
  for (bool said_foreign = false;;) {
    while (!server.sock.valid()) {
      const double left = deadline - monotonic_now();
      if (left <= 0) throw timed_out("could not reach machine 0 at " + main_address() + " (" + last_error + ")");
      server.sock = connect_to_main(left, last_error);
      if (!server.sock.valid()) pause();
    }
    keep_alive(server.sock.get());
    send(server, "ACC1 HELLO " + std::to_string(o_.machine_rank) + " " + std::to_string(o_.num_machines) + " " +
                     std::to_string(o_.num_processes) + " " + config::host_name());
    if (const int port = await_go(server, sigfd, deadline); port > 0) return port;
    // Something that is not an acc launcher answered, or it closed: try again.
    server.sock.reset();
    server.buf.clear();
    last_error = "something that is not an acc launcher answers there";
    if (!said_foreign && !o_.quiet)
      std::fprintf(stderr, "%s: machine %d of %d: %s at %s; trying again until the timeout (%.0f s)\n", kMe,
                   o_.machine_rank, o_.num_machines, last_error.c_str(), main_address().c_str(), o_.join_timeout);
    said_foreign = said_waiting = true;
    pause();
  }
}

// After the hello: machine 0's GO (its port), or 0 when the other end turned out not to be an acc launcher.
// Until machine 0 has said something of the protocol, the other end may be any program on that port.
int Agent::await_go(Peer& server, int sigfd, double deadline) {
  bool acc_answered = false;
  for (;;) {
    const double left = deadline - monotonic_now();
    if (left <= 0)
      throw AgentError("rendezvous timed out after " + std::to_string(static_cast<int>(o_.join_timeout)) + " s: " +
                           (acc_answered ? "machine 0 at " + main_address() +
                                               " accepted this machine but the other machines did not all join"
                                         : "the program at " + main_address() + " is not an acc launcher") +
                           "; " + rendezvous_hint(),
                       1);
    std::vector<pollfd> fds{{server.sock.get(), POLLIN, 0}};
    if (sigfd >= 0) fds.push_back({sigfd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::ceil(std::min(left, 1.0) * 1000))) <= 0) continue;
    if (fds.size() > 1) check_signal(sigfd, fds[1]);
    std::vector<std::string> lines;
    const bool open = read_lines(server, lines);
    bool foreign = false;
    for (const auto& line : lines) {
      auto w = words(line, 3);
      int round = 0, port = 0;
      if (w.size() == 3 && w[0] == "GO" && to_int(w[1], round) && to_int(w[2], port)) return port;
      if (!w.empty() && w[0] == "ERROR")
        throw AgentError("machine 0 refused the rendezvous: " + line.substr(std::min<size_t>(6, line.size())), 2);
      if (line == "ACC1 WELCOME") acc_answered = true;
      else if (!acc_answered) foreign = true;
    }
    if (acc_answered && !open)
      throw AgentError("machine 0 at " + main_address() +
                           " closed the connection during the rendezvous (its acc launch ended)",
                       1);
    if (foreign || !open) return 0;
  }
}

void Agent::poll_fds(std::vector<pollfd>& fds) const {
  for (const auto& p : peers_)
    if (!p->lost && p->sock.get() >= 0) fds.push_back({p->sock.get(), POLLIN, 0});
}

Agent::Event Agent::handle_server_line(Peer& from, const std::string& line) {
  // Machine 0 receiving from another machine.
  auto w = words(line, 5);
  if (w[0] == "FAIL" && w.size() == 5) {  // FAIL <machine_rank> <code> <interrupted 0|1> <message>
    int code = 1, intr = 0;
    to_int(w[2], code);
    to_int(w[3], intr);
    if (intr) no_restart_ = true;
    if (!failure_seen_) {
      failure_seen_ = true;
      failure_code_ = code;
      failure_message_ = "machine " + w[1] + " (" + from.host + "): " + w[4];
      broadcast("STOP " + failure_message_, &from);
      return {Event::Stop, failure_message_};
    }
    return {};
  }
  if (w[0] == "RESULT") {
    from.result = true;
    return {};
  }
  return {};
}

Agent::Event Agent::on_poll(const std::vector<pollfd>& fds) {
  Event ev;
  for (const auto& pf : fds) {
    if (!pf.revents) continue;
    for (const auto& p : peers_) {
      if (p->sock.get() != pf.fd || p->lost) continue;
      std::vector<std::string> lines;
      bool open = read_lines(*p, lines);
      for (const auto& line : lines) {
        if (o_.machine_rank == 0) {
          Event e = handle_server_line(*p, line);
          if (e.kind != Event::None && ev.kind == Event::None) ev = e;
        } else if (line.rfind("STOP ", 0) == 0 && ev.kind == Event::None) {
          ev = {Event::Stop, line.substr(5)};
        } else if (line.rfind("END ", 0) == 0 || line.rfind("RESTART ", 0) == 0) {
          p->buf = line + "\n" + p->buf;  // a decision: finish_round reads it
        }
      }
      if (!open) {
        Event e = lose(*p, "its acc launch ended or the network failed");
        if (ev.kind == Event::None) ev = e;
      }
    }
  }
  return ev;
}

Agent::Event Agent::lose(Peer& p, const std::string& why) {
  p.lost = true;
  p.sock.reset();
  std::string msg =
      o_.machine_rank == 0
          ? "lost contact with machine " + std::to_string(p.machine_rank) + " (" + p.host + "): " + why
          : "lost contact with machine 0 at " + o_.main_ip + ":" + std::to_string(o_.main_port) + ": " + why;
  if (o_.machine_rank != 0) return {Event::Lost, msg};
  no_restart_ = true;
  Event ev;
  if (!p.result && !failure_seen_) {
    failure_seen_ = true;
    failure_code_ = 1;
    failure_message_ = msg;
    broadcast("STOP " + msg);
  }
  if (!p.result) ev = {Event::Lost, msg};
  p.result = true;
  return ev;
}

Agent::Event Agent::heartbeat() {
  const double now = monotonic_now();
  Event ev;
  for (const auto& p : peers_) {
    if (p->lost || p->sock.get() < 0) continue;
    if (now - p->last_sent >= 2.0) send(*p, "PING");
    if (now - p->last_seen > o_.heartbeat_timeout) {
      char why[128];
      std::snprintf(why, sizeof why, "nothing heard from it for %.0f s (its host is down or the network failed)",
                    now - p->last_seen);
      Event e = lose(*p, why);
      if (ev.kind == Event::None) ev = e;
    }
  }
  return ev;
}

void Agent::report_failure(const std::string& message, int code, bool interrupted) {
  const std::string where = "machine " + std::to_string(o_.machine_rank);
  if (o_.machine_rank == 0) {
    if (interrupted) no_restart_ = true;
    if (!failure_seen_) {
      failure_seen_ = true;
      failure_code_ = code;
      failure_message_ = "machine 0 (" + config::host_name() + "): " + message;
      broadcast("STOP " + failure_message_);
    }
    return;
  }
  for (const auto& p : peers_)
    send(*p, "FAIL " + std::to_string(o_.machine_rank) + " " + std::to_string(code) + " " + (interrupted ? "1" : "0") +
                 " " + message);
}

namespace {

// The signal a poll saw on sigfd (0: none, or SIGCHLD, which only says a worker ended).
int signal_seen(int sigfd, const pollfd& pf) {
  if (sigfd < 0 || !(pf.revents & POLLIN)) return 0;
  int sig = take_signal(sigfd);
  return sig == SIGCHLD ? 0 : sig;
}

}  // namespace

Decision Agent::finish_round(const Outcome& local, int attempt, int max_restarts, int sigfd) {
  if (o_.machine_rank != 0) return await_decision(local, sigfd);
  // Machine 0: collect every machine's outcome.
  if (local.kind != Outcome::Ok) {
    report_failure(local.message, local.code, local.kind == Outcome::Interrupted);
    if (local.kind == Outcome::Interrupted) no_restart_ = true;
  }
  Decision d;
  if (!collect_outcomes(sigfd, d)) return d;
  return decide(attempt, max_restarts);
}

Decision Agent::await_decision(const Outcome& local, int sigfd) {
  Decision d;
  Peer* server = peers_.empty() ? nullptr : peers_.front().get();
  if (!server || server->lost) {
    d.code = local.code ? local.code : 1;
    d.message = "lost contact with machine 0";
    return d;
  }
  const char* kind = local.kind == Outcome::Ok ? "ok" : local.kind == Outcome::Interrupted ? "interrupted" : "fail";
  send(*server, std::string("RESULT ") + kind + " " + std::to_string(local.code));
  for (;;) {
    std::vector<std::string> lines;
    bool open = read_lines(*server, lines);
    for (const auto& line : lines) {
      auto w = words(line, 3);
      if (w[0] == "RESTART" && w.size() >= 3) {
        int port = 0;
        to_int(w[2], port);
        d.restart = true;
        d.port = port;
        return d;
      }
      if (w[0] == "END") {
        auto e = words(line, 3);
        int code = 0;
        if (e.size() >= 2) to_int(e[1], code);
        d.code = local.kind == Outcome::Failed || local.kind == Outcome::Interrupted ? local.code : code;
        d.message = e.size() >= 3 ? e[2] : "";
        return d;
      }
    }
    if (!open || (heartbeat(), server->lost)) {
      d.code = local.code ? local.code : 1;
      d.message = "lost contact with machine 0 at " + o_.main_ip + ":" + std::to_string(o_.main_port) +
                  " before it decided how the job ends";
      return d;
    }
    std::vector<pollfd> fds{{server->sock.get(), POLLIN, 0}};
    if (sigfd >= 0) fds.push_back({sigfd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 1000) > 0 && fds.size() > 1) {
      if (int sig = signal_seen(sigfd, fds[1])) {
        d.interrupted = true;
        d.code = 128 + sig;
        return d;
      }
    }
  }
}

bool Agent::collect_outcomes(int sigfd, Decision& d) {
  const double deadline = monotonic_now() + o_.result_timeout;
  for (;;) {
    bool all = std::all_of(peers_.begin(), peers_.end(), [](const auto& p) { return p->result || p->lost; });
    if (all) return true;
    if (monotonic_now() > deadline) {
      lose_silent_machines();
      return true;
    }
    heartbeat();
    std::vector<pollfd> fds;
    poll_fds(fds);
    size_t n = fds.size();
    if (sigfd >= 0) fds.push_back({sigfd, POLLIN, 0});
    int rc = ::poll(fds.data(), fds.size(), 500);
    if (rc <= 0) continue;
    if (sigfd >= 0) {
      if (int sig = signal_seen(sigfd, fds[n])) {
        broadcast("END " + std::to_string(128 + sig) + " machine 0 was interrupted by " + signal_name(sig));
        d.interrupted = true;
        d.code = 128 + sig;
        return false;
      }
    }
    fds.resize(n);
    on_poll(fds);
  }
}

void Agent::lose_silent_machines() {
  for (const auto& p : peers_)
    if (!p->result && !p->lost) {
      p->lost = true;
      no_restart_ = true;
      if (!failure_seen_) {
        failure_seen_ = true;
        failure_code_ = 1;
        failure_message_ =
            "machine " + std::to_string(p->machine_rank) + " (" + p->host + ") did not report the end of its processes";
      }
    }
}

Decision Agent::decide(int attempt, int max_restarts) {
  Decision d;
  for (const auto& p : peers_) p->result = false;
  if (!failure_seen_) {
    broadcast("END 0 ok");
    return d;
  }
  if (!no_restart_ && attempt < max_restarts) {
    failure_seen_ = false;
    failure_message_.clear();
    d.restart = true;
    d.port = pick_worker_port();
    broadcast("RESTART " + std::to_string(attempt + 1) + " " + std::to_string(d.port));
    return d;
  }
  d.code = failure_code_ ? failure_code_ : 1;
  d.message = failure_message_;
  broadcast("END " + std::to_string(d.code) + " " + failure_message_);
  return d;
}

}  // namespace acc::launcher
