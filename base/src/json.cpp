// acc/json.hpp: the strict JSON (RFC 8259) reader that keeps line and column of every value and key, the values'
// typed getters, and the writer. Written here rather than taken from a JSON package because none of those on the
// registries reports the position of every value, which the configuration's provenance and every error need.
#include "acc/json.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "internal.hpp"

namespace acc::config::detail {
namespace {

class Reader {
 public:
  Reader(std::string_view t, const json::Limits& limits) : t_(t), limits_(limits) {}

  Node document() {
    skip_ws();
    Node n = value(0);
    skip_ws();
    if (p_ < t_.size()) fail("unexpected text after the JSON value");
    return n;
  }

 private:
  std::string_view t_;
  size_t p_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
  json::Limits limits_;
  // The keys and indices from the root down to the value being read: a limit error says where ("in
  // 'target_modules[1]'"), so that one value in a large file can be found. A key is read before it is pushed, so
  // a key that is too long is placed in its object.
  struct Step {
    const std::string* key;  // null in an array
    size_t index;
  };
  std::vector<Step> path_;

  // " in 'a.b[2]'" (nothing at the root), at most about 200 bytes, control bytes shown as '?'.
  std::string in_path() const {
    if (path_.empty()) return "";
    std::string s;
    for (const Step& step : path_) {
      if (step.key) s += (s.empty() ? "" : ".") + *step.key;
      else s += "[" + std::to_string(step.index) + "]";
      if (s.size() > 200) break;
    }
    if (s.size() > 200) {
      size_t cut = 200;
      while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // a whole UTF-8 character
      s = s.substr(0, cut) + "...";
    }
    for (char& c : s)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return " in '" + s + "'";
  }

  int col() const { return static_cast<int>(p_ - line_start_) + 1; }

  [[noreturn]] void fail(const std::string& what) const { fail_at(line_, col(), what); }
  [[noreturn]] static void fail_at(int line, int col, const std::string& what) {
    throw Error("malformed JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
  }

  std::string here() const {
    if (p_ >= t_.size()) return "end of input";
    unsigned char c = static_cast<unsigned char>(t_[p_]);
    if (c < 0x20 || c >= 0x7f) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
      return buf;
    }
    return std::string("'") + static_cast<char>(c) + "'";
  }

  void skip_ws() {
    while (p_ < t_.size()) {
      char c = t_[p_];
      if (c == '\n') {
        ++p_;
        ++line_;
        line_start_ = p_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++p_;
      } else {
        break;
      }
    }
  }

  bool literal(std::string_view word) {
    if (t_.substr(p_, word.size()) == word) {
      p_ += word.size();
      return true;
    }
    return false;
  }

  Node value(int depth) {
    if (depth > limits_.depth)
      fail("nesting deeper than " + std::to_string(limits_.depth) + " levels (the limit)" + in_path());
    if (p_ >= t_.size()) fail("expected a value, got end of input");
    Node n;
    n.line = line_;
    n.col = col();
    char c = t_[p_];
    if (c == '{') return object(std::move(n), depth);
    if (c == '[') return array(std::move(n), depth);
    if (c == '"') {
      n.kind = Kind::String;
      n.s = string_body(limits_.string_bytes, "string");
      return n;
    }
    if (literal("true")) {
      n.kind = Kind::Bool;
      n.b = true;
      return n;
    }
    if (literal("false")) {
      n.kind = Kind::Bool;
      return n;
    }
    if (literal("null")) return n;
    if (limits_.nonfinite_numbers) {
      for (auto [word, v] :
           {std::pair<const char*, double>{"NaN", NAN}, {"Infinity", HUGE_VAL}, {"-Infinity", -HUGE_VAL}})
        if (literal(word)) {
          n.kind = Kind::Double;
          n.d = v;
          return n;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(n);
    fail("expected a value, got " + here());
  }

  // An object, from its '{' (n holds the position): keys unique, at most keys_per_object of them.
  Node object(Node n, int depth) {
    n.kind = Kind::Map;
    ++p_;
    skip_ws();
    if (p_ < t_.size() && t_[p_] == '}') {
      ++p_;
      return n;
    }
    std::unordered_set<std::string> keys;  // duplicate check in linear time
    for (;;) {
      skip_ws();
      if (p_ < t_.size() && t_[p_] == '}') fail("trailing comma before '}'");
      if (p_ >= t_.size() || t_[p_] != '"') fail("expected a string key, got " + here());
      int kl = line_, kc = col();
      std::string key = string_body(limits_.key_bytes, "key");
      if (!keys.insert(key).second) fail_at(kl, kc, "duplicate key " + quote(key));
      if (keys.size() > limits_.keys_per_object)
        fail_at(kl, kc,
                "more than " + std::to_string(limits_.keys_per_object) + " keys in one object (the limit)" + in_path());
      skip_ws();
      if (p_ >= t_.size() || t_[p_] != ':') fail("expected ':' after key \"" + key + "\", got " + here());
      ++p_;
      skip_ws();
      path_.push_back({&key, 0});
      Node v = value(depth + 1);
      path_.pop_back();
      v.key_line = kl;
      n.map.emplace_back(std::move(key), std::move(v));
      skip_ws();
      if (p_ < t_.size() && t_[p_] == ',') {
        ++p_;
        continue;
      }
      if (p_ < t_.size() && t_[p_] == '}') {
        ++p_;
        return n;
      }
      fail("expected ',' or '}' in object, got " + here());
    }
  }

  // An array, from its '[' (n holds the position).
  Node array(Node n, int depth) {
    n.kind = Kind::List;
    ++p_;
    skip_ws();
    if (p_ < t_.size() && t_[p_] == ']') {
      ++p_;
      return n;
    }
    path_.push_back({nullptr, 0});
    for (;;) {
      skip_ws();
      if (p_ < t_.size() && t_[p_] == ']') fail("trailing comma before ']'");
      path_.back().index = n.list.size();
      n.list.push_back(value(depth + 1));
      skip_ws();
      if (p_ < t_.size() && t_[p_] == ',') {
        ++p_;
        continue;
      }
      if (p_ < t_.size() && t_[p_] == ']') {
        ++p_;
        path_.pop_back();
        return n;
      }
      fail("expected ',' or ']' in array, got " + here());
    }
  }

  Node number(Node n) {
    size_t start = p_;
    bool is_float = false;
    if (t_[p_] == '-') ++p_;
    if (p_ >= t_.size() || !std::isdigit(static_cast<unsigned char>(t_[p_]))) fail("malformed number");
    if (t_[p_] == '0' && p_ + 1 < t_.size() && std::isdigit(static_cast<unsigned char>(t_[p_ + 1])))
      fail("numbers must not have leading zeros");
    while (p_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[p_]))) ++p_;
    if (p_ < t_.size() && t_[p_] == '.') {
      is_float = true;
      ++p_;
      if (p_ >= t_.size() || !std::isdigit(static_cast<unsigned char>(t_[p_]))) fail("expected digits after '.'");
      while (p_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[p_]))) ++p_;
    }
    if (p_ < t_.size() && (t_[p_] == 'e' || t_[p_] == 'E')) {
      is_float = true;
      ++p_;
      if (p_ < t_.size() && (t_[p_] == '+' || t_[p_] == '-')) ++p_;
      if (p_ >= t_.size() || !std::isdigit(static_cast<unsigned char>(t_[p_]))) fail("expected exponent digits");
      while (p_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[p_]))) ++p_;
    }
    std::string_view txt = t_.substr(start, p_ - start);
    if (!is_float) {
      int64_t v = 0;
      auto r = std::from_chars(txt.data(), txt.data() + txt.size(), v);
      if (r.ec == std::errc() && r.ptr == txt.data() + txt.size()) {
        n.kind = Kind::Int;
        n.i = v;
        return n;
      }
    }
    double d = 0;
    auto r = std::from_chars(txt.data(), txt.data() + txt.size(), d);
    if (r.ec != std::errc() || !std::isfinite(d)) fail_at(n.line, n.col, "number out of range: " + std::string(txt));
    n.kind = Kind::Double;
    n.d = d;
    return n;
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  uint32_t hex4() {
    if (p_ + 4 > t_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = t_[p_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else fail("bad hex digit in \\u escape");
    }
    return v;
  }

  // A string's text; `what` ("key", "string") and `max_bytes` for the length limit.
  std::string string_body(size_t max_bytes, const char* what) {
    const int line = line_, column = col();
    ++p_;  // opening quote
    std::string out;
    for (;;) {
      if (p_ >= t_.size()) fail("unterminated string");
      if (out.size() > max_bytes)
        fail_at(line, column,
                std::string(what) + " longer than " + std::to_string(max_bytes) + " bytes (the limit)" + in_path());
      char c = t_[p_];
      if (c == '"') {
        ++p_;
        if (auto problem = text_problem(out)) fail_at(line, column, std::string(what) + " holds " + *problem);
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string (escape it)");
      if (c != '\\') {
        out += c;
        ++p_;
        continue;
      }
      ++p_;
      if (p_ >= t_.size()) fail("unterminated string");
      char e = t_[p_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (p_ + 2 <= t_.size() && t_[p_] == '\\' && t_[p_ + 1] == 'u') {
              p_ += 2;
              uint32_t lo = hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) fail("invalid surrogate pair in \\u escape");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              fail("lone surrogate in \\u escape");
            }
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("lone surrogate in \\u escape");
          }
          put_utf8(out, cp);
          break;
        }
        default: --p_; fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }
};

}  // namespace

Node parse_json(std::string_view text, const json::Limits& limits) { return Reader(text, limits).document(); }

void write_json(std::string& out, const Node& n, int indent) {
  json::Writer w(indent < 0 ? json::Writer::Layout::Tight : json::Writer::Layout::Indented, indent);
  w.write(n);
  out += w.str();
}

}  // namespace acc::config::detail

namespace acc::json {

using config::detail::Node;
namespace detail = config::detail;

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

// ---- Document and Value ----------------------------------------------------------------------------------------

Document::Document(std::string_view text, std::string source, const Limits& limits) : source_(std::move(source)) {
  try {
    root_ = std::make_unique<Node>(detail::parse_json(text, limits));
  } catch (const config::Error& e) {
    throw Error(source_ + ": " + e.what());
  }
}

Document Document::object(std::string_view text, std::string source, const Limits& limits) {
  Document d(text, std::move(source), limits);
  if (d.root_->kind != detail::Kind::Map) throw Error(d.source_ + ": expected a JSON object");
  return d;
}

Document::~Document() = default;
Document::Document(Document&&) noexcept = default;
Document& Document::operator=(Document&&) noexcept = default;

Value Document::root() const { return Value(root_.get(), source_); }

Kind Value::kind() const {
  switch (node_->kind) {
    case detail::Kind::Null: return Kind::Null;
    case detail::Kind::Bool: return Kind::Bool;
    case detail::Kind::Int: return Kind::Int;
    case detail::Kind::Double: return Kind::Double;
    case detail::Kind::String: return Kind::String;
    case detail::Kind::List: return Kind::Array;
    case detail::Kind::Map: return Kind::Object;
  }
  return Kind::Null;
}

int Value::line() const { return node_->line; }
int Value::column() const { return node_->col; }

void Value::fail(const std::string& what) const {
  std::string at;
  if (node_->line > 0) at = " (line " + std::to_string(node_->line) + ", column " + std::to_string(node_->col) + ")";
  throw Error(where_ + at + ": " + what);
}

bool Value::is_integer() const {
  if (node_->kind == detail::Kind::Int) return true;
  return node_->kind == detail::Kind::Double && node_->d == std::floor(node_->d) &&
         std::fabs(node_->d) <= 9007199254740992.0;
}

bool Value::as_bool() const {
  if (node_->kind != detail::Kind::Bool) fail("expected true or false");
  return node_->b;
}

int64_t Value::as_int() const {
  if (!is_integer()) fail("expected an integer");
  return node_->kind == detail::Kind::Int ? node_->i : static_cast<int64_t>(node_->d);
}

double Value::as_double() const {
  if (node_->kind == detail::Kind::Int) return static_cast<double>(node_->i);
  if (node_->kind != detail::Kind::Double) fail("expected a number");
  return node_->d;
}

const std::string& Value::as_string() const {
  if (node_->kind != detail::Kind::String) fail("expected a string");
  return node_->s;
}

bool Value::has(std::string_view key) const {
  if (node_->kind != detail::Kind::Map) fail("expected an object");
  return node_->find(key) != nullptr;
}

bool Value::has_value(std::string_view key) const {
  if (node_->kind != detail::Kind::Map) fail("expected an object");
  const Node* n = node_->find(key);
  return n && n->kind != detail::Kind::Null;
}

std::optional<Value> Value::find(std::string_view key) const {
  if (node_->kind != detail::Kind::Map) fail("expected an object");
  const Node* n = node_->find(key);
  if (!n) return std::nullopt;
  return Value(n, where_ + "." + std::string(key));
}

Value Value::get(std::string_view key) const {
  auto v = find(key);
  if (!v) fail("missing key '" + std::string(key) + "'");
  return *v;
}

std::vector<std::string> Value::keys() const {
  if (node_->kind != detail::Kind::Map) fail("expected an object");
  std::vector<std::string> k;
  k.reserve(node_->map.size());
  for (const auto& e : node_->map) k.push_back(e.first);
  return k;
}

std::vector<std::pair<std::string, Value>> Value::items() const {
  if (node_->kind != detail::Kind::Map) fail("expected an object");
  std::vector<std::pair<std::string, Value>> out;
  out.reserve(node_->map.size());
  for (const auto& [k, n] : node_->map) out.emplace_back(k, Value(&n, where_ + "." + k));
  return out;
}

int64_t Value::get_int_or(std::string_view key, int64_t fallback) const {
  return has_value(key) ? get_int(key) : fallback;
}
double Value::get_double_or(std::string_view key, double fallback) const {
  return has_value(key) ? get_double(key) : fallback;
}
bool Value::get_bool_or(std::string_view key, bool fallback) const { return has_value(key) ? get_bool(key) : fallback; }
std::string Value::get_string_or(std::string_view key, const std::string& fallback) const {
  return has_value(key) ? get_string(key) : fallback;
}

size_t Value::size() const {
  if (node_->kind == detail::Kind::List) return node_->list.size();
  if (node_->kind == detail::Kind::Map) return node_->map.size();
  fail("expected an array or object");
}

Value Value::at(size_t i) const {
  if (node_->kind != detail::Kind::List) fail("expected an array");
  if (i >= node_->list.size()) fail("no element " + std::to_string(i));
  return Value(&node_->list[i], where_ + "[" + std::to_string(i) + "]");
}

std::vector<Value> Value::elements() const {
  if (node_->kind != detail::Kind::List) fail("expected an array");
  std::vector<Value> out;
  out.reserve(node_->list.size());
  for (size_t i = 0; i < node_->list.size(); ++i)
    out.push_back(Value(&node_->list[i], where_ + "[" + std::to_string(i) + "]"));
  return out;
}

std::string Value::text() const {
  Writer w(Writer::Layout::Tight);
  w.value(*this);
  return w.str();
}

// ---- Writer ----------------------------------------------------------------------------------------------------

Writer::Layout Writer::inside() const { return frames_.empty() ? layout_ : frames_.back().inside; }

void Writer::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (frames_.empty()) return;
  Frame& f = frames_.back();
  if (!f.empty) out_ += f.inside == Layout::Tight && !f.python_separator ? "," : ", ";
  f.empty = false;
}

void Writer::newline(size_t level) {
  out_ += '\n';
  out_.append(static_cast<size_t>(indent_) * level, ' ');
}

Writer& Writer::begin_object() {
  separate();
  out_ += '{';
  frames_.push_back({true, inside()});
  return *this;
}

Writer& Writer::end_object() {
  const Frame f = frames_.back();
  frames_.pop_back();
  if (f.inside == Layout::Indented && !f.empty) newline(frames_.size());
  out_ += '}';
  return *this;
}

Writer& Writer::begin_array() {
  separate();
  out_ += '[';
  // Indented output keeps each array on one line, its items separated by ", " and written tight inside.
  const Layout l = inside();
  frames_.push_back({true, l == Layout::Indented ? Layout::Tight : l});
  if (l == Layout::Indented) frames_.back().python_separator = true;
  return *this;
}

Writer& Writer::end_array() {
  frames_.pop_back();
  out_ += ']';
  return *this;
}

Writer& Writer::key(std::string_view k) {
  Frame& f = frames_.back();
  if (f.inside == Layout::Indented) {
    if (!f.empty) out_ += ',';
    f.empty = false;
    newline(frames_.size());
  } else {
    separate();
  }
  out_ += quote(k);
  out_ += f.inside == Layout::Tight ? ":" : ": ";
  after_key_ = true;
  return *this;
}

Writer& Writer::value(std::string_view v) {
  separate();
  out_ += quote(v);
  return *this;
}

Writer& Writer::value(int64_t v) {
  separate();
  out_ += std::to_string(v);
  return *this;
}

Writer& Writer::value(uint64_t v) {
  separate();
  out_ += std::to_string(v);
  return *this;
}

Writer& Writer::value(double v) {
  if (!std::isfinite(v)) throw Error("JSON has no representation for " + std::to_string(v));
  separate();
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";  // stays a float when read back
  out_ += s;
  return *this;
}

Writer& Writer::value(bool v) {
  separate();
  out_ += v ? "true" : "false";
  return *this;
}

Writer& Writer::raw(std::string_view json) {
  separate();
  out_ += json;
  return *this;
}

Writer& Writer::null() {
  separate();
  out_ += "null";
  return *this;
}

Writer& Writer::value(const Value& v) {
  write(*v.node_);
  return *this;
}

void Writer::write(const Node& n) {
  switch (n.kind) {
    case detail::Kind::Null: null(); break;
    case detail::Kind::Bool: value(n.b); break;
    case detail::Kind::Int: value(n.i); break;
    case detail::Kind::Double: value(n.d); break;
    case detail::Kind::String: value(std::string_view(n.s)); break;
    case detail::Kind::List:
      begin_array();
      for (const Node& e : n.list) write(e);
      end_array();
      break;
    case detail::Kind::Map:
      begin_object();
      for (const auto& [k, v] : n.map) {
        key(k);
        write(v);
      }
      end_object();
      break;
  }
}

}  // namespace acc::json
