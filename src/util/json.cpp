#include "util/json.hpp"

#include <acc/config.hpp>

#include <cjson/cJSON.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace acc::core {

void JsonWriter::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ", ";
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  separate();
  out_ += '{';
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_object() {
  out_ += '}';
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::begin_array() {
  separate();
  out_ += '[';
  first_.push_back(true);
  return *this;
}
JsonWriter& JsonWriter::end_array() {
  out_ += ']';
  first_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::key(std::string_view k) {
  value(k);
  out_ += ": ";
  after_key_ = true;
  return *this;
}
JsonWriter& JsonWriter::value(std::string_view v) {
  separate();
  out_ += config::json_quote(v);
  return *this;
}

JsonWriter& JsonWriter::value(int64_t v) {
  separate();
  out_ += std::to_string(v);
  return *this;
}
JsonWriter& JsonWriter::value(double v) {
  if (!std::isfinite(v)) throw std::invalid_argument("JSON has no representation for " + std::to_string(v));
  separate();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out_ += buf;
  return *this;
}
JsonWriter& JsonWriter::value(bool v) {
  separate();
  out_ += v ? "true" : "false";
  return *this;
}

Json::Json(const std::string& text, std::string source) : source_(std::move(source)) {
  // cJSON alone would take the first of two equal keys (Python's json the last), ignore what follows the document
  // and pass bytes that are not UTF-8: the config library's strict reader refuses each, naming line and column.
  try {
    config::check_json(text, source_);
  } catch (const config::Error& e) {
    throw std::invalid_argument(e.what());
  }
  root_ = cJSON_ParseWithLength(text.data(), text.size());
  if (!root_ || !cJSON_IsObject(root_)) {
    cJSON_Delete(root_);
    throw std::invalid_argument(source_ + ": not a JSON object");
  }
}

Json::~Json() { cJSON_Delete(root_); }

void JsonValue::fail(const std::string& what) const { throw std::invalid_argument(where_ + ": " + what); }

bool JsonValue::has(const std::string& key) const {
  return cJSON_IsObject(node_) && cJSON_GetObjectItemCaseSensitive(node_, key.c_str()) != nullptr;
}

JsonValue JsonValue::get(const std::string& key) const {
  if (!cJSON_IsObject(node_)) fail("expected an object");
  const cJSON* item = cJSON_GetObjectItemCaseSensitive(node_, key.c_str());
  if (!item) fail("missing key '" + key + "'");
  return JsonValue(item, where_ + "." + key);
}

int64_t JsonValue::as_int() const {
  if (!cJSON_IsNumber(node_) || node_->valuedouble != std::floor(node_->valuedouble) ||
      std::fabs(node_->valuedouble) > 9007199254740992.0)
    fail("expected an integer");
  return static_cast<int64_t>(node_->valuedouble);
}

std::string JsonValue::as_string() const {
  if (!cJSON_IsString(node_)) fail("expected a string");
  return node_->valuestring;
}

int64_t JsonValue::get_int(const std::string& key) const { return get(key).as_int(); }

double JsonValue::get_double(const std::string& key) const {
  JsonValue v = get(key);
  if (!cJSON_IsNumber(v.node_)) v.fail("expected a number");
  return v.node_->valuedouble;
}

bool JsonValue::get_bool(const std::string& key) const {
  JsonValue v = get(key);
  if (!cJSON_IsBool(v.node_)) v.fail("expected true or false");
  return cJSON_IsTrue(v.node_);
}

std::string JsonValue::get_string(const std::string& key) const { return get(key).as_string(); }

bool JsonValue::has_value(const std::string& key) const {
  return has(key) && !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(node_, key.c_str()));
}
int64_t JsonValue::get_int_or(const std::string& key, int64_t fallback) const {
  return has_value(key) ? get_int(key) : fallback;
}
double JsonValue::get_double_or(const std::string& key, double fallback) const {
  return has_value(key) ? get_double(key) : fallback;
}
bool JsonValue::get_bool_or(const std::string& key, bool fallback) const {
  return has_value(key) ? get_bool(key) : fallback;
}
std::string JsonValue::get_string_or(const std::string& key, const std::string& fallback) const {
  return has_value(key) ? get_string(key) : fallback;
}
bool JsonValue::is_object() const { return cJSON_IsObject(node_); }
bool JsonValue::is_array() const { return cJSON_IsArray(node_); }

size_t JsonValue::size() const {
  if (!cJSON_IsArray(node_) && !cJSON_IsObject(node_)) fail("expected an array or object");
  return static_cast<size_t>(cJSON_GetArraySize(node_));
}

JsonValue JsonValue::at(size_t i) const {
  if (!cJSON_IsArray(node_)) fail("expected an array");
  const cJSON* item = cJSON_GetArrayItem(node_, static_cast<int>(i));
  if (!item) fail("no element " + std::to_string(i));
  return JsonValue(item, where_ + "[" + std::to_string(i) + "]");
}

std::vector<std::string> JsonValue::keys() const {
  if (!cJSON_IsObject(node_)) fail("expected an object");
  std::vector<std::string> k;
  for (const cJSON* c = node_->child; c; c = c->next) k.push_back(c->string);
  return k;
}

}  // namespace acc::core
