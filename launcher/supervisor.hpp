// Starts a group of local worker processes and watches them until they all end.
//   - every worker runs in its own process group and gets PR_SET_PDEATHSIG(SIGKILL), so it dies with `acc`;
//   - the first worker that exits non-zero or dies by a signal stops the rest: SIGTERM to every group, then
//     SIGKILL after `term_timeout` seconds; one block on stderr names the failed rank and its status;
//   - SIGINT/SIGTERM/SIGHUP/SIGQUIT to `acc` are forwarded to every group (a second one escalates to SIGKILL);
//   - a worker that cannot be executed is reported before anything else runs.
#pragma once

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

struct SuperviseOptions {
  double term_timeout = 5.0;      // seconds between SIGTERM and SIGKILL
  double monitor_interval = 0.1;  // seconds between checks when nothing happens
  std::string label;              // the command, for messages
  bool quiet = false;             // no notes, only the failure block
};

// Returns the exit status for `acc`: 0 when every worker exited 0; the failed worker's exit status, or 128 + signal
// number if it was killed; 128 + signal number when `acc` itself was interrupted; 126/127 if exec failed; 1 if a
// process could not be started (fork) or reaped.
int supervise(const std::vector<Worker>& workers, const SuperviseOptions& opt);

std::string signal_name(int sig);  // "SIGSEGV"

}  // namespace acc::launcher
