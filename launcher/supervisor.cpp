#include "supervisor.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <cmath>
#include <cstdio>
#include <string>

#include "acc/files.hpp"

extern char** environ;

namespace acc::launcher {

double monotonic_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    std::string s = "killed by signal " + signal_name(sig);
    const char* d = strsignal(sig);
    if (d) s += std::string(" (") + d + ")";
    if (WCOREDUMP(status)) s += ", core dumped";
    return s;
  }
  return "ended with wait status " + std::to_string(status);
}

namespace {

bool failed_status(int status) { return WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0); }

void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // acc's own output is gone (EPIPE): the workers go on
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

struct Group::Proc {
  const Worker* w = nullptr;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  double ended = 0;
  int stop_signal = 0;  // the signal acc sent it last (0: none)
};

struct Group::Stream {
  int fd = -1;          // read end of the worker's pipe
  int console = 1;      // acc's stdout or stderr
  int log = -1;         // log file, when teed
  int local_rank = 0;
  bool prefix = false;  // line-prefixed console output
  std::string partial;  // an unfinished line (prefixing and the tail)
  std::deque<std::string>* tail = nullptr;
};

Group::Group(std::vector<Worker> workers, OutputOptions out, double term_timeout, bool quiet)
    : workers_(std::move(workers)), out_(std::move(out)), term_timeout_(term_timeout), quiet_(quiet) {}

Group::~Group() {
  if (!finished_) {
    for (auto& p : procs_)
      if (p->running) kill(-p->pid, SIGKILL);
    for (auto& s : streams_) {
      if (s->fd >= 0) close(s->fd);
      if (s->log >= 0) close(s->log);
    }
  }
}

void Group::fail(Exit e) {
  if (first_) return;
  first_ = std::move(e);
}

namespace {

// The three pipes of a worker (stdout, stderr, and the exec-failure report), close-on-exec; 0, or the errno of the
// pipe that could not be made (the others closed).
int open_worker_pipes(int outp[2], int errp[2], int execp[2]) {
  if (pipe2(outp, O_CLOEXEC) != 0) return errno;
  if (pipe2(errp, O_CLOEXEC) != 0) {
    const int err = errno;
    close(outp[0]);
    close(outp[1]);
    return err;
  }
  if (pipe2(execp, O_CLOEXEC) != 0) {
    const int err = errno;
    for (int fd : {outp[0], outp[1], errp[0], errp[1]}) close(fd);
    return err;
  }
  return 0;
}

// In the forked child: its own process group, death with acc, stdout and stderr to the pipes, default signals, then
// exec; a failed exec writes its errno to the exec pipe. Async-signal-safe calls only.
[[noreturn]] void exec_worker(const Worker& w, pid_t parent, int out_fd, int err_fd, int exec_fd, char* const* argv,
                              char* const* envp, const sigset_t& none) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(125);  // acc died before the death signal was armed
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int s : {SIGCHLD, SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(s, &dfl, nullptr);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(w.path.c_str(), argv, envp);
  int err = errno;
  ssize_t wr = write(exec_fd, &err, sizeof err);
  (void)wr;
  _exit(127);
}

}  // namespace

void Group::start() {
  const char* me = "acc launch";
  start_ = monotonic_now();
  // Everything the children need is built before fork: after fork only async-signal-safe calls are made.
  const size_t n = workers_.size();
  std::vector<std::vector<char*>> argvs(n), envps(n);
  for (size_t i = 0; i < n; ++i) {
    for (const auto& a : workers_[i].argv) argvs[i].push_back(const_cast<char*>(a.c_str()));
    argvs[i].push_back(nullptr);
    for (const auto& e : workers_[i].env) envps[i].push_back(const_cast<char*>(e.c_str()));
    envps[i].push_back(nullptr);
  }
  for (size_t i = 0; i < n; ++i) tails_.push_back(std::make_unique<std::deque<std::string>>());
  const pid_t self = getpid();
  for (size_t i = 0; i < n; ++i)
    if (!start_worker(i, argvs[i].data(), envps[i].data(), self)) break;
  if (first_) {
    std::fprintf(stderr, "%s: error: %s\n", me, first_->start_error.c_str());
    stop(SIGTERM);
  }
}

void Group::fail_start(const Worker& w, const std::string& error, int err, pid_t pid) {
  Exit e;
  e.rank = w.rank;
  e.local_rank = w.local_rank;
  e.pid = pid;
  e.start_error = error;
  e.start_errno = err;
  e.status = -1;
  fail(e);
}

bool Group::open_logs(const Worker& w, int tee, int logs[2]) {
  if (!tee || out_.log_dir.empty()) return true;
  std::string dir = out_.log_dir + "/" + std::to_string(w.local_rank);
  try {
    config::make_directories(dir);
  } catch (const std::exception& ex) {
    fail_start(w, ex.what(), EIO);
    return false;
  }
  const char* names[2] = {"stdout.log", "stderr.log"};
  for (int k = 0; k < 2; ++k)
    if (tee & (1 << k))
      logs[k] = open((dir + "/" + names[k]).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
  return true;
}

void Group::add_streams(size_t i, const int read_ends[2], const int logs[2], int tee) {
  const Worker& w = workers_[i];
  for (int k = 0; k < 2; ++k) {
    auto s = std::make_unique<Stream>();
    s->fd = read_ends[k];
    fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) | O_NONBLOCK);
    s->console = k == 0 ? 1 : 2;
    s->log = logs[k];
    s->local_rank = w.local_rank;
    s->prefix = out_.prefix && (tee & (1 << k));
    s->tail = tails_[i].get();
    streams_.push_back(std::move(s));
  }
}

bool Group::start_worker(size_t i, char* const* argv, char* const* envp, pid_t self) {
  const Worker& w = workers_[i];
  sigset_t none;
  sigemptyset(&none);
  int outp[2], errp[2], execp[2];
  if (int err = open_worker_pipes(outp, errp, execp)) {
    fail_start(w, "cannot start rank " + std::to_string(w.rank) + " (pipe): " + strerror(err), err);
    return false;
  }
  // Log files first: a log directory that cannot be written is an error before the worker starts.
  int tee = static_cast<size_t>(w.local_rank) < out_.tee.size() ? out_.tee[static_cast<size_t>(w.local_rank)] : 0;
  int logs[2] = {-1, -1};
  if (!open_logs(w, tee, logs)) {
    for (int fd : {outp[0], outp[1], errp[0], errp[1], execp[0], execp[1]}) close(fd);
    return false;
  }
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    for (int fd : {outp[0], outp[1], errp[0], errp[1], execp[0], execp[1], logs[0], logs[1]})
      if (fd >= 0) close(fd);
    fail_start(w, "cannot start rank " + std::to_string(w.rank) + " (fork): " + strerror(err), err);
    return false;
  }
  if (pid == 0) exec_worker(w, self, outp[1], errp[1], execp[1], argv, envp, none);
  setpgid(pid, pid);  // both sides set it, so it holds before either proceeds
  close(outp[1]);
  close(errp[1]);
  close(execp[1]);
  auto proc = std::make_unique<Proc>();
  proc->w = &w;
  proc->pid = pid;
  proc->running = true;
  procs_.push_back(std::move(proc));
  const int read_ends[2] = {outp[0], errp[0]};
  add_streams(i, read_ends, logs, tee);
  int err = 0;
  ssize_t got;
  do got = read(execp[0], &err, sizeof err);
  while (got < 0 && errno == EINTR);
  close(execp[0]);
  if (got == static_cast<ssize_t>(sizeof err)) {  // exec failed; the child exits 127
    fail_start(w, "cannot execute '" + w.path + "' (rank " + std::to_string(w.rank) + "): " + strerror(err), err, pid);
    return false;
  }
  return true;
}

void Group::poll_fds(std::vector<pollfd>& fds) const {
  for (const auto& s : streams_)
    if (s->fd >= 0) fds.push_back({s->fd, POLLIN, 0});
}

void Group::on_poll(const std::vector<pollfd>& fds) {
  for (const auto& p : fds) {
    if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
    for (auto& s : streams_)
      if (s->fd == p.fd) read_stream(*s, false);
  }
}

void Group::read_stream(Stream& s, bool final) {
  char buf[65536];
  for (;;) {
    if (s.fd < 0) return;
    ssize_t n = read(s.fd, buf, sizeof buf);
    if (n > 0) {
      emit(s, buf, static_cast<size_t>(n), false);
      if (!final) return;  // one read per wake-up keeps the ranks fair
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (final) emit(s, nullptr, 0, true);
      return;
    }
    // EOF (or an error): the worker and everything it started closed this stream.
    emit(s, nullptr, 0, true);
    close(s.fd);
    s.fd = -1;
    return;
  }
}

void Group::emit(Stream& s, const char* data, size_t n, bool final) {
  if (n && s.log >= 0) write_all(s.log, data, n);
  if (n && !s.prefix) write_all(s.console, data, n);
  s.partial.append(data ? data : "", n);
  auto push_line = [&](std::string line) {
    if (s.prefix) {
      std::string out = "[" + out_.role + std::to_string(s.local_rank) + "]:" + line + "\n";
      write_all(s.console, out.data(), out.size());
    }
    if (s.tail) {
      s.tail->push_back(std::move(line));
      while (s.tail->size() > out_.tail_lines) s.tail->pop_front();
    }
  };
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    push_line(s.partial.substr(start, nl - start));
  s.partial.erase(0, start);
  if (s.partial.size() > 65536) {  // a very long line without a newline: keep its end only
    push_line(s.partial);
    s.partial.clear();
  }
  if (final && !s.partial.empty()) {
    push_line(s.partial);
    s.partial.clear();
  }
}

void Group::reap() {
  for (;;) {
    int st = 0;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid <= 0) break;
    for (auto& p : procs_) {
      if (p->pid != pid || !p->running) continue;
      p->running = false;
      p->status = st;
      p->ended = monotonic_now();
      if (!stopping_ && failed_status(st) && !first_) {
        Exit e;
        e.rank = p->w->rank;
        e.local_rank = p->w->local_rank;
        e.pid = pid;
        e.status = st;
        e.after = p->ended - start_;
        fail(e);
        if (!quiet_)
          std::fprintf(stderr, "acc launch: rank %d %s; stopping the other ranks\n", p->w->rank,
                       describe_status(st).c_str());
        stop(SIGTERM);
      }
    }
  }
}

void Group::stop(int sig) {
  if (sig == SIGKILL) {
    for (auto& p : procs_)
      if (p->running) {
        kill(-p->pid, SIGKILL);
        kill(p->pid, SIGKILL);
        p->stop_signal = SIGKILL;
      }
    if (!killed_) {
      killed_ = true;
      give_up_at_ = monotonic_now() + 5.0;
    }
    stopping_ = true;
    return;
  }
  for (auto& p : procs_) {
    if (!p->running) continue;
    // The group holds the worker and anything it started; the pid itself too in case setpgid lost a race.
    if (kill(-p->pid, sig) != 0) kill(p->pid, sig);
    p->stop_signal = sig;
  }
  if (!stopping_) {
    stopping_ = true;
    kill_at_ = monotonic_now() + term_timeout_;
  }
}

void Group::tick() {
  if (!stopping_) return;
  const double t = monotonic_now();
  size_t running = 0;
  for (auto& p : procs_) running += p->running;
  if (running == 0) return;
  if (!killed_ && t >= kill_at_) {
    if (!quiet_)
      std::fprintf(stderr, "acc launch: %zu process(es) still running %.1f s after the stop signal; sending SIGKILL\n",
                   running, term_timeout_);
    stop(SIGKILL);
    return;
  }
  if (killed_ && t >= give_up_at_) {
    std::fprintf(stderr,
                 "acc launch: error: %zu process(es) survive SIGKILL (stuck in the kernel?); giving up on:", running);
    for (auto& p : procs_)
      if (p->running) {
        std::fprintf(stderr, " pid %d (rank %d)", static_cast<int>(p->pid), p->w->rank);
        p->running = false;
        p->status = -1;
        given_up_ = true;
      }
    std::fprintf(stderr, "\n");
  }
}

double Group::next_deadline() const {
  if (!stopping_) return 1e9;
  const double t = monotonic_now();
  return std::max(0.0, (killed_ ? give_up_at_ : kill_at_) - t);
}

bool Group::done() const {
  for (auto& p : procs_)
    if (p->running) return false;
  return true;
}

std::vector<std::pair<std::string, std::vector<int>>> Group::stopped_ranks() const {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  for (auto& p : procs_) {
    if (!p->stop_signal || (first_ && first_->pid == p->pid)) continue;
    std::string name = signal_name(p->stop_signal);
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == name; });
    if (it == out.end()) {
      out.emplace_back(name, std::vector<int>{});
      it = out.end() - 1;
    }
    it->second.push_back(p->w->rank);
  }
  return out;
}

std::vector<std::string> Group::tail(int local_rank) const {
  for (size_t i = 0; i < workers_.size(); ++i)
    if (workers_[i].local_rank == local_rank && i < tails_.size())
      return std::vector<std::string>(tails_[i]->begin(), tails_[i]->end());
  return {};
}

void Group::finish() {
  if (finished_) return;
  finished_ = true;
  // Whatever the workers left behind in their process groups goes too, and is reaped (for up to a second: a
  // descendant that left the groups may live on).
  for (auto& p : procs_)
    if (p->pid > 0) kill(-p->pid, SIGKILL);
  for (const double until = monotonic_now() + 1.0; monotonic_now() < until;) {
    pid_t r = waitpid(-1, nullptr, WNOHANG);
    if (r < 0) break;  // ECHILD: nothing left
    if (r == 0) {
      timespec ts{0, 10 * 1000 * 1000};
      nanosleep(&ts, nullptr);
    }
  }
  // What is still in the pipes is read without waiting for an EOF that a leaked descendant could hold back.
  for (auto& s : streams_) {
    read_stream(*s, true);
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    if (s->log >= 0) close(s->log);
    s->log = -1;
  }
}

namespace {

// posix_spawnp of `program` with stdin from /dev/null, stdout (and stderr, merged) to `out_fd`, no signal blocked and
// every one at its default; 0 or the error (a failed exec included).
int spawn_capturing(const std::string& program, char* const* args, int out_fd, bool merge_stderr, pid_t* pid) {
  // The child's stdout (and stderr) become the pipe's write end; the O_CLOEXEC originals close at exec.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  if (merge_stderr) posix_spawn_file_actions_adddup2(&actions, out_fd, 2);
  else posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  // acc may have signals blocked (the launch loop reads them from a signalfd) or ignored (SIGPIPE): the program
  // starts with none blocked and every one at its default.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  // glibc's posix_spawnp reports a failed exec (ENOENT, EACCES, ENOEXEC) as its result, so there is no child
  // to reap then.
  const int spawn_error = posix_spawnp(pid, program.c_str(), &actions, &attr, args, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return spawn_error;
}

// Reads what the (non-blocking) pipe holds now into `out`, keeping at most max_bytes; true at end of file (or on a
// read error, which ends the output the same way).
bool drain_pipe(int fd, std::string& out, size_t max_bytes) {
  char buf[4096];
  for (;;) {
    ssize_t got = read(fd, buf, sizeof buf);
    if (got > 0) {
      if (out.size() < max_bytes) out.append(buf, std::min(static_cast<size_t>(got), max_bytes - out.size()));
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    return got == 0 || errno != EAGAIN;
  }
}

struct CaptureEnd {
  bool reaped = false;  // false: the timeout came first
  int status = 0;       // wait status, when reaped
  int wait_error = 0;   // waitpid's errno, when it failed
};

// Both ends are waited for: the end of the output and the program's exit. The poll is sliced so that an exit is
// seen even when something the program started still holds the pipe open (its output is then what was there).
CaptureEnd wait_capture(pid_t pid, int fd, const CaptureOptions& options, std::string& out) {
  const double deadline = monotonic_now() + options.timeout;
  bool eof = false;
  CaptureEnd end;
  while (!(eof && end.reaped)) {
    const double left = deadline - monotonic_now();
    if (left <= 0) break;
    const int slice_ms = static_cast<int>(std::min(left * 1000.0, 50.0)) + 1;
    if (!eof) {
      pollfd p{fd, POLLIN, 0};
      poll(&p, 1, slice_ms);
      eof = drain_pipe(fd, out, options.max_bytes);
    } else {
      poll(nullptr, 0, std::min(slice_ms, 10));  // the output ended; the program has not yet
    }
    if (!end.reaped) {
      const pid_t w = waitpid(pid, &end.status, WNOHANG);
      if (w == pid || (w < 0 && errno != EINTR)) {
        end.reaped = true;
        if (w < 0) end.wait_error = errno;
        if (!eof) {
          drain_pipe(fd, out, options.max_bytes);  // what it wrote before it ended
          eof = true;
        }
      }
    }
  }
  return end;
}

// Killed, then reaped if it goes within a second. A program stuck in the kernel (a hung driver) may not: it is
// left, not waited for, so acc never hangs on it.
void kill_and_reap_briefly(pid_t pid) {
  kill(pid, SIGKILL);
  for (const double until = monotonic_now() + 1.0; monotonic_now() < until;) {
    const pid_t w = waitpid(pid, nullptr, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) break;
    poll(nullptr, 0, 10);
  }
}

}  // namespace

Captured run_capture(const std::vector<std::string>& argv, const CaptureOptions& options) {
  Captured r;
  if (argv.empty() || argv[0].empty()) {
    r.error = "no program to run";
    return r;
  }
  const std::string& program = argv[0];
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    r.error = "cannot run '" + program + "' (pipe): " + strerror(errno);
    return r;
  }
  // An inherited SIGCHLD = SIG_IGN would let the kernel reap the child and hide its status: default while it runs.
  struct sigaction dfl{}, original_chld{};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGCHLD, &dfl, &original_chld);

  pid_t pid = -1;
  const int spawn_error = spawn_capturing(program, args.data(), pipefd[1], options.merge_stderr, &pid);
  close(pipefd[1]);
  const int fd = pipefd[0];
  if (spawn_error != 0) {
    close(fd);
    sigaction(SIGCHLD, &original_chld, nullptr);
    r.error = "cannot execute '" + program + "': " + strerror(spawn_error);
    return r;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  const CaptureEnd end = wait_capture(pid, fd, options, r.out);
  close(fd);
  if (!end.reaped) {
    kill_and_reap_briefly(pid);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", options.timeout);
    r.error = "'" + program + "' did not finish within " + secs + " s (killed)";
  } else if (end.wait_error != 0) {
    r.error = "cannot read the exit status of '" + program + "': " + strerror(end.wait_error);
  } else {
    r.status = end.status;
    if (!WIFEXITED(end.status) || WEXITSTATUS(end.status) != 0)
      r.error = "'" + program + "' " + describe_status(end.status);
  }
  sigaction(SIGCHLD, &original_chld, nullptr);
  return r;
}

}  // namespace acc::launcher
