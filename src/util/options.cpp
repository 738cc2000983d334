#include "util/options.hpp"

#include <cjson/cJSON.h>

#include <acc/config.hpp>

#include <cmath>

namespace acc::core {

namespace {
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}
}  // namespace

Options::Options(const char* json_text, std::string what, std::vector<std::string> accepted)
    : what_(std::move(what)) {
  std::string text = json_text ? json_text : "";
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) text = "{}";
  // Strict first (util/json.cpp says why): a duplicate key, trailing text or bytes that are not UTF-8 are refused.
  try {
    config::check_json(text, what_);
  } catch (const config::Error& e) {
    throw OptionsError(e.what());
  }
  root_ = cJSON_ParseWithLength(text.data(), text.size());
  if (!root_) throw OptionsError(what_ + ": malformed JSON");
  if (!cJSON_IsObject(root_)) {
    cJSON_Delete(root_);
    throw OptionsError(what_ + ": expected a JSON object");
  }
  for (const cJSON* c = root_->child; c; c = c->next) {
    bool known = false;
    for (const auto& a : accepted) known = known || a == c->string;
    if (!known) {
      std::string msg = what_ + ": unknown key '" + c->string + "'; accepted: " + join(accepted);
      cJSON_Delete(root_);
      throw OptionsError(msg);
    }
  }
}

Options::~Options() { cJSON_Delete(root_); }

const cJSON* Options::item(const std::string& key) const {
  const cJSON* it = cJSON_GetObjectItemCaseSensitive(root_, key.c_str());
  return (it && !cJSON_IsNull(it)) ? it : nullptr;
}

void Options::fail(const std::string& key, const std::string& expected) const {
  throw OptionsError(what_ + ": '" + key + "' must be " + expected);
}

bool Options::has(const std::string& key) const { return item(key) != nullptr; }

std::string Options::get_string(const std::string& key, const std::string& fallback,
                                const std::vector<std::string>& allowed) const {
  const cJSON* it = item(key);
  if (!it) return fallback;
  std::string expected = allowed.empty() ? "a string" : "one of " + join(allowed);
  if (!cJSON_IsString(it)) fail(key, expected);
  std::string v = it->valuestring;
  if (!allowed.empty()) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == v;
    if (!ok) fail(key, expected + "; got '" + v + "'");
  }
  return v;
}

int64_t Options::get_int(const std::string& key, std::optional<int64_t> fallback, int64_t min) const {
  const cJSON* it = item(key);
  std::string expected = "an integer" + (min == INT64_MIN ? std::string() : " >= " + std::to_string(min));
  if (!it) {
    if (!fallback) fail(key, expected + " (required)");
    return *fallback;
  }
  if (!cJSON_IsNumber(it) || it->valuedouble != std::floor(it->valuedouble) ||
      std::fabs(it->valuedouble) > 9.0e15)
    fail(key, expected);
  auto v = static_cast<int64_t>(it->valuedouble);
  if (v < min) fail(key, expected + "; got " + std::to_string(v));
  return v;
}

double Options::get_double(const std::string& key, double fallback) const {
  const cJSON* it = item(key);
  if (!it) return fallback;
  if (!cJSON_IsNumber(it) || !std::isfinite(it->valuedouble)) fail(key, "a number");
  return it->valuedouble;
}

bool Options::get_bool(const std::string& key, bool fallback) const {
  const cJSON* it = item(key);
  if (!it) return fallback;
  if (!cJSON_IsBool(it)) fail(key, "true or false");
  return cJSON_IsTrue(it);
}

std::vector<int64_t> Options::get_int_list(const std::string& key) const {
  const cJSON* it = item(key);
  if (!it || !cJSON_IsArray(it) || cJSON_GetArraySize(it) == 0)
    fail(key, "a non-empty list of positive integers (required)");
  std::vector<int64_t> v;
  for (const cJSON* c = it->child; c; c = c->next) {
    if (!cJSON_IsNumber(c) || c->valuedouble < 1 || c->valuedouble != std::floor(c->valuedouble))
      fail(key, "a non-empty list of positive integers");
    v.push_back(static_cast<int64_t>(c->valuedouble));
  }
  return v;
}

std::vector<double> Options::get_double_list(const std::string& key, std::vector<double> fallback) const {
  const cJSON* it = item(key);
  if (!it) return fallback;
  if (!cJSON_IsArray(it)) fail(key, "a list of numbers");
  std::vector<double> v;
  for (const cJSON* c = it->child; c; c = c->next) {
    if (!cJSON_IsNumber(c)) fail(key, "a list of numbers");
    v.push_back(c->valuedouble);
  }
  return v;
}

std::vector<int64_t> Options::get_id_list(const std::string& key, std::vector<int64_t> fallback) const {
  const cJSON* it = item(key);
  if (!it) return fallback;
  const auto is_id = [](const cJSON* c) {
    return cJSON_IsNumber(c) && c->valuedouble >= 0 && c->valuedouble <= 9.0e15 && c->valuedouble == std::floor(c->valuedouble);
  };
  if (is_id(it)) return {static_cast<int64_t>(it->valuedouble)};
  if (!cJSON_IsArray(it)) fail(key, "a token id (an integer >= 0) or a list of them");
  std::vector<int64_t> v;
  for (const cJSON* c = it->child; c; c = c->next) {
    if (!is_id(c)) fail(key, "a token id (an integer >= 0) or a list of them");
    v.push_back(static_cast<int64_t>(c->valuedouble));
  }
  return v;
}

}  // namespace acc::core
