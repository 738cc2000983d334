// A strict JSON (RFC 8259) reader that keeps line and column of every value and key, and a writer.
// cJSON is not used for reading because it does not report positions.
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "internal.hpp"

namespace acc::config::detail {
namespace {

class Reader {
 public:
  Reader(std::string_view t, const TextLimits& limits) : t_(t), limits_(limits) {}

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
  TextLimits limits_;

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
    if (depth > limits_.depth) fail("nesting deeper than " + std::to_string(limits_.depth) + " levels (the limit)");
    if (p_ >= t_.size()) fail("expected a value, got end of input");
    Node n;
    n.line = line_;
    n.col = col();
    char c = t_[p_];
    if (c == '{') {
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
        if (!keys.insert(key).second) fail_at(kl, kc, "duplicate key " + json_quote(key));
        if (keys.size() > limits_.keys_per_mapping)
          fail_at(kl, kc, "more than " + std::to_string(limits_.keys_per_mapping) + " keys in one object (the limit)");
        skip_ws();
        if (p_ >= t_.size() || t_[p_] != ':') fail("expected ':' after key \"" + key + "\", got " + here());
        ++p_;
        skip_ws();
        Node v = value(depth + 1);
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
    if (c == '[') {
      n.kind = Kind::List;
      ++p_;
      skip_ws();
      if (p_ < t_.size() && t_[p_] == ']') {
        ++p_;
        return n;
      }
      for (;;) {
        skip_ws();
        if (p_ < t_.size() && t_[p_] == ']') fail("trailing comma before ']'");
        n.list.push_back(value(depth + 1));
        skip_ws();
        if (p_ < t_.size() && t_[p_] == ',') {
          ++p_;
          continue;
        }
        if (p_ < t_.size() && t_[p_] == ']') {
          ++p_;
          return n;
        }
        fail("expected ',' or ']' in array, got " + here());
      }
    }
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
    if (c == '-' || (c >= '0' && c <= '9')) return number(n);
    fail("expected a value, got " + here());
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
        fail_at(line, column, std::string(what) + " longer than " + std::to_string(max_bytes) + " bytes (the limit)");
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
        default:
          --p_;
          fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }
};

}  // namespace

Node parse_json(std::string_view text, const TextLimits& limits) { return Reader(text, limits).document(); }


static void newline(std::string& out, int indent, int level) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent * level), ' ');
}

void write_json(std::string& out, const Node& n, int indent, int level) {
  switch (n.kind) {
    case Kind::Null: out += "null"; break;
    case Kind::Bool: out += n.b ? "true" : "false"; break;
    case Kind::Int: out += std::to_string(n.i); break;
    case Kind::Double: {
      char buf[64];
      auto r = std::to_chars(buf, buf + sizeof buf, n.d);
      std::string s(buf, r.ptr);
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep it a float when read back
      out += s;
      break;
    }
    case Kind::String: out += json_quote(n.s); break;
    case Kind::List: {
      out += '[';
      bool first = true;
      for (const Node& v : n.list) {
        if (!first) out += indent < 0 ? "," : ", ";
        first = false;
        write_json(out, v, -1, 0);  // lists stay on one line
      }
      out += ']';
      break;
    }
    case Kind::Map: {
      if (n.map.empty()) {
        out += "{}";
        break;
      }
      out += '{';
      bool first = true;
      for (const auto& [k, v] : n.map) {
        if (!first) out += ',';
        first = false;
        newline(out, indent, level + 1);
        out += json_quote(k);
        out += indent < 0 ? ":" : ": ";
        write_json(out, v, indent, level + 1);
      }
      newline(out, indent, level);
      out += '}';
      break;
    }
  }
}

}  // namespace acc::config::detail

namespace acc::config {

std::string json_quote(std::string_view s) {
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

}  // namespace acc::config

namespace acc::config {

void check_json(std::string_view text, const std::string& source) {
  // The strict reader above, without the per-key and per-string limits of config files: a checkpoint index maps
  // any number of tensors, and the file's size is bounded where it is read.
  constexpr detail::TextLimits kAnyDocument{limits::kConfigDepth, SIZE_MAX, SIZE_MAX, SIZE_MAX};
  try {
    (void)detail::parse_json(text, kAnyDocument);
  } catch (const Error& e) {
    throw Error(source + ": " + e.what());
  }
}

}  // namespace acc::config
