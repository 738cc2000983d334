// One attempt of a job on this machine: a group of local worker processes, started together and watched until
// they all end.
//   - every worker runs in its own process group and gets PR_SET_PDEATHSIG(SIGKILL), so it dies with `acc`;
//   - the workers' stdout and stderr come through pipes: forwarded to acc's own stdout and stderr, teed into
//     per-rank log files on request, and the last lines of each rank are kept for the failure report;
//   - stop(): SIGTERM (or the signal given) to every group, SIGKILL after `term_timeout` seconds;
//   - a worker that cannot be executed is reported before anything else runs.
// The caller owns the event loop (poll): it asks for the descriptors to watch and hands back what poll saw, and
// calls reap() when SIGCHLD arrives. Signals are the caller's too (see launch.cpp).
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace acc::launcher {

struct Worker {
  int rank = 0;
  int local_rank = 0;
  std::string path;               // resolved executable
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "NAME=value"
};

struct OutputOptions {
  std::vector<int> tee;         // per local rank: 1 stdout, 2 stderr, 3 both go to log files too (torchrun's --tee)
  std::string log_dir;          // this attempt's log directory: <log_dir>/<local_rank>/{stdout,stderr}.log
  bool prefix = false;          // prefix teed console lines with "[<role><local_rank>]:" (as torchrun does)
  std::string role = "default";
  size_t tail_lines = 20;       // lines of output kept per rank for the failure report
};

// What ended a worker, or why it could not start.
struct Exit {
  int rank = -1;
  int local_rank = -1;
  pid_t pid = -1;
  int status = 0;         // wait status
  double after = 0;       // seconds since the group started
  std::string start_error;  // set when the worker could not be started ("cannot execute '...': ...")
  int start_errno = 0;
};

class Group {
 public:
  Group(std::vector<Worker> workers, OutputOptions out, double term_timeout, bool quiet);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  // Starts every worker. A worker that cannot be executed (or forked) stops the others and is the failure.
  void start();

  // Event loop hooks.
  void poll_fds(std::vector<pollfd>& fds) const;  // appends the output pipes still open
  void on_poll(const std::vector<pollfd>& fds);  // reads what is ready
  void reap();                                   // waitpid for every ended child (SIGCHLD)
  void tick();                                   // escalates to SIGKILL when term_timeout has passed
  double next_deadline() const;                  // seconds until tick() has something to do (large if nothing)

  // Stops every worker still running: `sig` now, SIGKILL after term_timeout. A second call with a different signal
  // forwards it; stop(SIGKILL) kills at once.
  void stop(int sig);
  bool stopping() const { return stopping_; }

  bool done() const;                             // every worker ended (or is given up on)
  bool failed() const { return first_.has_value(); }
  const std::optional<Exit>& first_failure() const { return first_; }  // the first worker that failed
  // Ranks stopped by acc, by the signal that ended them: "SIGTERM" -> ranks.
  std::vector<std::pair<std::string, std::vector<int>>> stopped_ranks() const;
  std::vector<std::string> tail(int local_rank) const;  // the last lines a rank printed (stdout and stderr)
  double started_at() const { return start_; }

  // After done(): kills what is left in the workers' process groups, reaps orphans, drains and closes the pipes.
  void finish();

 private:
  struct Proc;
  struct Stream;
  void fail(Exit e);
  void read_stream(Stream& s, bool final);
  void emit(Stream& s, const char* data, size_t n, bool final);

  std::vector<Worker> workers_;
  OutputOptions out_;
  double term_timeout_;
  bool quiet_;
  std::vector<std::unique_ptr<Proc>> procs_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<std::deque<std::string>>> tails_;  // per worker, in workers_ order
  bool given_up_ = false;
  std::optional<Exit> first_;
  bool stopping_ = false;
  bool killed_ = false;
  double kill_at_ = 0, give_up_at_ = 0;
  double start_ = 0;
  bool finished_ = false;
};

std::string signal_name(int sig);       // "SIGSEGV"
std::string describe_status(int status);  // "exited with status 3", "killed by signal SIGSEGV (Segmentation fault)"
double monotonic_now();

}  // namespace acc::launcher
