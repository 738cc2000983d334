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
  // start()'s parts: one worker started (false, the failure recorded, when it could not be), its failure to start,
  // its log files (tee) and its output streams.
  bool start_worker(size_t i, char* const* argv, char* const* envp, pid_t self);
  void fail_start(const Worker& w, const std::string& error, int err, pid_t pid = -1);
  bool open_logs(const Worker& w, int tee, int logs[2]);
  void add_streams(size_t i, const int read_ends[2], const int logs[2], int tee);
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

// Runs a short helper program to read its output (`mpirun --version`, `nvidia-smi -L`): posix_spawnp with argv as
// given, no shell, so a path or argument with spaces or quotes reaches the program as it is. The program inherits
// acc's environment (PATH is searched when argv[0] has no '/'), with stdin from /dev/null and default signals.
struct CaptureOptions {
  bool merge_stderr = false;      // true: stderr goes into the output too (2>&1); false: to /dev/null
  double timeout = 30;            // seconds; after that the program is killed (SIGKILL) and the run is an error
  size_t max_bytes = 1 << 20;     // output kept; the rest is read and dropped, so the program never blocks on it
};
struct Captured {
  int status = -1;    // wait status; -1 when it did not run to its end (could not start, timed out)
  std::string out;    // what it wrote to stdout (and stderr, with merge_stderr), also when it failed
  // Empty when it exited with status 0; else what went wrong, naming the program: "cannot execute 'x': No such
  // file or directory", "'x' exited with status 2", "'x' killed by signal SIGSEGV (Segmentation fault)",
  // "'x' did not finish within 30 s (killed)".
  std::string error;
  bool ok() const { return error.empty(); }
};
Captured run_capture(const std::vector<std::string>& argv, const CaptureOptions& options = {});

std::string signal_name(int sig);       // "SIGSEGV"
std::string describe_status(int status);  // "exited with status 3", "killed by signal SIGSEGV (Segmentation fault)"
double monotonic_now();

}  // namespace acc::launcher
