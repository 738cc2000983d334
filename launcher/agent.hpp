// Several machines: the `acc launch` of every machine meets the one of machine 0 before any process starts, and
// stays connected to it while the job runs (as torchrun's elastic agents do through their rendezvous):
//   - rendezvous: machine 0 listens on main_process_port; the others connect (retrying until --rdzv_conf
//     join_timeout) and say who they are. Machine 0 checks that every machine agrees on num_machines and
//     num_processes and that no machine rank is taken twice, then picks the port the workers meet on (MASTER_PORT:
//     main_process_port + 1 unless taken, else a free port) and tells everyone to start. A machine that never arrives
//     is a clear error after the timeout, on every machine, instead of processes waiting forever in c10d;
//   - while the job runs, a failure on one machine stops the workers of every machine (a worker that lost a peer
//     would otherwise wait for its collective timeout), and a machine whose `acc` disappears does too;
//   - at the end of an attempt machine 0 decides for everyone: done, restart (--max_restarts), or fail.
// Protocol: one text line per message over TCP ("ACC1 HELLO ...", "GO ...", "FAIL ...", "STOP ...", "RESULT ...",
// "RESTART ...", "END ...", "ERROR ...", and "PING" every 2 s: a machine silent for --rdzv_conf heartbeat_timeout
// (default 30 s) is lost, even when its host vanished without closing the connection.
#pragma once

#include <poll.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "net.hpp"

namespace acc::launcher {

// A rendezvous or protocol failure; `code` is acc's exit status (1, or 2 for a configuration mismatch).
struct AgentError : std::runtime_error {
  AgentError(const std::string& msg, int code) : std::runtime_error(msg), code(code) {}
  int code;
};

struct AgentOptions {
  int num_machines = 1;
  int machine_rank = 0;
  int num_processes = 1;
  std::string main_ip;
  int main_port = 0;
  double join_timeout = 600;  // seconds
  double result_timeout = 60;  // seconds machine 0 waits for the other machines' result after an attempt
  double heartbeat_timeout = 30;  // seconds of silence after which a connected machine counts as lost
  bool quiet = false;
};

// How an attempt ended on one machine.
struct Outcome {
  enum Kind { Ok, Failed, Stopped, Interrupted, Lost } kind = Ok;
  int code = 0;         // exit status acc would return for it
  std::string message;  // for Failed: "rank 3 exited with status 1" ...
};

struct Decision {
  bool restart = false;
  int port = 0;           // MASTER_PORT of the next attempt
  int code = 0;           // exit status when not restarting
  std::string message;    // why the job ended (a failure elsewhere), empty on success
  bool interrupted = false;  // acc itself got a signal while waiting (signal number in code - 128)
};

class Agent {
 public:
  explicit Agent(AgentOptions o);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Meets the other machines; returns MASTER_PORT for the workers. sigfd: a signalfd to watch (a signal aborts the
  // rendezvous: AgentError with code 128 + signal). Throws AgentError.
  int rendezvous(int sigfd);

  // While the workers run.
  struct Event {
    enum Kind { None, Stop, Lost } kind = None;
    std::string message;
  };
  void poll_fds(std::vector<pollfd>& fds) const;
  Event on_poll(const std::vector<pollfd>& fds);
  // Sends heartbeats, and reports a machine silent for heartbeat_timeout (its host died, the network split) as
  // lost. Call it every loop iteration.
  Event heartbeat();
  // This machine's workers failed (or acc was interrupted): every other machine is told to stop its workers.
  void report_failure(const std::string& message, int code, bool interrupted);

  // After this machine's workers all ended: reports the outcome and waits for machine 0's decision (machine 0
  // collects every machine's outcome and decides). attempt: 0-based; restarts allowed while attempt < max_restarts.
  Decision finish_round(const Outcome& local, int attempt, int max_restarts, int sigfd);

 private:
  struct Peer;
  int pick_worker_port() const;
  // The rendezvous: machine 0 admits the others; the others join it.
  int host_rendezvous(int sigfd, double deadline);
  void admit(std::unique_ptr<Peer> p, const std::string& hello);  // AgentError (code 2) when it disagrees
  std::string missing_machines() const;
  int join_rendezvous(int sigfd, double deadline);
  UniqueFd connect_to_main(double left, std::string& error) const;
  int await_go(Peer& server, int sigfd, double deadline);
  void check_signal(int sigfd, const pollfd& pf);  // AgentError when a signal other than SIGCHLD came
  std::string main_address() const;
  std::string rendezvous_hint() const;
  void send(Peer& p, const std::string& line);
  void broadcast(const std::string& line, const Peer* except = nullptr);
  bool read_lines(Peer& p, std::vector<std::string>& lines);  // false: connection closed
  Event lose(Peer& p, const std::string& why);
  Event handle_server_line(Peer& from, const std::string& line);
  // finish_round's parts. Another machine: reports its outcome and waits for machine 0's decision. Machine 0: waits
  // for every machine's outcome (false, d filled, when acc was interrupted meanwhile), gives up on the silent ones,
  // then decides: the end, or a restart.
  Decision await_decision(const Outcome& local, int sigfd);
  bool collect_outcomes(int sigfd, Decision& d);
  void lose_silent_machines();
  Decision decide(int attempt, int max_restarts);

  AgentOptions o_;
  std::vector<std::unique_ptr<Peer>> peers_;  // machine 0: one per other machine; others: machine 0
  // Machine 0's view of the current attempt.
  bool failure_seen_ = false;
  bool no_restart_ = false;  // a machine was lost or interrupted
  int failure_code_ = 0;
  std::string failure_message_;
};

}  // namespace acc::launcher
