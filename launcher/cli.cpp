#include "cli.hpp"

#include <algorithm>

#include "acc/config.hpp"

namespace acc::cli {
namespace {

// "--num-processes" and "--num_processes" are one option.
std::string normalize(const std::string& s) {
  if (s.rfind("--", 0) != 0) return s;
  std::string out = "--";
  for (size_t i = 2; i < s.size(); ++i) out += s[i] == '-' ? '_' : s[i];
  return out;
}

const Option* find(const std::vector<Option>& options, const std::string& typed) {
  const std::string n = normalize(typed);
  for (const auto& o : options) {
    if (normalize(o.name) == n) return &o;
    for (const auto& s : o.shorts)
      if (s == typed) return &o;
  }
  return nullptr;
}

}  // namespace

Parsed parse(const std::vector<Option>& options, const std::vector<std::string>& args, bool stop_at_positional) {
  Parsed p;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      p.positionals.insert(p.positionals.end(), args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    if (a.size() < 2 || a[0] != '-') {
      if (stop_at_positional) {
        p.positionals.insert(p.positionals.end(), args.begin() + static_cast<long>(i), args.end());
        break;
      }
      p.positionals.push_back(a);
      continue;
    }
    std::string name = a, inline_value;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0) {
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        name = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
        has_inline = true;
      }
    }
    const Option* o = find(options, name);
    if (!o) {
      std::vector<std::string> names;
      for (const auto& opt : options) names.push_back(opt.name);
      std::string msg = "unknown option '" + name + "'";
      std::string near = config::closest_match(normalize(name), names);
      if (!near.empty()) msg += " (did you mean '" + near + "'?)";
      throw UsageError(msg);
    }
    Given g;
    g.as_typed = name;
    if (o->takes_value) {
      if (has_inline) {
        g.value = inline_value;
      } else {
        if (i + 1 >= args.size()) throw UsageError("option '" + name + "' needs a value (" + o->metavar + ")");
        g.value = args[++i];
      }
    } else if (has_inline) {
      auto b = config::parse_bool(inline_value);
      if (!b) throw UsageError("option '" + name + "' is a flag; got '=" + inline_value + "' (use true or false)");
      if (!*b) {
        p.options.erase(o->name);
        continue;
      }
      g.value = "true";
    } else {
      g.value = "true";
    }
    p.options[o->name] = g;
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

}  // namespace acc::cli
