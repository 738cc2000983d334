// Internal types of the configuration library: a generic value tree with source positions, the schema, and
// the parsers that build trees from JSON and YAML text.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "acc/config.hpp"
#include "acc/json.hpp"
#include "acc/limits.hpp"

namespace acc::config::detail {

enum class Kind { Null, Bool, Int, Double, String, List, Map };

// One value. Maps keep their order. Positions are 1-based (0: unknown).
struct Node {
  Kind kind = Kind::Null;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;                                    // String value
  std::vector<Node> list;                           // List items
  std::vector<std::pair<std::string, Node>> map;    // Map entries
  int line = 0, col = 0;                            // where the value starts
  int key_line = 0;                                 // where its key starts (map entries)
  bool from_yaml = false;                           // parsed from YAML (lenient string/bool rules apply)
  bool plain = false;                               // YAML plain (unquoted) scalar: `raw` is its text
  bool text = false;                                // env/flag text: `raw` is the text, typed by the schema
  std::string raw;

  // Declared, so that clang with libstdc++ accepts the vectors of the still incomplete Node above.
  Node() = default;

  static Node null() { return Node{}; }
  static Node boolean(bool v) {
    Node n;
    n.kind = Kind::Bool;
    n.b = v;
    return n;
  }
  static Node integer(int64_t v) {
    Node n;
    n.kind = Kind::Int;
    n.i = v;
    return n;
  }
  static Node number(double v) {
    Node n;
    n.kind = Kind::Double;
    n.d = v;
    return n;
  }
  static Node string(std::string v) {
    Node n;
    n.kind = Kind::String;
    n.s = std::move(v);
    return n;
  }
  static Node of_text(std::string v) {
    Node n;
    n.kind = Kind::String;
    n.s = v;
    n.raw = std::move(v);
    n.text = true;
    return n;
  }

  const Node* find(std::string_view key) const;  // last entry with that key (YAML duplicates: last wins)
  Node* find(std::string_view key);
  void erase(std::string_view key);
};

bool equal(const Node& a, const Node& b);  // value equality (ignores positions and flags)
Node strip(const Node& n);                 // value copy without positions and source flags

// What a JSON or YAML text may hold (acc/json.hpp); an error names the limit a text exceeds. Strings must be UTF-8
// without NUL characters in any case.
using TextLimits = json::Limits;
inline constexpr TextLimits kConfigText = json::kConfigLimits;

// JSON text <-> Node (the reader and writer of acc/json.hpp). Parse errors: "malformed JSON at line L, column C: ...".
// Duplicate keys are errors.
Node parse_json(std::string_view text, const TextLimits& limits = kConfigText);
void write_json(std::string& out, const Node& n, int indent /* <0: compact */);
using ::acc::json::quote;

// YAML text -> Node (yaml-cpp), keeping positions. Errors: "malformed YAML at line L, column C: ...".
// A stream of more than one document is an error, as for PyYAML's safe_load.
Node parse_yaml(const std::string& text, const TextLimits& limits = kConfigText);

// A DeepSpeed JSON config's settings as accelerator keys (deepspeed.cpp): `key` gets `value`, from `where`
// ("ds.json: zero_optimization.stage"). mixed_precision: the accelerator's, which fp16/bf16 in the file may change.
// Throws Error naming the file and the key for anything libacc does not read.
struct DsSetting {
  std::string key;
  Node value;
  std::string where;
};
std::vector<DsSetting> deepspeed_settings(const Node& root, const std::string& file,
                                          const std::string& mixed_precision);

// -------------------------------------------------------------------------------------------------------------
enum TypeBits : unsigned {
  tNull = 1u << 0,
  tBool = 1u << 1,
  tInt = 1u << 2,
  tNum = 1u << 3,     // int or floating point
  tStr = 1u << 4,
  tList = 1u << 5,    // list of strings
  tTriple = 1u << 6,  // three booleans (fp8 override_linear_precision)
  tAny = 1u << 7,     // any JSON value (free-form object such as comm_state_option)
};

struct KeySpec;
using FixFn = std::optional<std::string> (*)(const KeySpec&, Node&);  // post-coercion normalizer; error text

struct KeySpec {
  std::string path;
  std::string name;    // last path component
  std::string parent;  // section path ("" for top level)
  unsigned types = 0;
  Node def;
  std::vector<std::string> choices;
  bool ci = false;  // choices match case-insensitively; stored in the listed spelling
  std::optional<double> min, max;
  std::string env;
  std::vector<std::string> aliases;
  std::string help;
  FixFn fix = nullptr;
};

struct Schema {
  SchemaKind kind;
  std::vector<KeySpec> keys;
  std::unordered_map<std::string, size_t> index;                    // leaf path -> key index
  std::unordered_map<std::string, std::vector<std::string>> children;  // section path -> child names, in order
  std::vector<std::string> sections;                                // section paths, in order

  const KeySpec* key(std::string_view path) const;
  bool is_section(std::string_view path) const;
};

// What a resolved value of the key can be: its types, less those its fix rewrites (enum_index turns the legacy
// integers into strings, join_list a list into one string). The typed views (acc/config_views.hpp) follow it.
unsigned stored_types(const KeySpec& k);

const Schema& accelerator_schema();
const Schema& launch_schema();
const Schema& schema(SchemaKind kind);

// Type description for messages: "a boolean", "an integer >= 1", "one of \"no\", \"fp16\"", joined with " or ".
std::string describe_type(const KeySpec& k);
std::string type_name(const KeySpec& k);  // "int | null"
std::string range_text(const KeySpec& k);
std::string brief_value(const Node& n);  // value as shown in errors: JSON text, truncated

// Coerces a source value to the key's type; returns the error message (naming the key) on failure.
std::optional<std::string> coerce(const KeySpec& k, const Node& in, Node& out);

// Text helpers
std::string lower(std::string_view s);
std::string upper(std::string_view s);
std::optional<int64_t> parse_int(std::string_view s);
std::optional<double> parse_double(std::string_view s);
std::string join(const std::vector<std::string>& v, std::string_view sep);
// Optimal string alignment distance, or any value above `bound` once it is certain to exceed it (cheap for long
// inputs: one row of memory, and nothing computed when the lengths alone differ by more than bound).
size_t edit_distance(std::string_view a, std::string_view b, size_t bound = SIZE_MAX);
// Why s is not acceptable text (invalid UTF-8, a NUL character), or nullopt.
std::optional<std::string> text_problem(std::string_view s);

// "'key' (value, where)": a setting as the errors about contradictory settings show it.
std::string shown_setting(const Config& c, const std::string& key);
// FullyShardedDataParallelPlugin's rule for activation_checkpointing_offload (Accelerate 1.15), over either schema's
// keys: it needs activation checkpointing and FSDP2.
void check_checkpointing_offload(const Config& c, const std::string& offload, const std::string& checkpointing,
                                 const std::string& version);

// parallelism_config's pp_split_points (`key`): each a block index (an integer >= 0, above the previous index) or the
// dotted name of the block a stage begins with ("model.layers.4"; the model tells whether it names one). Error naming
// the key.
std::vector<std::string> split_points(const Config& c, const std::string& key);
// ParallelismConfig's size rules as Accelerate checks them (parallelism.cpp), over either schema's keys (`prefix`:
// "parallelism_config." or the launch file's "parallelism_config.parallelism_config_"): CP and SP exclusive, PP with neither (libacc's pp keys checked too), TP/CP not
// with replication alone, CP only under FSDP2, FSDP2 needs dp_shard or cp above 1, the sizes multiply to `processes`
// (or to 1). Throws Error naming each key with its value and source; `processes_shown` says where the count came from.
void check_parallelism_sizes(const Config& c, const std::string& prefix, int64_t processes,
                             const std::string& processes_shown, bool fsdp2);

// Fills the generated typed views (acc/config_views.hpp, written by gen_views.cpp) from a resolved Config: the
// generated code reads each key once, by its path; a type that does not match the value, or a key left unread at
// finish(), is a std::logic_error (the views and the schema disagree), never a wrong value.
class ViewReader {
 public:
  ViewReader(const Config& c, SchemaKind kind);  // Error when c resolves the other schema
  template <class T>
  void read(T& out, const char* path) {
    convert(take(path), path, out);
  }
  template <class T>
  void read(std::optional<T>& out, const char* path) {
    const Node& n = take(path);
    if (n.kind == Kind::Null) out.reset();
    else convert(n, path, out.emplace());
  }
  void read_json(std::string& out, const char* path);  // "any" and mixed-type keys: compact JSON text
  void finish() const;

 private:
  const Node& take(const char* path);
  static void convert(const Node& n, const char* path, bool& out);
  static void convert(const Node& n, const char* path, int64_t& out);
  static void convert(const Node& n, const char* path, double& out);
  static void convert(const Node& n, const char* path, std::string& out);
  static void convert(const Node& n, const char* path, std::vector<std::string>& out);
  static void convert(const Node& n, const char* path, std::array<bool, 3>& out);
  const Config::Impl* impl_;
  std::vector<bool> read_;
};

}  // namespace acc::config::detail

namespace acc::config {
// Builds Config objects from inside the library.
struct Access {
  static Config make(std::shared_ptr<const Config::Impl> impl) { return Config(std::move(impl)); }
  static const Config::Impl& impl(const Config& c) { return *c.impl_; }
};

struct Config::Impl {
  const detail::Schema* schema = nullptr;
  std::vector<detail::Node> values;  // per key index
  std::vector<Provenance> prov;
};
}  // namespace acc::config
