// libFuzzer target: a regular expression a caller gives for parameter names, the two ways it reaches libacc:
// acc_model_set_requires_grad's pattern (Model::set_requires_grad: the C string as given, matched against each whole
// parameter name), and acc_optimizer_create's param_groups "params" (src/train/optim.cpp: the options' JSON read by
// Options, each group written back as JSON and read again, its patterns compiled, each matched against each name).
// The input is the pattern, then a NUL byte and the parameter names separated by NUL bytes (none: a Llama's and a
// GPT-2's). Under std::regex "(.|.)*x" ran past 60 s and 20,000 nested groups overflowed the stack; on RE2 each must
// be matched or refused at once.
//
// The torch-free part: Model and the optimizer need LibTorch, and the fuzz build has none (-Dcore=false). This target
// runs the code they run on the text: the options reader (src/util/options.cpp) and the JSON reader and writer, and
// the pattern engine (src/util/pattern.cpp), both compiled here.
//
// Oracle: besides crashes, hangs (-timeout), leaks and sanitizer reports, a refused pattern's message names it as
// documented and stays bounded; a whole match is a match somewhere; full_match(name) is the search of "^(?:p)$" (RE2's
// $ is the end of the text); "params" read back from the options is the pattern written into them, byte for byte,
// and selects the same names.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "fuzz_patterns.hpp"
#include "util/options.hpp"
#include <acc/json.hpp>
#include <acc/limits.hpp>

namespace {

using acc_fuzz::pattern_finding;

// The optimizer options a caller would write for one group: {"type": "adamw", "param_groups": [{"params": [P],
// "weight_decay": 0.0}]}.
std::string options_with(const std::string& pattern) {
  acc::json::Writer w;
  w.begin_object().key("type").value("adamw").key("param_groups").begin_array();
  w.begin_object().key("params").begin_array().value(pattern).end_array().key("weight_decay").value(0.0);
  w.end_object().end_array().end_object();
  return w.str();
}

// What optim.cpp does with them: the top level read by Options, each group's text read by Options again, its
// "params" a pattern or a list of them.
std::vector<std::string> params_of(const std::string& options_json) {
  using acc::core::Options;
  const std::vector<std::string> hyper = {"lr",    "momentum", "dampening",    "nesterov",
                                          "betas", "eps",      "weight_decay", "amsgrad"};
  std::vector<std::string> top_keys = hyper, group_keys = hyper;
  top_keys.insert(top_keys.end(), {"type", "fused", "param_groups"});
  group_keys.push_back("params");
  Options top(options_json.c_str(), "optimizer options", top_keys);
  const acc::json::Value list = top.root().get("param_groups");
  std::vector<std::string> texts;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "optimizer options: param_groups[" + std::to_string(i) + "]";
    Options o(list.at(i).text().c_str(), where, group_keys);
    const acc::json::Value p = o.root().get("params");
    if (p.is_string()) texts.push_back(p.as_string());
    for (const acc::json::Value& e : p.is_array() ? p.elements() : std::vector<acc::json::Value>{})
      texts.push_back(e.as_string());
  }
  return texts;
}

// RFC 3629's UTF-8 (no overlong forms, no surrogates, at most U+10FFFF): what a JSON text's strings must hold.
bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c >> 6) != 2) return false;
      cp = cp << 6 | (c & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string pattern = input.substr(0, nul);
  std::vector<std::string> given;
  for (size_t at = nul; at != std::string::npos;) {
    const size_t next = input.find('\0', at + 1);
    given.push_back(input.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1));
    at = next;
  }
  const std::vector<std::string>& names = given.empty() ? acc_fuzz::parameter_names() : given;

  acc_fuzz::guarded<std::invalid_argument>([&] {
    // set_requires_grad
    const auto p = acc_fuzz::compile_pattern(pattern, "requires_grad pattern");
    size_t hits = 0;
    if (p) {
      hits = acc_fuzz::match_names(*p, names);
      if (pattern.size() + 6 <= acc::limits::kPatternBytes) {
        if (const auto anchored = acc_fuzz::compile_pattern("^(?:" + pattern + ")$", "anchored")) {
          for (const std::string& name : names)
            if (p->full_match(name) != anchored->search(name))
              pattern_finding("full_match('" + name + "') differs from the search of ^(?:pattern)$");
        }
      }
    }
    // param_groups: a caller's JSON holds UTF-8 only (the reader refuses other bytes in a string)
    std::vector<std::string> read;
    try {
      read = params_of(options_with(pattern));
    } catch (const acc::core::OptionsError& e) {
      if (!valid_utf8(pattern)) return;
      pattern_finding(std::string("the options written for a pattern are refused: ") + e.what());
    }
    if (!valid_utf8(pattern)) pattern_finding("param_groups' JSON accepted a pattern that is not UTF-8");
    if (read.size() != 1 || read.front() != pattern)
      pattern_finding("param_groups' params read back differ from the pattern written");
    const auto q = acc_fuzz::compile_pattern(read.front(), "optimizer options: param_groups[0]: 'params'");
    if (q.has_value() != p.has_value()) pattern_finding("the pattern compiles one way and not the other");
    if (q && acc_fuzz::match_names(*q, names) != hits)
      pattern_finding("the pattern selects other names through param_groups");
  });
  return 0;
}
