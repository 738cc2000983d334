// libFuzzer target: a LoRA adapter's adapter_config.json (peft's LoraConfig), as load_adapter reads it from a folder
// and add_lora from a caller, and the regular expressions it holds as lora::plan runs them on a model's module names:
// target_modules and exclude_modules given as one string, modules_to_save, layers_pattern, and rank_pattern's and
// alpha_pattern's keys, each wrapped as src/models/lora.cpp wraps it and matched against a Llama's and a GPT-2's
// module names. A pattern from such a file hung the process under std::regex ("(.|.)*x": past 60 s) or crashed it
// (30,000 nested groups: a stack overflow); on RE2 each must be matched or refused at once.
//
// The torch-free part: lora::parse_config and lora::plan are in src/models/lora.cpp, which needs LibTorch, and the
// fuzz build has none (-Dcore=false). This target runs what they run on the file's text: the JSON reader (acc::json,
// under a config file's limits, as issue 36 item 7 asks of adapter_config.json) and the pattern engine itself
// (src/util/pattern.cpp, compiled here). LoraConfig's other fields' checks are not reached.
//
// Oracle: besides crashes, hangs (-timeout), leaks and sanitizer reports, a refused pattern's message names it as
// documented and stays bounded (fuzz_patterns.hpp), and a whole match is a match somewhere.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "fuzz_patterns.hpp"
#include <acc/json.hpp>
#include <acc/limits.hpp>

namespace {

using acc::json::Value;

// A config file's limits (issue 36 item 7), with keys as long as a pattern: rank_pattern's and alpha_pattern's keys
// are patterns (parse_config's kConfigTextLimits).
constexpr acc::json::Limits kLimits{acc::limits::kConfigDepth, acc::limits::kKeysPerMapping, acc::limits::kPatternBytes,
                                    acc::limits::kStringBytes, false};

// lora.cpp's strings(): null, one string (when string_ok), or a list of strings; json::Error otherwise.
std::vector<std::string> strings(const Value& v, bool string_ok, bool* is_string = nullptr) {
  std::vector<std::string> out;
  if (is_string) *is_string = false;
  if (v.is_null()) return out;
  if (string_ok && v.is_string()) {
    if (is_string) *is_string = true;
    return {v.as_string()};
  }
  if (!v.is_array()) v.fail("expected a list of strings");
  for (const Value& e : v.elements()) out.push_back(e.as_string());
  return out;
}

void run(const std::string& pattern, const std::string& what, bool search_with_group = false) {
  const auto p = acc_fuzz::compile_pattern(pattern, what);
  if (!p) return;
  acc_fuzz::match_names(*p, acc_fuzz::module_names());
  if (!search_with_group) return;
  std::string group;  // layer_index: the layer number after layers_pattern, the first group
  for (const std::string& name : acc_fuzz::module_names()) (void)p->search(name, &group);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  acc_fuzz::guarded<std::invalid_argument>([&] {
    const acc::json::Document doc = acc::json::Document::object(text, "adapter_config.json", kLimits);
    for (const auto& [key, v] : doc.root().items()) {
      if (key == "target_modules" || key == "exclude_modules") {
        bool is_string = false;
        const std::vector<std::string> s = strings(v, true, &is_string);
        if (is_string) run(s.front(), key);  // a regular expression (a list holds names, matched as suffixes)
      } else if (key == "modules_to_save") {
        for (const std::string& m : strings(v, false)) run("(^|.*\\.)" + m + "($|\\..*)", "modules_to_save");
      } else if (key == "layers_pattern") {
        for (const std::string& p : strings(v, true)) run("^(?:|.*?\\.)" + p + "\\.(\\d+)\\.", "layers_pattern", true);
      } else if (key == "rank_pattern" || key == "alpha_pattern") {
        if (v.is_null()) continue;
        if (!v.is_object()) v.fail(key + " must be an object of module patterns");
        for (const auto& [pattern, value] : v.items()) {
          // Checked when read, naming the key (parse_config); then get_pattern_key's match at the end of a name.
          if (acc_fuzz::compile_pattern(pattern, value.where())) run("(.*\\.)?(" + pattern + ")", "pattern");
        }
      }
    }
  });
  return 0;
}
