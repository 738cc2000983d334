#include "checkpoint/save_model.hpp"

#include <ATen/ATen.h>

#include <filesystem>
#include <functional>
#include <set>
#include <stdexcept>

#include "acc/files.hpp"
#include "acc/json.hpp"
#include "acc/limits.hpp"
#include "checkpoint/agree.hpp"
#include "formats/hf_weights.hpp"
#include "formats/safetensors.hpp"
#include "models/hf/families.hpp"
#include "parallel/strategy.hpp"
#include "train/accelerator.hpp"
#include "util/dtypes.hpp"

namespace fs = std::filesystem;

namespace acc::core {
namespace {

// The whole model on every process (a sharding strategy gathers: collective), then the main process writes the
// weights and what `more` adds.
void save_weights(PreparedModel& model, const char* what, const std::string& dir, const std::string& max_shard_size,
                  const std::function<void()>& more) {
  const int64_t max = parse_shard_size(max_shard_size.empty() ? "10GB" : max_shard_size);
  model.model->check_made(what);
  Accelerator* acc = model.owner.get();
  NamedTensors state = model.strategy ? model.strategy->full_state_dict() : model.model->state();
  if (model.pipeline) state = model.pipeline->whole_state(state);  // every stage's (collective over the pp group)
  const bool main = !acc || acc->state().rank == 0;
  agreed(acc, what, [&] {
    if (!main) return;
    write_model_files(state, dir, max);
    if (more) more();
  });
}

bool is_dtype_key(const std::string& key) { return key == "dtype" || key == "torch_dtype"; }

// A "dtype" or "torch_dtype" holding a string, at any depth.
bool holds_dtype(const json::Value& v) {
  if (v.is_object())
    for (const auto& [k, e] : v.items())
      if ((is_dtype_key(k) && e.is_string()) || holds_dtype(e)) return true;
  if (v.is_array())
    for (const auto& e : v.elements())
      if (holds_dtype(e)) return true;
  return false;
}

// `v` with every "dtype" or "torch_dtype" that holds a string set to `name` (each keeps its key).
void write_with_dtype(json::Writer& w, const json::Value& v, const std::string& name) {
  if (v.is_object()) {
    w.begin_object();
    for (const auto& [k, e] : v.items()) {
      w.key(k);
      if (is_dtype_key(k) && e.is_string()) w.value(name);
      else write_with_dtype(w, e, name);
    }
    w.end_object();
  } else if (v.is_array()) {
    w.begin_array();
    for (const auto& e : v.elements()) write_with_dtype(w, e, name);
    w.end_array();
  } else {
    w.value(v);
  }
}

// config.json as from_pretrained read it, with its dtype set to the weights' (transformers writes the dtype the
// model is in): each "dtype" or "torch_dtype" that holds a string, or else a "dtype" first in the object. Parsed and
// written again, never edited as text; the writer keeps integers and floats apart (0.0 stays 0.0), as transformers,
// which checks the types of its fields, needs.
std::string config_with_dtype(const std::string& text, at::ScalarType dtype) {
  const std::string name = float_dtype_name(dtype);
  const json::Document doc = json::Document::object(text, "save_pretrained: the model's config");
  const json::Value root = doc.root();
  json::Writer w(json::Writer::Layout::Indented, 2);
  if (holds_dtype(root)) {
    write_with_dtype(w, root, name);
  } else {
    w.begin_object().key("dtype").value(name);
    for (const auto& [k, e] : root.items()) {
      if (k == "dtype") continue;  // null: replaced
      w.key(k);
      write_with_dtype(w, e, name);
    }
    w.end_object();
  }
  return w.str() + "\n";
}

}  // namespace

void save_model(PreparedModel& model, const std::string& dir, const std::string& max_shard_size) {
  save_weights(model, "save_model", dir, max_shard_size, {});
}

void save_pretrained(PreparedModel& model, const std::string& dir, const std::string& max_shard_size) {
  const auto* p = dynamic_cast<const hf::Pretrained*>(model.model.get());
  if (!p || p->config_json.empty())
    throw std::invalid_argument("save_pretrained needs a model from from_pretrained (save_model writes the weights "
                                "of any model)");
  const NamedTensors params = model.model->named_parameters();
  const at::ScalarType dtype = params.empty() ? at::kFloat : params.front().second.scalar_type();
  save_weights(model, "save_pretrained", dir, max_shard_size, [&] {
    config::write_file_atomic((fs::path(dir) / "config.json").string(), config_with_dtype(p->config_json, dtype));
    if (!p->generation_config_json.empty())
      config::write_file_atomic((fs::path(dir) / "generation_config.json").string(), p->generation_config_json);
    // The tokenizer from_pretrained found beside the weights, byte for byte (never onto itself).
    for (const auto& from : p->tokenizer_files) {
      const fs::path to = fs::path(dir) / fs::path(from).filename();
      std::error_code ec;
      if (fs::equivalent(from, to, ec)) continue;
      config::write_file_atomic(to.string(), config::read_file(from, limits::kTokenizerJsonBytes));
    }
  });
}

namespace {
// The state lies in the strategy's shards (ZeRO-3 / FSDP, or float32 masters behind a mixed-precision policy).
bool sharded_now(const PreparedModel& model) { return model.strategy && !model.strategy->state_in_model(); }
}  // namespace

at::Tensor state_tensor(const PreparedModel& model, const std::string& name) {
  if (!sharded_now(model)) {
    model.model->check_made("reading '" + name + "'");
    for (const auto& [n, t] : model.model->state())
      if (n == name) return t.detach();
    throw std::invalid_argument("the model has no tensor '" + name + "'");
  }
  const std::set<std::string> only{name};
  NamedTensors one = model.strategy->full_state_dict(&only);
  if (one.empty()) throw std::invalid_argument("the model has no tensor '" + name + "'");
  return one.front().second;
}

void save_state_file(const PreparedModel& model, const std::string& path) {
  model.model->check_made("saving " + path);
  if (!sharded_now(model)) return save_safetensors(model.model->state(), path, {{"format", "pt"}});
  Accelerator* acc = model.owner.get();
  const NamedTensors state = model.strategy->full_state_dict();
  agreed(acc, "save_safetensors", [&] {
    if (acc->state().rank == 0) save_safetensors(state, path, {{"format", "pt"}});
  });
}

void load_state_file(PreparedModel& model, const std::string& path) {
  if (!sharded_now(model)) return model.model->load_state_dict(load_safetensors(path), path);
  model.strategy->load_full_state_dict(load_safetensors(path), path);
}

}  // namespace acc::core
