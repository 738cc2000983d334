// The one JSON layer of libacc and the launcher: a strict reader (RFC 8259: no duplicate key, nothing after the
// document, UTF-8) that keeps the line and column of every value, typed getters whose errors name the source, the key
// and the position, and one writer. Nothing else in the project parses or prints JSON.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "acc/limits.hpp"

namespace acc::config::detail {
struct Node;
}

namespace acc::json {

// Malformed text, or a value of the wrong kind: "<where> (line L, column C): <what>". An invalid argument at the C ABI;
// callers reading a configuration rethrow it as config::Error.
struct Error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// What a text may hold; an error names the limit a text exceeds.
struct Limits {
  int depth = limits::kConfigDepth;
  size_t keys_per_object = limits::kKeysPerMapping;
  size_t key_bytes = limits::kKeyBytes;
  size_t string_bytes = limits::kStringBytes;
  // Python's json writes NaN, Infinity and -Infinity (a diverged loss); they are read as numbers only when allowed.
  bool nonfinite_numbers = false;
};
inline constexpr Limits kConfigLimits{};
// Files libacc reads whose size is bounded where they are read (a checkpoint index maps any number of tensors).
inline constexpr Limits kDocumentLimits{limits::kConfigDepth, SIZE_MAX, SIZE_MAX, SIZE_MAX, false};
// The same, with NaN and Infinity read as Python's json module writes them (the trackers' values and files).
inline constexpr Limits kPythonLimits{limits::kConfigDepth, SIZE_MAX, SIZE_MAX, SIZE_MAX, true};

enum class Kind { Null, Bool, Int, Double, String, Array, Object };

// A value inside a Document (which must outlive it). `where` names it in messages: "scheduler.json.steps".
class Value {
 public:
  Kind kind() const;
  bool is_null() const { return kind() == Kind::Null; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_number() const { return kind() == Kind::Int || kind() == Kind::Double; }
  bool is_string() const { return kind() == Kind::String; }
  bool is_array() const { return kind() == Kind::Array; }
  bool is_object() const { return kind() == Kind::Object; }
  bool is_integer() const;  // an Int, or a Double with an integral value within +-2^53 (Python writes 3.0 for 3)
  int line() const;
  int column() const;
  const std::string& where() const { return where_; }

  // Scalars; an error names this value when it is of another kind.
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;  // an integer too
  const std::string& as_string() const;

  // Objects (an error when this is not one).
  bool has(std::string_view key) const;  // present, even as null
  bool has_value(std::string_view key) const;  // present and not null
  std::optional<Value> find(std::string_view key) const;
  Value get(std::string_view key) const;  // required: an error names the missing key
  std::vector<std::string> keys() const;  // in the text's order
  std::vector<std::pair<std::string, Value>> items() const;
  int64_t get_int(std::string_view key) const { return get(key).as_int(); }
  double get_double(std::string_view key) const { return get(key).as_double(); }
  bool get_bool(std::string_view key) const { return get(key).as_bool(); }
  std::string get_string(std::string_view key) const { return get(key).as_string(); }
  // Optional keys (Hugging Face config.json): the fallback when the key is missing or null.
  int64_t get_int_or(std::string_view key, int64_t fallback) const;
  double get_double_or(std::string_view key, double fallback) const;
  bool get_bool_or(std::string_view key, bool fallback) const;
  std::string get_string_or(std::string_view key, const std::string& fallback) const;

  // Arrays and objects.
  size_t size() const;
  Value at(size_t i) const;  // of an array
  std::vector<Value> elements() const;

  std::string text() const;  // this value as tight JSON ("[0.9,0.95]")
  [[noreturn]] void fail(const std::string& what) const;  // throws Error naming this value and its position

 private:
  friend class Document;
  friend class Writer;
  Value(const config::detail::Node* node, std::string where) : node_(node), where_(std::move(where)) {}
  const config::detail::Node* node_;
  std::string where_;
};

// A parsed text. `source` names it in every message ("config.json", "optimizer options").
class Document {
 public:
  // Throws Error "<source>: malformed JSON at line L, column C: ..." for text that is not one strict JSON document.
  Document(std::string_view text, std::string source, const Limits& limits = kDocumentLimits);
  // The same, and the document must be an object: "<source>: expected a JSON object".
  static Document object(std::string_view text, std::string source, const Limits& limits = kDocumentLimits);
  ~Document();
  Document(Document&&) noexcept;
  Document& operator=(Document&&) noexcept;
  Value root() const;

 private:
  std::unique_ptr<config::detail::Node> root_;
  std::string source_;
};

// A JSON string literal of s (quotes and escapes).
std::string quote(std::string_view s);

// Writes one JSON text as it goes. Layouts: Python's json.dumps (", " and ": ", the default), Tight ("," and ":"),
// Indented (each object key on its own line, `indent` spaces a level; arrays on one line). Numbers read back exactly
// (shortest round trip; a float keeps its '.': 1.0).
class Writer {
 public:
  enum class Layout { Python, Tight, Indented };
  explicit Writer(Layout layout = Layout::Python, int indent = 2) : layout_(layout), indent_(indent) {}
  Writer& begin_object();
  Writer& end_object();
  Writer& begin_array();
  Writer& end_array();
  Writer& key(std::string_view k);
  Writer& value(std::string_view v);
  Writer& value(const char* v) { return value(std::string_view(v)); }
  Writer& value(const std::string& v) { return value(std::string_view(v)); }
  Writer& value(int64_t v);
  Writer& value(int v) { return value(static_cast<int64_t>(v)); }
  Writer& value(uint64_t v);
  Writer& value(double v);  // finite only (JSON has no NaN): an Error otherwise
  Writer& value(bool v);
  Writer& null();
  Writer& value(const Value& v);  // a parsed value, whole
  Writer& raw(std::string_view json);  // a value already written as JSON (Python's NaN of the trackers)
  const std::string& str() const { return out_; }

  void write(const config::detail::Node& n);  // the configuration library's values

 private:
  struct Frame {
    bool empty = true;
    Layout inside = Layout::Python;
    bool python_separator = false;  // an array inside Indented output: ", " between items
  };
  Layout inside() const;
  void separate();
  void newline(size_t level);
  std::string out_;
  Layout layout_;
  int indent_;
  std::vector<Frame> frames_;
  bool after_key_ = false;
};

}  // namespace acc::json
