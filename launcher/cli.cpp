#include "cli.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "acc/config.hpp"

namespace acc::cli {
namespace {

// Accelerate's argparse takes every long option in both spellings: "--num_processes" and "--num-processes".
std::vector<std::string> spellings(const Option& o) {
  std::vector<std::string> out = {o.name};
  for (char from : {'-', '_'}) {
    std::string s = "--";
    for (size_t i = 2; i < o.name.size(); ++i) s += o.name[i] == from ? (from == '-' ? '_' : '-') : o.name[i];
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  out.insert(out.end(), o.shorts.begin(), o.shorts.end());
  return out;
}

[[noreturn]] void unknown_option(const std::vector<Option>& options, const std::string& typed) {
  const std::string name = typed.substr(0, typed.find('='));
  std::vector<std::string> names;
  for (const auto& o : options) names.push_back(o.name);
  std::string underscored = name;
  std::replace(underscored.begin() + std::min<size_t>(2, underscored.size()), underscored.end(), '-', '_');
  std::string msg = "unknown option '" + name + "'";
  std::string near = config::closest_match(underscored, names);
  if (!near.empty()) msg += " (did you mean '" + near + "'?)";
  throw UsageError(msg);
}

// CLI11's checks of a Number: CLI::Range (and CLI::PositiveNumber for an excluded minimum of 0), after a check of the
// text's form, since CLI11 reads integers with base prefixes ("010" is octal) and lets NaN through its ranges.
CLI::Validator number_validator(const Number& n) {
  if (n.above_min && n.min != 0) throw std::logic_error("cli::Number: above_min needs min 0");
  CLI::Validator range = CLI::Range(n.min, n.max);  // read as a double: the form check below keeps integers decimal
  if (n.above_min) range = CLI::PositiveNumber & range;
  CLI::Validator form(
      [integer = n.integer](std::string& s) -> std::string {
        if (integer) {
          const size_t digits = s.find_first_not_of("+-") == 1 ? 1 : 0;
          if (s.size() > digits && s.find_first_not_of("0123456789", digits) == std::string::npos) return "";
          return "not decimal digits";
        }
        double v = 0;
        return CLI::detail::lexical_cast(s, v) && !std::isnan(v) ? "" : "not a number";
      },
      "");
  return form & range;
}

}  // namespace

std::string describe(const Number& n) {
  auto text = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.15g", v);
    return std::string(buf);
  };
  std::string s = n.integer ? "an integer" : "a number";
  if (!n.unit.empty()) s += " of " + n.unit;
  if (n.max >= std::numeric_limits<double>::max()) return s + (n.above_min ? " > " : " >= ") + text(n.min);
  return s + " in " + (n.above_min ? "(" : "[") + text(n.min) + ", " + text(n.max) + "]";
}

std::optional<double> number(const std::string& text, const Number& n) {
  std::string s = text;
  double v = 0;
  if (!number_validator(n)(s).empty() || !CLI::detail::lexical_cast(s, v)) return std::nullopt;
  return v;
}

Parsed parse(const std::vector<Option>& options, const std::vector<std::string>& args, bool stop_at_positional) {
  CLI::App app;
  app.set_help_flag();  // the tables list --help themselves, with our help text
  app.allow_extras();   // unknown options come back in remaining(): reported below with a did-you-mean
  if (stop_at_positional) app.prefix_command();  // the program and its arguments are passed through untouched
  // One CLI11 option per spelling, so that the spelling typed is known (messages and provenance name it).
  std::map<const CLI::Option*, std::pair<const Option*, std::string>> owner;
  std::string refused;  // what a validator said of a value, as the usage error says it
  for (const auto& o : options)
    for (const auto& s : spellings(o)) {
      CLI::Option* c = !o.takes_value ? app.add_flag(s) : app.add_option(s)->expected(1, o.many ? -1 : 1);
      if (o.takes_value && o.number) {
        const CLI::Validator check = number_validator(*o.number);
        c->check(CLI::Validator(
            [check, &refused, s, n = *o.number](std::string& v) -> std::string {
              std::string copy = v;
              if (check(copy).empty()) return "";
              refused = s + " must be " + describe(n) + "; got '" + v + "'";
              return refused;
            },
            describe(*o.number)));
      }
      if (o.many) c->allow_extra_args();  // take values up to the next option, as nargs="+"
      c->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);  // every occurrence; the last one wins below
      owner[c] = {&o, s};
    }
  std::vector<std::string> positionals;
  if (!stop_at_positional) app.add_option("positionals", positionals);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ArgumentMismatch&) {
    // An option's values are taken whatever they look like ("--term_timeout -1"), so only the last argument can
    // lack its value.
    const std::string name = args.back().substr(0, args.back().find('='));
    for (const auto& o : options)
      for (const auto& s : spellings(o))
        if (s == name) throw UsageError("option '" + name + "' needs a value (" + o.metavar + ")");
    throw UsageError("option '" + name + "' needs a value");
  } catch (const CLI::ValidationError& e) {
    throw UsageError(refused.empty() ? e.what() : refused);
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  Parsed p;
  // Options in the order given, so that the last occurrence wins, whichever its spelling.
  std::map<const CLI::Option*, size_t> seen;
  for (const CLI::Option* c : app.parse_order()) {
    auto it = owner.find(c);
    if (it == owner.end()) continue;  // the positionals
    const auto& [o, typed] = it->second;
    const std::string value = c->results().at(seen[c]++);
    Given g{value, {}, typed};
    if (o->number) g.number = number(value, *o->number).value();  // the validator passed it
    if (o->many) {
      auto& given = p.options[o->name];
      given.value = value;
      given.values.push_back(value);
      given.as_typed = typed;
      continue;
    }
    if (!o->takes_value) {
      auto b = config::parse_bool(value);
      if (!b) throw UsageError("option '" + typed + "' is a flag; got '=" + value + "' (use true or false)");
      if (!*b) {
        p.options.erase(o->name);
        continue;
      }
      g.value = "true";
    }
    p.options[o->name] = g;
  }
  // What CLI11 did not take: unknown options, "--", and (with stop_at_positional) the program and its arguments,
  // which start at the first positional.
  const std::vector<std::string> rest = app.remaining();
  auto is_option = [](const std::string& a) { return a != "--" && a.size() > 1 && a[0] == '-'; };
  if (stop_at_positional) {
    if (!rest.empty() && is_option(rest[0])) unknown_option(options, rest[0]);
    p.positionals.assign(rest.begin() + (!rest.empty() && rest[0] == "--" ? 1 : 0), rest.end());
  } else {
    for (const auto& a : rest)
      if (is_option(a)) unknown_option(options, a);
    p.positionals = positionals;
  }
  return p;
}

std::string help(const std::string& usage, const std::string& description, const std::vector<Option>& options) {
  std::string out = "usage: " + usage + "\n\n" + description + "\n";
  std::vector<std::string> groups;
  for (const auto& o : options)
    if (std::find(groups.begin(), groups.end(), o.group) == groups.end()) groups.push_back(o.group);
  for (const auto& g : groups) {
    out += "\n" + g + ":\n";
    for (const auto& o : options) {
      if (o.group != g) continue;
      std::string left = "  ";
      for (const auto& s : o.shorts) left += s + ", ";
      left += o.name;
      if (o.takes_value) left += " " + o.metavar;
      if (left.size() < 34) left.append(34 - left.size(), ' ');
      else left += "\n" + std::string(34, ' ');
      out += left + o.help + "\n";
    }
  }
  return out;
}

std::optional<int> parse_or_help(const std::vector<Option>& options, const std::vector<std::string>& args,
                                 const char* me, const std::string& usage, const std::string& description, Parsed& p) {
  try {
    p = parse(options, args, false);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: error: %s\n", me, e.what());
    return 2;
  }
  if (!p.options.count("--help")) return std::nullopt;
  std::fputs(help(usage, description, options).c_str(), stdout);
  return 0;
}

}  // namespace acc::cli
