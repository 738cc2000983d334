// What is built on top of a resolved config: the JSON Schema of the files, the text of a launch config file as
// `accelerate config` writes it, the settings libacc cannot do yet, and the run record written next to a run's outputs.
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>

#include "acc/files.hpp"
#include "internal.hpp"

namespace acc::config {
using namespace detail;

namespace {

Node map_node() {
  Node n;
  n.kind = Kind::Map;
  return n;
}

Node list_node() {
  Node n;
  n.kind = Kind::List;
  return n;
}

Node strings(const std::vector<std::string>& v) {
  Node n = list_node();
  for (const auto& s : v) n.list.push_back(Node::string(s));
  return n;
}

// ----------------------------------------------------------------------------------------------------------- schema

// Accepted spellings of a case-insensitive choice: the listed one, lower and upper case.
std::vector<std::string> spellings(const KeySpec& k) {
  std::vector<std::string> out;
  auto add = [&](const std::string& s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  for (const auto& c : k.choices) {
    add(c);
    if (k.ci) {
      add(lower(c));
      add(upper(c));
    }
  }
  return out;
}

Node key_schema(const KeySpec& k, SchemaKind kind) {
  Node alts = list_node();
  const unsigned t = k.types;
  auto numeric = [&](bool integer) {
    Node n = map_node();
    n.map.emplace_back("type", Node::string(integer ? "integer" : "number"));
    auto bound = [&](double v) {
      return integer || v == static_cast<double>(static_cast<int64_t>(v)) ? Node::integer(static_cast<int64_t>(v))
                                                                          : Node::number(v);
    };
    if (k.min) n.map.emplace_back("minimum", bound(*k.min));
    if (k.max) n.map.emplace_back("maximum", bound(*k.max));
    return n;
  };
  if (t & tStr) {
    Node n = map_node();
    n.map.emplace_back("type", Node::string("string"));
    if (!k.choices.empty()) n.map.emplace_back("enum", strings(spellings(k)));
    alts.list.push_back(std::move(n));
  }
  if (t & tBool) {
    Node n = map_node();
    n.map.emplace_back("type", Node::string("boolean"));
    alts.list.push_back(std::move(n));
    // Accelerate writes some booleans as quoted strings ('no').
    if (kind == SchemaKind::Launch) {
      Node s = map_node();
      s.map.emplace_back("type", Node::string("string"));
      s.map.emplace_back("enum", strings({"yes", "no", "true", "false", "on", "off", "y", "n", "t", "f", "1", "0"}));
      alts.list.push_back(std::move(s));
    }
  }
  if (t & tInt) alts.list.push_back(numeric(true));
  // A launch file may hold num_processes: -1 ("give it on the command line"), as Accelerate writes it.
  if ((t & tInt) && kind == SchemaKind::Launch && k.path == "num_processes") {
    Node n = map_node();
    n.map.emplace_back("const", Node::integer(-1));
    alts.list.push_back(std::move(n));
  } else if (t & tNum) alts.list.push_back(numeric(false));
  if (t & tList) {
    Node n = map_node();
    n.map.emplace_back("type", Node::string("array"));
    Node items = map_node();
    items.map.emplace_back("type", Node::string("string"));
    if (!k.choices.empty()) items.map.emplace_back("enum", strings(spellings(k)));
    n.map.emplace_back("items", std::move(items));
    alts.list.push_back(std::move(n));
    if (!(t & tStr)) {  // one name, or names separated by commas
      Node s = map_node();
      s.map.emplace_back("type", Node::string("string"));
      alts.list.push_back(std::move(s));
    }
  }
  if (t & tTriple) {
    Node n = map_node();
    n.map.emplace_back("type", Node::string("array"));
    Node items = map_node();
    items.map.emplace_back("type", Node::string("boolean"));
    n.map.emplace_back("items", std::move(items));
    n.map.emplace_back("minItems", Node::integer(3));
    n.map.emplace_back("maxItems", Node::integer(3));
    alts.list.push_back(std::move(n));
    Node s = map_node();  // "(false, false, false)", as Accelerate writes it
    s.map.emplace_back("type", Node::string("string"));
    s.map.emplace_back("pattern", Node::string("^[\\[(]?\\s*\\w+\\s*,\\s*\\w+\\s*,\\s*\\w+\\s*[\\])]?$"));
    alts.list.push_back(std::move(s));
  }
  if (t & tNull) {
    Node n = map_node();
    n.map.emplace_back("type", Node::string("null"));
    alts.list.push_back(std::move(n));
  }
  // A string key without choices also takes what YAML reads as a number (`gpu_ids: 0`).
  if (kind == SchemaKind::Launch && (t & tStr) && k.choices.empty() && !(t & (tInt | tNum))) {
    Node n = map_node();
    n.map.emplace_back("type", Node::string("number"));
    alts.list.push_back(std::move(n));
  }

  Node out = map_node();
  std::string desc = k.help;
  if (!k.env.empty()) desc += " (environment: " + k.env + ")";
  out.map.emplace_back("description", Node::string(desc));
  if (t & tAny) {
    // any JSON value
  } else if (alts.list.size() == 1) {
    for (auto& e : alts.list[0].map) out.map.push_back(std::move(e));
  } else {
    out.map.emplace_back("anyOf", std::move(alts));
  }
  out.map.emplace_back("default", strip(k.def));
  return out;
}

Node section_schema(const Schema& s, const std::string& section, SchemaKind kind) {
  Node obj = map_node();
  obj.map.emplace_back("type", Node::string("object"));
  Node props = map_node();
  for (const auto& name : s.children.at(section)) {
    const std::string path = section.empty() ? name : section + "." + name;
    if (s.is_section(path)) {
      Node sub = section_schema(s, path, kind);
      // A section may be empty or null (`deepspeed_config: {}` / `fsdp_config:`), as Accelerate writes them.
      sub.map.front().second = strings({"object", "null"});
      props.map.emplace_back(name, std::move(sub));
      continue;
    }
    const KeySpec& k = *s.key(path);
    props.map.emplace_back(name, key_schema(k, kind));
    for (const auto& a : k.aliases) {
      Node alias = key_schema(k, kind);
      alias.map.front().second = Node::string("legacy spelling of '" + k.name + "': " + k.help);
      alias.map.emplace_back("deprecated", Node::boolean(true));
      props.map.emplace_back(a, std::move(alias));
    }
  }
  if (kind == SchemaKind::Launch && section == "fsdp_config") {
    // Accelerate accepts fsdp_config keys without their `fsdp_` prefix.
    const auto kids = s.children.at(section);
    for (const auto& name : kids) {
      if (name.rfind("fsdp_", 0) != 0 || name == "fsdp_version") continue;
      Node alias = key_schema(*s.key(section + "." + name), kind);
      alias.map.front().second = Node::string("same as '" + name + "'");
      props.map.emplace_back(name.substr(5), std::move(alias));
    }
  }
  if (kind == SchemaKind::Launch && section == "dynamo_config") {
    for (const auto& name : s.children.at(section)) {
      Node alias = key_schema(*s.key(section + "." + name), kind);
      alias.map.front().second = Node::string("same as '" + name + "'");
      props.map.emplace_back(name.substr(7), std::move(alias));
    }
  }
  if (kind == SchemaKind::Launch && section.empty()) {
    Node fp16 = map_node();
    fp16.map.emplace_back("description", Node::string("legacy: true means mixed_precision: fp16"));
    fp16.map.emplace_back("type", Node::string("boolean"));
    fp16.map.emplace_back("deprecated", Node::boolean(true));
    props.map.emplace_back("fp16", std::move(fp16));
    Node db = map_node();
    db.map.emplace_back("description", Node::string("legacy: dynamo_config.dynamo_backend"));
    db.map.emplace_back("deprecated", Node::boolean(true));
    props.map.emplace_back("dynamo_backend", std::move(db));
  }
  obj.map.emplace_back("properties", std::move(props));
  obj.map.emplace_back("additionalProperties", Node::boolean(false));
  return obj;
}

// -------------------------------------------------------------------------------------------------------- writing

// PyYAML's safe_dump quoting, closely enough: a string that would read back as something else is single-quoted.
std::string yaml_string(const std::string& s) {
  bool quote = s.empty() || s.front() == ' ' || s.back() == ' ';
  static const char* const kWords[] = {"yes", "no", "true", "false", "on", "off", "y", "n", "null", "~"};
  for (const char* w : kWords)
    if (lower(s) == w) quote = true;
  if (parse_int(s) || parse_double(s)) quote = true;
  if (s.find_first_of(":#{}[],&*!|>'\"%@`\n\t\\") != std::string::npos) quote = true;
  if (!s.empty() && (s.front() == '-' || s.front() == '?' || s.front() == '.')) quote = true;
  bool control = false;
  for (unsigned char c : s)
    if (c < 0x20) control = true;
  if (control) return json::quote(s);  // double-quoted YAML is JSON's escaping
  if (!quote) return s;
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

void write_yaml(std::string& out, const Node& n, int level) {
  const std::string pad(static_cast<size_t>(level) * 2, ' ');
  for (const auto& [k, v] : n.map) {
    out += pad + k + ":";
    switch (v.kind) {
      case Kind::Map:
        out += "\n";
        write_yaml(out, v, level + 1);
        break;
      case Kind::List:
        if (v.list.empty()) {
          out += " []\n";
        } else {
          out += "\n";
          for (const Node& e : v.list) {
            out += pad + "- ";
            if (e.kind == Kind::String) out += yaml_string(e.s);
            else write_json(out, e, -1);
            out += "\n";
          }
        }
        break;
      case Kind::String:
        out += ' ';
        out += yaml_string(v.s);
        out += '\n';
        break;
      default: {
        std::string t;
        write_json(t, v, -1);
        out += " " + t + "\n";
      }
    }
  }
}

void sort_maps(Node& n) {
  if (n.kind != Kind::Map) return;
  std::sort(n.map.begin(), n.map.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& e : n.map) sort_maps(e.second);
}

// ------------------------------------------------------------------------------------------------------ run record

std::string utc_now() {
  char buf[32];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::vector<std::string> self_argv() {
  std::vector<std::string> out;
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string arg;
  while (std::getline(f, arg, '\0')) out.push_back(arg);
  return out;
}

}  // namespace

std::string json_schema(SchemaKind kind) {
  const Schema& s = schema(kind);
  Node root = map_node();
  root.map.emplace_back("$schema", Node::string("https://json-schema.org/draft/2020-12/schema"));
  if (kind == SchemaKind::Launch) {
    root.map.emplace_back("$id", Node::string("https://libacc.dev/schema/launch-config.json"));
    root.map.emplace_back("title", Node::string("libacc / Accelerate launch config (default_config.yaml)"));
    root.map.emplace_back("description",
                          Node::string("Read by `acc launch` and `accelerate launch`; see docs/configuration.md."));
  } else {
    root.map.emplace_back("$id", Node::string("https://libacc.dev/schema/accelerator-config.json"));
    root.map.emplace_back("title", Node::string("libacc accelerator config (acc_accelerator_create)"));
    root.map.emplace_back("description", Node::string("The explicit JSON given to acc_accelerator_create."));
  }
  Node body = section_schema(s, "", kind);
  for (auto& e : body.map) root.map.push_back(std::move(e));
  if (kind == SchemaKind::Launch) {
    Node req = list_node();
    req.list.push_back(Node::string("distributed_type"));
    root.map.emplace_back("required", std::move(req));
  }
  std::string out;
  write_json(out, root, 2);
  return out + "\n";
}

std::string format_launch_file(const Config& cfg, bool json) {
  const Config::Impl& im = Access::impl(cfg);
  if (im.schema->kind != SchemaKind::Launch) throw Error("format_launch_file needs a launch config");
  // ClusterConfig fields that are never None, so `accelerate config` always writes them.
  static const char* const kAlways[] = {"compute_environment",
                                        "debug",
                                        "distributed_type",
                                        "downcast_bf16",
                                        "enable_cpu_affinity",
                                        "machine_rank",
                                        "main_training_function",
                                        "mixed_precision",
                                        "num_machines",
                                        "num_processes",
                                        "rdzv_backend",
                                        "same_network",
                                        "tpu_use_cluster",
                                        "tpu_use_sudo",
                                        "use_cpu"};
  Node root = map_node();
  const Schema& s = *im.schema;
  for (size_t i = 0; i < s.keys.size(); ++i) {
    const KeySpec& k = s.keys[i];
    const Node& v = im.values[i];
    bool always = k.parent.empty() && std::find(std::begin(kAlways), std::end(kAlways), k.path) != std::end(kAlways);
    bool set = im.prov[i].origin != Origin::Default;
    if (!(always || (set && v.kind != Kind::Null))) continue;
    Node* target = &root;
    if (!k.parent.empty()) {
      Node* sec = root.find(k.parent);
      if (!sec) {
        root.map.emplace_back(k.parent, map_node());
        sec = &root.map.back().second;
      }
      target = sec;
    }
    target->map.emplace_back(k.name, strip(v));
  }
  if (!root.find("tpu_env")) root.map.emplace_back("tpu_env", list_node());  // accelerate config writes []
  sort_maps(root);
  std::string out;
  if (json) {
    write_json(out, root, 2);
    out += "\n";
  } else {
    write_yaml(out, root, 0);
  }
  return out;
}

namespace {

// A key's default as compact JSON (what get_json gives for it untouched).
std::string default_json(const Config& c, const char* key) {
  std::string out;
  write_json(out, detail::schema(c.kind()).key(key)->def, -1);
  return out;
}

// Where a key's value came from: "the default", or the origin and where ("file path:line", ...).
std::string value_source(const Config& c, const char* key) {
  Provenance p = c.provenance(key);
  return p.origin == Origin::Default ? std::string("the default") : std::string(origin_name(p.origin)) + " " + p.where;
}

// The refusal of a key's value: the value, where it came from, what libacc lacks and what to do instead.
std::string refuse(const Config& c, const char* key, const std::string& what, const std::string& instead) {
  std::string m = "'";
  m += key;
  m += "' = ";
  m += c.get_json(key);
  m += " (from ";
  m += value_source(c, key);
  m += "): ";
  m += what;
  m += " is not supported yet by libacc";
  if (!instead.empty()) {
    m += "; ";
    m += instead;
  }
  return m;
}

bool holds_json(const Config& c, const char* key, const char* json) { return c.get_json(key) == json; }

// Paradigms and features libacc does not have: FSDP's ignored modules and local state dicts, ZeRO offload to NVMe,
// Megatron-LM, sequence parallelism, parallelism_config with DeepSpeed, torch.compile.
std::optional<std::string> unsupported_paradigm(const Config& c) {
  if (c.get_bool("use_fsdp")) {
    (void)sharding(c);  // its errors (a policy's bad dtype) name their key
    if (c.is_set("fsdp_plugin.ignored_modules"))
      return refuse(c, "fsdp_plugin.ignored_modules", "FSDP ignored modules", "leave it null");
    if (c.is_set("fsdp_plugin.state_dict_type") && c.get_string("fsdp_plugin.state_dict_type") == "LOCAL_STATE_DICT")
      return refuse(c, "fsdp_plugin.state_dict_type", "LOCAL_STATE_DICT", "use FULL_STATE_DICT or SHARDED_STATE_DICT");
  }
  if (c.get_bool("use_deepspeed")) {
    for (const char* k : {"deepspeed_plugin.offload_optimizer_device", "deepspeed_plugin.offload_param_device"})
      if (c.get_string(k) == "nvme") return refuse(c, k, "ZeRO offload to NVMe", "use \"cpu\" or \"none\"");
  }
  if (c.get_bool("use_megatron_lm"))
    return refuse(c, "use_megatron_lm", "Megatron-LM", "train with DDP (the default) instead");
  if (c.get_bool("use_parallelism_config")) {
    // Its dimensions make the process mesh (parallel_dims, src/runtime/mesh.hpp); prepare splits the model over its
    // tp, cp and sp groups (src/parallel/parallelize.hpp). Sequence parallelism (sp_size: Ulysses, DeepSpeed's ALST)
    // is libacc's own on that mesh, with DDP or FSDP2 over it, not DeepSpeed's engine.
    if (c.get_bool("use_deepspeed"))
      return refuse(c, "use_parallelism_config", "parallelism_config with DeepSpeed",
                    "use FSDP2 for dp_shard_size (sp_size runs with DDP or FSDP2 too)");
  }
  if (c.get_string("dynamo_plugin.backend") != "NO")
    return refuse(c, "dynamo_plugin.backend", "torch.compile (TorchDynamo)", "set it to \"NO\"");
  return std::nullopt;
}

// Trackers and c10d backends and rendezvous libacc does not have.
std::optional<std::string> unsupported_service(const Config& c) {
  // Trackers: libacc writes TensorBoard event files, JSON lines, CSV, MLflow's file store and W&B offline runs
  // (src/tracking).
  if (c.is_set("log_with"))
    for (const auto& t : c.get_string_list("log_with"))
      if (t != "all" && t != "tensorboard" && t != "jsonl" && t != "csv" && t != "mlflow" && t != "wandb")
        return refuse(c, "log_with", "the tracker \"" + t + "\"", "use tensorboard, jsonl, csv, mlflow or wandb");
  if (c.is_set("init_process_group_kwargs.backend")) {
    std::string b = lower(c.get_string("init_process_group_kwargs.backend"));
    if (b != "gloo" && b != "nccl" && b != "cpu:gloo,cuda:nccl")
      return refuse(c, "init_process_group_kwargs.backend", "the c10d backend \"" + b + "\"",
                    "use gloo or nccl (or null)");
  }
  if (c.is_set("init_process_group_kwargs.init_method")) {
    std::string m = c.get_string("init_process_group_kwargs.init_method");
    if (m != "env://")
      return refuse(c, "init_process_group_kwargs.init_method", "a rendezvous other than env://",
                    "leave it null: processes meet at MASTER_ADDR:MASTER_PORT");
  }
  return std::nullopt;
}

// Keys whose Accelerate meaning libacc does not have: refused unless they hold a value that asks for nothing
// (the default, or what `acc launch` / `accelerate launch` export when the feature is off).
std::optional<std::string> meaningless_setting(const Config& c) {
  if (c.get_int("ddp_kwargs.dim") != 0)
    return refuse(c, "ddp_kwargs.dim", "a DDP scatter dimension",
                  "torch's DDP scatters inputs only over several devices per process; libacc has one; leave it 0");
  if (c.get_bool("downcast_bf16")) return refuse(c, "downcast_bf16", "XLA's float64 downcast (TPUs)", "leave it false");
  // torch.compile is refused above with any backend; its other settings mean nothing without it.
  for (const char* k : {"dynamo_plugin.mode", "dynamo_plugin.options"})
    if (c.is_set(k) && !holds_json(c, k, k[14] == 'm' ? "\"default\"" : "null"))
      return refuse(c, k, "torch.compile (TorchDynamo) settings", "leave it at its default");
  for (const char* k : {"dynamo_plugin.fullgraph", "dynamo_plugin.dynamic", "dynamo_plugin.disable",
                        "dynamo_plugin.use_regional_compilation"})
    if (holds_json(c, k, "true")) return refuse(c, k, "torch.compile (TorchDynamo) settings", "leave it false");
  // Context parallelism is libacc's own (torch's): cp_backend has one value. (The sp_* settings are read:
  // parallelism.cpp checks them.)
  for (const char* k : {"parallelism_config.cp_backend"})
    if (c.provenance(k).origin != Origin::Default && c.get_json(k) != default_json(c, k))
      return refuse(c, k, "context parallelism settings", "leave it at its default");
  // libacc's FP8 (mixed_precision fp8) is one recipe: E4M3 forward GEMMs with a scale per tensor from its current
  // amax, backward in bf16. Recipe settings that ask for another are refused; use_autocast_during_eval is honoured.
  for (const char* k : {"fp8_recipe_kwargs.backend", "fp8_recipe_kwargs.fp8_format", "fp8_recipe_kwargs.margin",
                        "fp8_recipe_kwargs.interval", "fp8_recipe_kwargs.amax_history_len",
                        "fp8_recipe_kwargs.amax_compute_algo", "fp8_recipe_kwargs.override_linear_precision",
                        "fp8_recipe_kwargs.use_mxfp8_block_scaling", "fp8_recipe_kwargs.opt_level",
                        "fp8_recipe_kwargs.pad_inner_dim", "fp8_recipe_kwargs.enable_fsdp_float8_all_gather"})
    if (c.get_json(k) != default_json(c, k))
      return refuse(
          c, k, "an FP8 recipe setting",
          "libacc's FP8 runs E4M3 forward GEMMs scaled by each tensor's current amax, backward in bf16; leave "
          "it at its default");
  return std::nullopt;
}

// What libacc's sharded strategy and ZeRO-3 do one way only, and the RNGs it has.
std::optional<std::string> unsupported_variant(const Config& c) {
  if (c.get_bool("use_fsdp") && c.get_int("fsdp_plugin.fsdp_version") == 1) {
    // libacc's sharded strategy keeps rank 0's weights everywhere, steps the original parameters and has at most one
    // all-gather prefetched: FSDP1's true values, and nothing else.
    if (!c.get_bool("fsdp_plugin.limit_all_gathers"))
      return refuse(c, "fsdp_plugin.limit_all_gathers", "unlimited all-gathers",
                    "libacc prefetches one unit; leave it true");
    if (holds_json(c, "fsdp_plugin.use_orig_params", "false"))
      return refuse(c, "fsdp_plugin.use_orig_params", "flat parameters for the optimizer",
                    "libacc's optimizer steps the original parameters; set it true or null");
    if (holds_json(c, "fsdp_plugin.sync_module_states", "false"))
      return refuse(c, "fsdp_plugin.sync_module_states", "FSDP without rank 0's weights everywhere",
                    "libacc always starts every process from rank 0's weights; set it true or null");
  }
  if (c.get_bool("use_deepspeed") && c.is_set("deepspeed_plugin.transformer_moe_cls_names"))
    return refuse(c, "deepspeed_plugin.transformer_moe_cls_names", "DeepSpeed's MoE leaf modules",
                  "ZeRO-3 gathers libacc's model blocks whole; leave it null");
  if (c.is_set("rng_types"))
    for (const auto& r : c.get_string_list("rng_types"))
      if (r != "torch" && r != "cuda" && r != "generator")
        return refuse(c, "rng_types", "the RNG \"" + r + "\"", "use torch, cuda or generator");
  return std::nullopt;
}

}  // namespace

std::optional<std::string> unsupported_setting(const Config& c) {
  if (c.kind() != SchemaKind::Accelerator) throw Error("unsupported_setting needs an accelerator config");
  if (auto m = unsupported_paradigm(c)) return m;
  if (auto m = unsupported_service(c)) return m;
  if (auto m = meaningless_setting(c)) return m;
  return unsupported_variant(c);
}

std::vector<std::string> setting_warnings(const Config& c) {
  if (c.kind() != SchemaKind::Accelerator) throw Error("setting_warnings needs an accelerator config");
  std::vector<std::string> out;
  // torch's DDP warns about it too (FutureWarning) and does nothing with it.
  if (c.get_bool("ddp_kwargs.check_reduction"))
    out.push_back(shown_setting(c, "ddp_kwargs.check_reduction") +
                  ": deprecated in torch's DistributedDataParallel, which ignores it; remove it");
  return out;
}

namespace {

// A dtype as Accelerate's policies spell it ("bf16", "bfloat16", "torch.bfloat16", ...) -> "bfloat16" / "float16" /
// "float32"; "fp8" gathers in bfloat16, as Accelerate's mapping does.
std::string policy_dtype(const std::string& v, const std::string& key) {
  std::string d = v.rfind("torch.", 0) == 0 ? v.substr(6) : v;
  if (d == "bf16" || d == "bfloat16" || d == "fp8") return "bfloat16";
  if (d == "fp16" || d == "float16" || d == "half") return "float16";
  if (d == "fp32" || d == "float32" || d == "float") return "float32";
  throw Error("'" + key + "': '" + v + "' is not a dtype (bf16, fp16, fp32, or torch.bfloat16, ...)");
}

// DeepSpeed's ZeRO: its stage, offload, clipping and (stage 3) prefetching.
void deepspeed_sharding(const Config& c, Sharding& sh) {
  sh.stage = static_cast<int>(c.get_int("deepspeed_plugin.zero_stage"));
  sh.label = "DeepSpeed ZeRO stage " + std::to_string(sh.stage);
  sh.offload = c.get_string("deepspeed_plugin.offload_optimizer_device") == "cpu" ||
               c.get_string("deepspeed_plugin.offload_param_device") == "cpu";
  if (c.is_set("deepspeed_plugin.gradient_clipping"))
    sh.gradient_clipping = c.get_double("deepspeed_plugin.gradient_clipping");
  if (sh.stage == 3) {  // DeepSpeed's stage3_prefetch_bucket_size
    sh.forward_prefetch = true;
    sh.backward_prefetch = "BACKWARD_PRE";
  }
}

// FSDP's sharding strategy, as FullyShardedDataParallelPlugin reads it. FSDP1: the deprecated sharding_strategy wins,
// then reshard_after_forward as a strategy; neither set means FULL_SHARD. FSDP2: reshard_after_forward, a bool (true
// when unset); sharding_strategy is FSDP1's, not read from the environment (accelerate launch always exports
// FSDP_SHARDING_STRATEGY) and, given, ignored beside reshard_after_forward and refused without it.
std::string fsdp_strategy(const Config& c) {
  auto show = [&](const char* k) { return shown_setting(c, k); };
  std::string strategy = "FULL_SHARD";
  const char* const kStrategy = "fsdp_plugin.sharding_strategy";
  const char* const kReshard = "fsdp_plugin.reshard_after_forward";
  if (c.get_int("fsdp_plugin.fsdp_version") == 2) {
    if (c.is_set(kReshard)) {
      const std::string v = c.get_json(kReshard);
      if (v != "true" && v != "false")
        throw Error(show(kReshard) + " must be a bool with FSDP2 (a sharding strategy is FSDP1's)");
      strategy = v == "true" ? "FULL_SHARD" : "SHARD_GRAD_OP";
    } else if (c.is_set(kStrategy) && c.provenance(kStrategy).origin != Origin::Env) {
      throw Error(show(kStrategy) + " is FSDP1's; FSDP2 takes 'fsdp_plugin.reshard_after_forward', a bool");
    }
    // FSDP2 prefetches on its own (so does libacc, below); the environment's FSDP_FORWARD_PREFETCH is FSDP1's.
    if (c.is_set("fsdp_plugin.forward_prefetch") && c.provenance("fsdp_plugin.forward_prefetch").origin != Origin::Env)
      throw Error(show("fsdp_plugin.forward_prefetch") + " is FSDP1's: FSDP2 prefetches by itself; leave it null");
  } else if (c.is_set(kStrategy)) {
    strategy = c.get_string(kStrategy);
  } else if (c.is_set(kReshard)) {
    const std::string v = c.get_json(kReshard);
    strategy = v == "true" ? "FULL_SHARD" : v == "false" ? "SHARD_GRAD_OP" : c.get_string(kReshard);
  }
  return strategy;
}

// fsdp_plugin.mixed_precision_policy: a dtype for both, or {param_dtype, reduce_dtype, buffer_dtype / output_dtype}.
void apply_mixed_precision_policy(const Config& c, Sharding& sh) {
  const char* key = "fsdp_plugin.mixed_precision_policy";
  const Node policy = parse_json(c.get_json(key));
  if (policy.kind == Kind::String) {
    sh.param_dtype = sh.reduce_dtype = policy_dtype(policy.s, key);
  } else if (policy.kind == Kind::Map) {
    const Node* param = policy.find("param_dtype");
    const Node* reduce = policy.find("reduce_dtype");
    if (!param || param->kind != Kind::String)
      throw Error("'" + std::string(key) + ".param_dtype' is required (bf16, fp16 or fp32)");
    sh.param_dtype = policy_dtype(param->s, std::string(key) + ".param_dtype");
    sh.reduce_dtype = reduce && reduce->kind == Kind::String
                          ? policy_dtype(reduce->s, std::string(key) + ".reduce_dtype")
                          : sh.param_dtype;
  } else {
    throw Error("'" + std::string(key) + "' must be a dtype or {param_dtype, reduce_dtype}");
  }
}

// Accelerate's ParallelismConfig for FSDP2: dp_shard_size ranks shard, dp_replicate_size such groups replicate.
void apply_fsdp2_parallelism(const Config& c, Sharding& sh) {
  const char* const kShard = "parallelism_config.dp_shard_size";
  if (c.get_int("fsdp_plugin.fsdp_version") != 2)
    throw Error("'use_parallelism_config' (" + c.provenance("use_parallelism_config").where + ") needs FSDP2; got " +
                shown_setting(c, "fsdp_plugin.fsdp_version"));
  if (c.get_int(kShard) == 1 && c.get_int("parallelism_config.cp_size") == 1 &&
      c.get_int("parallelism_config.sp_size") == 1)
    throw Error(shown_setting(c, kShard) +
                ": FSDP is enabled but the parallelism config has no dimension for FSDP to "
                "shard across; set dp_shard_size > 1 (or cp_size or sp_size > 1, or train without the FSDP config)");
  sh.dp_shard_size = c.get_int(kShard);
  sh.dp_replicate_size = c.get_int("parallelism_config.dp_replicate_size");
  sh.hybrid = sh.dp_replicate_size > 1;
  if (sh.hybrid) sh.label = sh.reshard_after_forward ? "FSDP2 HSDP" : "FSDP2 HSDP (reshard_after_forward false)";
}

// FSDP's prefetching (FSDP2's implicit one, or FSDP1's settings) and its wrap policy.
void fsdp_prefetch_and_wrap(const Config& c, Sharding& sh) {
  if (c.get_int("fsdp_plugin.fsdp_version") == 2) {  // FSDP2's implicit prefetching
    sh.forward_prefetch = true;
    sh.backward_prefetch = "BACKWARD_PRE";
  } else {
    sh.forward_prefetch = c.is_set("fsdp_plugin.forward_prefetch") && c.get_bool("fsdp_plugin.forward_prefetch");
    if (c.is_set("fsdp_plugin.backward_prefetch") && c.get_string("fsdp_plugin.backward_prefetch") != "NO_PREFETCH")
      sh.backward_prefetch = c.get_string("fsdp_plugin.backward_prefetch");
  }
  sh.wrap_policy = c.get_string("fsdp_plugin.auto_wrap_policy");
  if (c.is_set("fsdp_plugin.transformer_cls_names_to_wrap")) {
    sh.wrap_classes = c.get_string_list("fsdp_plugin.transformer_cls_names_to_wrap");
    sh.wrap_classes_set = true;
  }
  if (c.is_set("fsdp_plugin.min_num_params")) sh.min_num_params = c.get_int("fsdp_plugin.min_num_params");
  // Accelerate drops a size-based policy with min_num_params 0 (no wrapping).
  if (sh.wrap_policy == "SIZE_BASED_WRAP" && sh.min_num_params <= 0) sh.wrap_policy = "NO_WRAP";
}

}  // namespace

Sharding sharding(const Config& c) {
  if (c.kind() != SchemaKind::Accelerator) throw Error("sharding needs an accelerator config");
  Sharding sh;
  const std::string mp = c.get_string("mixed_precision");
  if (mp != "no" && (c.get_bool("use_deepspeed") || c.get_bool("use_fsdp")))
    sh.param_dtype = sh.reduce_dtype = policy_dtype(mp, "mixed_precision");
  if (c.get_bool("use_deepspeed")) {
    deepspeed_sharding(c, sh);
    return sh;
  }
  if (!c.get_bool("use_fsdp")) return sh;
  check_checkpointing_offload(c, "fsdp_plugin.activation_checkpointing_offload", "fsdp_plugin.activation_checkpointing",
                              "fsdp_plugin.fsdp_version");
  const std::string strategy = fsdp_strategy(c);
  sh.label = "FSDP " + strategy;
  if (c.is_set("fsdp_plugin.mixed_precision_policy")) apply_mixed_precision_policy(c, sh);
  if (strategy == "NO_SHARD") return sh;
  sh.stage = 3;
  sh.reshard_after_forward = strategy == "FULL_SHARD" || strategy == "HYBRID_SHARD";
  sh.hybrid = strategy.rfind("HYBRID_SHARD", 0) == 0;
  if (c.get_bool("use_parallelism_config")) apply_fsdp2_parallelism(c, sh);
  sh.offload = c.get_bool("fsdp_plugin.cpu_offload");
  fsdp_prefetch_and_wrap(c, sh);
  return sh;
}

std::string write_run_record(const Config& cfg, const std::string& dir, std::string_view build_info_json,
                             const std::map<std::string, std::string>& env) {
  if (dir.empty()) throw Error("write_run_record: empty directory");
  Node root = map_node();
  root.map.emplace_back("format", Node::string("acc_run_config/1"));
  root.map.emplace_back("written_at", Node::string(utc_now()));
  Node build;
  try {
    build = strip(parse_json(build_info_json));
  } catch (const Error&) {
    build = Node::string(std::string(build_info_json));
  }
  root.map.emplace_back("build", std::move(build));
  Node proc = map_node();
  proc.map.emplace_back("hostname", Node::string(host_name()));
  proc.map.emplace_back("pid", Node::integer(getpid()));
  proc.map.emplace_back("argv", strings(self_argv()));
  char cwd[4096] = {0};
  proc.map.emplace_back("cwd", getcwd(cwd, sizeof cwd) ? Node::string(cwd) : Node::null());
  root.map.emplace_back("process", std::move(proc));
  // The variables that shape a distributed run: the launcher's and the library's.
  Node vars = map_node();
  static const char* const kPrefixes[] = {"ACCELERATE_",   "FSDP_", "MEGATRON_LM_", "PARALLELISM_CONFIG_",
                                          "TORCHELASTIC_", "GLOO_", "NCCL_",        "ACC_"};
  static const char* const kNames[] = {
      "RANK",        "LOCAL_RANK",  "WORLD_SIZE",      "LOCAL_WORLD_SIZE",    "GROUP_RANK", "GROUP_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"};
  for (const auto& [k, v] : env) {
    bool keep = std::find(std::begin(kNames), std::end(kNames), k) != std::end(kNames);
    for (const char* p : kPrefixes)
      if (k.rfind(p, 0) == 0) keep = true;
    // Secrets never go into files: skip anything that looks like one.
    const std::string u = upper(k);
    if (u.find("TOKEN") != std::string::npos || u.find("SECRET") != std::string::npos ||
        u.find("PASSWORD") != std::string::npos || u.find("KEY") != std::string::npos)
      keep = false;
    if (keep) vars.map.emplace_back(k, Node::string(v));
  }
  root.map.emplace_back("environment", std::move(vars));
  Node both = parse_json(cfg.to_json(true));
  for (auto& e : both.map) root.map.push_back(std::move(e));
  std::string text;
  write_json(text, strip(root), 2);
  text += "\n";

  const std::string path = dir + "/" + kRunRecordName;
  try {
    make_directories(dir);
    write_file_atomic(path, text);
  } catch (const std::ios_base::failure& e) {
    throw Error(e.what());  // this function's contract: every failure is an Error
  }
  return path;
}

}  // namespace acc::config
