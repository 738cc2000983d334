#include "supervisor.hpp"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <string>

namespace acc::launcher {
namespace {

double now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Proc {
  const Worker* w = nullptr;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  double ended = 0;
  int stop_signal = 0;  // the signal acc sent it last (0: none)
};

bool failed(int status) { return WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0); }

std::string describe(int status) {
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

void signal_group(Proc& p, int sig) {
  if (!p.running) return;
  // The group holds the worker and anything it started; the pid itself too in case setpgid lost a race.
  if (kill(-p.pid, sig) != 0) kill(p.pid, sig);
  p.stop_signal = sig;
}

}  // namespace

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

int supervise(const std::vector<Worker>& workers, const SuperviseOptions& opt) {
  const char* me = "acc launch";
  // Everything the children need is built before fork: after fork only async-signal-safe calls are made.
  std::vector<std::vector<char*>> argvs(workers.size()), envps(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) {
    for (const auto& a : workers[i].argv) argvs[i].push_back(const_cast<char*>(a.c_str()));
    argvs[i].push_back(nullptr);
    for (const auto& e : workers[i].env) envps[i].push_back(const_cast<char*>(e.c_str()));
    envps[i].push_back(nullptr);
  }

  // Signals are taken synchronously with sigtimedwait: no handler runs while acc forks or reaps.
  sigset_t watched, original;
  sigemptyset(&watched);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&watched, s);
  sigprocmask(SIG_BLOCK, &watched, &original);
  // An inherited SIGCHLD = SIG_IGN would make the kernel reap the workers itself and hide their status.
  struct sigaction dfl {}, original_chld {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGCHLD, &dfl, &original_chld);
  // Orphans of the workers become acc's children, so acc reaps what it kills at the end.
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  std::vector<Proc> procs(workers.size());
  const double start = now();
  int exec_error = 0;
  size_t exec_error_rank = 0;
  const char* start_step = "execute";  // what failed: "execute" (execve in the child), or "start" (pipe, fork)
  const pid_t self = getpid();

  for (size_t i = 0; i < workers.size(); ++i) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
      exec_error = errno;
      start_step = "start";
      exec_error_rank = i;
      break;
    }
    pid_t pid = fork();
    if (pid < 0) {
      exec_error = errno;
      start_step = "start";
      exec_error_rank = i;
      close(pipefd[0]);
      close(pipefd[1]);
      break;
    }
    if (pid == 0) {
      close(pipefd[0]);
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != self) _exit(125);  // acc died before the death signal was armed
      sigaction(SIGCHLD, &original_chld, nullptr);
      sigprocmask(SIG_SETMASK, &original, nullptr);
      execve(workers[i].path.c_str(), argvs[i].data(), envps[i].data());
      int err = errno;
      ssize_t wr = write(pipefd[1], &err, sizeof err);
      (void)wr;
      _exit(127);
    }
    setpgid(pid, pid);  // both sides set it, so it holds before either proceeds
    close(pipefd[1]);
    procs[i].w = &workers[i];
    procs[i].pid = pid;
    procs[i].running = true;
    int err = 0;
    ssize_t n;
    do n = read(pipefd[0], &err, sizeof err);
    while (n < 0 && errno == EINTR);
    close(pipefd[0]);
    if (n == static_cast<ssize_t>(sizeof err)) {  // exec failed
      exec_error = err;
      exec_error_rank = i;
      break;
    }
  }

  enum class State { Running, Stopping } state = State::Running;
  double kill_at = 0, give_up_at = 0;
  bool killed = false;
  int interrupted = 0;           // signal that interrupted acc
  const Proc* first = nullptr;   // first failed worker
  size_t running = 0;
  for (auto& p : procs) running += p.running;

  auto begin_stop = [&](int sig) {
    state = State::Stopping;
    for (auto& p : procs) signal_group(p, sig);
    kill_at = now() + opt.term_timeout;
  };
  auto kill_all = [&]() {
    for (auto& p : procs) signal_group(p, SIGKILL);
    killed = true;
    give_up_at = now() + 5.0;
  };

  if (exec_error) {
    std::fprintf(stderr, "%s: error: cannot %s '%s' (rank %d): %s\n", me, start_step,
                 workers[exec_error_rank].path.c_str(), workers[exec_error_rank].rank, strerror(exec_error));
    begin_stop(SIGTERM);
  }

  while (running > 0) {
    // Reap everything that ended.
    for (;;) {
      int st = 0;
      pid_t pid = waitpid(-1, &st, WNOHANG);
      if (pid <= 0) break;
      for (auto& p : procs) {
        if (p.pid != pid || !p.running) continue;
        p.running = false;
        p.status = st;
        p.ended = now();
        --running;
        if (state == State::Running && failed(st)) {
          first = &p;
          if (!opt.quiet)
            std::fprintf(stderr, "%s: rank %d %s; stopping the other ranks\n", me, p.w->rank, describe(st).c_str());
          begin_stop(SIGTERM);
        }
      }
    }
    if (running == 0) break;
    double t = now();
    if (state == State::Stopping && !killed && t >= kill_at) {
      if (!opt.quiet)
        std::fprintf(stderr, "%s: %zu process(es) still running %.1f s after the stop signal; sending SIGKILL\n", me,
                     running, opt.term_timeout);
      kill_all();
    }
    if (killed && t >= give_up_at) {
      std::fprintf(stderr, "%s: error: %zu process(es) survive SIGKILL (stuck in the kernel?); giving up on:", me,
                   running);
      for (auto& p : procs)
        if (p.running) std::fprintf(stderr, " pid %d (rank %d)", static_cast<int>(p.pid), p.w->rank);
      std::fprintf(stderr, "\n");
      break;
    }
    double wait_s = opt.monitor_interval;
    if (state == State::Stopping) wait_s = std::min(wait_s, std::max(0.0, (killed ? give_up_at : kill_at) - t));
    wait_s = std::max(wait_s, 0.001);
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(wait_s);
    ts.tv_nsec = static_cast<long>((wait_s - std::floor(wait_s)) * 1e9);
    siginfo_t info{};
    int sig = sigtimedwait(&watched, &info, &ts);
    if (sig > 0 && sig != SIGCHLD) {
      if (state == State::Running || !interrupted) {
        if (!interrupted) interrupted = sig;
        if (!opt.quiet)
          std::fprintf(stderr, "%s: received %s; forwarding it to %zu process(es)\n", me, signal_name(sig).c_str(),
                       running);
        if (state == State::Running) {
          begin_stop(sig);
        } else {
          for (auto& p : procs) signal_group(p, sig);
        }
      } else if (!killed) {
        if (!opt.quiet) std::fprintf(stderr, "%s: received %s again; sending SIGKILL\n", me, signal_name(sig).c_str());
        kill_all();
      }
    }
  }

  // Whatever the workers left behind in their process groups goes too, and is reaped (for up to a second: a
  // descendant that left the groups may live on).
  for (auto& p : procs)
    if (p.pid > 0) kill(-p.pid, SIGKILL);
  for (const double until = now() + 1.0; now() < until;) {
    pid_t r = waitpid(-1, nullptr, WNOHANG);
    if (r < 0) break;  // ECHILD: nothing left
    if (r == 0) {
      timespec ts{0, 10 * 1000 * 1000};
      nanosleep(&ts, nullptr);
    }
  }
  sigaction(SIGCHLD, &original_chld, nullptr);
  sigprocmask(SIG_SETMASK, &original, nullptr);

  if (exec_error) {
    if (std::string(start_step) == "start") return 1;  // pipe or fork failed (resources), not the program
    return exec_error == ENOENT ? 127 : 126;
  }

  if (first) {
    const std::string rule(60, '=');
    std::string stopped_term, stopped_kill;
    for (auto& p : procs) {
      if (&p == first || p.pid <= 0) continue;
      if (p.stop_signal == SIGKILL) stopped_kill += (stopped_kill.empty() ? "" : ", ") + std::to_string(p.w->rank);
      else if (p.stop_signal) stopped_term += (stopped_term.empty() ? "" : ", ") + std::to_string(p.w->rank);
    }
    std::fprintf(stderr, "%s\n%s: FAILED  %s\n", rule.c_str(), me, opt.label.c_str());
    std::fprintf(stderr, "  failed rank : %d (local_rank %d, pid %d)\n", first->w->rank, first->w->local_rank,
                 static_cast<int>(first->pid));
    std::fprintf(stderr, "  status      : %s\n", describe(first->status).c_str());
    std::fprintf(stderr, "  after       : %.2f s\n", first->ended - start);
    if (!stopped_term.empty()) std::fprintf(stderr, "  stopped     : rank %s (SIGTERM)\n", stopped_term.c_str());
    if (!stopped_kill.empty())
      std::fprintf(stderr, "  killed      : rank %s (SIGKILL after %.1f s)\n", stopped_kill.c_str(), opt.term_timeout);
    std::fprintf(stderr, "%s\n", rule.c_str());
    if (WIFEXITED(first->status)) return WEXITSTATUS(first->status);
    return 128 + WTERMSIG(first->status);
  }
  if (interrupted) return 128 + interrupted;
  for (auto& p : procs)  // a worker we could not reap
    if (p.running) return 1;
  return 0;
}

}  // namespace acc::launcher
