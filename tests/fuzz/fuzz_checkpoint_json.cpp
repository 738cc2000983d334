// libFuzzer target: the reader of a checkpoint's JSON files (acc::json::Document, base/src/json.cpp), walked
// the way load_state reads manifest.json and accelerator_state.json: the format and version, every file
// the manifest lists with its size, the counts of prepared objects; then every value of the document through the
// generic getters. Refusals are std::invalid_argument naming the file and the key; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "fuzz_common.hpp"
#include <acc/json.hpp>

namespace {

void walk(const acc::json::Value& v, int depth) {
  if (depth > 64) return;
  if (v.is_object()) {
    for (const std::string& k : v.keys()) {
      if (v.has_value(k)) (void)v.get_int_or(k, 0), (void)v.get_double_or(k, 0), (void)v.get_bool_or(k, false);
      try {
        (void)v.get_string_or(k, "");
      } catch (const std::invalid_argument&) {
      }
      walk(v.get(k), depth + 1);
    }
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) walk(v.at(i), depth + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  acc_fuzz::guarded<std::invalid_argument>([&] {
    const acc::json::Document doc = acc::json::Document::object(text, "manifest.json");
    const acc::json::Value root = doc.root();
    try {
      (void)root.get_string("format");
      (void)root.get_int("version");
      const acc::json::Value files = root.get("files");
      for (const std::string& name : files.keys()) (void)files.get_int(name);
    } catch (const std::invalid_argument&) {
    }
    try {
      for (const char* key : {"models", "optimizers", "schedulers", "dataloaders", "custom_objects", "num_processes"})
        (void)root.get_int(key);
    } catch (const std::invalid_argument&) {
    }
    walk(root, 0);
  });
  return 0;
}
