// A small command-line parser for `acc` subcommands: long options in `_` or `-` spelling (`--num_processes`,
// `--num-processes`), `--opt value` or `--opt=value`, short aliases, store-true flags, and parsing that stops at
// the first positional argument (the program to launch) so everything after it belongs to that program.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace acc::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Option {
  std::string name;                 // canonical: "--num_processes"
  std::vector<std::string> shorts;  // "-q"
  bool takes_value = false;         // false: a flag (store true)
  std::string metavar;              // "N"
  std::string help;
  std::string group;                // help section
  std::string config_key;           // launch-config key this option sets ("" for launcher-only options)
  std::string flag_value = "true";  // value a flag gives its config key ("MULTI_GPU" for --multi_gpu)
};

struct Given {
  std::string value;  // the option's value ("true" for a flag)
  std::string as_typed;  // "--num-processes"
};

struct Parsed {
  std::map<std::string, Given> options;  // by canonical name; the last occurrence wins
  std::vector<std::string> positionals;  // program and its arguments
};

// Parses argv[start..]. With stop_at_positional, the first non-option and everything after it are positionals
// (`--` also ends the options).
Parsed parse(const std::vector<Option>& options, const std::vector<std::string>& args, bool stop_at_positional);

// Help text: usage line, description, then the options by group.
std::string help(const std::string& usage, const std::string& description, const std::vector<Option>& options);

}  // namespace acc::cli
