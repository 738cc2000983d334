// `acc`: the libacc command line. Torch-free; links the config library only. One module per subcommand; later
// subcommands (config, env, test, estimate-memory) register here.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "launch.hpp"

#ifndef ACC_VERSION
#define ACC_VERSION "unknown"
#endif

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

const Command kCommands[] = {
    {"launch", "start a program in N local processes with the distributed environment, and supervise them",
     acc::launcher::launch_main},
};

void print_help(FILE* out) {
  std::fprintf(out,
               "usage: acc [--help] [--version] COMMAND [ARGS...]\n\n"
               "libacc command line (Hugging Face Accelerate's `accelerate`, as native software).\n\n"
               "commands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\nRun 'acc COMMAND --help' for the options of a command.\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    print_help(stderr);
    return 2;
  }
  const std::string& first = args.front();
  if (first == "-h" || first == "--help" || first == "help") {
    print_help(stdout);
    return 0;
  }
  if (first == "--version" || first == "-V") {
    std::printf("acc %s\n", ACC_VERSION);
    return 0;
  }
  for (const auto& c : kCommands)
    if (first == c.name) return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
  std::fprintf(stderr, "acc: error: unknown command '%s'\n", first.c_str());
  print_help(stderr);
  return 2;
}
