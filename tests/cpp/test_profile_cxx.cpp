// The C++ API's profiler (Accelerator::ProfileScope, Accelerate's profile()): the steps a trace holds follow
// torch.profiler.schedule exactly (tests/cpp/profile_schedules.json, made by torch itself with
// make_profile_schedules.py), the scope ends on its own, and a scope left by an exception writes nothing.
#include <acc/torch.hpp>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace {

std::string g_fixture;  // tests/cpp/profile_schedules.json

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("acc-profile-cxx-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::set<int> step_markers(const std::string& trace) {
  std::set<int> steps;
  static const std::regex marker("\"name\": \"ProfilerStep#(\\d+)\"");
  for (auto it = std::sregex_iterator(trace.begin(), trace.end(), marker); it != std::sregex_iterator(); ++it)
    steps.insert(std::stoi((*it)[1]));
  return steps;
}

// Trains a linear layer for `steps` steps inside a profile of `profile_kwargs`, ending each with step().
void train(acc::Accelerator& accelerator, const std::string& profile_kwargs, int steps) {
  torch::nn::Linear lin(4, 2);
  auto model = accelerator.prepare(lin);
  auto opt = accelerator.prepare(std::make_shared<torch::optim::SGD>(lin->parameters(), 0.1));
  auto scope = accelerator.profile(profile_kwargs);
  for (int i = 0; i < steps; ++i) {
    auto loss = model(torch::ones({3, 4})).pow(2).mean();
    accelerator.backward(loss);
    opt.step();
    opt.zero_grad();
    scope.step();
  }
  scope.end();
}

}  // namespace

TEST(ProfileCxx, StepsFollowTorchSchedules) {
  // Each line of the fixture: {"schedule": {...}, "actions": ["NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE", ...]}.
  std::istringstream lines(slurp(g_fixture));
  static const std::regex line_re(R"re(^\{"schedule": (\{[^}]*\}), "actions": \[(.*)\]\},?$)re");
  static const std::regex action_re(R"re("(\w+)")re");
  int schedules = 0;
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) continue;
    const std::string schedule = m[1];
    const std::string list = m[2];
    std::vector<std::string> actions;
    for (auto it = std::sregex_iterator(list.begin(), list.end(), action_re); it != std::sregex_iterator(); ++it)
      actions.push_back((*it)[1]);
    ASSERT_GE(actions.size(), 2u);
    // The steps of the last cycle torch records within steps 0..n (the final step() begins step n): a cycle is a run
    // of RECORD steps that RECORD_AND_SAVE ends; export_chrome_trace writes the last one.
    const int n = static_cast<int>(actions.size()) - 1;
    std::set<int> cycle, last;
    for (int s = 0; s <= n; ++s) {
      const bool records = actions[s] == "RECORD" || actions[s] == "RECORD_AND_SAVE";
      if (records) cycle.insert(s);
      if ((!records || actions[s] == "RECORD_AND_SAVE" || s == n) && !cycle.empty()) last = std::exchange(cycle, {});
    }
    TempDir tmp;
    const fs::path out = tmp.path / "traces";
    {
      acc::Accelerator accelerator;
      train(accelerator, R"({"output_trace_dir": ")" + out.string() + R"(", "schedule_option": )" + schedule + "}", n);
    }
    const fs::path file = out / "profile_0.json";
    ++schedules;
    if (last.empty()) {
      EXPECT_FALSE(fs::exists(file)) << schedule;
      continue;
    }
    ASSERT_TRUE(fs::exists(file)) << schedule;
    const std::string trace = slurp(file);
    EXPECT_EQ(step_markers(trace), last) << schedule;
    // One forward and one optimizer step in each recorded step but step n, which ends as soon as it begins.
    const int worked = static_cast<int>(last.size()) - (last.count(n) ? 1 : 0);
    EXPECT_EQ(count(trace, "\"name\": \"acc::forward\""), worked) << schedule;
    EXPECT_EQ(count(trace, "\"name\": \"acc::optimizer_step\""), worked) << schedule;
    if (worked > 0) {
      EXPECT_GT(count(trace, "\"name\": \"aten::"), 0) << schedule;
    }
  }
  EXPECT_EQ(schedules, 7) << "the fixture " << g_fixture << " has 7 schedules";
}

TEST(ProfileCxx, ScopeEndsItselfAndAnExceptionWritesNothing) {
  TempDir tmp;
  const fs::path out = tmp.path / "traces";
  acc::Accelerator accelerator(R"({"profile_kwargs": {"output_trace_dir": ")" + out.string() + R"("}})");
  torch::nn::Linear lin(4, 2);
  auto model = accelerator.prepare(lin);
  try {
    auto scope = accelerator.profile();
    model(torch::ones({3, 4}));
    throw std::runtime_error("the loop failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(fs::exists(out / "profile_0.json"));
  {
    auto scope = accelerator.profile();  // the profile above ended: a new one starts
    model(torch::ones({3, 4}));
  }
  const std::string trace = slurp(out / "profile_0.json");
  EXPECT_EQ(count(trace, "\"name\": \"acc::forward\""), 1);
  EXPECT_EQ(step_markers(trace).size(), 0u);  // no schedule, no markers
  // Refusals carry the key's name.
  try {
    accelerator.profile(R"({"schedule_option": {"wait": 1, "warmup": 1}})");
    ADD_FAILURE() << "a schedule without active was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'active'"), std::string::npos) << e.what();
  }
}

TEST(ProfileCxx, RangesCostLittleWithoutAProfile) {
  // libacc's ranges are RecordFunction user scopes: without a profiler each is one check of the thread's callbacks.
  // Compared with an ATen op, which runs the same check: a range must not cost more than a tiny op.
  torch::NoGradGuard no_grad;
  acc::Accelerator accelerator;
  torch::nn::Linear lin(1, 1);
  auto model = accelerator.prepare(lin);
  const auto x = torch::ones({1, 1});
  auto time = [](auto&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20000; ++i) fn();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / 20000;
  };
  const double guarded = time([&] { acc::Model::ForwardGuard guard(model); });
  const double op = time([&] { (void)x.add(1); });
  std::printf("ForwardGuard (its acc::forward range inside) %.0f ns, x.add(1) %.0f ns\n", guarded, op);
  EXPECT_LT(guarded, op * 4);
}

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: test_profile_cxx PROFILE_SCHEDULES_JSON\n");
    return 2;
  }
  g_fixture = argv[1];
  return RUN_ALL_TESTS();
}
