// GPT-2 as transformers' modeling_gpt2 defines it (GPT2LMHeadModel): learned positions, pre-LayerNorm blocks, Conv1D
// layers (weights stored [in, out]), the head tied to the token embedding. One implementation, two configurations:
// the built-in "gpt" (models/builtin.cpp: nanoGPT's model) and GPT2LMHeadModel from a config.json
// (models/hf/gpt2.cpp); where they differ, Gpt2Config says.
#pragma once
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "models/attention.hpp"
#include "models/layers.hpp"
#include "models/model.hpp"
#include "models/parallel_forward.hpp"
#include "models/pipeline_stages.hpp"
#include "models/transformer_layers.hpp"

namespace acc::core {

// GPT2Config's fields (config.json's names) and what the built-in sets.
struct Gpt2Config {
  std::string name;  // the model in errors: "gpt" (built-in), "GPT2LMHeadModel"
  int64_t vocab_size = 0, n_positions = 0, n_embd = 0, n_layer = 0, n_head = 0, n_inner = 0;  // built-in: 4 n_embd
  double layer_norm_epsilon = 1e-5, initializer_range = 0.02;
  double embd_pdrop = 0.1, attn_pdrop = 0.1, resid_pdrop = 0.1;  // built-in: its one "dropout"
  std::string activation_function = "gelu_new";                 // activation(); built-in: "gelu" (exact)
  bool scale_attn_weights = true, scale_attn_by_inverse_layer_idx = false;
  bool bias = true;  // the Conv1D layers' and layer norms' biases (built-in: "bias"; transformers has them)
  bool fp8 = false;  // the Conv1D layers through model_linear: FP8 GEMMs under mixed_precision "fp8" (built-in)
};

// The module tree, with transformers' class names (FSDP's TRANSFORMER_BASED_WRAP and device maps name classes).
// (Named, not anonymous: the core is compiled in unity units.)
namespace gpt2 {

using torch::nn::Module;

struct Attention : Module {  // GPT2Attention
  Attention(const Gpt2Config& c, double proj_std, const at::TensorOptions& o);
  std::shared_ptr<Conv1D> c_attn, c_proj;
};

struct Mlp : Module {  // GPT2MLP
  Mlp(const Gpt2Config& c, double proj_std, const at::TensorOptions& o);
  std::shared_ptr<Conv1D> c_fc, c_proj;
};

struct Block : Module {  // GPT2Block
  Block(const Gpt2Config& c, double proj_std, const at::TensorOptions& o);
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<Mlp> mlp;
};

struct Transformer : Module {  // GPT2Model
  Transformer(const Gpt2Config& c, const at::TensorOptions& o);
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<ModuleList<Block>> h;
  std::shared_ptr<LayerNorm> ln_f;
};

}  // namespace gpt2

// GPT2LMHeadModel's tree: "transformer" (wte, wpe, h.N, ln_f) and a head tied to wte (so not a parameter of its own,
// as in Hugging Face's named_parameters). Parameters are made with `options` (dtype, device) and left uninitialised:
// reset_parameters draws them (normal(0, initializer_range), the residual projections' c_proj scaled by
// 1/sqrt(2 n_layer), zero biases, unit norms) in definition order. Each family adds its named forward.
class Gpt2 : public NnModel, public Parallelizable, public PipelineStages {
 public:
  Gpt2(Gpt2Config c, const at::TensorOptions& options);
  const Gpt2Config& config() const { return c_; }
  std::vector<std::string> reported_units() const override { return numbered_units("transformer.h.", c_.n_layer); }
  void reset_parameters() override;
  void to_empty(const c10::Device& device) override;
  std::string input_name() const override { return "input_ids"; }
  // transformers has no plan for GPT-2; this is Megatron's for its layout: c_attn column-wise with q, k and v packed
  // (each rank takes its heads of each), c_fc column-wise, both c_proj row-wise, wte (and so the tied head)
  // vocabulary-parallel; wpe and the layer norms whole.
  TensorParallelPlan tensor_parallel_plan(int parts) const override;
  AttentionHeads attention_heads() const override { return {{"n_head", c_.n_head}, {"n_head", c_.n_head}}; }
  // Pipeline stages: the embeddings (wte, wpe), the blocks transformer.h.N, then ln_f and the head tied to wte.
  int64_t num_blocks() const override { return c_.n_layer; }
  std::vector<std::string> first_modules() const override { return {"transformer.wte", "transformer.wpe"}; }
  std::string block_module(int64_t i) const override { return "transformer.h." + std::to_string(i); }
  std::vector<std::string> last_modules() const override { return {"transformer.ln_f", "transformer.wte"}; }

 protected:
  // The forward, in two steps around the family's masks. `embeddings`: wte(ids) + wpe(positions), dropped out; ids
  // and positions [batch or 1, time] are this rank's (ForwardSplit::local_positions, SequenceSplit::local).
  at::Tensor embeddings(const at::Tensor& ids, const at::Tensor& positions) const;
  // The blocks and the tied head on the embeddings of B sequences of T tokens (this rank's, under context
  // parallelism: `seq`): logits [B, T, vocab] (this rank's slice of the vocabulary under tensor parallelism).
  // Attention goes through `seq` where the sequence is split, through `masking` otherwise; a `cache` gets each
  // block's keys and values (generation; its length is the caller's to advance).
  at::Tensor blocks_and_head(const at::Tensor& x, int64_t B, int64_t T, const std::shared_ptr<SequenceSplit>& seq,
                             const Masking& masking, KvCache* cache) const;
  // Its two steps, for pipeline stages: blocks [begin, end), then ln_f and the tied head.
  at::Tensor blocks(const at::Tensor& x, int64_t B, int64_t T, const std::shared_ptr<SequenceSplit>& seq,
                    const Masking& masking, KvCache* cache, int64_t begin, int64_t end) const;
  at::Tensor head(const at::Tensor& x) const;
  // A stage's forward refuses a sequence split (context or sequence parallelism): std::invalid_argument naming the
  // model.
  void check_no_sequence_split(int64_t length) const;
  // Called when the forward is done with a unit's weights ("transformer.wte", "transformer.h.0", ...): disk offload
  // releases them (models/hf/families.hpp's CausalLM).
  virtual void release_unit(const std::string& unit) const { (void)unit; }

  Gpt2Config c_;
  std::shared_ptr<gpt2::Transformer> t_;
};

}  // namespace acc::core
