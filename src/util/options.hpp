// Per-call options given as a JSON object (model specs, optimizer and data-loader options), read by acc/json.hpp.
// Every key must be known; errors name the key, the object's role and what is accepted.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <acc/json.hpp>

namespace acc::core {

// An invalid argument in a JSON text: mapped to ACC_ERR_INVALID_CONFIG at the ABI.
struct OptionsError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

class Options {
 public:
  // `what` names the object in messages, e.g. "optimizer options". NULL or "" text means {}.
  Options(const char* json_text, std::string what, std::vector<std::string> accepted);
  ~Options();
  Options(const Options&) = delete;
  Options& operator=(const Options&) = delete;

  bool has(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback,
                         const std::vector<std::string>& allowed = {}) const;
  int64_t get_int(const std::string& key, std::optional<int64_t> fallback, int64_t min = INT64_MIN) const;
  double get_double(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::vector<int64_t> get_int_list(const std::string& key) const;  // required
  std::vector<double> get_double_list(const std::string& key, std::vector<double> fallback) const;
  // Token ids: an integer >= 0 or a list of them (transformers' eos_token_id).
  std::vector<int64_t> get_id_list(const std::string& key, std::vector<int64_t> fallback) const;
  json::Value root() const;  // the whole object, for options with nested values (a device map)

 private:
  std::optional<json::Value> item(const std::string& key) const;  // present and not null
  [[noreturn]] void fail(const std::string& key, const std::string& expected) const;
  std::unique_ptr<json::Document> doc_;
  std::string what_;
};

}  // namespace acc::core
