// YAML -> Node through yaml-cpp. Plain scalars are typed the way PyYAML's safe_load types them (YAML 1.1:
// yes/no/on/off are booleans), and keep their text so that a string-typed key such as `mixed_precision: no`
// still reads as "no", which is what the user wrote.
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <sstream>

#include "internal.hpp"

namespace acc::config::detail {
namespace {

[[noreturn]] void fail(const YAML::Mark& m, const std::string& what) {
  if (m.line < 0) throw Error("malformed YAML: " + what);
  throw Error("malformed YAML at line " + std::to_string(m.line + 1) + ", column " + std::to_string(m.column + 1) +
              ": " + what);
}

void type_plain(Node& n, const std::string& t) {
  static const char* const kTrue[] = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
  static const char* const kFalse[] = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"};
  for (const char* w : kTrue)
    if (t == w) {
      n.kind = Kind::Bool;
      n.b = true;
      return;
    }
  for (const char* w : kFalse)
    if (t == w) {
      n.kind = Kind::Bool;
      n.b = false;
      return;
    }
  if (t == "~" || t == "null" || t == "Null" || t == "NULL" || t.empty()) {
    n.kind = Kind::Null;
    return;
  }
  std::string digits;
  for (char c : t)
    if (c != '_') digits += c;
  if (auto v = parse_int(digits)) {
    n.kind = Kind::Int;
    n.i = *v;
    return;
  }
  if (t.find_first_of(".eE") != std::string::npos) {
    if (auto d = parse_double(digits); d && std::isfinite(*d)) {
      n.kind = Kind::Double;
      n.d = *d;
      return;
    }
  }
  n.kind = Kind::String;
  n.s = t;
}

struct Converter {
  const TextLimits& limits;
  size_t count = 0;

  // Scalars and keys: the same length and text rules as JSON strings.
  void check_text(const YAML::Mark& m, const std::string& t, size_t max_bytes, const char* what) {
    if (t.size() > max_bytes)
      fail(m, std::string(what) + " longer than " + std::to_string(max_bytes) + " bytes (the limit)");
    if (auto problem = text_problem(t)) fail(m, std::string(what) + " holds " + *problem);
  }

  Node convert(const YAML::Node& y, int depth) {
    if (++count > limits::kConfigValues)
      fail(y.Mark(), "document too large (aliases expand to more than " + std::to_string(limits::kConfigValues) +
                         " values, the limit)");
    if (depth > limits.depth)
      fail(y.Mark(), "nesting deeper than " + std::to_string(limits.depth) + " levels (the limit)");
    Node n;
    n.from_yaml = true;
    const YAML::Mark m = y.Mark();
    if (m.line >= 0) {
      n.line = m.line + 1;
      n.col = m.column + 1;
    }
    switch (y.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        n.kind = Kind::Null;
        n.plain = true;
        return n;
      case YAML::NodeType::Scalar: {
        const std::string& tag = y.Tag();
        const std::string& text = y.Scalar();
        check_text(m, text, limits.string_bytes, "string");
        if (tag == "?") {
          n.plain = true;
          n.raw = text;
          type_plain(n, text);
        } else if (tag == "!" || tag == "tag:yaml.org,2002:str") {
          n.kind = Kind::String;
          n.s = text;
        } else if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
                   tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
          type_plain(n, text);
        } else {
          fail(m, "unsupported tag " + tag);
        }
        return n;
      }
      case YAML::NodeType::Sequence:
        n.kind = Kind::List;
        for (const auto& item : y) n.list.push_back(convert(item, depth + 1));
        return n;
      case YAML::NodeType::Map:
        n.kind = Kind::Map;
        for (const auto& kv : y) {
          if (!kv.first.IsScalar()) fail(kv.first.Mark(), "mapping keys must be plain names");
          check_text(kv.first.Mark(), kv.first.Scalar(), limits.key_bytes, "key");
          if (n.map.size() == limits.keys_per_object)
            fail(kv.first.Mark(),
                 "more than " + std::to_string(limits.keys_per_object) + " keys in one mapping (the limit)");
          Node v = convert(kv.second, depth + 1);
          const YAML::Mark km = kv.first.Mark();
          v.key_line = km.line >= 0 ? km.line + 1 : v.line;
          n.map.emplace_back(kv.first.Scalar(), std::move(v));
        }
        return n;
    }
    return n;
  }
};

// Parser events are dropped; only where the documents start is kept.
struct DocumentStarts : YAML::EventHandler {
  YAML::Mark last;
  void OnDocumentStart(const YAML::Mark& m) override { last = m; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

Node parse_yaml(const std::string& text, const TextLimits& limits) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
    // PyYAML's safe_load (Accelerate's reader) refuses a second document too; ignoring it would drop settings.
    // At most two documents are asked for: yaml-cpp 0.7's LoadAll loops forever on some malformed text (",").
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts starts;
    if (parser.HandleNextDocument(starts) && parser.HandleNextDocument(starts))
      fail(starts.last, "the text holds more than one YAML document (separated by '---'); a config file is one");
  } catch (const YAML::Exception& e) {
    fail(e.mark, e.msg);
  }
  try {
    Converter c{limits};
    return c.convert(root, 0);
  } catch (const YAML::Exception& e) {
    fail(e.mark, e.msg);
  }
}

}  // namespace acc::config::detail
