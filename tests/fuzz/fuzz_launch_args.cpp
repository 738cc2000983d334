// libFuzzer target: the command line of `acc launch`: acc::cli::parse over launch_options() (CLI11 underneath),
// then acc::launcher::resolve, which layers defaults < config file < scheduler < flags and runs the job checks.
// Linked from the launcher's object files (all but main.cpp). make_plan / run_plan are never called: they spawn
// processes.
//
// The input is argv after `acc launch`, entries separated by NUL bytes (corpus/fuzz_launch_args/*: see
// make_corpus.py). `--config_file` is dropped from the parsed options before resolve (the fuzzer would otherwise
// name arbitrary files of this machine, /dev/stdin included); config files are fuzz_launch_yaml's job. The
// environment is empty, so no default config file and no scheduler is found.
#include <string>
#include <vector>

#include "cli.hpp"
#include "fuzz_common.hpp"
#include "launch.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<acc::cli::Option> opts = acc::launcher::launch_options();
  std::vector<std::string> args;
  if (size > 0) {
    args.emplace_back();
    for (size_t i = 0; i < size; ++i) {
      if (data[i] == 0) args.emplace_back();
      else args.back().push_back(static_cast<char>(data[i]));
    }
  }
  acc_fuzz::guarded<acc::cli::UsageError>([&] {
    acc::cli::Parsed parsed = acc::cli::parse(opts, args, /*stop_at_positional=*/true);
    parsed.options.erase("--config_file");
    const std::map<std::string, std::string> env;
    const acc::launcher::Resolution r = acc::launcher::resolve(parsed, opts, env, /*check=*/true);
    (void)acc::config::launch_environment(r.cfg);
    (void)acc::config::format_launch_file(r.cfg, false);
  });
  return 0;
}
