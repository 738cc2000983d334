// LoRA adapters as Hugging Face peft 0.21 defines them (tests/finetune/PEFT_NOTES.md): a LoraConfig read from JSON,
// peft's rules for which linear layers get an adapter, the adapted forward base(x) + B(A(dropout(x))) * scaling,
// what trains, the names of adapter_model.safetensors, and merge_and_unload. A linear layer takes an adapter through
// the Host below (hf::Linear, GPT-2's Conv1D, the built-in layers, the C++ API's acc::Linear); its lora_A and lora_B
// are submodules of the layer, so parameter names are peft's file keys without "base_model.model."
// ("model.layers.0.self_attn.q_proj.lora_A.weight") and the base weights keep theirs.
#pragma once
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/batch.hpp"
#include "models/layers.hpp"

namespace acc::core::lora {

// The file keys' prefix: PeftModel's base_model (LoraModel) and its model.
inline constexpr const char* kKeyPrefix = "base_model.model.";

// LoraConfig's fields libacc acts on (peft's defaults); the others must hold peft's defaults.
struct Config {
  enum class Kind { None, List, String };  // a JSON null, a list of names, or one string
  int64_t r = 8;
  double lora_alpha = 8;
  double lora_dropout = 0;
  Kind target_kind = Kind::None;            // String: a regular expression, or "all-linear" (any case)
  std::vector<std::string> target_modules;  // List: names or dotted suffixes; String: the one string
  Kind exclude_kind = Kind::None;
  std::vector<std::string> exclude_modules;
  bool fan_in_fan_out = false;
  std::string bias = "none";  // "none" | "all" | "lora_only"
  bool use_rslora = false;
  std::optional<std::vector<std::string>> modules_to_save;
  std::string init_lora_weights = "true";  // "true" | "gaussian" | "false"
  std::optional<std::vector<int64_t>> layers_to_transform;
  bool layers_to_transform_is_int = false;
  std::optional<std::vector<std::string>> layers_pattern;
  bool layers_pattern_is_string = false;
  std::vector<std::pair<std::string, int64_t>> rank_pattern;  // in the text's order: the first match wins
  std::vector<std::pair<std::string, double>> alpha_pattern;
  std::string task_type;  // "" for null
  std::optional<std::string> base_model_name_or_path, revision;
  bool inference_mode = false;
  // peft's parameter targets: libacc has those of transformers 5's Mixtral (gate_up_proj and down_proj, the fused
  // experts; gate.weight, the router), which peft makes from the expert and router names (see plan).
  std::vector<std::string> target_parameters;

  bool all_linear() const;
};

// Reads a LoraConfig's JSON (LoraConfig's keyword arguments, or an adapter_config.json). Every key must be one of
// LoraConfig's fields; an unknown key, a wrong type or a bad value (r <= 0, bias "some") is std::invalid_argument
// naming it; a field libacc does not implement set to other than its default (use_dora true) is UnsupportedError
// naming it. `source` names the text in messages. The text is read within the limits of a config file (nesting,
// keys per object, string values: acc/limits.hpp), its keys (rank_pattern's patterns) as long as a pattern; an
// error names the source and the key.
Config parse_config(std::string_view json, const std::string& source);

// A LoRA factor, nn.Linear without bias: lora_A (weight [r, in]) or lora_B (weight [out, r]). Re-initialised by
// reset_tree as peft's reset_lora_parameters does.
struct Factor : InitModule {
  Factor(int64_t rows, int64_t cols, bool is_a, std::string init, int64_t r, const at::TensorOptions& o);
  void reset() override;
  bool is_a;
  std::string init;
  int64_t r;
};

struct Adapter;

// One layer's adapter: lora_B(lora_A(dropout(x))) * scaling, added to the layer's output.
struct Branch {
  std::shared_ptr<Factor> A, B;
  double scaling = 1, dropout = 0;
  std::shared_ptr<const Adapter> adapter;  // the adapter it is part of
  // Fused experts (peft's parameter targets on a [E, out, in] parameter): A [E*r, in] is expert-major, B [out, r*E]
  // expert-minor; this layer is expert `expert`'s, rows [row0, row0 + rows) of the fused output. experts 0: none.
  int64_t experts = 0, expert = 0, row0 = 0, rows = 0;
  // This layer's A [r, in] and B [out, r] (views of the fused factors for an expert).
  std::pair<at::Tensor, at::Tensor> factors() const;
  at::Tensor add_to(const at::Tensor& x, const at::Tensor& y, bool training) const;
};

// What a linear layer that can take an adapter shows. Its forward ends with `return with_lora(x, y)`.
class Host {
 public:
  virtual ~Host() = default;
  virtual torch::nn::Module& host_module() = 0;  // lora_A and lora_B are registered under it
  virtual at::Tensor host_weight() = 0;          // [out, in], or [in, out] when fan_in_fan_out
  virtual bool fan_in_fan_out() const { return false; }  // transformers' Conv1D
  at::Tensor with_lora(const at::Tensor& x, at::Tensor y) {
    return branch ? branch->add_to(x, y, host_module().is_training()) : y;
  }
  std::shared_ptr<Branch> branch;
};

// Finds the Host of a module (nullptr: not a layer that takes an adapter). The default is a dynamic_cast; the C++
// API adds acc::Linear.
using HostOf = std::function<Host*(torch::nn::Module&)>;
Host* default_host_of(torch::nn::Module& m);

// What peft learns from the model besides its modules.
struct ModelInfo {
  bool transformers = false;     // a transformers model (PreTrainedModel): "all-linear" leaves out its output layer
  bool tied_lm_head = false;     // its lm_head is the input embedding (not a module of its own in libacc)
  std::string model_type;        // config.json's: target_modules' default per architecture
  std::string base_model_class;  // auto_mapping's, written when task_type is null
  std::string parent_library;
  std::optional<std::string> name_or_path;  // base_model_name_or_path's default
};

// A tensor of an adapter: its name in the model, its key in adapter_model.safetensors, its shape.
struct Entry {
  std::string name, key;
  std::vector<int64_t> shape;
};

// An adapter applied to a model: what the file needs and merge undoes. Shared by the layers' branches.
struct Adapter {
  // Where a layer's (or fused experts') lora_A and lora_B live, and the layers that use them.
  struct Target {
    std::string module;      // lora_A / lora_B are registered under it: the layer, or a container for fused experts
    std::string key_module;  // its name in the file when it differs (transformers 5's Mixtral names)
    int64_t r = 0;           // per expert
    double alpha = 0, scaling = 0;
    int64_t in = 0, out = 0;
    bool fan_in_fan_out = false;
    int64_t experts = 0;  // fused experts: A [E*r, in], B [out, r*E]; 0: one layer
    struct Use {
      std::string host;  // the layer
      int64_t expert = 0, row0 = 0, rows = 0;
    };
    std::vector<Use> uses;  // fused: the experts' layers and their slices
  };
  Config config;
  ModelInfo info;
  std::vector<Target> targets;            // module order
  std::vector<std::string> saved_modules;  // modules_to_save's matches: trained in place
  std::vector<Entry> entries;             // the tensors the file holds = the tensors that train
  std::vector<std::string> written_targets;  // target_modules as adapter_config.json lists them
};

// peft's inject_adapter without changing anything: the targets, the modules saved whole, the entries. An error
// names the culprit: nothing matched (listing the model's linear layers), a target that is not a linear layer
// (torch::nn::Linear: use acc::Linear), a model that has an adapter already. For Mixtral (info.model_type), the
// config is first rewritten as peft rewrites it for transformers 5 (the experts' and router's names become
// target_parameters: `config` as adapter_config.json then shows it).
std::shared_ptr<Adapter> plan(torch::nn::Module& root, const Config& config, const ModelInfo& info,
                              const HostOf& host_of = default_host_of);

// Adds the planned adapter: every parameter frozen, lora_A / lora_B registered and initialised as
// init_lora_weights says (`init` false: zeros, for a load to fill), the entries trainable when `trainable`. The factors
// live on their layer's device; `cpu_for_meta`: on the CPU for a layer on the meta device (a zero3_init_flag model's,
// whose own weights prepare makes: models/deferred.hpp), drawn now as for a model that holds its weights.
void apply(torch::nn::Module& root, const std::shared_ptr<Adapter>& adapter, bool init, bool trainable,
           const HostOf& host_of = default_host_of, bool cpu_for_meta = false);

// The model's adapter, or nullptr.
std::shared_ptr<Adapter> find(torch::nn::Module& root, const HostOf& host_of = default_host_of);

// merge_and_unload: W += B A * scaling per layer (transposed for fan_in_fan_out), lora_A / lora_B removed.
// The modules_to_save copies and trained biases are in place already. requires_grad stays as it is.
void merge(torch::nn::Module& root, const HostOf& host_of = default_host_of);

// adapter_config.json as PeftModel.save_pretrained writes it: every field, keys sorted, indent 2, inference_mode true.
std::string config_file_text(const Adapter& adapter);

// The adapter's tensors by file key, from the model's `state` (full tensors: a sharded model gathered), contiguous
// CPU copies.
NamedTensors file_tensors(const Adapter& adapter, const NamedTensors& state);

// Checks `tensors` (adapter_model.safetensors, read from `source`) against the entries: a key missing, one the
// adapter does not have, a shape or dtype that differs is std::invalid_argument naming it. Returns them by name in
// the model.
NamedTensors check_file_tensors(const Adapter& adapter, const NamedTensors& tensors, const std::string& source);

// peft nests two parameter targets of one module in target_parameters' (set) order, so which of a layer's fused
// experts is "experts" and which "experts.base_layer" in a file is read from the tensors' shapes.
void match_fused_keys(Adapter& adapter, const NamedTensors& tensors);

}  // namespace acc::core::lora
