// JSON for the files libacc writes itself (checkpoints): a streaming writer, and a reader over cJSON
// whose getters name the file and the key when something is missing or of the wrong type.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

struct cJSON;

namespace acc::core {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);
  JsonWriter& value(std::string_view v);
  JsonWriter& value(const char* v) { return value(std::string_view(v)); }
  JsonWriter& value(const std::string& v) { return value(std::string_view(v)); }
  JsonWriter& value(int64_t v);
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(double v);  // exact round trip (%.17g)
  JsonWriter& value(bool v);
  const std::string& str() const { return out_; }

 private:
  void separate();
  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

// A node of a parsed document; `where` is its path for messages ("scheduler.json: steps").
class JsonValue {
 public:
  JsonValue(const cJSON* node, std::string where) : node_(node), where_(std::move(where)) {}
  bool has(const std::string& key) const;
  JsonValue get(const std::string& key) const;  // required
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  // Optional keys (Hugging Face config.json): the fallback when the key is missing or null.
  bool has_value(const std::string& key) const;  // present and not null
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_double_or(const std::string& key, double fallback) const;
  bool get_bool_or(const std::string& key, bool fallback) const;
  std::string get_string_or(const std::string& key, const std::string& fallback) const;
  bool is_object() const;
  bool is_array() const;
  size_t size() const;             // of an array or object
  JsonValue at(size_t i) const;    // of an array
  std::vector<std::string> keys() const;  // of an object, in order
  int64_t as_int() const;
  std::string as_string() const;

 private:
  [[noreturn]] void fail(const std::string& what) const;
  const cJSON* node_;
  std::string where_;
};

class Json {
 public:
  // Throws std::invalid_argument naming `source` when `text` is not strict JSON (config::check_json: no duplicate
  // keys, nothing after the document, UTF-8) or not an object.
  Json(const std::string& text, std::string source);
  ~Json();
  Json(const Json&) = delete;
  Json& operator=(const Json&) = delete;
  JsonValue root() const { return JsonValue(root_, source_); }

 private:
  cJSON* root_ = nullptr;
  std::string source_;
};

}  // namespace acc::core
