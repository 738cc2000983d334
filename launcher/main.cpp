// `acc`: the libacc command line, Accelerate's `accelerate` as native software. Torch-free: it links the config
// library only (`acc env` and `acc test` find libacc at run time). One module per subcommand.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "acc/config.hpp"
#include "commands.hpp"

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
    {"launch", "start a program in N processes (one or several machines) and supervise them",
     acc::launcher::launch_main},
    {"config", "write a config file (questionnaire, default, update); explain, show the schema",
     acc::launcher::config_main},
    {"env", "versions, build, devices and the resolved default config, for bug reports", acc::launcher::env_main},
    {"test", "run a built-in distributed sanity check over the current config", acc::launcher::test_main},
    {"estimate-memory", "memory a model needs, per dtype, from a model spec or a safetensors file",
     acc::launcher::estimate_main},
    {"merge-weights", "merge a sharded safetensors checkpoint into one model.safetensors", acc::launcher::merge_main},
};

void print_help(FILE* out) {
  std::fprintf(out, "usage: acc [--help] [--version] COMMAND [ARGS...]\n\n"
                    "libacc command line (Hugging Face Accelerate's `accelerate`, as native software).\n\n"
                    "commands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-16s %s\n", c.name, c.summary);
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
    if (first == "help" && args.size() > 1) {
      for (const auto& c : kCommands)
        if (args[1] == c.name) return c.run({"--help"});
    }
    print_help(stdout);
    return 0;
  }
  if (first == "--version" || first == "-V") {
    std::printf("acc %s\n", ACC_VERSION);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (first != c.name) continue;
    // The last line of defence: an exception no command caught (memory running out on a hostile input) is an
    // error message and exit status 1, never std::terminate's abort.
    try {
      return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "acc %s: error: out of memory\n", c.name);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "acc %s: error: %s\n", c.name, e.what());
    } catch (...) {
      std::fprintf(stderr, "acc %s: error: unknown exception\n", c.name);
    }
    return 1;
  }
  std::vector<std::string> names;
  for (const auto& c : kCommands) names.push_back(c.name);
  std::string near = acc::config::closest_match(first, names);
  std::fprintf(stderr, "acc: error: unknown command '%s'%s\n", first.c_str(),
               near.empty() ? "" : (" (did you mean '" + near + "'?)").c_str());
  print_help(stderr);
  return 2;
}
