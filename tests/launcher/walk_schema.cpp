// Walks both schemas key by key (schema_keys: every key the schema accepts, so keys added later are walked too) and
// prints, for each, what setting it to each of a few valid non-default values does at run time:
//   accelerator KEY refused|warned|-       unsupported_setting / setting_warnings / resolution name the key
//   launch KEY exported VAR,...|refused|warned|-  launch_environment differs from the same config with the key at
//                                           its default, or resolve_launch / check_launch / launch_warnings name it
// An exported launch key also lists the accelerator keys its variables change in the launched processes
// ("feeds a.b,c"), or "context-refused" when the library refuses the job its section describes (Megatron-LM).
// check_keys_used.py adds the keys the library and launcher read in their sources and fails on the rest.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "acc/config.hpp"

using namespace acc::config;

namespace {

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t i = s.find(sep, start);
    out.push_back(s.substr(start, i - start));
    if (i == std::string::npos) return out;
    start = i + sep.size();
  }
}

std::string quote(const std::string& s) { return "\"" + s + "\""; }

// Valid values of the key other than its default, as JSON texts.
std::vector<std::string> candidates(const KeyInfo& k) {
  std::vector<std::string> out;
  std::optional<double> lo, hi;
  if (k.range.rfind(">= ", 0) == 0) lo = std::stod(k.range.substr(3));
  if (auto dots = k.range.find(".."); dots != std::string::npos) {
    lo = std::stod(k.range.substr(0, dots));
    hi = std::stod(k.range.substr(dots + 2));
  }
  for (const std::string& type : split(k.type, " | ")) {
    if (type == "bool") {
      out.push_back("true");
      out.push_back("false");
    } else if (type == "int" || type == "number") {
      double base = lo.value_or(1);  // the default when it is a number
      if (!k.default_json.empty() &&
          (std::isdigit(static_cast<unsigned char>(k.default_json[0])) || k.default_json[0] == '-'))
        base = std::stod(k.default_json);
      for (double v : {base + 1, base * 2 + 1, lo.value_or(base + 3), hi.value_or(base + 5)}) {
        if ((lo && v < *lo) || (hi && v > *hi)) continue;
        char buf[32];
        std::snprintf(buf, sizeof buf, type == "int" ? "%.0f" : "%g", type == "int" ? v : v + 0.5);
        out.push_back(buf);
      }
    } else if (type == "string") {
      for (const auto& c : k.choices) out.push_back(quote(c));
      if (k.choices.empty()) out.push_back("\"x\"");
    } else if (type == "list[string]") {
      for (const auto& c : k.choices) out.push_back("[" + quote(c) + "]");
      if (k.choices.empty()) out.push_back("[\"x\"]");
    } else if (type == "bool[3]") {
      out.push_back("[true, false, false]");
      out.push_back("[false, true, true]");
    } else if (type == "any" || type == "object") {
      out.push_back("{\"a\": 1}");
      out.push_back("\"x\"");
    }
  }
  std::vector<std::string> kept;
  for (auto& v : out)
    if (v != k.default_json && std::find(kept.begin(), kept.end(), v) == kept.end()) kept.push_back(v);
  return kept;
}

// A JSON object holding each (dotted path, JSON value) pair, nested by section.
std::string object_of(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::vector<std::string> order;
  std::vector<std::vector<std::pair<std::string, std::string>>> members;
  for (const auto& [path, value] : entries) {
    const size_t dot = path.find('.');
    const std::string head = path.substr(0, dot);
    auto it = std::find(order.begin(), order.end(), head);
    if (it == order.end()) {
      order.push_back(head);
      members.emplace_back();
      it = order.end() - 1;
    }
    members[it - order.begin()].emplace_back(dot == std::string::npos ? "" : path.substr(dot + 1), value);
  }
  std::string out = "{";
  for (size_t i = 0; i < order.size(); ++i) {
    out += (i ? ", " : "") + quote(order[i]) + ": ";
    out += members[i].size() == 1 && members[i][0].first.empty() ? members[i][0].second : object_of(members[i]);
  }
  return out + "}";
}

bool names(const std::string& message, const std::string& key) {
  return message.find("'" + key + "'") != std::string::npos || message.find(key + " ") != std::string::npos ||
         message.find(key + ":") != std::string::npos;
}

void walk_accelerator() {
  for (const KeyInfo& k : schema_keys(SchemaKind::Accelerator)) {
    std::set<std::string> what;
    for (const std::string& v : candidates(k)) {
      try {
        Config c = resolve_accelerator(object_of({{k.path, v}}), {});
        if (auto why = unsupported_setting(c); why && names(*why, k.path)) what.insert("refused");
        for (const auto& w : setting_warnings(c))
          if (names(w, k.path)) what.insert("warned");
      } catch (const Error& e) {
        if (names(e.what(), k.path)) what.insert("refused");
      }
    }
    std::string line;
    for (const auto& w : what) line += (line.empty() ? "" : ",") + w;
    if (candidates(k).empty()) line = "only-default";  // no other value is accepted: nothing to ignore
    std::printf("accelerator %s %s\n", k.path.c_str(), line.empty() ? "-" : line.c_str());
  }
}

// The launch config around a key: what makes its section mean something to accelerate launch (fp8_config with fp8,
// fsdp_config with FSDP, a sequence-parallel setting with sp_size 2, ...), and the key itself at its default, so that
// only the value differs from the baseline.
std::vector<std::pair<std::string, std::string>> context_of(const KeyInfo& k) {
  const std::string& path = k.path;
  std::vector<std::pair<std::string, std::string>> out;
  auto starts = [&](const char* prefix) { return path.rfind(prefix, 0) == 0; };
  out.emplace_back("distributed_type", starts("fsdp_config.")          ? "\"FSDP\""
                                       : starts("deepspeed_config.")   ? "\"DEEPSPEED\""
                                       : starts("megatron_lm_config.") ? "\"MEGATRON_LM\""
                                                                       : "\"NO\"");
  if (starts("fp8_config.")) out.emplace_back("mixed_precision", "\"fp8\"");
  const std::string p = "parallelism_config.parallelism_config_";
  if (starts((p + "sp_").c_str()) && path != p + "sp_size") out.emplace_back(p + "sp_size", "2");
  if (starts((p + "cp_").c_str()) && path != p + "cp_size") out.emplace_back(p + "cp_size", "2");
  if (k.default_json != "null") out.emplace_back(path, k.default_json);
  return out;
}

std::string file_with(const std::string& dir, const std::string& json) {
  static int n = 0;
  const std::string path = dir + "/config" + std::to_string(n++) + ".json";
  std::ofstream(path) << json;
  return path;
}

void walk_launch(const std::string& dir) {
  for (const KeyInfo& k : schema_keys(SchemaKind::Launch)) {
    const auto ctx = context_of(k);
    if (k.path == "distributed_type") {  // the context key itself: every paradigm is a launch or a refusal
      std::printf("launch %s exported\n", k.path.c_str());
      continue;
    }
    const auto base_cfg = resolve_launch(file_with(dir, object_of(ctx)), {}, false);
    const auto base = launch_environment(base_cfg);
    std::set<std::string> vars, feeds, what;
    for (const std::string& v : candidates(k)) {
      try {
        auto with = ctx;
        if (!with.empty() && with.back().first == k.path) with.pop_back();
        with.emplace_back(k.path, v);
        Config c = resolve_launch(file_with(dir, object_of(with)), {}, false);
        try {
          check_launch(c);
        } catch (const Error& e) {
          if (names(e.what(), k.path)) what.insert("refused");
        }
        for (const auto& w : launch_warnings(c))
          if (names(w, k.path)) what.insert("warned");
        const auto env = launch_environment(c);
        std::set<std::string> changed;
        for (const auto& [name, value] : env) {
          auto it = base.find(name);
          if (it == base.end() || it->second != value) changed.insert(name);
        }
        for (const auto& [name, value] : base)
          if (!env.count(name)) changed.insert(name);
        if (changed.empty()) continue;
        vars.insert(changed.begin(), changed.end());
        // What the launched processes resolve from it.
        try {
          const Config lib = resolve_accelerator("", env), lib_base = resolve_accelerator("", base);
          bool fed = false;
          for (const auto& key : lib.keys())
            if (lib.get_json(key) != lib_base.get_json(key)) feeds.insert(key), fed = true;
          if (!fed && unsupported_setting(lib)) what.insert("context-refused");
        } catch (const Error& e) {
          what.insert("refused-in-library");
        }
      } catch (const Error& e) {
        if (names(e.what(), k.path)) what.insert("refused");
        else std::fprintf(stderr, "launch %s = %s: %s\n", k.path.c_str(), v.c_str(), e.what());
      }
    }
    std::string line;
    for (const auto& w : what) line += (line.empty() ? "" : ",") + w;
    if (!vars.empty()) {
      std::string list, fed;
      for (const auto& v : vars) list += (list.empty() ? "" : ",") + v;
      for (const auto& f : feeds) fed += (fed.empty() ? "" : ",") + f;
      line += (line.empty() ? "" : " ") + std::string("exported ") + list + (fed.empty() ? "" : " feeds " + fed);
    }
    if (candidates(k).empty()) line = "only-default";
    std::printf("launch %s %s\n", k.path.c_str(), line.empty() ? "-" : line.c_str());
  }
}

}  // namespace

int main() {
  char tmpl[] = "/tmp/acc-walk-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (!dir) {
    std::perror("mkdtemp");
    return 1;
  }
  int rc = 0;
  try {
    walk_accelerator();
    walk_launch(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "walk_schema: %s\n", e.what());
    rc = 1;
  }
  std::filesystem::remove_all(dir);
  return rc;
}
