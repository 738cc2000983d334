// acc_config_gen HEADER SOURCE: writes the typed views of the two schemas (acc/config_views.hpp) and the functions that
// fill them from a resolved Config (config_views.cpp), from the schema table itself (schema.cpp), at build time
// (base/include/acc/meson.build). A file is rewritten only when its text changes, so that a change elsewhere in
// the config library does not make everything that includes the header compile again.
// Generation fails, naming the key, on anything the views cannot hold: a type bit it does not know, a key or section
// name that is not a C++ identifier, or one that is a keyword.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "internal.hpp"

namespace acc::config::detail {
namespace {

const std::set<std::string> kKeywords = {
    "alignas",     "alignof",   "and",        "and_eq",    "asm",      "auto",         "bitand",
    "bitor",       "bool",      "break",      "case",      "catch",    "char",         "char8_t",
    "char16_t",    "char32_t",  "class",      "compl",     "concept",  "const",        "consteval",
    "constexpr",   "constinit", "const_cast", "continue",  "co_await", "co_return",    "co_yield",
    "decltype",    "default",   "delete",     "do",        "double",   "dynamic_cast", "else",
    "enum",        "explicit",  "export",     "extern",    "false",    "float",        "for",
    "friend",      "goto",      "if",         "inline",    "int",      "long",         "mutable",
    "namespace",   "new",       "noexcept",   "not",       "not_eq",   "nullptr",      "operator",
    "or",          "or_eq",     "private",    "protected", "public",   "register",     "reinterpret_cast",
    "requires",    "return",    "short",      "signed",    "sizeof",   "static",       "static_assert",
    "static_cast", "struct",    "switch",     "template",  "this",     "thread_local", "throw",
    "true",        "try",       "typedef",    "typeid",    "typename", "union",        "unsigned",
    "using",       "virtual",   "void",       "volatile",  "wchar_t",  "while",        "xor",
    "xor_eq",      "Key"};

void check_name(const std::string& name, const std::string& path) {
  bool ok = !name.empty() && (std::islower(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name)
    ok = ok && (std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_');
  if (!ok || kKeywords.count(name))
    throw std::runtime_error("'" + path + "': '" + name +
                             "' cannot name a member of the typed views (lower-case C++ identifier, not a keyword)");
}

// "ddp_kwargs" -> "DdpKwargs": the type of a section's struct.
std::string type_of_section(const std::string& name) {
  std::string out;
  bool up = true;
  for (char c : name) {
    if (c == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return out;
}

std::string literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// A double as a C++ literal: JSON's shortest round trip is one ("1e-05", "0.5", "2.0").
std::string number(double v) { return json::Writer().value(v).str(); }

enum class View { Bool, Int, Num, Str, List, Triple, Json };

struct Member {
  View view;
  bool optional;
};

Member member_of(const KeySpec& k) {
  constexpr unsigned known = tNull | tBool | tInt | tNum | tStr | tList | tTriple | tAny;
  if (k.types & ~known) throw std::runtime_error("'" + k.path + "': a type the typed views do not know");
  const unsigned stored = stored_types(k);
  const unsigned t = stored & ~tNull;
  // "any", and a value of several types, is JSON text; so is a null "any" value (never optional).
  if (t & tAny) return {View::Json, false};
  const bool opt = stored & tNull;
  if (t == tBool) return {View::Bool, opt};
  if (t == tInt) return {View::Int, opt};
  if (t == tNum || t == (tNum | tInt)) return {View::Num, opt};
  if (t == tStr) return {View::Str, opt};
  if (t == tList) return {View::List, opt};
  if (t == tTriple) return {View::Triple, opt};
  if (t == 0) throw std::runtime_error("'" + k.path + "': a key that only holds null");
  return {View::Json, false};
}

std::string type_text(const Member& m) {
  std::string t;
  switch (m.view) {
    case View::Bool: t = "bool"; break;
    case View::Int: t = "int64_t"; break;
    case View::Num: t = "double"; break;
    case View::Str: t = "std::string"; break;
    case View::List: t = "std::vector<std::string>"; break;
    case View::Triple: t = "std::array<bool, 3>"; break;
    case View::Json: t = "JsonText"; break;
  }
  return m.optional ? "std::optional<" + t + ">" : t;
}

// The member's initializer from the key's default ("" for none: an empty optional).
std::string initializer(const KeySpec& k, const Member& m) {
  const Node& d = k.def;
  if (m.view == View::Json) {
    std::string json;
    write_json(json, d, -1);
    return "{" + literal(json) + "}";
  }
  if (d.kind == Kind::Null) {
    if (!m.optional) throw std::runtime_error("'" + k.path + "': a null default for a key that cannot be null");
    return "";
  }
  switch (m.view) {
    case View::Bool: return d.b ? "true" : "false";
    case View::Int: return std::to_string(d.i);
    case View::Num: return number(d.kind == Kind::Int ? static_cast<double>(d.i) : d.d);
    case View::Str: return literal(d.s);
    case View::List: {
      std::string out = "std::vector<std::string>{";
      for (size_t i = 0; i < d.list.size(); ++i) out += (i ? ", " : "") + literal(d.list[i].s);
      return out + "}";
    }
    case View::Triple: {
      std::string out = "std::array<bool, 3>{";
      for (size_t i = 0; i < d.list.size(); ++i) out += std::string(i ? ", " : "") + (d.list[i].b ? "true" : "false");
      return out + "}";
    }
    case View::Json: break;
  }
  return "";
}

std::string comment(std::string help) {
  for (char& c : help)
    if (c == '\n' || c == '\r' || c == '\\') c = ' ';
  return help;
}

struct Writer {
  const Schema& s;
  std::ostringstream& h;  // header
  std::ostringstream& cc;  // fill function body

  // The members of one struct: the keys and sections under `section` ("" for the top level), in schema order.
  void members(const std::string& section, const std::string& type, int depth, const std::string& access) {
    const std::string pad(static_cast<size_t>(depth) * 2, ' ');
    auto it = s.children.find(section);
    if (it == s.children.end()) return;
    std::vector<std::pair<std::string, std::string>> keys;  // member name, path
    for (const std::string& name : it->second) {
      const std::string path = section.empty() ? name : section + "." + name;
      check_name(name, path);
      keys.emplace_back(name, path);
      if (s.is_section(path)) {
        const std::string sub = type_of_section(name);
        h << pad << "struct " << sub << " {\n";
        members(path, sub, depth + 1, access + name + ".");
        h << pad << "};\n";
        h << pad << sub << " " << name << ";\n";
        continue;
      }
      const KeySpec& k = *s.key(path);
      const Member m = member_of(k);
      const std::string init = initializer(k, m);
      h << pad << type_text(m) << " " << name << (init.empty() ? "" : " = " + init) << ";  // " << comment(k.help)
        << "\n";
      cc << "  r." << (m.view == View::Json ? "read_json" : "read") << "(s." << access << name
         << (m.view == View::Json ? ".json" : "") << ", " << literal(path) << ");\n";
    }
    h << pad << "struct Key {  // the dotted paths, for Config::provenance and messages\n";
    for (const auto& [name, path] : keys)
      h << pad << "  static constexpr const char* " << name << " = " << literal(path) << ";\n";
    h << pad << "};\n";
    h << pad << "bool operator==(const " << type << "&) const = default;\n";
  }
};

void write_if_changed(const std::string& path, const std::string& text) {
  {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream old;
    old << in.rdbuf();
    if (in && old.str() == text) return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace

void generate(const std::string& header_path, const std::string& source_path) {
  std::ostringstream h, cc;
  h << R"(// Generated by base/src/gen_views.cpp from the schema table (base/src/schema.cpp) at build time: do not edit.
//
// Typed views of a resolved configuration: a struct per schema, a nested struct per section, one member per key,
// named as the key, so that code reads `settings.ddp_kwargs.bucket_cap_mb` and a misspelt key does not compile.
// Types: bool; int64_t (int); double (number); std::string; std::vector<std::string> (list[string]);
// std::array<bool, 3> (bool[3]); std::optional<T> where the key admits null (null: not given); JsonText for a key of
// type "any" or of several types. Members start at the schema's defaults. Each struct's Key gives the dotted path of every member and section (Key::bucket_cap_mb is
// "ddp_kwargs.bucket_cap_mb"), for Config::provenance and messages.
// Config::get_* stay for generic access by path: the config library's own tools, `acc config explain`, tests.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace acc::config {

class Config;

// The value of a key of type "any" or of several types ("string | object", "bool | string"), as compact JSON text.
struct JsonText {
  std::string json = "null";
  bool is_null() const { return json == "null"; }
  bool operator==(const JsonText&) const = default;
};
)";
  cc << "// Generated by base/src/gen_views.cpp from the schema table (base/src/schema.cpp): do not edit.\n"
        "#include \"acc/config_views.hpp\"\n\n#include \"internal.hpp\"\n\nnamespace acc::config {\n";
  const std::pair<SchemaKind, const char*> kinds[] = {{SchemaKind::Accelerator, "Accelerator"},
                                                      {SchemaKind::Launch, "Launch"}};
  for (auto [kind, name] : kinds) {
    const std::string type = std::string(name) + "Settings";
    const std::string fn = kind == SchemaKind::Accelerator ? "accelerator_settings" : "launch_settings";
    const std::string arg = kind == SchemaKind::Accelerator ? "accelerator" : "launch";
    h << "\n// The " << name << " schema"
      << (kind == SchemaKind::Accelerator ? " (resolve_accelerator: what acc_accelerator_create takes).\n"
                                          : " (resolve_launch: a default_config.yaml and the launcher's flags).\n");
    h << "struct " << type << " {\n";
    cc << "\n"
       << type << " " << fn << "(const Config& " << arg << ") {\n  detail::ViewReader r(" << arg
       << ", SchemaKind::" << name << ");\n  " << type << " s;\n";
    Writer{schema(kind), h, cc}.members("", type, 1, "");
    h << "};\n// Throws Error for a config of the other schema.\n"
      << type << " " << fn << "(const Config& " << arg << ");\n";
    cc << "  r.finish();\n  return s;\n}\n";
  }
  h << "\n}  // namespace acc::config\n";
  cc << "\n}  // namespace acc::config\n";
  write_if_changed(header_path, h.str());
  write_if_changed(source_path, cc.str());
}

}  // namespace acc::config::detail

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s HEADER SOURCE\n", argv[0]);
    return 2;
  }
  try {
    acc::config::detail::generate(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
  return 0;
}
