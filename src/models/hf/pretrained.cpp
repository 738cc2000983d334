#include "models/hf/pretrained.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "checkpoint/safetensors.hpp"
#include "models/hf/families.hpp"
#include "util/errors.hpp"
#include "util/json.hpp"
#include "util/options.hpp"

namespace acc::core::hf {

namespace fs = std::filesystem;

namespace {

const char* const kDecoders[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "MixtralForCausalLM"};

std::string read_text(const fs::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::ios_base::failure("from_pretrained: " + what + " '" + path.string() + "' is missing or unreadable");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Tensors a checkpoint may hold that are not state: buffers older transformers versions saved (rotary
// frequencies, GPT-2's causal masks), and the head of a tied model saved with it.
bool ignorable(const std::string& name, bool tied) {
  auto ends = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends("rotary_emb.inv_freq") || ends(".attn.bias") || ends(".attn.masked_bias") ||
         (tied && name == "lm_head.weight");
}

// Every tensor of the checkpoint by name (views on the mapped files).
std::map<std::string, at::Tensor> read_weights(const fs::path& dir) {
  std::map<std::string, at::Tensor> out;
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  std::vector<std::string> files;
  std::map<std::string, std::string> expected_in;  // tensor -> shard, from the index
  if (fs::exists(single)) {
    files.push_back(single.string());
  } else if (fs::exists(index)) {
    Json doc(read_text(index, "index"), index.string());
    JsonValue map = doc.root().get("weight_map");
    std::set<std::string> shards;
    for (const std::string& name : map.keys()) {
      const std::string shard = map.get_string(name);
      if (shard.find('/') != std::string::npos)
        throw std::invalid_argument(index.string() + ": weight_map names a file outside the directory: '" + shard + "'");
      expected_in[name] = shard;
      shards.insert(shard);
    }
    for (const std::string& shard : shards) {
      if (!fs::exists(dir / shard))
        throw std::ios_base::failure("from_pretrained: shard '" + (dir / shard).string() + "', named by " +
                                     index.string() + ", is missing");
      files.push_back((dir / shard).string());
    }
  } else {
    throw std::ios_base::failure("from_pretrained: '" + dir.string() +
                                 "' has no model.safetensors and no model.safetensors.index.json");
  }
  for (const std::string& file : files)
    for (auto& [name, t] : load_safetensors(file)) {
      if (!out.emplace(name, t).second)
        throw std::invalid_argument("from_pretrained: tensor '" + name + "' is in more than one shard (" + file + ")");
      auto e = expected_in.find(name);
      if (!expected_in.empty() && (e == expected_in.end() || (dir / e->second).string() != file))
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

}  // namespace

std::string known_architectures() {
  std::string s;
  for (const char* a : kDecoders) s += (s.empty() ? "" : ", ") + std::string(a);
  return s;
}

std::unique_ptr<Model> from_pretrained(const std::string& dir_arg, const char* options_json) {
  Options opts(options_json, "from_pretrained options", {"dtype"});
  std::string dtype_name = opts.get_string("dtype", "auto", {"auto", "float32", "bfloat16", "float16"});
  const fs::path dir(dir_arg);
  if (!fs::is_directory(dir)) throw std::ios_base::failure("from_pretrained: '" + dir_arg + "' is not a directory");
  const fs::path config_path = dir / "config.json";
  Json config(read_text(config_path, "config"), config_path.string());
  const JsonValue c = config.root();
  // "auto", transformers 5's default: the dtype config.json records ("dtype", or "torch_dtype" before 5).
  if (dtype_name == "auto") dtype_name = c.get_string_or("dtype", c.get_string_or("torch_dtype", "float32"));
  const at::ScalarType dtype = dtype_name == "bfloat16"  ? at::kBFloat16
                               : dtype_name == "float16" ? at::kHalf
                               : dtype_name == "float32" ? at::kFloat
                                                         : throw std::invalid_argument(config_path.string() + ": dtype '" +
                                                                                       dtype_name + "' is not float32, bfloat16 or float16");
  if (!c.has_value("architectures") || c.get("architectures").size() == 0)
    throw std::invalid_argument(config_path.string() + ": no 'architectures' list naming the model class");
  const std::string arch = c.get("architectures").at(0).as_string();

  // Built on the meta device: shapes and names, no storage until the weights are in hand.
  const auto meta = at::TensorOptions().dtype(dtype).device(at::kMeta);
  std::unique_ptr<Model> model;
  for (const char* a : kDecoders)
    if (arch == a) model = make_decoder(c, arch, meta, config_path.string());
  if (!model)
    throw UnsupportedError(config_path.string() + ": architecture '" + arch + "' is not one libacc has (" +
                           known_architectures() + ")");
  const bool tied = dynamic_cast<CausalLM*>(model.get()) && dynamic_cast<CausalLM*>(model.get())->ties_embeddings();

  std::map<std::string, at::Tensor> weights = read_weights(dir);
  // Accelerate's strict loading: every problem at once.
  std::vector<std::string> missing, unexpected, mismatched;
  const NamedTensors state = model->state();
  std::set<std::string> known;
  for (const auto& [name, t] : state) {
    known.insert(name);
    auto w = weights.find(name);
    if (w == weights.end())
      missing.push_back(name);
    else if (!w->second.sizes().equals(t.sizes()))
      mismatched.push_back(name + " (" + c10::str(w->second.sizes()) + " in the checkpoint, " + c10::str(t.sizes()) +
                           " in the model)");
  }
  for (const auto& [name, t] : weights)
    if (!known.count(name) && !ignorable(name, tied)) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string what;
    if (!missing.empty()) what += "; missing: " + list(missing);
    if (!unexpected.empty()) what += "; unexpected: " + list(unexpected);
    if (!mismatched.empty()) what += "; mismatched shapes: " + list(mismatched);
    throw std::invalid_argument("from_pretrained: the checkpoint in '" + dir_arg + "' does not fit " + arch + ":" +
                                what.substr(1));
  }
  model->to_empty(c10::kCPU);
  {
    c10::NoGradGuard no_grad;
    for (auto& [name, t] : model->state()) t.copy_(weights.at(name));
  }
  model->train(false);
  return model;
}

}  // namespace acc::core::hf
