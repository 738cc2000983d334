// `acc test`: launches acc-selftest (launcher/selftest/acc_selftest.c) over the current config, as `accelerate test`
// launches its test script, and says which step worked on which rank: rendezvous, first collective, DDP step.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

#include "acc/config.hpp"
#include "acc/limits.hpp"
#include "commands.hpp"
#include "devices.hpp"
#include "launch.hpp"

namespace acc::launcher {
namespace {

constexpr const char* kMe = "acc test";
const char* const kSteps[] = {"rendezvous", "first collective", "ddp step", "shutdown"};

std::string find_selftest(std::string* tried) {
  std::vector<std::string> c;
  if (const char* e = std::getenv("ACC_SELFTEST"); e && *e) c.push_back(e);
  const std::string dir = self_dir();
  c.push_back(dir + "/selftest/acc-selftest");        // build tree: <build>/launcher/acc
  c.push_back(dir + "/../libexec/acc/acc-selftest");  // installed: <prefix>/bin/acc
  c.push_back(dir + "/acc-selftest");
  for (const auto& p : c) {
    if (access(p.c_str(), X_OK) == 0) return p;
    *tried += (tried->empty() ? "" : ", ") + p;
  }
  return "";
}

struct StepState {
  std::string state;  // "", "begin", "ok", "fail"
  std::string detail;
};

// acc launch's options, then --timeout and --steps.
std::vector<cli::Option> test_options() {
  std::vector<cli::Option> opts = launch_options();
  cli::Option timeout;
  timeout.name = "--timeout";
  timeout.takes_value = true;
  timeout.metavar = "SECONDS";
  timeout.group = "Test";
  timeout.help = "bound of the rendezvous and of every collective (default 60)";
  timeout.number = cli::Number{0, limits::kTimeoutMaxSeconds, false, true, "seconds"};
  opts.push_back(timeout);
  cli::Option steps = timeout;
  steps.name = "--steps";
  steps.metavar = "N";
  steps.help = "DDP training steps of the last check (default 1)";
  steps.number = cli::Number{1, 100000, true, false, ""};
  opts.push_back(steps);
  return opts;
}

void print_help(const std::vector<cli::Option>& opts) {
  const std::string usage = "acc test [acc launch options] [--timeout SECONDS] [--steps N]";
  std::fputs(cli::help(usage,
                       "Launches a small libacc program in every process, exactly as `acc launch` would launch yours\n"
                       "with the same options and config, and reports each step on each rank: the rendezvous, a\n"
                       "first collective (all-reduce), one DDP training step (parameters equal on all ranks after\n"
                       "it). On several machines, run it on every machine as you would run acc launch.",
                       opts)
                 .c_str(),
             stdout);
}

// The directory the ranks report their steps in (under TMPDIR); empty, with the error told, when it cannot be made.
std::string make_report_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/acc_test_XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) {
    std::fprintf(stderr, "%s: error: cannot create a temporary directory: %s\n", kMe, std::strerror(errno));
    return "";
  }
  return buf.data();
}

// What every rank of this machine got to (its report file, "<step> <state> [detail]" a line); the files and the
// directory are removed.
std::map<int, std::map<std::string, StepState>> read_rank_steps(const Plan& plan, const std::string& dir) {
  std::map<int, std::map<std::string, StepState>> ranks;
  for (int r = plan.first_rank; r < plan.first_rank + plan.nproc; ++r) {
    std::ifstream f(dir + "/rank" + std::to_string(r));
    auto& steps = ranks[r];
    for (std::string line; std::getline(f, line);) {
      for (const char* s : kSteps) {
        std::string name = s;
        if (line.rfind(name + " ", 0) != 0) continue;
        std::string rest = line.substr(name.size() + 1);
        size_t sp = rest.find(' ');
        StepState st;
        st.state = rest.substr(0, sp);
        st.detail = sp == std::string::npos ? "" : rest.substr(sp + 1);
        steps[name] = st;
      }
    }
    unlink((dir + "/rank" + std::to_string(r)).c_str());
  }
  rmdir(dir.c_str());
  return ranks;
}

// One step over all ranks: how many passed, the first passing rank's detail, and why it failed where it did.
struct StepOutcome {
  int ok = 0;
  std::string first_detail, problem;
};

StepOutcome step_outcome(std::map<int, std::map<std::string, StepState>>& ranks, const char* s) {
  StepOutcome o;
  std::string reported;
  for (auto& [r, steps] : ranks) {
    const StepState& st = steps[s];
    if (st.state == "ok") {
      ++o.ok;
      if (o.first_detail.empty()) o.first_detail = st.detail;
    } else if (st.state == "fail") {
      // A rank's own report says why; the others were usually stopped because of it (before they wrote a line).
      if (reported.empty()) reported = "rank " + std::to_string(r) + ": " + st.detail;
    } else if (o.problem.empty()) {
      if (st.state == "begin")
        o.problem = "rank " + std::to_string(r) + " started it but did not finish (it was stopped or died; see above)";
      else o.problem = "rank " + std::to_string(r) + " did not get there";
    }
  }
  if (!reported.empty()) o.problem = reported;
  return o;
}

// The table of steps on this machine and the verdict; the exit status (0 when every step passed and the launch did).
int report(std::map<int, std::map<std::string, StepState>>& ranks, int rc) {
  std::string failed_step, why;
  std::printf("\n%s: results on this machine:\n", kMe);
  for (const char* s : kSteps) {
    if (!failed_step.empty()) {
      std::printf("  %-17s not reached\n", s);
      continue;
    }
    const StepOutcome o = step_outcome(ranks, s);
    const int n = static_cast<int>(ranks.size());
    if (o.ok == n) {
      std::printf("  %-17s ok      %s\n", s, o.first_detail.c_str());
    } else {
      std::printf("  %-17s FAILED  %d of %d ranks passed; %s\n", s, o.ok, n, o.problem.c_str());
      if (failed_step.empty()) {
        failed_step = s;
        why = o.problem;
      }
    }
  }
  if (failed_step.empty() && rc == 0) {
    std::printf("\nTest is a success! You are ready for your distributed training!\n");
    return 0;
  }
  if (failed_step.empty()) {
    std::printf("\n%s: FAILED (acc launch exited with status %d)\n", kMe, rc);
  } else {
    std::printf("\n%s: FAILED at step '%s': %s\n", kMe, failed_step.c_str(), why.c_str());
  }
  return rc ? rc : 1;
}

}  // namespace

int test_main(const std::vector<std::string>& args) {
  const std::vector<cli::Option> opts = test_options();
  cli::Parsed p;
  try {
    p = cli::parse(opts, args, false);
    if (!p.positionals.empty())
      throw cli::UsageError("unexpected argument '" + p.positionals.front() + "' (acc test runs its own program)");
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s: error: %s\nRun 'acc test --help' for the options.\n", kMe, e.what());
    return 2;
  }
  if (p.options.count("--help")) {
    print_help(opts);
    return 0;
  }
  std::string tried;
  std::string selftest = find_selftest(&tried);
  if (selftest.empty()) {
    std::fprintf(stderr,
                 "%s: error: acc-selftest not found (tried %s); it is built with libacc (meson -Dcore=true) "
                 "and installed in <prefix>/libexec/acc; or set ACC_SELFTEST\n",
                 kMe, tried.c_str());
    return 1;
  }
  const double t = p.options.count("--timeout") ? p.options.at("--timeout").number : 60;
  const std::string dir = make_report_dir();
  if (dir.empty()) return 1;
  setenv("ACC_SELFTEST_DIR", dir.c_str(), 1);
  setenv("ACC_SELFTEST_TIMEOUT", std::to_string(t).c_str(), 1);
  if (auto it = p.options.find("--steps"); it != p.options.end())
    setenv("ACC_SELFTEST_STEPS", std::to_string(static_cast<long>(it->second.number)).c_str(), 1);

  Plan plan;
  try {
    plan = make_plan(p, opts, {selftest});
  } catch (const PlanError& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return e.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 2;
  }
  if (!plan.quiet)
    std::printf("%s: running %d process(es) on this machine (world size %d), timeout %.0f s\n", kMe, plan.nproc,
                plan.world, t);
  std::fflush(stdout);
  int rc = run_plan(plan);
  auto ranks = read_rank_steps(plan, dir);
  return report(ranks, rc);
}

}  // namespace acc::launcher
