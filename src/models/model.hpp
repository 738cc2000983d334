// Models as the core sees them: module trees (named submodules, dotted parameter and buffer names,
// train/eval) with a forward over a named batch. Two kinds share this interface: torch::nn::Module
// trees (the built-in families, and a C++ user's own modules through acc/torch.hpp) and TorchScript
// modules. Wrap policies, device maps and checkpoints address modules by their dotted names.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "data/batch.hpp"
#include "models/module_tree.hpp"
#include "models/placement.hpp"

namespace torch::nn {
class Module;
}

namespace acc::core {

class DeferredParameters;

// Told about the forward of a model's blocks, one at a time: a sharded strategy gathers a block's parameters
// before it and frees them after (FSDP's units).
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // `input`: what the block is given (a hook may register on it to learn when backward is done with the block).
  virtual void before_unit(const std::string& name, const at::Tensor& input) = 0;
  // `output`: what the block returned (a hook may register on it to learn when backward reaches the block).
  virtual void after_unit(const std::string& name, const at::Tensor& output) = 0;
  // The model's head (what follows the blocks: final norm, language-model head) ran from `input` to `output`. Its
  // backward, from `output` to `input`, is the last to read the root's parameters: what precedes the blocks reads
  // none in backward (an embedding lookup's gradient needs only the token ids).
  virtual void after_head(const at::Tensor& input, const at::Tensor& output) = 0;
};

// One block's forward: its input to its output. Captures what it uses by value: with activation checkpointing,
// backward calls it again after the model's forward has returned.
using UnitBody = std::function<at::Tensor(const at::Tensor&)>;

// Whether a loaded tensor of dtype `from` may become a model tensor of dtype `to` by conversion: floating point into
// floating point (transformers loads bf16 into fp32 and back), an integer into an integer. An integer or bool into
// floating point, or floating point into an integer, would turn the file's values into other numbers: refused.
bool dtype_converts(at::ScalarType from, at::ScalarType to);
// Throws std::invalid_argument naming the tensor, `source` and both dtypes when `given` cannot become `target`'s.
void check_dtype_converts(const std::string& name, const at::Tensor& given, const at::Tensor& target,
                          const std::string& source);

class Model {
 public:
  virtual ~Model() = default;
  // The dotted names of the blocks whose forward the model reports to unit hooks (none by default).
  virtual std::vector<std::string> reported_units() const { return {}; }
  void set_unit_hooks(UnitHooks* hooks) { unit_hooks_ = hooks; }
  // FSDP's activation_checkpointing: the reported units keep no activations in forward; backward recomputes them
  // (models/activation_checkpointing.cpp). Only models that report units have blocks to recompute. `offload`
  // (activation_checkpointing_offload): the input each block keeps for its recomputation waits in CPU memory
  // (pinned) while it is not needed, as Accelerate's offload_wrapper does; on a CPU it stays where it is.
  void set_activation_checkpointing(bool on, bool offload = false) {
    checkpoint_units_ = on;
    offload_checkpoints_ = on && offload;
  }
  bool activation_checkpointing() const { return checkpoint_units_; }
  // Recursive, dotted names ("transformer.h.0.attn.c_attn.weight"), in definition order.
  virtual NamedTensors named_parameters() const = 0;
  virtual NamedTensors named_buffers() const = 0;
  // Every submodule's dotted name, the root first as "" (torch's named_modules).
  virtual std::vector<std::string> module_names() const = 0;
  virtual void train(bool on) = 0;
  virtual bool is_training() const = 0;
  // Named inputs to named outputs: "logits" (or "output") and, when the batch holds targets, "loss".
  // A module without a named forward (a C++ user's own: they call its forward) throws UnsupportedError.
  virtual TensorDict forward(const TensorDict& batch);
  // What the two-tensor calls (acc_model_forward(input, targets)) are named in a batch.
  virtual std::string input_name() const { return "input"; }
  virtual std::string target_name() const { return "targets"; }
  // Initialises the parameters again as at construction (built-in families); meta tensors stay meta.
  virtual void reset_parameters();
  // transformers' _no_split_modules: the classes device maps keep whole and FSDP wraps by default
  // ("LlamaDecoderLayer"); none by default.
  virtual std::vector<std::string> no_split_modules() const { return {}; }
  // The input embedding's parameter that the language-model head shares (transformers' tie_word_embeddings:
  // "model.embed_tokens.weight"), so that the module tree shows "lm_head" as a module of its own as nn.Module
  // trees do; "" when the model has no tied head.
  virtual std::string tied_lm_head() const { return ""; }
  // The modules transformers' model has and this one leaves out as they hold no weights (module_tree.hpp), in
  // named_modules order; none by default.
  virtual std::vector<WeightlessModule> weightless_modules() const { return {}; }

  // Moves parameters and buffers in place: tensor identities (held by optimizers) survive.
  void to(const c10::Device& device);
  // torch's Module.to_empty: every tensor on the meta device gets new, uninitialised storage on
  // `device` (new tensors: materialise before an optimizer holds them). The built-in families can.
  virtual void to_empty(const c10::Device& device);
  NamedTensors state() const;  // parameters, then buffers
  // Copies `tensors` into the state: every name and shape must match, every dtype convert (dtype_converts), and
  // nothing changes when one does not. `source` names where they came from in errors (a file).
  void load_state_dict(const NamedTensors& tensors, const std::string& source);
  int64_t num_parameters() const;
  // The parameters an optimizer trains: those requiring gradients, each tensor once (under its first name).
  NamedTensors trainable_parameters() const;
  // The same tensors without their names: what an optimizer is built over (the one place that selects them).
  std::vector<at::Tensor> trainable_tensors() const;
  // torch's requires_grad_ on every parameter whose whole dotted name the regular expression `pattern` (RE2:
  // util/pattern.hpp) matches (a tied weight when any of its names does). Returns how many tensors matched;
  // std::invalid_argument naming the pattern when RE2 refuses it or it matches nothing (nothing changes then).
  int64_t set_requires_grad(const std::string& pattern, bool on);

  // ZeRO-3's zero3_init_flag: the parameters are on the meta device until prepare makes them (models/deferred.hpp);
  // null for a model that holds its tensors.
  const std::shared_ptr<DeferredParameters>& deferred() const { return deferred_; }
  void set_deferred(std::shared_ptr<DeferredParameters> d) { deferred_ = std::move(d); }
  // Throws StateError naming `what` while the parameters wait for prepare to make them.
  void check_made(const std::string& what) const;

  // Where each parameter lives across the process mesh (models/placement.hpp): written by the mechanisms that split or
  // shard it, read by everything that needs whole tensors.
  const Placements& placements() const { return placements_; }
  Placements& placements() { return placements_; }

 protected:
  // "prefix0", "prefix1", ...: a ModuleList of blocks' names.
  static std::vector<std::string> numbered_units(const std::string& prefix, int64_t count) {
    std::vector<std::string> v;
    for (int64_t i = 0; i < count; ++i) v.push_back(prefix + std::to_string(i));
    return v;
  }
  // Runs the block `name` on x, telling the unit hooks before and after; with activation checkpointing (and grad
  // mode on), without keeping its activations.
  at::Tensor run_unit(const std::string& name, const at::Tensor& x, const UnitBody& body) const;
  // Runs the head on the last block's output, telling the unit hooks. Only for a model whose layers before the
  // first block read no parameter in backward (UnitHooks::after_head).
  at::Tensor run_head(const at::Tensor& x, const UnitBody& body) const;

 private:
  UnitHooks* unit_hooks_ = nullptr;
  std::shared_ptr<DeferredParameters> deferred_;
  Placements placements_;
  bool checkpoint_units_ = false;
  bool offload_checkpoints_ = false;
};

// Any torch::nn::Module tree.
class NnModel : public Model {
 public:
  explicit NnModel(std::shared_ptr<torch::nn::Module> module);
  const std::shared_ptr<torch::nn::Module>& module() const { return module_; }
  NamedTensors named_parameters() const override;
  NamedTensors named_buffers() const override;
  std::vector<std::string> module_names() const override;
  void train(bool on) override;
  bool is_training() const override;

 protected:
  std::shared_ptr<torch::nn::Module> module_;
};

// {"type": "mlp" | "gpt", ...}: see acc.h. Throws OptionsError naming the bad key. With device meta the
// parameters have shapes but no storage (to_empty + reset_parameters materialises them).
std::unique_ptr<Model> make_builtin_model(const char* spec_json, c10::Device device = c10::kCPU);
std::unique_ptr<Model> load_torchscript_model(const std::string& path, const char* options_json);

// The loss named in a spec: "mse", "cross_entropy" (targets equal to ignore_index are skipped) or "none".
at::Tensor compute_loss(const std::string& kind, const at::Tensor& output, const at::Tensor& targets,
                        int64_t ignore_index = -1);

}  // namespace acc::core
