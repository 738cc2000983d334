// Value helpers, text helpers, type descriptions and the schema-driven coercion of source values.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "internal.hpp"

namespace acc::config {

std::string_view origin_name(Origin o) {
  switch (o) {
    case Origin::Default: return "default";
    case Origin::File: return "file";
    case Origin::Flag: return "flag";
    case Origin::Env: return "env";
    case Origin::Explicit: return "explicit";
  }
  return "?";
}

std::optional<bool> parse_bool(std::string_view text) {
  const std::string v = detail::lower(text);
  if (v == "y" || v == "yes" || v == "t" || v == "true" || v == "on" || v == "1") return true;
  if (v == "n" || v == "no" || v == "f" || v == "false" || v == "off" || v == "0") return false;
  return std::nullopt;
}

std::string host_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  // Only distances up to `limit` matter, so a long word costs no more than its length (a 50 MB key: no matrix).
  const size_t limit = std::clamp<size_t>(word.size() / 3, 1, 3);
  std::string best;
  size_t best_d = limit + 1;
  const std::string lw = detail::lower(word);
  for (const auto& c : candidates) {
    const size_t d = detail::edit_distance(lw, detail::lower(c), limit);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

}  // namespace acc::config

namespace acc::config::detail {

const Node* Node::find(std::string_view key) const {
  const Node* hit = nullptr;
  for (const auto& [k, v] : map)
    if (k == key) hit = &v;
  return hit;
}

Node* Node::find(std::string_view key) {
  Node* hit = nullptr;
  for (auto& [k, v] : map)
    if (k == key) hit = &v;
  return hit;
}

void Node::erase(std::string_view key) {
  map.erase(std::remove_if(map.begin(), map.end(), [&](const auto& e) { return e.first == key; }), map.end());
}

bool equal(const Node& a, const Node& b) {
  if (a.kind != b.kind) {
    if ((a.kind == Kind::Int && b.kind == Kind::Double) || (a.kind == Kind::Double && b.kind == Kind::Int)) {
      double x = a.kind == Kind::Int ? static_cast<double>(a.i) : a.d;
      double y = b.kind == Kind::Int ? static_cast<double>(b.i) : b.d;
      return x == y;
    }
    return false;
  }
  switch (a.kind) {
    case Kind::Null: return true;
    case Kind::Bool: return a.b == b.b;
    case Kind::Int: return a.i == b.i;
    case Kind::Double: return a.d == b.d;
    case Kind::String: return a.s == b.s;
    case Kind::List:
      if (a.list.size() != b.list.size()) return false;
      for (size_t k = 0; k < a.list.size(); ++k)
        if (!equal(a.list[k], b.list[k])) return false;
      return true;
    case Kind::Map:
      if (a.map.size() != b.map.size()) return false;
      for (size_t k = 0; k < a.map.size(); ++k)
        if (a.map[k].first != b.map[k].first || !equal(a.map[k].second, b.map[k].second)) return false;
      return true;
  }
  return false;
}

Node strip(const Node& n) {
  Node out;
  out.kind = n.kind;
  out.b = n.b;
  out.i = n.i;
  out.d = n.d;
  out.s = n.s;
  for (const Node& v : n.list) out.list.push_back(strip(v));
  for (const auto& [k, v] : n.map) out.map.emplace_back(k, strip(v));
  return out;
}

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return o;
}

std::string upper(std::string_view s) {
  std::string o(s);
  for (char& c : o)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return o;
}

static std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<int64_t> parse_int(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  int64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (size_t k = 0; k < v.size(); ++k) {
    if (k) out += sep;
    out += v[k];
  }
  return out;
}

// Optimal string alignment distance (Levenshtein plus adjacent transpositions), three rows of memory.
size_t edit_distance(std::string_view a, std::string_view b, size_t bound) {
  const size_t n = a.size(), m = b.size();
  if ((n > m ? n - m : m - n) > bound) return bound == SIZE_MAX ? bound : bound + 1;
  std::vector<size_t> before(m + 1), prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = j;
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    size_t row_min = cur[0];
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], before[j - 2] + 1);
      row_min = std::min(row_min, cur[j]);
    }
    if (row_min > bound) return bound + 1;  // every later row is at least as large
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

std::optional<std::string> text_problem(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0) return "a NUL character at byte " + std::to_string(i);
    // Well-formed UTF-8 (Unicode's table 3-7): the lead byte gives the length and the range of the second byte.
    size_t len = 1;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return "invalid UTF-8 at byte " + std::to_string(i);
    for (size_t k = 1; k < len; ++k) {
      if (i + k >= s.size()) return "invalid UTF-8 at byte " + std::to_string(i);
      const auto t = static_cast<unsigned char>(s[i + k]);
      if (t < (k == 1 ? lo : 0x80) || t > (k == 1 ? hi : 0xBF)) return "invalid UTF-8 at byte " + std::to_string(i);
    }
    i += len;
  }
  return std::nullopt;
}

static std::string fmt_num(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string range_text(const KeySpec& k) {
  if (k.min && k.max) return "between " + fmt_num(*k.min) + " and " + fmt_num(*k.max);
  if (k.min) return ">= " + fmt_num(*k.min);
  if (k.max) return "<= " + fmt_num(*k.max);
  return "";
}

static std::string quoted_list(const std::vector<std::string>& v) {
  std::string out;
  for (size_t k = 0; k < v.size(); ++k) {
    if (k) out += ", ";
    out += json::quote(v[k]);
  }
  return out;
}

std::string describe_type(const KeySpec& k) {
  std::vector<std::string> alts;
  const unsigned t = k.types;
  const std::string r = range_text(k);
  if (t & tStr) alts.push_back(k.choices.empty() ? "a string" : "one of " + quoted_list(k.choices));
  if (t & tBool) alts.push_back("a boolean");
  if (t & tInt) alts.push_back("an integer" + (r.empty() ? "" : " " + r));
  else if (t & tNum) alts.push_back("a number" + (r.empty() ? "" : " " + r));
  if (t & tList)
    alts.push_back(k.choices.empty() || (t & tStr) ? "a list of strings" : "a list of " + quoted_list(k.choices));
  if (t & tTriple) alts.push_back("three booleans [fprop, dgrad, wgrad]");
  if (t & tAny) alts.push_back("any JSON value");
  if (t & tNull) alts.push_back("null");
  if (alts.size() == 1) return alts[0];
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) {
    if (i) out += (i + 1 == alts.size()) ? " or " : ", ";
    out += alts[i];
  }
  return out;
}

std::string type_name(const KeySpec& k) {
  std::vector<std::string> alts;
  const unsigned t = k.types;
  if (t & tBool) alts.push_back("bool");
  if (t & tInt) alts.push_back("int");
  else if (t & tNum) alts.push_back("number");
  if (t & tStr) alts.push_back("string");
  if (t & tList) alts.push_back("list[string]");
  if (t & tTriple) alts.push_back("bool[3]");
  if (t & tAny) alts.push_back("any");
  if (t & tNull) alts.push_back("null");
  return join(alts, " | ");
}

std::string brief_value(const Node& n) {
  std::string s;
  if (n.text) {
    s = json::quote(n.raw);
  } else if (n.kind == Kind::Map) {
    s = "an object";
  } else {
    write_json(s, strip(n), -1);
  }
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

namespace {

bool accepts_kind(unsigned t, Kind kind) {
  if (t & tAny) return true;
  switch (kind) {
    case Kind::Null: return t & tNull;
    case Kind::Bool: return t & tBool;
    case Kind::Int: return t & (tInt | tNum);
    case Kind::Double: return t & tNum;
    case Kind::String: return t & (tStr | tList);
    case Kind::List: return t & (tList | tTriple);
    case Kind::Map: return false;
  }
  return false;
}

std::optional<std::vector<bool>> parse_triple(std::string_view s) {
  s = trim(s);
  if (s.size() >= 2 && ((s.front() == '(' && s.back() == ')') || (s.front() == '[' && s.back() == ']'))) {
    s.remove_prefix(1);
    s.remove_suffix(1);
  }
  std::vector<bool> out;
  while (true) {
    size_t c = s.find(',');
    auto b = parse_bool(trim(s.substr(0, c)));
    if (!b) return std::nullopt;
    out.push_back(*b);
    if (c == std::string_view::npos) break;
    s.remove_prefix(c + 1);
  }
  if (out.size() != 3) return std::nullopt;
  return out;
}

Node triple(const std::vector<bool>& v) {
  Node n;
  n.kind = Kind::List;
  for (bool b : v) n.list.push_back(Node::boolean(b));
  return n;
}

// One key's coercion: the key, where the value goes, and the checks every kind of source value shares.
class Coercion {
 public:
  Coercion(const KeySpec& k, Node& out) : k_(k), t_(k.types), out_(out) {}

  // A value from an environment variable or a flag: text, typed by what the key takes.
  std::optional<std::string> text(const Node& in) {
    const std::string& s = in.raw;
    // Environment variables and flags: the limits a config file's strings have.
    if (s.size() > limits::kStringBytes)
      return "'" + k_.path + "' is longer than " + std::to_string(limits::kStringBytes) + " bytes (the limit)";
    if (auto problem = text_problem(s)) return "'" + k_.path + "' holds " + *problem;
    if (t_ & tBool)
      if (auto b = parse_bool(s)) return set(Node::boolean(*b));
    if (t_ & (tInt | tNum))
      if (auto v = parse_int(s)) return set_ranged(Node::integer(*v), static_cast<double>(*v), in);
    if ((t_ & tNum) && !(t_ & tInt))
      if (auto v = parse_double(s)) return set_ranged(Node::number(*v), *v, in);
    if (t_ & tTriple)
      if (auto v = parse_triple(s)) return set(triple(*v));
    if ((t_ & tNull) && !(t_ & tStr) && (lower(s) == "none" || lower(s) == "null")) return set(Node::null());
    if ((t_ & tList) && !(t_ & tStr)) return text_list(s, in);
    if (t_ & tStr) {
      std::string v = s;
      if (auto e = check_choice(v, in)) return e;
      return set(Node::string(v));
    }
    if (t_ & tAny) {
      try {
        out_ = strip(parse_json(s));
      } catch (const Error&) {
        out_ = Node::string(s);
      }
      return finish();
    }
    return bad(in);
  }

  // A value from a config file (or the API): typed already, by YAML or JSON.
  std::optional<std::string> typed(const Node& in) {
    Node v = in;
    // A YAML plain scalar that YAML typed as something this key does not take (`mixed_precision: no` is a YAML
    // boolean, `gpu_ids: 0` an integer) is read as the text the user wrote.
    if (v.plain && !accepts_kind(t_, v.kind) && (t_ & (tStr | tList)) && v.kind != Kind::List && v.kind != Kind::Map) {
      Node s = Node::string(v.raw);
      s.from_yaml = true;
      v = s;
    }
    switch (v.kind) {
      case Kind::Null:
        if (t_ & (tNull | tAny)) return set(Node::null());
        return bad(v);
      case Kind::Bool:
        if (t_ & tBool) return set(Node::boolean(v.b));
        break;
      case Kind::Int:
        if (t_ & (tInt | tNum)) return set_ranged(Node::integer(v.i), static_cast<double>(v.i), v);
        break;
      case Kind::Double:
        if ((t_ & tNum) && !(t_ & tInt)) return set_ranged(Node::number(v.d), v.d, v);
        break;
      case Kind::String: return typed_string(v);
      case Kind::List: return typed_list(v);
      case Kind::Map: break;
    }
    return any_or_bad(v);
  }

 private:
  const KeySpec& k_;
  const unsigned t_;
  Node& out_;

  std::optional<std::string> bad(const Node& shown) const {
    return "'" + k_.path + "' must be " + describe_type(k_) + "; got " + brief_value(shown);
  }

  // A string value against the key's choices (canonical spelling when case-insensitive).
  std::optional<std::string> check_choice(std::string& s, const Node& shown) const {
    if (k_.choices.empty()) return std::nullopt;
    for (const auto& c : k_.choices)
      if (c == s || (k_.ci && lower(c) == lower(s))) {
        s = c;
        return std::nullopt;
      }
    std::string msg = *bad(shown);
    std::string near = closest_match(s, k_.choices);
    if (!near.empty()) msg += " (did you mean \"" + near + "\"?)";
    return msg;
  }

  std::optional<std::string> check_range(double v, const Node& shown) const {
    if ((k_.min && v < *k_.min) || (k_.max && v > *k_.max)) return bad(shown);
    return std::nullopt;
  }

  std::optional<std::string> finish() {
    if (k_.fix) return k_.fix(k_, out_);
    return std::nullopt;
  }

  std::optional<std::string> set(Node value) {
    out_ = std::move(value);
    return finish();
  }

  // A number: stored, then held to the key's range.
  std::optional<std::string> set_ranged(Node value, double v, const Node& shown) {
    out_ = std::move(value);
    if (auto e = check_range(v, shown)) return e;
    return finish();
  }

  // What no kind-specific rule took: any value where the key takes anything, else the type error.
  std::optional<std::string> any_or_bad(const Node& v) {
    if (t_ & tAny) return set(strip(v));
    return bad(v);
  }

  // A comma-separated list of text (empty items dropped), each item held to the choices.
  std::optional<std::string> text_list(const std::string& s, const Node& in) {
    out_ = Node{};
    out_.kind = Kind::List;
    std::string_view rest = s;
    while (!rest.empty()) {
      size_t c = rest.find(',');
      std::string item(trim(rest.substr(0, c)));
      if (!item.empty()) {
        if (auto e = check_choice(item, in)) return e;
        out_.list.push_back(Node::string(item));
      }
      if (c == std::string_view::npos) break;
      rest.remove_prefix(c + 1);
    }
    return finish();
  }

  std::optional<std::string> typed_string(const Node& v) {
    if (t_ & tStr) {
      std::string s = v.s;
      if (auto e = check_choice(s, v)) return e;
      return set(Node::string(s));
    }
    if (t_ & tList) {
      std::string s = v.s;
      if (auto e = check_choice(s, v)) return e;
      out_ = Node{};
      out_.kind = Kind::List;
      out_.list.push_back(Node::string(s));
      return finish();
    }
    if ((t_ & tBool) && v.from_yaml)  // Accelerate writes `downcast_bf16: 'no'`
      if (auto b = parse_bool(v.s)) return set(Node::boolean(*b));
    if (t_ & tTriple)  // Accelerate writes `override_linear_precision: (false, false, false)`
      if (auto tr = parse_triple(v.s)) return set(triple(*tr));
    return any_or_bad(v);
  }

  std::optional<std::string> typed_list(const Node& v) {
    if ((t_ & tTriple) && v.list.size() == 3) {
      std::vector<bool> bs;
      for (const Node& e : v.list) {
        if (e.kind == Kind::Bool) bs.push_back(e.b);
        else if (e.from_yaml && e.kind == Kind::String && parse_bool(e.s)) bs.push_back(*parse_bool(e.s));
        else break;
      }
      if (bs.size() == 3) return set(triple(bs));
    }
    if (t_ & tList) {
      out_ = Node{};
      out_.kind = Kind::List;
      for (const Node& e : v.list) {
        std::string s;
        if (e.kind == Kind::String) s = e.s;
        else if (e.plain && e.kind != Kind::Null) s = e.raw;
        else return bad(v);
        if (auto err = check_choice(s, v)) return err;
        out_.list.push_back(Node::string(s));
      }
      return finish();
    }
    return any_or_bad(v);
  }
};

}  // namespace

std::optional<std::string> coerce(const KeySpec& k, const Node& in, Node& out) {
  Coercion c(k, out);
  return in.text ? c.text(in) : c.typed(in);
}

}  // namespace acc::config::detail
