// Layering of sources over the schema defaults, the Config accessors, and the two resolvers.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "acc/files.hpp"
#include "acc/limits.hpp"
#include "internal.hpp"

extern char** environ;

namespace acc::config {
using namespace detail;

namespace {

// "unknown key 'a.b' (did you mean 'c'?); accepted: x, y, z"
std::string unknown_key_message(const Schema& s, const std::string& section, const std::string& key) {
  const std::string full = section.empty() ? key : section + "." + key;
  std::string msg = "unknown key '" + full + "'";
  auto it = s.children.find(section);
  std::vector<std::string> siblings = it == s.children.end() ? std::vector<std::string>{} : it->second;
  std::vector<std::string> candidates = siblings;
  for (const auto& k : s.keys)
    if (k.parent == section)
      for (const auto& a : k.aliases) candidates.push_back(a);
  std::string near = closest_match(key, candidates);
  if (!near.empty()) {
    for (const auto& k : s.keys)  // an alias suggests its canonical name
      if (k.parent == section && std::find(k.aliases.begin(), k.aliases.end(), near) != k.aliases.end()) near = k.name;
    msg += " (did you mean '" + near + "'?)";
  } else {
    // The right name in the wrong place: `even_batches` at the top level.
    std::vector<std::string> elsewhere;
    for (const auto& k : s.keys)
      if (k.name == key && k.parent != section) elsewhere.push_back(k.path);
    for (const auto& sec : s.sections)
      if (sec.substr(sec.rfind('.') == std::string::npos ? 0 : sec.rfind('.') + 1) == key && sec != full)
        elsewhere.push_back(sec);
    if (!elsewhere.empty()) msg += " (did you mean '" + elsewhere.front() + "'?)";
  }
  msg += "; accepted: " + join(siblings, ", ");
  return msg;
}

// `${env:NAME}` and `${env:NAME:-fallback}` inside a string value of a file or of the explicit JSON are replaced
// by the environment variable, so secrets and paths need not be written into config files. Returns the names used.
std::vector<std::string> expand_env(std::string& text, const std::map<std::string, std::string>& env,
                                    const std::string& key_path) {
  std::vector<std::string> used;
  std::string out;
  size_t pos = 0;
  for (;;) {
    size_t start = text.find("${env:", pos);
    if (start == std::string::npos) break;
    size_t end = text.find('}', start);
    if (end == std::string::npos) throw Error("'" + key_path + "': unterminated ${env:...} in " + json::quote(text));
    std::string ref = text.substr(start + 6, end - start - 6);
    std::optional<std::string> fallback;
    if (size_t dash = ref.find(":-"); dash != std::string::npos) {
      fallback = ref.substr(dash + 2);
      ref = ref.substr(0, dash);
      // "${env:A:-x${env:B}": the first '}' would end A's reference inside B's and leave "${env:B" in the value.
      if (fallback->find("${") != std::string::npos)
        throw Error("'" + key_path + "': a ${env:...} fallback cannot hold another reference, in " + json::quote(text));
    }
    if (ref.empty() ||
        ref.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
      throw Error("'" + key_path + "': bad environment reference ${env:" + ref + "} (a variable name is expected)");
    out += text.substr(pos, start - pos);
    auto it = env.find(ref);
    if (it != env.end() && !it->second.empty()) out += it->second;
    else if (fallback) out += *fallback;
    else throw Error("'" + key_path + "' refers to ${env:" + ref + "}, but " + ref + " is not set");
    used.push_back(ref);
    pos = end + 1;
  }
  if (used.empty()) return used;
  out += text.substr(pos);
  text = out;
  return used;
}

struct Resolver {
  const Schema& s;
  std::vector<Node> values;
  std::vector<Provenance> prov;
  std::map<std::string, std::string> env;  // for ${env:NAME} references

  explicit Resolver(const Schema& schema) : s(schema) {
    for (const auto& k : s.keys) {
      values.push_back(k.def);
      prov.push_back({Origin::Default, "default"});
    }
  }

  size_t idx(const std::string& path) const { return s.index.at(path); }

  void set(const std::string& path, Node v, Provenance p) {
    size_t i = idx(path);
    values[i] = std::move(v);
    prov[i] = std::move(p);
  }

  // A typed tree (JSON or YAML) whose top level is a section of the schema.
  // where(node) gives the provenance text; prefix(node) the text put before error messages.
  void apply_tree(const Node& map, const std::string& section, Origin origin,
                  const std::function<std::string(const Node&)>& where,
                  const std::function<std::string(const Node&)>& prefix) {
    const auto& kids = s.children.at(section);
    for (const auto& [key_in, val] : map.map) {
      std::string key = key_in;
      if (std::find(kids.begin(), kids.end(), key) == kids.end()) {
        for (const auto& k : s.keys)
          if (k.parent == section && std::find(k.aliases.begin(), k.aliases.end(), key) != k.aliases.end())
            key = k.name;
      }
      if (std::find(kids.begin(), kids.end(), key) == kids.end())
        throw Error(prefix(val) + unknown_key_message(s, section, key_in));
      const std::string path = section.empty() ? key : section + "." + key;
      if (s.is_section(path)) {
        if (val.kind == Kind::Null) continue;  // `fsdp_config:` with nothing under it
        if (val.kind != Kind::Map)
          throw Error(prefix(val) + "'" + path + "' must be a mapping of keys (accepted: " +
                      join(s.children.at(path), ", ") + "); got " + brief_value(val));
        apply_tree(val, path, origin, where, prefix);
        continue;
      }
      const KeySpec& k = s.keys[idx(path)];
      Node in = val;
      std::vector<std::string> refs;
      try {
        auto expand = [&](Node& n) {
          if (n.kind != Kind::String || n.text) return;
          std::string& t = n.plain ? n.raw : n.s;
          if (t.find("${env:") == std::string::npos) return;
          for (auto& r : expand_env(t, env, path)) refs.push_back(r);
          if (n.plain) n.s = n.raw;
        };
        expand(in);
        for (Node& item : in.list) expand(item);
      } catch (const Error& e) {
        throw Error(prefix(val) + e.what());
      }
      Node out;
      if (auto err = coerce(k, in, out)) throw Error(prefix(val) + *err);
      std::string w = where(val);
      if (!refs.empty()) w += " (${env:" + join(refs, "}, ${env:") + "})";
      set(path, std::move(out), {origin, w});
    }
  }

  void apply_env(const std::map<std::string, std::string>& env) {
    for (const auto& k : s.keys) {
      if (k.env.empty()) continue;
      auto it = env.find(k.env);
      if (it == env.end() || it->second.empty()) continue;
      Node out;
      if (auto err = coerce(k, Node::of_text(it->second), out))
        throw Error("environment variable " + k.env + "=" + it->second + ": " + *err);
      set(k.path, std::move(out), {Origin::Env, k.env});
    }
  }

  std::shared_ptr<const Config::Impl> finish() {
    auto impl = std::make_shared<Config::Impl>();
    impl->schema = &s;
    impl->values = std::move(values);
    impl->prov = std::move(prov);
    return impl;
  }
};

std::string trim_ws(std::string_view t) {
  size_t a = t.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return "";
  size_t b = t.find_last_not_of(" \t\r\n");
  return std::string(t.substr(a, b - a + 1));
}

// --- Config lookup helpers -------------------------------------------------------------------------------------

[[noreturn]] void unknown_path(const Schema& s, std::string_view path) {
  std::string p(path);
  size_t dot = p.rfind('.');
  std::string section = dot == std::string::npos ? "" : p.substr(0, dot);
  std::string key = dot == std::string::npos ? p : p.substr(dot + 1);
  if (!section.empty() && !s.children.count(section)) {
    key = p;
    section.clear();
  }
  throw Error(unknown_key_message(s, section, key));
}

size_t leaf_index(const Config::Impl& im, std::string_view path) {
  auto it = im.schema->index.find(std::string(path));
  if (it == im.schema->index.end()) {
    if (im.schema->is_section(path)) throw Error("'" + std::string(path) + "' is a section, not a single value");
    unknown_path(*im.schema, path);
  }
  return it->second;
}

const Node& leaf(const Config::Impl& im, std::string_view path) {
  const Node& v = im.values[leaf_index(im, path)];
  if (v.kind == Kind::Null) throw Error("'" + std::string(path) + "' is not set (null)");
  return v;
}

[[noreturn]] void wrong_kind(std::string_view path, const Node& v, const char* want) {
  throw Error("'" + std::string(path) + "' is " + brief_value(v) + ", not " + want);
}

void collect_section(const Config::Impl& im, const std::string& section, Node& out, bool prov_map, Node* provs) {
  out.kind = Kind::Map;
  for (const auto& name : im.schema->children.at(section)) {
    std::string path = section.empty() ? name : section + "." + name;
    if (im.schema->is_section(path)) {
      Node sub;
      collect_section(im, path, sub, prov_map, provs);
      out.map.emplace_back(name, std::move(sub));
    } else {
      size_t i = im.schema->index.at(path);
      out.map.emplace_back(name, im.values[i]);
      if (prov_map && provs) {
        Node p;
        p.kind = Kind::Map;
        p.map.emplace_back("origin", Node::string(std::string(origin_name(im.prov[i].origin))));
        p.map.emplace_back("where", Node::string(im.prov[i].where));
        provs->map.emplace_back(path, std::move(p));
      }
    }
  }
}

std::vector<size_t> leaves_under(const Config::Impl& im, std::string_view section) {
  std::vector<size_t> out;
  std::string pre = std::string(section) + ".";
  for (size_t i = 0; i < im.schema->keys.size(); ++i)
    if (im.schema->keys[i].path.rfind(pre, 0) == 0) out.push_back(i);
  return out;
}

std::string read_config_file(const std::string& path) {
  try {
    return config::read_file(path, limits::kConfigBytes);
  } catch (const FileError& e) {
    throw Error("cannot read config file '" + path + "': " +
                (e.code().value() == EFBIG ? "it is larger than the limit for config files, " +
                                                 std::to_string(limits::kConfigBytes >> 10) + " KiB"
                                           : e.reason));
  }
}

std::string scalar_text(const Node& v) {
  if (v.plain) return v.raw;
  if (v.kind == Kind::String) return v.s;
  std::string out;
  write_json(out, strip(v), -1);
  return out;
}

// Accelerate's upgrades of old files (config_args.py process_config, launch.py _validate_launch_command).
void upgrade_launch_file(Node& root) {
  if (Node* fp16 = root.find("fp16")) {
    if (!root.find("mixed_precision")) {
      bool on = fp16->kind == Kind::Bool ? fp16->b : parse_bool(scalar_text(*fp16)).value_or(false);
      if (on) {
        Node mp = Node::string("fp16");
        mp.line = fp16->line;
        mp.key_line = fp16->key_line;
        root.map.emplace_back("mixed_precision", std::move(mp));
      }
    }
    root.erase("fp16");
  }
  if (Node* db = root.find("dynamo_backend")) {
    Node backend = *db;
    root.erase("dynamo_backend");
    std::string text = scalar_text(backend);
    root.erase("dynamo_config");
    Node dc;
    dc.kind = Kind::Map;
    dc.key_line = backend.key_line;
    dc.line = backend.line;
    if (upper(text) != "NO" && !(backend.kind == Kind::Bool && !backend.b))
      dc.map.emplace_back("dynamo_backend", backend);
    root.map.emplace_back("dynamo_config", std::move(dc));
  }
  auto prefix_keys = [&](const char* section, const std::string& prefix, bool add) {
    Node* sec = root.find(section);
    if (!sec || sec->kind != Kind::Map) return;
    for (auto& [k, v] : sec->map) {
      if (add && k.rfind(prefix, 0) != 0) k = prefix + k;
      if (!add && k.rfind(prefix, 0) == 0 && k != "fp8_format") k = k.substr(prefix.size());
    }
  };
  prefix_keys("fsdp_config", "fsdp_", true);
  prefix_keys("dynamo_config", "dynamo_", true);
  prefix_keys("fp8_config", "fp8_", false);
}

}  // namespace

// --- Config --------------------------------------------------------------------------------------------------------

Config::Config() : impl_(Resolver(accelerator_schema()).finish()) {}
Config::Config(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

SchemaKind Config::kind() const { return impl_->schema->kind; }

bool Config::get_bool(std::string_view path) const {
  const Node& v = leaf(*impl_, path);
  if (v.kind != Kind::Bool) wrong_kind(path, v, "a boolean");
  return v.b;
}

int64_t Config::get_int(std::string_view path) const {
  const Node& v = leaf(*impl_, path);
  if (v.kind != Kind::Int) wrong_kind(path, v, "an integer");
  return v.i;
}

double Config::get_double(std::string_view path) const {
  const Node& v = leaf(*impl_, path);
  if (v.kind == Kind::Int) return static_cast<double>(v.i);
  if (v.kind != Kind::Double) wrong_kind(path, v, "a number");
  return v.d;
}

std::string Config::get_string(std::string_view path) const {
  const Node& v = leaf(*impl_, path);
  if (v.kind != Kind::String) wrong_kind(path, v, "a string");
  return v.s;
}

std::vector<std::string> Config::get_string_list(std::string_view path) const {
  const Node& v = leaf(*impl_, path);
  if (v.kind != Kind::List) wrong_kind(path, v, "a list");
  std::vector<std::string> out;
  for (const Node& e : v.list) {
    if (e.kind == Kind::String) out.push_back(e.s);
    else if (e.kind == Kind::Bool) out.push_back(e.b ? "true" : "false");
    else wrong_kind(path, v, "a list of strings");
  }
  return out;
}

std::string Config::get_json(std::string_view path) const {
  std::string out;
  if (impl_->schema->is_section(path) || path.empty()) {
    Node n;
    collect_section(*impl_, std::string(path), n, false, nullptr);
    write_json(out, n, -1);
  } else {
    write_json(out, impl_->values[leaf_index(*impl_, path)], -1);
  }
  return out;
}

bool Config::is_set(std::string_view path) const {
  if (impl_->schema->is_section(path)) {
    for (size_t i : leaves_under(*impl_, path))
      if (impl_->prov[i].origin != Origin::Default) return true;
    return false;
  }
  return impl_->values[leaf_index(*impl_, path)].kind != Kind::Null;
}

bool Config::has_key(std::string_view path) const {
  return impl_->schema->index.count(std::string(path)) || impl_->schema->is_section(path);
}

Provenance Config::provenance(std::string_view path) const {
  if (impl_->schema->is_section(path)) {
    Provenance best{Origin::Default, "default"};
    for (size_t i : leaves_under(*impl_, path))
      if (impl_->prov[i].origin > best.origin) best = impl_->prov[i];
    return best;
  }
  return impl_->prov[leaf_index(*impl_, path)];
}

std::string Config::to_json(bool with_provenance) const {
  Node cfg, provs;
  provs.kind = Kind::Map;
  collect_section(*impl_, "", cfg, with_provenance, &provs);
  std::string out;
  if (!with_provenance) {
    write_json(out, cfg, 2);
  } else {
    Node root;
    root.kind = Kind::Map;
    root.map.emplace_back("config", std::move(cfg));
    root.map.emplace_back("provenance", std::move(provs));
    write_json(out, root, 2);
  }
  out += '\n';
  return out;
}

std::vector<std::string> Config::keys() const {
  std::vector<std::string> out;
  for (const auto& k : impl_->schema->keys) out.push_back(k.path);
  return out;
}

// --- Library side --------------------------------------------------------------------------------------------------

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

namespace {

// Three environment variables (ACCELERATE_FP8_OVERRIDE_FPROP, _DGRAD, _WGRAD) make one value.
void apply_fp8_override_env(Resolver& r, const std::map<std::string, std::string>& env) {
  static const char* const kOverride[] = {"ACCELERATE_FP8_OVERRIDE_FPROP", "ACCELERATE_FP8_OVERRIDE_DGRAD",
                                          "ACCELERATE_FP8_OVERRIDE_WGRAD"};
  Node tri;
  tri.kind = Kind::List;
  std::vector<std::string> names;
  for (const char* name : kOverride) {
    auto it = env.find(name);
    bool v = false;
    if (it != env.end() && !it->second.empty()) {
      auto b = parse_bool(it->second);
      if (!b)
        throw Error(std::string("environment variable ") + name + "=" + it->second +
                    ": must be a boolean (true/false, yes/no, on/off, 1/0)");
      v = *b;
      names.push_back(name);
    }
    tri.list.push_back(Node::boolean(v));
  }
  if (!names.empty()) r.set("fp8_recipe_kwargs.override_linear_precision", tri, {Origin::Env, join(names, ",")});
}

// The caller's configuration JSON: an object (or a resolved config or run record, whose "config" part it takes),
// or nothing (a null node).
Node parse_explicit_json(std::string_view explicit_json, std::string_view where) {
  if (explicit_json.size() > limits::kConfigBytes)
    throw Error(std::string(where) + ": the configuration JSON holds " + std::to_string(explicit_json.size()) +
                " bytes, more than the limit for config files, " + std::to_string(limits::kConfigBytes >> 10) + " KiB");
  const std::string text = trim_ws(explicit_json);
  Node root;
  if (!text.empty()) {
    root = parse_json(text);
    if (root.kind == Kind::Map) {
      // The output of to_json(true) reproduces a run: take its "config" part.
      // So does a run record (acc_run_config.json): its "config" part, the rest describes the run.
      const Node* cfg = root.find("config");
      if (cfg && cfg->kind == Kind::Map && root.find("provenance") && (root.map.size() == 2 || root.find("format"))) {
        Node inner = *cfg;  // copy first: *cfg lives inside root
        root = std::move(inner);
      }
    }
    if (root.kind != Kind::Map && root.kind != Kind::Null)
      throw Error("the configuration must be a JSON object; got " + brief_value(root));
  }
  return root;
}

// The caller's values (origin Explicit, from `w`); passing a plugin turns its paradigm on, as in Accelerate.
void apply_explicit(Resolver& r, const Node& root, const std::string& w) {
  r.apply_tree(root, "", Origin::Explicit, [&](const Node&) { return w; }, [](const Node&) { return std::string(); });
  const std::pair<const char*, const char*> implied[] = {{"fsdp_plugin", "use_fsdp"},
                                                         {"deepspeed_plugin", "use_deepspeed"},
                                                         {"parallelism_config", "use_parallelism_config"}};
  for (auto [section, flag] : implied) {
    const Node* sec = root.find(section);
    if (sec && sec->kind == Kind::Map && !root.find(flag)) r.set(flag, Node::boolean(true), {Origin::Explicit, w});
  }
}

// What Accelerate's _deepspeed_config_checks refuses: a launch config that sets these beside the file.
void refuse_launch_fields_beside_ds_file(const std::map<std::string, std::string>& env, const Node& ds) {
  auto it = env.find("ACCELERATE_CONFIG_DS_FIELDS");
  if (it == env.end()) return;
  static const char* const kIgnored[] = {
      "gradient_accumulation_steps", "gradient_clipping",      "zero_stage",
      "offload_optimizer_device",    "offload_param_device",   "offload_param_nvme_path",
      "offload_optimizer_nvme_path", "zero3_save_16bit_model", "mixed_precision"};
  std::string_view fields = it->second;
  while (!fields.empty()) {
    const size_t comma = fields.find(',');
    const std::string_view field = fields.substr(0, comma);
    for (const char* name : kIgnored)
      if (field == name)
        throw Error("the launch config sets '" + std::string(field) + "' beside deepspeed_config_file (" +
                    (ds.kind == Kind::String ? ds.s : std::string("an object")) +
                    "); as in Accelerate, set it in the DeepSpeed config file instead");
    fields = comma == std::string_view::npos ? std::string_view() : fields.substr(comma + 1);
  }
}

// A DeepSpeed config file or object (hf_ds_config; ACCELERATE_DEEPSPEED_CONFIG_FILE, where "none" is none): its
// values win over the plugin's settings and "auto" keeps them, as in Accelerate (deepspeed.cpp).
void apply_deepspeed_config(Resolver& r, const std::map<std::string, std::string>& env) {
  const size_t i = r.idx("deepspeed_plugin.hf_ds_config");
  const Node ds = r.values[i];
  if (!((ds.kind == Kind::String && ds.s != "none") || ds.kind == Kind::Map)) return;
  refuse_launch_fields_beside_ds_file(env, ds);
  Node root = ds;
  std::string file = r.prov[i].where;
  if (ds.kind == Kind::String) {
    file = ds.s;
    const std::string text = read_config_file(file);
    try {
      root = parse_json(text);
    } catch (const Error& e) {
      throw Error(file + ": " + e.what());
    }
  }
  for (DsSetting& setting : deepspeed_settings(root, file, r.values[r.idx("mixed_precision")].s)) {
    Node out;
    if (auto err = coerce(*r.s.key(setting.key), setting.value, out)) throw Error(setting.where + ": " + *err);
    r.set(setting.key, std::move(out), {Origin::File, setting.where});
  }
}

// Gradient accumulation: one number, two spellings.
void unify_gradient_accumulation(Resolver& r) {
  size_t gas = r.idx("gradient_accumulation_steps"), ns = r.idx("gradient_accumulation_plugin.num_steps");
  if (r.values[ns].kind == Kind::Int) {
    // As Accelerate refuses both; the same number twice is what a resolved config given back holds.
    if (r.prov[gas].origin == Origin::Explicit && r.values[gas].i != 1 && r.values[gas].i != r.values[ns].i)
      throw Error(
          "'gradient_accumulation_steps' and 'gradient_accumulation_plugin.num_steps' are exclusive; give one of them");
    r.values[gas] = r.values[ns];
    r.prov[gas] = r.prov[ns];
  } else {
    r.values[ns] = r.values[gas];
    r.prov[ns] = r.prov[gas];
  }
}

// Project directory: project_config.project_dir wins, project_dir fills it, logging_dir follows it.
void unify_project_dir(Resolver& r) {
  size_t top = r.idx("project_dir"), pc = r.idx("project_config.project_dir"), lg = r.idx("project_config.logging_dir");
  if (r.values[pc].kind == Kind::Null && r.values[top].kind != Kind::Null) {
    r.values[pc] = r.values[top];
    r.prov[pc] = r.prov[top];
  } else if (r.values[pc].kind != Kind::Null) {
    r.values[top] = r.values[pc];
    r.prov[top] = r.prov[pc];
  }
  if (r.values[lg].kind == Kind::Null && r.values[pc].kind != Kind::Null) {
    r.values[lg] = r.values[pc];
    r.prov[lg] = r.prov[pc];
  }
}

}  // namespace

Config resolve_accelerator(std::string_view explicit_json, const std::map<std::string, std::string>& env,
                           std::string_view where) {
  Resolver r(accelerator_schema());
  r.env = env;
  r.apply_env(env);
  apply_fp8_override_env(r, env);
  const Node root = parse_explicit_json(explicit_json, where);
  const std::string w(where);
  if (root.kind == Kind::Map) apply_explicit(r, root, w);
  apply_deepspeed_config(r, env);
  unify_gradient_accumulation(r);
  unify_project_dir(r);
  if (r.values[r.idx("use_fsdp")].b && r.values[r.idx("use_deepspeed")].b)
    throw Error("'use_fsdp' (" + r.prov[r.idx("use_fsdp")].where + ") and 'use_deepspeed' (" +
                r.prov[r.idx("use_deepspeed")].where + ") are exclusive; choose one");
  return Access::make(r.finish());
}

// --- Launcher side -------------------------------------------------------------------------------------------------

std::optional<std::string> find_default_config_file(const std::map<std::string, std::string>& env,
                                                    std::vector<std::string>* searched) {
  auto get = [&](const char* name) -> std::string {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  auto exists = [](const std::string& p) {
    struct stat st{};
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  };
  const std::string home = get("HOME");
  auto expand = [&](std::string p) {
    if (!p.empty() && p[0] == '~' && (p.size() == 1 || p[1] == '/')) p = home + p.substr(1);
    return p;
  };
  std::string explicit_file = get("ACC_CONFIG_FILE");
  if (explicit_file == "none") return std::nullopt;  // no file at all: defaults and flags only
  if (!explicit_file.empty()) {
    explicit_file = expand(explicit_file);
    if (searched) searched->push_back(explicit_file);
    return explicit_file;  // must exist: reading it reports the error
  }
  std::string cache = get("XDG_CACHE_HOME");
  cache = cache.empty() ? (home.empty() ? std::string() : home + "/.cache") : expand(cache);
  std::vector<std::string> candidates;
  if (!cache.empty()) candidates.push_back(cache + "/acc/default_config.yaml");
  std::string hf = get("HF_HOME");
  hf = hf.empty() ? (cache.empty() ? std::string() : cache + "/huggingface") : expand(hf);
  if (!hf.empty()) candidates.push_back(hf + "/accelerate/default_config.yaml");
  for (const auto& c : candidates) {
    if (searched) searched->push_back(c);
    if (exists(c)) return c;
  }
  return std::nullopt;
}

Config resolve_launch(const std::optional<std::string>& config_file, const std::vector<Flag>& flags, bool check) {
  const Schema& s = launch_schema();
  Resolver r(s);
  r.env = current_environment();
  std::string np_missing_reason;
  if (config_file) {
    const std::string& path = *config_file;
    const std::string text = read_config_file(path);
    Node root;
    try {
      root = path.ends_with(".json") ? parse_json(text) : parse_yaml(text);
    } catch (const Error& e) {
      throw Error(path + ": " + e.what());
    }
    if (root.kind == Kind::Null)
      throw Error(path + ": the config file is empty (it needs at least 'distributed_type')");
    if (root.kind != Kind::Map)
      throw Error(path + ":" + std::to_string(root.line) + ": the config file must be a mapping of keys; got " +
                  brief_value(root));
    upgrade_launch_file(root);
    const Node* dt = root.find("distributed_type");
    if (!dt)
      throw Error(path + ": missing key 'distributed_type' (required in config files); accepted values: " +
                  join(s.key("distributed_type")->choices, ", "));
    // Accelerate's placeholder for "given on the command line" (its default for distributed configs).
    bool np_placeholder = false;
    if (const Node* np = root.find("num_processes"); np && np->kind == Kind::Int && np->i == -1) {
      root.erase("num_processes");
      np_placeholder = true;
    }
    auto where = [&](const Node& n) { return n.key_line ? path + ":" + std::to_string(n.key_line) : path; };
    auto prefix = [&](const Node& n) { return where(n) + ": "; };
    r.apply_tree(root, "", Origin::File, where, prefix);
    if (np_placeholder) {
      r.set("num_processes", Node::integer(-1), {Origin::File, path});
      np_missing_reason = path + " sets num_processes to -1";
    } else if (!root.find("num_processes") && r.values[r.idx("distributed_type")].s != "NO") {
      // Accelerate's default for a distributed config without num_processes is -1: "pass --num_processes".
      r.set("num_processes", Node::integer(-1), {Origin::File, path});
      np_missing_reason =
          path + " sets distributed_type " + r.values[r.idx("distributed_type")].s + " without num_processes";
    }
  }
  for (const Flag& f : flags) {
    const KeySpec* k = s.key(f.path);
    if (!k) throw Error(f.name + ": " + unknown_key_message(s, "", f.path));
    Node out;
    if (auto err = coerce(*k, Node::of_text(f.value), out)) throw Error(f.name + ": " + *err);
    r.set(f.path, std::move(out), {f.origin, f.name});
  }

  for (const Flag& f : flags) {
    // A flag's value replaces the file's num_processes placeholder reason.
    if (f.path == "num_processes") np_missing_reason.clear();
  }
  Config cfg = Access::make(r.finish());
  if (check) {
    if (cfg.get_int("num_processes") == -1) {
      if (np_missing_reason.empty())
        np_missing_reason = "'num_processes' is -1 (" + cfg.provenance("num_processes").where + ")";
      throw Error(np_missing_reason + ": pass --num_processes");
    }
    check_launch(cfg);
  }
  return cfg;
}

namespace detail {

std::string shown_setting(const Config& c, const std::string& key) {
  return "'" + key + "' (" + c.get_json(key) + ", " + c.provenance(key).where + ")";
}

void check_checkpointing_offload(const Config& c, const std::string& offload, const std::string& checkpointing,
                                 const std::string& version) {
  if (!c.get_bool(offload)) return;
  if (!c.get_bool(checkpointing))
    throw Error("contradictory settings: " + shown_setting(c, offload) +
                " offloads what activation checkpointing keeps, but " + shown_setting(c, checkpointing));
  if (c.get_int(version) != 2)
    throw Error("contradictory settings: " + shown_setting(c, offload) + " needs FSDP2, but " +
                shown_setting(c, version));
}

}  // namespace detail

namespace {

// A key's default as compact JSON (what get_json gives for it untouched).
std::string default_json_of(const Config& cfg, const char* key) {
  std::string out;
  write_json(out, schema(cfg.kind()).key(key)->def, -1);
  return out;
}

}  // namespace

void check_launch(const Config& cfg) {
  if (cfg.kind() != SchemaKind::Launch) throw Error("check_launch needs a launch config");
  auto at = [&](const char* p) { return cfg.provenance(p).where; };
  auto num = [&](const char* p) { return std::to_string(cfg.get_int(p)); };
  // "'a' (value, where)"
  auto show = [&](const char* p) { return shown_setting(cfg, p); };
  const int64_t np = cfg.get_int("num_processes");
  if (np == -1) throw Error("'num_processes' is -1 (" + at("num_processes") + "): pass --num_processes");
  if (np < 1)
    throw Error(at("num_processes") + ": 'num_processes' must be an integer >= 1; got " + num("num_processes"));
  const int64_t nm = cfg.get_int("num_machines"), mr = cfg.get_int("machine_rank");
  if (mr >= nm)
    throw Error("'machine_rank' (" + num("machine_rank") + ", " + at("machine_rank") +
                ") must be less than 'num_machines' (" + num("num_machines") + ", " + at("num_machines") + ")");
  if (np % nm != 0)
    throw Error("'num_processes' (" + num("num_processes") + ", " + at("num_processes") +
                ") must be a multiple of 'num_machines' (" + num("num_machines") + ", " + at("num_machines") + ")");
  if (np / nm > limits::kProcessesPerMachine)
    throw Error("'num_processes' (" + num("num_processes") + ", " + at("num_processes") + ") over 'num_machines' (" +
                num("num_machines") + ", " + at("num_machines") + ") puts " + std::to_string(np / nm) +
                " processes on each machine, more than the limit of " + std::to_string(limits::kProcessesPerMachine));
  if (nm > 1 && !cfg.is_set("main_process_ip"))
    throw Error("'num_machines' is " + num("num_machines") + " (" + at("num_machines") +
                "): give the address of machine 0 ('main_process_ip', --main_process_ip)");
  if (nm > 1 && cfg.is_set("main_process_port") && cfg.get_int("main_process_port") == 0)
    throw Error("'main_process_port' 0 (a free port, " + at("main_process_port") +
                ") works on one machine only; give every machine the same fixed port");
  const std::string dt = cfg.get_string("distributed_type");
  const bool gpu_type = dt.rfind("MULTI_", 0) == 0 ? dt != "MULTI_CPU"
                                                   : (dt == "FSDP" || dt == "DEEPSPEED" || dt == "MEGATRON_LM");
  const bool use_cpu = cfg.get_bool("use_cpu");
  if (cfg.is_set("gpu_ids")) {
    const std::string ids = cfg.get_string("gpu_ids");
    if (ids != "all") {
      std::vector<std::string> list;
      size_t start = 0;
      for (;;) {
        size_t c = ids.find(',', start);
        std::string item = trim_ws(ids.substr(start, c == std::string::npos ? std::string::npos : c - start));
        if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos)
          throw Error("'gpu_ids' (" + json::quote(ids) + ", " + at("gpu_ids") +
                      ") must be \"all\" or comma-separated device numbers such as \"0,1\"");
        list.push_back(item);
        if (c == std::string::npos) break;
        start = c + 1;
      }
      if (use_cpu)
        throw Error("contradictory settings: " + show("use_cpu") + " trains on the CPU, but " + show("gpu_ids") +
                    " selects GPUs; drop one of them");
      const int64_t per_machine = np / nm;
      if (gpu_type && static_cast<int64_t>(list.size()) < per_machine)
        throw Error("contradictory settings: " + show("gpu_ids") + " names " + std::to_string(list.size()) +
                    " device(s), but " + std::to_string(per_machine) + " processes run on each machine (" +
                    show("num_processes") + ", " + show("num_machines") + ")");
    }
  }
  if (dt == "MULTI_GPU" && cfg.provenance("distributed_type").origin == Origin::Flag && np < 2)
    throw Error("contradictory settings: " + show("distributed_type") + " needs at least 2 processes; " +
                show("num_processes"));
  // What `accelerate config` refuses to write (commands/config/cluster.py), refused from a file too.
  if (dt == "MULTI_GPU" && np == 1 && nm == 1)
    throw Error("contradictory settings: " + show("distributed_type") + " with only 1 process on 1 machine (" +
                show("num_processes") + "); use distributed_type \"NO\" for one process");
  if (cfg.get_string("mixed_precision") == "fp8" && use_cpu)
    throw Error("contradictory settings: " + show("mixed_precision") + " needs a GPU, but " + show("use_cpu"));
  if (cfg.is_set("parallelism_config") && !(dt == "FSDP" && cfg.get_int("fsdp_config.fsdp_version") == 2))
    throw Error("contradictory settings: 'parallelism_config' (" + cfg.provenance("parallelism_config").where +
                ") needs distributed_type FSDP with fsdp_version 2; got " + show("distributed_type") +
                (dt == "FSDP" ? " and " + show("fsdp_config.fsdp_version") : std::string()));
  if (cfg.is_set("parallelism_config"))  // what Accelerate's ParallelismConfig refuses once the processes run
    check_parallelism_sizes(cfg, "parallelism_config.parallelism_config_", np, show("num_processes"), true);
  if (dt == "FSDP" && cfg.get_int("fsdp_config.fsdp_version") == 1 &&
      cfg.get_bool("fsdp_config.fsdp_cpu_ram_efficient_loading") &&
      !cfg.get_bool("fsdp_config.fsdp_sync_module_states"))
    throw Error("'fsdp_config.fsdp_cpu_ram_efficient_loading' is true (" +
                at("fsdp_config.fsdp_cpu_ram_efficient_loading") +
                ") so 'fsdp_config.fsdp_sync_module_states' must be true too (" +
                at("fsdp_config.fsdp_sync_module_states") + ")");
  // What Accelerate's FullyShardedDataParallelPlugin refuses as the script starts, refused before any process does.
  if (dt == "FSDP")
    check_checkpointing_offload(cfg, "fsdp_config.fsdp_activation_checkpointing_offload",
                                "fsdp_config.fsdp_activation_checkpointing", "fsdp_config.fsdp_version");
}

std::vector<std::string> launch_warnings(const Config& cfg) {
  if (cfg.kind() != SchemaKind::Launch) throw Error("launch_warnings needs a launch config");
  std::vector<std::string> out;
  // Settings of machines acc launch does not start: TPU pods (accelerate tpu-config, --tpu, tpu_use_cluster) and
  // SageMaker (compute_environment AMAZON_SAGEMAKER), both refused on their own. A local job ignores them, as
  // accelerate launch does (Accelerate's own test configs carry a tpu_name), but not silently. The values
  // `accelerate config` writes for a local machine (null, false, [], "main", "us-east-1") ask for nothing.
  auto asks = [&](const char* p) {
    const std::string v = cfg.get_json(p);
    return v != "null" && v != "false" && v != "[]" && v != "\"\"" && v != default_json_of(cfg, p);
  };
  for (const char* p : {"tpu_name", "tpu_zone", "tpu_use_sudo", "tpu_vm", "tpu_env", "command_file", "commands",
                        "main_training_function"})
    if (asks(p)) out.push_back(shown_setting(cfg, p) + " is a TPU setting; acc launch runs no TPU pods and ignores it");
  for (const char* p :
       {"ec2_instance_type", "iam_role_name", "image_uri", "profile", "region", "base_job_name", "pytorch_version",
        "transformers_version", "py_version", "sagemaker_inputs_file", "sagemaker_metrics_file", "additional_args"})
    if (asks(p))
      out.push_back(shown_setting(cfg, p) +
                    " is an Amazon SageMaker setting; acc launch runs local jobs and ignores it");
  // DeepSpeed's multi-node launcher (pdsh, openmpi, ... over a hostfile): acc launch runs on every machine itself.
  for (const char* p : {"deepspeed_config.deepspeed_hostfile", "deepspeed_config.deepspeed_exclusion_filter",
                        "deepspeed_config.deepspeed_inclusion_filter", "deepspeed_config.deepspeed_multinode_launcher"})
    if (cfg.is_set(p))
      out.push_back(shown_setting(cfg, p) + " is for DeepSpeed's multi-node launcher; acc launch is started on each "
                                            "machine (or by a job scheduler) and ignores it");
  // torchrun's dynamic rendezvous (c10d, etcd) assigns machine ranks as machines join; acc launch always meets at
  // main_process_ip:main_process_port with each machine's machine_rank, as the static backend does.
  if (cfg.get_string("rdzv_backend") != "static")
    out.push_back(shown_setting(cfg, "rdzv_backend") +
                  ": acc launch's rendezvous is static (machine_rank fixed, at main_process_ip:main_process_port)");
  return out;
}

}  // namespace acc::config
