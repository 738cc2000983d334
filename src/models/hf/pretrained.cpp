#include "models/hf/pretrained.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <filesystem>
#include <map>
#include <set>

#include "acc/files.hpp"
#include "acc/hf_shapes.hpp"
#include "acc/limits.hpp"
#include "acc/safetensors_header.hpp"
#include "bigmodel/offload.hpp"
#include "bigmodel/plan.hpp"
#include "formats/safetensors.hpp"
#include "models/deferred.hpp"
#include "models/hf/families.hpp"
#include "models/layers.hpp"
#include "runtime/process_state.hpp"
#include "util/dtypes.hpp"
#include "util/errors.hpp"
#include <acc/json.hpp>
#include "util/options.hpp"

namespace acc::core::hf {

namespace fs = std::filesystem;

namespace {

const char* const kDecoders[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "MixtralForCausalLM"};

// config.json's values as transformers reads them (config::check_hf_config), checked before anything is built:
// a size out of range, a negative epsilon or a malformed rope_parameters is refused naming the key and `source`.
void check_config(const std::string& text, const std::string& source) {
  try {
    config::check_hf_config(text, source);
  } catch (const config::Error& e) {
    throw std::invalid_argument(e.what());
  }
}

// Tensors a checkpoint may hold that are not state: buffers older transformers versions saved (rotary
// frequencies, GPT-2's causal masks), and the head of a tied model saved with it.
bool ignorable(const std::string& name, bool tied) {
  auto ends = [&](const char* suffix) { return name.ends_with(suffix); };
  return ends("rotary_emb.inv_freq") || ends(".attn.bias") || ends(".attn.masked_bias") ||
         ends("embeddings.position_ids") || ends("embeddings.token_type_ids") || (tied && name == "lm_head.weight");
}

// A file's tensors as the header describes them, on the meta device: names and shapes, no data read.
NamedTensors header_tensors(const std::string& file) {
  NamedTensors out;
  try {
    for (const auto& e : config::read_safetensors_header(file).tensors) {
      const std::optional<at::ScalarType> type = safetensors_scalar_type(e.dtype);
      if (!type)
        throw std::invalid_argument(file + ": tensor \"" + e.name + "\" has dtype " + e.dtype +
                                    ", which libacc does not load");
      out.emplace_back(e.name, at::empty(e.shape, at::TensorOptions().dtype(*type).device(at::kMeta)));
    }
  } catch (const config::Error& e) {
    throw std::invalid_argument(e.what());
  }
  return out;
}

// The checkpoint's tensors by name (mapped from the files), or with `data` false their headers' names, shapes and
// dtypes; *file_of gets each one's file.
std::map<std::string, at::Tensor> read_weights(const fs::path& dir, bool data,
                                               std::map<std::string, std::string>* file_of) {
  std::map<std::string, at::Tensor> out;
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  std::vector<std::string> files;
  std::map<std::string, std::string> expected_in;  // tensor -> shard, from the index
  if (fs::exists(single)) {
    files.push_back(single.string());
  } else if (fs::exists(index)) {
    // Read as a regular file within limits::kHfIndexBytes, strict JSON, each shard a plain name in `dir`; one pass
    // over the weight map (a large model's lists 100k tensors).
    config::HfIndex parsed;
    try {
      parsed = config::read_hf_index(dir.string());
    } catch (const config::Error& e) {
      throw std::invalid_argument(e.what());
    }
    expected_in.insert(parsed.weight_map.begin(), parsed.weight_map.end());
    for (const std::string& shard : parsed.shards) {
      if (!fs::exists(shard))
        throw std::ios_base::failure("from_pretrained: shard '" + shard + "', named by " + index.string() +
                                     ", is missing");
      files.push_back(shard);
    }
  } else {
    throw std::ios_base::failure("from_pretrained: '" + dir.string() +
                                 "' has no model.safetensors and no model.safetensors.index.json");
  }
  for (const std::string& file : files)
    for (auto& [name, t] : data ? load_safetensors(file) : header_tensors(file)) {
      if (!out.emplace(name, t).second)
        throw std::invalid_argument("from_pretrained: tensor '" + name + "' is in more than one shard (" + file + ")");
      (*file_of)[name] = file;
      auto e = expected_in.find(name);
      if (!expected_in.empty() && (e == expected_in.end() || e->second != file))
        throw std::invalid_argument("from_pretrained: tensor '" + name + "' is in " + file + ", not where " +
                                    index.string() + " says");
    }
  for (const auto& [name, shard] : expected_in)
    if (!out.count(name))
      throw std::invalid_argument("from_pretrained: " + index.string() + " puts '" + name + "' in " + shard +
                                  ", which does not hold it");
  return out;
}

std::string list(const std::vector<std::string>& names) {
  std::string s;
  const size_t shown = std::min<size_t>(names.size(), 10);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += " and " + std::to_string(names.size() - shown) + " more";
  return s;
}

std::vector<int64_t> token_ids(const json::Value& v, const std::string& key) {
  if (!v.has_value(key)) return {};
  json::Value ids = v.get(key);
  if (!ids.is_array()) return {v.get_int(key)};
  std::vector<int64_t> out;
  for (size_t i = 0; i < ids.size(); ++i) out.push_back(ids.at(i).as_int());
  return out;
}

// transformers' GenerationConfig of the model from generation_config.json (`full`: its sampling settings too)
// or config.json (the token ids), read from `source`. Without a pad token, the first stop token pads (as generate
// does).
GenerationOptions generation_defaults(const json::Value& v, bool full, const std::string& source) {
  GenerationOptions g;
  g.eos_token_ids = token_ids(v, "eos_token_id");
  if (!g.eos_token_ids.empty()) g.eos_source = source;
  const std::vector<int64_t> pad = token_ids(v, "pad_token_id");
  g.pad_token_id = !pad.empty() ? pad[0] : !g.eos_token_ids.empty() ? g.eos_token_ids[0] : 0;
  if (!pad.empty()) g.pad_source = source;
  else if (!g.eos_token_ids.empty()) g.pad_source = source + "'s eos_token_id, as it sets no pad_token_id";
  if (full) {
    g.do_sample = v.get_bool_or("do_sample", g.do_sample);
    g.temperature = v.get_double_or("temperature", g.temperature);
    g.top_k = v.get_int_or("top_k", g.top_k);
    g.top_p = v.get_double_or("top_p", g.top_p);
    g.repetition_penalty = v.get_double_or("repetition_penalty", g.repetition_penalty);
    g.max_new_tokens = v.get_int_or("max_new_tokens", g.max_new_tokens);
  }
  return g;
}

at::ScalarType dtype_named(const std::string& name, const std::string& source) {
  if (const auto t = float_dtype_named(name)) return *t;
  throw std::invalid_argument(source + ": dtype '" + name + "' is not " + kFloatDtypeNames);
}

// The class config.json names (architectures[0]); without one, AutoModelForCausalLM's for its model_type.
std::string architecture(const json::Value& c, const std::string& source) {
  if (c.has_value("architectures") && c.get("architectures").size() > 0)
    return c.get("architectures").at(0).as_string();
  if (!c.has_value("model_type"))
    throw std::invalid_argument(source + ": neither an 'architectures' list naming the model class nor a 'model_type'");
  const std::string type = c.get("model_type").as_string();
  if (auto cls = config::causal_lm_class(type)) return *cls;
  throw UnsupportedError(source + ": model_type '" + type + "' has no causal language model libacc builds (name the " +
                         "class in 'architectures': " + known_architectures() + ")");
}

// The architecture of the config, with `options`' dtype and device.
std::unique_ptr<Model> build(const json::Value& c, const at::TensorOptions& options, const std::string& source) {
  const std::string arch = architecture(c, source);
  for (const char* a : kDecoders)
    if (arch == a) return make_decoder(c, arch, options, source);
  if (arch == "GPT2LMHeadModel") return make_gpt2(c, options, source);
  if (arch == "BertForSequenceClassification") return make_bert_classifier(c, options, source);
  throw UnsupportedError(source + ": architecture '" + arch + "' is not one libacc has (" + known_architectures() +
                         ")");
}

// options_json's dtype; "auto" is the config's.
at::ScalarType requested_dtype(const Options& opts, const json::Value& c, const std::string& source) {
  std::string name = opts.get_string("dtype", "auto", {"auto", "float32", "bfloat16", "float16"});
  // "auto", transformers 5's default: the dtype config.json records ("dtype", or "torch_dtype" before 5).
  if (name == "auto") name = c.get_string_or("dtype", c.get_string_or("torch_dtype", "float32"));
  return dtype_named(name, source);
}

// The device of a parameter in a device map: its own entry or its nearest ancestor's.
std::string device_of(const std::map<std::string, std::string>& map, const std::string& name) {
  for (std::string n = name;; n = n.substr(0, n.rfind('.'))) {
    if (map.count(n)) return map.at(n);
    if (n.find('.') == std::string::npos) break;
  }
  auto root = map.find("");
  if (root == map.end()) throw std::logic_error("device map: no device for '" + name + "'");
  return root->second;
}

// An explicit device map ({"model.layers.0": 0, "lm_head": "cpu", ...}), checked against the model: every key a
// module or parameter it has (or, as Accelerate's maps list them, a weightless module of transformers' model and its
// buffers, "model.rotary_emb", and a tied "lm_head"), every parameter placed.
std::map<std::string, std::string> explicit_map(const Model& model, const json::Value& map) {
  std::set<std::string> names;
  for (const std::string& m : model.module_names()) names.insert(m);
  for (const auto& [n, t] : model.named_parameters()) names.insert(n);
  for (const WeightlessModule& w : model.weightless_modules()) {
    names.insert(w.name);
    for (const auto& [b, t] : w.buffers) names.insert(w.name + "." + b);
  }
  if (!model.tied_lm_head().empty()) names.insert({"lm_head", "lm_head.weight"});  // as tree_of shows it
  std::map<std::string, std::string> out;
  for (const auto& [name, e] : map.items()) {
    if (!names.count(name))
      throw OptionsError("from_pretrained options: device_map names '" + name + "', which the model does not have");
    if (e.is_integer() && e.as_int() >= 0) out[name] = std::to_string(e.as_int());
    else if (e.is_string() && (e.as_string() == "cpu" || e.as_string() == "disk")) out[name] = e.as_string();
    else
      throw OptionsError("from_pretrained options: device_map['" + name +
                         "'] must be an accelerator index, \"cpu\" or \"disk\"");
  }
  for (const auto& [n, t] : model.named_parameters()) {
    bool placed = out.count("");
    for (std::string k = n; !placed; k = k.substr(0, k.rfind('.'))) {
      placed = out.count(k);
      if (k.find('.') == std::string::npos) break;
    }
    if (!placed) throw OptionsError("from_pretrained options: device_map leaves '" + n + "' out");
  }
  return out;
}

// The device map from_pretrained's options ask for: a mode planned by bigmodel::plan_device_map (its options,
// without offload_folder), or an explicit map.
std::map<std::string, std::string> plan(const Model& model, const char* options_json) {
  const json::Document o =
      json::Document::object(options_json && *options_json ? options_json : "{}", "from_pretrained options");
  if (auto m = o.root().find("device_map"); m && m->is_object()) return explicit_map(model, *m);
  json::Writer planner_options;  // these options, without offload_folder
  planner_options.begin_object();
  for (const auto& [k, v] : o.root().items())
    if (k != "offload_folder") planner_options.key(k).value(v);
  planner_options.end_object();
  const json::Document map =
      json::Document::object(bigmodel::plan_device_map(model, planner_options.str().c_str()), "device map");
  std::map<std::string, std::string> out;
  for (const std::string& k : map.root().keys()) {
    const json::Value v = map.root().get(k);
    out[k] = v.is_integer() ? std::to_string(v.as_int()) : v.as_string();
  }
  return out;
}

}  // namespace

std::unique_ptr<Model> from_config(const std::string& config_json, const char* options_json) {
  const std::string source = "the model config";
  const json::Document config = json::Document::object(config_json, source);
  check_config(config_json, source);
  Options opts(options_json, "from_config options", {"dtype", "device"});
  const at::ScalarType dtype = requested_dtype(opts, config.root(), source);
  // "meta": Accelerate's init_empty_weights, names and shapes without memory (for device maps and dispatch).
  const std::string device = opts.get_string("device", "cpu", {"cpu", "meta"});
  // DeepSpeed ZeRO-3's zero.Init (runtime/process_state.hpp): built on the meta device, initialised at prepare.
  const bool deferred = device != "meta" && zero3_init();
  std::unique_ptr<Model> model =
      build(config.root(), at::TensorOptions().dtype(dtype).device(device == "meta" || deferred ? at::kMeta : at::kCPU),
            source);
  if (deferred) model->set_deferred(defer_initialisation(dynamic_cast<NnModel&>(*model).module()));
  if (auto* p = dynamic_cast<Pretrained*>(model.get())) {
    p->config_json = config_json;
    // A config naming only its model_type (or a null architectures) is saved naming the class first, as
    // transformers' save_pretrained writes it: parsed and written again, never edited as text.
    if (!config.root().has_value("architectures")) {
      json::Writer w(json::Writer::Layout::Indented, 2);
      w.begin_object().key("architectures").begin_array().value(architecture(config.root(), source)).end_array();
      for (const auto& [k, e] : config.root().items())
        if (k != "architectures") w.key(k).value(e);
      p->config_json = w.end_object().str() + "\n";
    }
  }
  if (auto* lm = dynamic_cast<CausalLM*>(model.get()))
    lm->generation_defaults = generation_defaults(config.root(), false, source);
  return model;
}

std::string known_architectures() {
  std::string s;
  for (const char* a : kDecoders) s += std::string(a) + ", ";
  return s + "GPT2LMHeadModel, BertForSequenceClassification";
}

namespace {

// Accelerate's strict loading: the checkpoint's tensors against the model's, every problem at once (missing,
// unexpected, mismatched shapes, dtypes that do not convert).
void check_checkpoint_fits(const Model& model, const std::map<std::string, at::Tensor>& weights,
                           std::map<std::string, std::string>& file_of, bool tied, const std::string& dir_arg,
                           const std::string& arch) {
  std::vector<std::string> missing, unexpected, mismatched, unconverted;
  const NamedTensors state = model.state();
  std::set<std::string> known;
  for (const auto& [name, t] : state) {
    known.insert(name);
    auto w = weights.find(name);
    if (w == weights.end()) missing.push_back(name);
    else if (!w->second.sizes().equals(t.sizes()))
      mismatched.push_back(name + " (" + c10::str(w->second.sizes()) + " in the checkpoint, " + c10::str(t.sizes()) +
                           " in the model)");
    else if (!dtype_converts(w->second.scalar_type(), t.scalar_type()))
      unconverted.push_back(name + " (" + c10::str(w->second.scalar_type()) + " in " + file_of[name] + ", " +
                            c10::str(t.scalar_type()) + " in the model)");
  }
  for (const auto& [name, t] : weights)
    if (!known.count(name) && !ignorable(name, tied)) unexpected.push_back(name);
  if (missing.empty() && unexpected.empty() && mismatched.empty() && unconverted.empty()) return;
  std::string what;
  if (!missing.empty()) what += "; missing: " + list(missing);
  if (!unexpected.empty()) what += "; unexpected: " + list(unexpected);
  if (!mismatched.empty()) what += "; mismatched shapes: " + list(mismatched);
  // Floating point converts into floating point (bf16 into fp32), never integers or bools into it (dtype_converts).
  if (!unconverted.empty()) what += "; dtypes that do not convert: " + list(unconverted);
  throw std::invalid_argument("from_pretrained: the checkpoint in '" + dir_arg + "' does not fit " + arch + ":" +
                              what.substr(1));
}

// What the model keeps of the folder: generation defaults (generation_config.json, else config.json), the config
// and generation texts, and the tokenizer's files.
void attach_folder_files(Model& model, const fs::path& dir, const json::Value& c, const std::string& config_text,
                         const fs::path& config_path) {
  const fs::path generation_path = dir / "generation_config.json";
  const std::string generation_text =
      fs::exists(generation_path) ? config::read_file(generation_path.string(), limits::kHfConfigBytes) : "";
  if (auto* lm = dynamic_cast<CausalLM*>(&model)) {
    if (generation_text.empty()) {
      lm->generation_defaults = generation_defaults(c, false, config_path.string());
    } else {
      const json::Document g = json::Document::object(generation_text, generation_path.string());
      lm->generation_defaults = generation_defaults(g.root(), true, generation_path.string());
    }
  }
  if (auto* p = dynamic_cast<Pretrained*>(&model)) {
    p->config_json = config_text;
    p->generation_config_json = generation_text;
    for (const char* name :
         {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"})
      if (fs::is_regular_file(dir / name)) p->tokenizer_files.push_back((dir / name).string());
  }
}

// The checkpoint's tensors become the parameters: in the requested dtype, the mapped file's own memory
// (copy-on-write: pages are read when first used and copied when first written, as transformers' loading
// does); in another dtype, converted copies. A dispatched model keeps in memory ("cpu") a copy, and on the
// disk the mapped tensor (converted ones written to offload_folder and mapped from there), its pages given
// back after each use. Returns the disk offload (null when nothing went to the disk).
std::shared_ptr<bigmodel::DiskOffload> adopt_weights(Model& model, const std::map<std::string, at::Tensor>& weights,
                                                     const std::map<std::string, std::string>& placement,
                                                     const std::string& offload_folder) {
  std::shared_ptr<bigmodel::DiskOffload> disk;
  c10::NoGradGuard no_grad;
  const auto& root = dynamic_cast<NnModel&>(model).module();
  for (const auto& item : root->named_modules("", /*include_self=*/true)) {
    auto* init = dynamic_cast<InitModule*>(item.value().get());
    if (!init) continue;
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    init->adopt([&](const std::string& local, const at::Tensor& meta) {
      const std::string name = prefix + local;
      at::Tensor w = weights.at(name);
      const std::string device = placement.empty() ? "" : device_of(placement, name);
      if (device != "disk") {
        if (w.scalar_type() != meta.scalar_type()) w = w.to(meta.scalar_type());
        if (device.empty()) return w;
        if (device == "cpu") return w.clone();
        throw UnsupportedError("from_pretrained: the device map puts '" + name + "' on accelerator " + device +
                               ", and dispatch to accelerators is not in this build yet");
      }
      if (w.scalar_type() != meta.scalar_type()) {
        if (offload_folder.empty())
          throw std::invalid_argument("from_pretrained: '" + name +
                                      "' goes to the disk in another dtype than the "
                                      "checkpoint's: give an offload_folder for the converted weights");
        config::make_directories(offload_folder);
        const std::string file = config::child_path(offload_folder, name + ".safetensors", "an offload file");
        save_safetensors({{name, w.to(meta.scalar_type())}}, file);
        w = load_safetensors(file).front().second;
      }
      if (!disk) disk = std::make_shared<bigmodel::DiskOffload>();
      disk->add(bigmodel::offload_unit(name), w);
      return w;
    });
  }
  return disk;
}

}  // namespace

std::unique_ptr<Model> from_pretrained(const std::string& dir_arg, const char* options_json) {
  const fs::path dir(dir_arg);
  if (!fs::is_directory(dir)) throw std::ios_base::failure("from_pretrained: '" + dir_arg + "' is not a directory");
  const fs::path config_path = dir / "config.json";
  const std::string config_text = config::read_file(config_path.string(), limits::kHfConfigBytes);
  const json::Document config = json::Document::object(config_text, config_path.string());
  check_config(config_text, config_path.string());
  const json::Value c = config.root();
  const Options opts(options_json, "from_pretrained options",
                     {"dtype", "device_map", "max_memory", "no_split_module_classes", "offload_folder"});
  const at::ScalarType dtype = requested_dtype(opts, c, config_path.string());
  const std::string arch = architecture(c, config_path.string());
  // Built on the meta device: shapes and names, no storage until the weights are in hand.
  std::unique_ptr<Model> model = build(c, at::TensorOptions().dtype(dtype).device(at::kMeta), config_path.string());
  const bool tied = dynamic_cast<CausalLM*>(model.get()) && dynamic_cast<CausalLM*>(model.get())->ties_embeddings();

  // FSDP's cpu_ram_efficient_loading on a process that is not its machine's first: the checkpoint is checked
  // against the model (every process fails alike) but not read; prepare broadcasts rank 0's weights.
  const bool skip_weights = ram_efficient_loading() && !opts.has("device_map");
  // DeepSpeed ZeRO-3's zero.Init (runtime/process_state.hpp): checked now, each module's tensors read at prepare.
  const bool deferred = zero3_init() && !opts.has("device_map");
  std::map<std::string, std::string> file_of;
  std::map<std::string, at::Tensor> weights = read_weights(dir, !skip_weights && !deferred, &file_of);
  check_checkpoint_fits(*model, weights, file_of, tied, dir_arg, arch);
  attach_folder_files(*model, dir, c, config_text, config_path);
  if (deferred) {
    model->set_deferred(defer_loading(dynamic_cast<NnModel&>(*model).module(), file_of));
    model->train(false);
    return model;
  }
  if (skip_weights) {
    model->to_empty(c10::kCPU);  // transformers' torch.empty on these processes
    model->train(false);
    return model;
  }
  // With a device map (Accelerate's load_checkpoint_and_dispatch), every weight goes where the plan puts it.
  std::map<std::string, std::string> placement;
  if (opts.has("device_map")) placement = plan(*model, options_json);
  const std::shared_ptr<bigmodel::DiskOffload> disk =
      adopt_weights(*model, weights, placement, opts.get_string("offload_folder", ""));
  if (disk) {
    // Inference only: a weight written in place would be lost when its pages are given back.
    c10::NoGradGuard no_grad;
    for (auto& [name, t] : model->named_parameters())
      if (device_of(placement, name) == "disk") t.requires_grad_(false);
    auto* lm = dynamic_cast<CausalLM*>(model.get());
    if (!lm) throw UnsupportedError("from_pretrained: disk offload is for the causal language models");
    lm->offload = disk;
  }
  for (const auto& [name, t] : model->state())
    if (t.is_meta()) throw std::logic_error("from_pretrained: '" + name + "' was not loaded");
  model->train(false);
  return model;
}

}  // namespace acc::core::hf
