// The command line of `acc` subcommands, parsed by CLI11 from one table of options per subcommand: long options in
// `_` or `-` spelling (`--num_processes`, `--num-processes`), `--opt value` or `--opt=value`, short aliases,
// store-true flags (`--flag=false` clears one), options with several values (argparse's nargs="+"), and parsing
// that stops at the first positional argument (the program to launch) so everything after it belongs to that
// program. Unknown options are errors with a did-you-mean; a numeric option's value is checked by CLI11's validators.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace acc::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The number an option's value must be, checked by CLI11's validators (CLI::Range, CLI::PositiveNumber) as the
// command line is parsed. A value that is not is a usage error naming the option and this range:
// "--term_timeout must be a number of seconds in (0, 3600]; got '-1'".
struct Number {
  double min = 0, max = 0;
  bool integer = false;    // decimal digits, optionally signed
  bool above_min = false;  // min itself excluded (min 0 only: CLI::PositiveNumber)
  std::string unit;        // "seconds": "a number of seconds in ..."
};
std::string describe(const Number& n);  // "an integer in [0, 1000000]", "a number of seconds in (0, 3600]"
// The value of `text` when it is such a number (the checks of parse()), else nullopt.
std::optional<double> number(const std::string& text, const Number& n);

struct Option {
  std::string name;                 // canonical: "--num_processes"
  std::vector<std::string> shorts;  // "-q"
  bool takes_value = false;         // false: a flag (store true)
  bool many = false;                // with takes_value: one or more values, as argparse's nargs="+"
  std::string metavar;              // "N"
  std::string help;
  std::string group;                // help section
  std::string config_key;           // launch-config key this option sets ("" for launcher-only options)
  std::string flag_value = "true";  // value a flag gives its config key ("MULTI_GPU" for --multi_gpu)
  std::optional<Number> number;     // with takes_value: the value must be this number
};

struct Given {
  std::string value;  // the option's value ("true" for a flag; the last one for `many`)
  std::vector<std::string> values;  // `many`: every value given, over all occurrences
  std::string as_typed;  // "--num-processes"
  double number = 0;     // an option with `number`: the value, checked
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

// A subcommand's preamble: parses `args` (positionals kept) and prints the help for --help. The exit status when
// there is nothing more to do (0 after the help; 2 after a usage error, printed as "<me>: error: ..."), nullopt to
// go on with `p`.
std::optional<int> parse_or_help(const std::vector<Option>& options, const std::vector<std::string>& args,
                                 const char* me, const std::string& usage, const std::string& description, Parsed& p);

}  // namespace acc::cli
