// Unit tests of the launcher's run_capture (launcher/supervisor.cpp): a program's output read through a pipe, with
// no shell between acc and the program, and every way it can go wrong reported with the program's name.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "supervisor.hpp"

using acc::launcher::Captured;
using acc::launcher::CaptureOptions;
using acc::launcher::monotonic_now;
using acc::launcher::run_capture;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/acc-process-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  // An executable shell script (the script runs under sh; acc does not).
  std::string script(const std::string& rel, const std::string& body, mode_t mode = 0755) const {
    std::string full = path + "/" + rel;
    std::filesystem::create_directories(std::filesystem::path(full).parent_path());
    std::ofstream(full) << "#!/bin/sh\n" << body;
    chmod(full.c_str(), mode);
    return full;
  }
};

CaptureOptions timeout(double seconds) {
  CaptureOptions o;
  o.timeout = seconds;
  return o;
}

TEST(RunCapture, ReadsStdout) {
  Captured r = run_capture({"/bin/echo", "hello", "world"});
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.out, "hello world\n");
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 0);
}

TEST(RunCapture, SearchesPath) {
  Captured r = run_capture({"echo", "found"});
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.out, "found\n");
}

// A path with a space and a single quote, and arguments full of shell syntax: the old `popen("'" + app + "' ...")`
// broke on the first; here both reach the program as they are and nothing is interpreted.
TEST(RunCapture, PathAndArgumentsAreNotShellSyntax) {
  TempDir t;
  std::string prog = t.script("it's a dir/my prog", "printf '%s\\n' \"$@\"\n");
  const std::vector<std::string> args = {"a b", "'", "\"", "$(touch " + t.path + "/pwned)", "; exit 7", "`id`", "*"};
  std::vector<std::string> argv = {prog};
  argv.insert(argv.end(), args.begin(), args.end());
  Captured r = run_capture(argv);
  EXPECT_TRUE(r.ok()) << r.error;
  std::string expected;
  for (const auto& a : args) expected += a + "\n";
  EXPECT_EQ(r.out, expected);
  EXPECT_FALSE(std::filesystem::exists(t.path + "/pwned"));
}

TEST(RunCapture, NonexistentProgram) {
  for (std::string prog : {"/nonexistent/dir/prog", "acc-no-such-program-in-path"}) {
    Captured r = run_capture({prog, "--version"});
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status, -1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.error, "cannot execute '" + prog + "': No such file or directory");
  }
}

TEST(RunCapture, NotExecutable) {
  TempDir t;
  std::string prog = t.script("plain file", "echo hi\n", 0644);
  Captured r = run_capture({prog});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error, "cannot execute '" + prog + "': Permission denied");
}

TEST(RunCapture, FailingProgramKeepsItsOutput) {
  TempDir t;
  std::string prog = t.script("fails", "echo partial\nexit 3\n");
  Captured r = run_capture({prog});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.out, "partial\n");
  EXPECT_EQ(r.error, "'" + prog + "' exited with status 3");
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 3);
}

TEST(RunCapture, ProgramKilledBySignal) {
  TempDir t;
  std::string prog = t.script("killed", "echo before\nkill -KILL $$\n");
  Captured r = run_capture({prog});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.out, "before\n");
  EXPECT_EQ(r.error.rfind("'" + prog + "' killed by signal SIGKILL", 0), 0u) << r.error;
  ASSERT_TRUE(WIFSIGNALED(r.status));
  EXPECT_EQ(WTERMSIG(r.status), SIGKILL);
}

TEST(RunCapture, Stderr) {
  TempDir t;
  std::string prog = t.script("both", "echo out\necho err >&2\n");
  EXPECT_EQ(run_capture({prog}).out, "out\n");  // stderr to /dev/null
  CaptureOptions merged;
  merged.merge_stderr = true;
  EXPECT_EQ(run_capture({prog}, merged).out, "out\nerr\n");  // 2>&1
}

TEST(RunCapture, StdinIsDevNull) {
  Captured r = run_capture({"cat"}, timeout(10));  // would wait for input if stdin were inherited
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.out, "");
}

TEST(RunCapture, TimeoutKillsTheProgram) {
  const double t0 = monotonic_now();
  Captured r = run_capture({"sleep", "30"}, timeout(0.3));
  const double took = monotonic_now() - t0;
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status, -1);
  EXPECT_EQ(r.error, "'sleep' did not finish within 0.3 s (killed)");
  EXPECT_GE(took, 0.3);
  EXPECT_LT(took, 5.0);
}

// Something the program started in the background keeps the pipe open: its exit ends the wait all the same.
TEST(RunCapture, ExitEndsTheWaitWhenADescendantHoldsThePipe) {
  TempDir t;
  std::string prog = t.script("daemon", "sleep 3 &\necho started\n");
  const double t0 = monotonic_now();
  Captured r = run_capture({prog}, timeout(20));
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.out, "started\n");
  EXPECT_LT(monotonic_now() - t0, 2.5);
}

TEST(RunCapture, LargeOutputIsCappedWithoutBlocking) {
  CaptureOptions o;
  o.max_bytes = 100000;
  o.timeout = 20;
  Captured r = run_capture({"head", "-c", "3000000", "/dev/zero"}, o);
  EXPECT_TRUE(r.ok()) << r.error;  // it was read to the end, so it never blocked on a full pipe
  EXPECT_EQ(r.out.size(), 100000u);
}

// acc's launch loop blocks signals and ignores SIGPIPE; the program starts with the defaults. And an inherited
// SIGCHLD = SIG_IGN does not hide the exit status.
TEST(RunCapture, SignalsAreResetForTheProgramAndStatusSurvivesIgnoredSigchld) {
  TempDir t;
  std::string prog = t.script("term", "kill -TERM $$\necho survived\n");
  sigset_t term, old_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_BLOCK, &term, &old_mask);
  struct sigaction ign{}, old_term{}, old_chld{};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGTERM, &ign, &old_term);
  sigaction(SIGCHLD, &ign, &old_chld);
  Captured r = run_capture({prog});
  Captured f = run_capture({"false"});
  struct sigaction now_chld{};
  sigaction(SIGCHLD, nullptr, &now_chld);
  sigaction(SIGCHLD, &old_chld, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.error.rfind("'" + prog + "' killed by signal SIGTERM", 0), 0u) << r.error;
  EXPECT_EQ(f.error, "'false' exited with status 1");
  EXPECT_EQ(now_chld.sa_handler, SIG_IGN);  // restored after each run
}

TEST(RunCapture, NoProgram) {
  EXPECT_EQ(run_capture({}).error, "no program to run");
  EXPECT_EQ(run_capture({""}).error, "no program to run");
}

}  // namespace
