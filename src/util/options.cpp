#include "util/options.hpp"

#include <cmath>

namespace acc::core {

namespace {
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}
}  // namespace

Options::Options(const char* json_text, std::string what, std::vector<std::string> accepted) : what_(std::move(what)) {
  std::string text = json_text ? json_text : "";
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) text = "{}";
  try {
    doc_ = std::make_unique<json::Document>(json::Document::object(text, what_));
  } catch (const json::Error& e) {
    throw OptionsError(e.what());
  }
  for (const std::string& key : doc_->root().keys()) {
    bool known = false;
    for (const auto& a : accepted) known = known || a == key;
    if (!known) throw OptionsError(what_ + ": unknown key '" + key + "'; accepted: " + join(accepted));
  }
}

Options::~Options() = default;

std::optional<json::Value> Options::item(const std::string& key) const {
  auto v = doc_->root().find(key);
  if (v && v->is_null()) return std::nullopt;
  return v;
}

void Options::fail(const std::string& key, const std::string& expected) const {
  throw OptionsError(what_ + ": '" + key + "' must be " + expected);
}

bool Options::has(const std::string& key) const { return item(key).has_value(); }

std::string Options::get_string(const std::string& key, const std::string& fallback,
                                const std::vector<std::string>& allowed) const {
  const auto it = item(key);
  if (!it) return fallback;
  std::string expected = allowed.empty() ? "a string" : "one of " + join(allowed);
  if (!it->is_string()) fail(key, expected);
  const std::string& v = it->as_string();
  if (!allowed.empty()) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == v;
    if (!ok) fail(key, expected + "; got '" + v + "'");
  }
  return v;
}

int64_t Options::get_int(const std::string& key, std::optional<int64_t> fallback, int64_t min) const {
  const auto it = item(key);
  std::string expected = "an integer" + (min == INT64_MIN ? std::string() : " >= " + std::to_string(min));
  if (!it) {
    if (!fallback) fail(key, expected + " (required)");
    return *fallback;
  }
  if (!it->is_integer()) fail(key, expected);
  const int64_t v = it->as_int();
  if (v < min) fail(key, expected + "; got " + std::to_string(v));
  return v;
}

double Options::get_double(const std::string& key, double fallback) const {
  const auto it = item(key);
  if (!it) return fallback;
  if (!it->is_number()) fail(key, "a number");
  return it->as_double();
}

bool Options::get_bool(const std::string& key, bool fallback) const {
  const auto it = item(key);
  if (!it) return fallback;
  if (!it->is_bool()) fail(key, "true or false");
  return it->as_bool();
}

std::vector<int64_t> Options::get_int_list(const std::string& key) const {
  const auto it = item(key);
  if (!it || !it->is_array() || it->size() == 0) fail(key, "a non-empty list of positive integers (required)");
  std::vector<int64_t> v;
  for (const json::Value& e : it->elements()) {
    if (!e.is_integer() || e.as_int() < 1) fail(key, "a non-empty list of positive integers");
    v.push_back(e.as_int());
  }
  return v;
}

std::vector<double> Options::get_double_list(const std::string& key, std::vector<double> fallback) const {
  const auto it = item(key);
  if (!it) return fallback;
  if (!it->is_array()) fail(key, "a list of numbers");
  std::vector<double> v;
  for (const json::Value& e : it->elements()) {
    if (!e.is_number()) fail(key, "a list of numbers");
    v.push_back(e.as_double());
  }
  return v;
}

std::vector<int64_t> Options::get_id_list(const std::string& key, std::vector<int64_t> fallback) const {
  const auto it = item(key);
  if (!it) return fallback;
  const auto is_id = [](const json::Value& e) { return e.is_integer() && e.as_int() >= 0; };
  if (is_id(*it)) return {it->as_int()};
  if (!it->is_array()) fail(key, "a token id (an integer >= 0) or a list of them");
  std::vector<int64_t> v;
  for (const json::Value& e : it->elements()) {
    if (!is_id(e)) fail(key, "a token id (an integer >= 0) or a list of them");
    v.push_back(e.as_int());
  }
  return v;
}

json::Value Options::root() const { return doc_->root(); }

}  // namespace acc::core
