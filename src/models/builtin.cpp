// The built-in families as torch::nn::Module trees: an MLP (torch.nn.Linear layers) and nanoGPT's GPT, a
// configuration of GPT-2 (models/gpt2.hpp: Hugging Face GPT-2's module names and Conv1D layout, so its state dict
// reads like GPT2LMHeadModel's, "transformer.h.0.attn.c_attn.weight" of shape [n_embd, 3 n_embd]). GPT-2 itself is
// here too, the one implementation that models/hf/gpt2.cpp configures from a config.json.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>

#include "models/gpt2.hpp"
#include "models/layers.hpp"
#include "models/lora.hpp"
#include "models/model.hpp"
#include "models/parallel_forward.hpp"
#include "models/transformer_layers.hpp"
#include "precision/fp8.hpp"
#include <acc/builtin_models.hpp>

namespace acc::core {

namespace {

using torch::nn::Module;

at::TensorOptions float_on(c10::Device d) { return at::TensorOptions().dtype(at::kFloat).device(d); }

// torch.nn.Linear: y = x W^T + b, W [out, in]; uniform(+-1/sqrt(in)) as Linear's default init. Takes a LoRA
// adapter (models/lora.hpp), as the Conv1D below.
struct Linear : InitModule, lora::Host {
  Linear(int64_t in, int64_t out, c10::Device d) : in_(in) {
    register_parameter("weight", at::empty({out, in}, float_on(d)));
    register_parameter("bias", at::empty({out}, float_on(d)));
  }
  void reset() override {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
    param("weight").uniform_(-bound, bound);
    param("bias").uniform_(-bound, bound);
  }
  at::Tensor forward(const at::Tensor& x) { return with_lora(x, model_linear(x, param("weight"), param("bias"))); }
  torch::nn::Module& host_module() override { return *this; }
  at::Tensor host_weight() override { return param("weight"); }
  int64_t in_;
};

void reject_unknown(const TensorDict& batch, const char* model, std::initializer_list<const char*> known) {
  for (const auto& [name, t] : batch.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || name == k;
    if (ok) continue;
    std::string list;
    for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    throw std::invalid_argument(std::string(model) + " forward: unexpected batch entry '" + name + "' (it takes " +
                                list + ")");
  }
}

// Linear layers with an activation between them: "layers.0", "layers.1", ...
class Mlp final : public NnModel {
 public:
  Mlp(const config::MlpSpec& spec, c10::Device d)
      : NnModel(std::make_shared<Module>("Mlp")), sizes_(spec.sizes), activation_(spec.activation), loss_(spec.loss) {
    layers_ = module_->register_module("layers", std::make_shared<ModuleList<Linear>>());
    for (size_t i = 0; i + 1 < sizes_.size(); ++i) layers_->add(std::make_shared<Linear>(sizes_[i], sizes_[i + 1], d));
    reset_parameters();
  }
  void reset_parameters() override { reset_tree(*module_); }
  void to_empty(const c10::Device& device) override { materialize_tree(*module_, device); }
  TensorDict forward(const TensorDict& batch) override {
    reject_unknown(batch, "mlp", {"input", "targets"});
    const at::Tensor& input = batch.at("input");
    if (input.dim() < 1 || input.size(-1) != sizes_.front())
      throw std::invalid_argument("mlp forward: input's last dimension must be " + std::to_string(sizes_.front()) +
                                  "; got shape " + c10::str(input.sizes()));
    at::Tensor x = input.to(layers_->items[0]->param("weight").scalar_type());
    for (size_t i = 0; i < layers_->items.size(); ++i) {
      x = layers_->items[i]->forward(x);
      if (i + 1 < layers_->items.size()) x = activation(activation_, x);
    }
    TensorDict out{{"output", x}};
    if (at::Tensor t = batch.get("targets"); t.defined()) out.set("loss", compute_loss(loss_, x, t));
    return out;
  }

 private:
  std::vector<int64_t> sizes_;
  std::string activation_, loss_;
  std::shared_ptr<ModuleList<Linear>> layers_;
};

// nanoGPT's GPT: GPT-2 with nanoGPT's choices (its spec's optional biases, exact gelu, one dropout, Conv1D layers that
// run FP8 GEMMs under mixed_precision "fp8"), initialised at construction (on the meta device too: no draws there).
Gpt2Config gpt_config(const config::GptSpec& s) {
  Gpt2Config c;
  c.name = "gpt";
  c.vocab_size = s.vocab_size, c.n_positions = s.block_size, c.n_embd = s.n_embd, c.n_layer = s.n_layer;
  c.n_head = s.n_head, c.n_inner = 4 * s.n_embd;
  c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = s.dropout;
  c.activation_function = "gelu";
  c.bias = s.bias;
  c.fp8 = true;
  return c;
}

class Gpt final : public Gpt2 {
 public:
  Gpt(const config::GptSpec& s, c10::Device d) : Gpt2(gpt_config(s), float_on(d)) { reset_parameters(); }

  // input_ids [batch, time]; targets: the next token of each position (nanoGPT style, -1 ignored);
  // labels: Hugging Face's, shifted inside (-100 ignored). Outputs logits and, with either, loss.
  TensorDict forward(const TensorDict& batch) override {
    const at::Tensor& input = checked_input(batch);
    const int64_t B = input.size(0), whole = input.size(1);
    // Context parallelism: this rank's tokens of the sequence, at their own positions.
    const ForwardSplit& parallel = forward_split();
    const std::shared_ptr<SequenceSplit> seq = parallel.split_sequence(whole, false, "gpt");
    const int64_t T = seq ? seq->local_length() : whole;
    parallel.check_length(T, false, "gpt");
    at::Tensor idx = input.to(at::kLong);
    // With sequence or context parallelism the embeddings are this rank's tokens'.
    at::Tensor pos = at::arange(whole, idx.options()).unsqueeze(0);
    if (seq) idx = seq->local(idx), pos = seq->local(pos);
    else pos = parallel.local_positions(pos);
    const at::Tensor x = embeddings(idx, pos);
    if (seq) seq->set_masks(at::Tensor(), 0, x.options());
    // Causal attention, every key present (SDPA's is_causal).
    const at::Tensor logits = blocks_and_head(x, B, T, seq, Masking{at::Tensor(), true, at::Tensor()}, nullptr);
    // Under tensor parallelism the loss reads this rank's vocabulary slice; the logits given back are whole.
    TensorDict out{{"logits", parallel.whole_logits(logits)}};
    if (at::Tensor l = loss(logits, batch, seq.get()); l.defined()) out.set("loss", l);
    return out;
  }

  // A pipeline stage's part of forward on one micro-batch (models/pipeline_stages.hpp).
  at::Tensor stage_forward(const TensorDict& batch, const at::Tensor& x, const StageLayers& layers) override {
    const at::Tensor& input = checked_input(batch);
    const int64_t B = input.size(0), T = input.size(1);
    check_no_sequence_split(T);
    const ForwardSplit& parallel = forward_split();
    parallel.check_length(T, false, "gpt");
    at::Tensor h = x;
    if (layers.first)
      h = embeddings(input.to(at::kLong),
                     parallel.local_positions(at::arange(T, input.options().dtype(at::kLong)).unsqueeze(0)));
    h = blocks(h, B, T, nullptr, Masking{at::Tensor(), true, at::Tensor()}, nullptr, layers.begin, layers.end);
    if (!layers.last) return h;
    const at::Tensor logits = head(h);
    const at::Tensor l = loss(logits, batch, nullptr);
    return l.defined() ? l : logits;  // pipelined inference: no targets
  }

 private:
  // The batch's input_ids, checked (the entries, the shape, the length).
  const at::Tensor& checked_input(const TensorDict& batch) const {
    reject_unknown(batch, "gpt", {"input_ids", "targets", "labels"});
    const at::Tensor& input = batch.at("input_ids");
    if (input.dim() != 2 || at::isFloatingType(input.scalar_type()))
      throw std::invalid_argument("gpt forward: input_ids must be integer token ids of shape [batch, time]; got " +
                                  c10::str(input.scalar_type()) + " " + c10::str(input.sizes()));
    if (input.size(1) > c_.n_positions)
      throw std::invalid_argument("gpt forward: sequence length " + std::to_string(input.size(1)) +
                                  " exceeds block_size " + std::to_string(c_.n_positions));
    return input;
  }

  // The loss of `logits` against the batch's targets or labels (undefined without either). With a sequence split,
  // the targets are this rank's tokens' and the loss the whole sequence's token mean.
  at::Tensor loss(const at::Tensor& logits, const TensorDict& batch, SequenceSplit* seq) const {
    const ForwardSplit& parallel = forward_split();
    const at::Tensor& input = batch.at("input_ids");
    const int64_t T = logits.size(1);
    if (at::Tensor t = batch.get("targets"); t.defined()) {
      if (t.sizes() != input.sizes())
        throw std::invalid_argument("gpt forward: targets shape " + c10::str(t.sizes()) + " differs from input_ids " +
                                    c10::str(input.sizes()));
      return parallel.cross_entropy(logits, seq ? seq->local(t) : t, -1, seq);
    }
    at::Tensor l = batch.get("labels");
    if (!l.defined()) return at::Tensor();
    if (l.sizes() != input.sizes())
      throw std::invalid_argument("gpt forward: labels shape " + c10::str(l.sizes()) + " differs from input_ids " +
                                  c10::str(input.sizes()));
    if (seq) return parallel.cross_entropy(logits, seq->next_token_labels(l, -100), -100, seq);
    return parallel.cross_entropy(logits.narrow(1, 0, T - 1), l.narrow(1, 1, T - 1), -100, nullptr);
  }
};

}  // namespace

namespace gpt2 {

Attention::Attention(const Gpt2Config& c, double proj_std, const at::TensorOptions& o) : Module("GPT2Attention") {
  const double std = c.initializer_range;
  c_attn = register_module("c_attn", std::make_shared<Conv1D>(c.n_embd, 3 * c.n_embd, c.bias, std, c.fp8, o));
  c_proj = register_module("c_proj", std::make_shared<Conv1D>(c.n_embd, c.n_embd, c.bias, proj_std, c.fp8, o));
}

Mlp::Mlp(const Gpt2Config& c, double proj_std, const at::TensorOptions& o) : Module("GPT2MLP") {
  const double std = c.initializer_range;
  c_fc = register_module("c_fc", std::make_shared<Conv1D>(c.n_embd, c.n_inner, c.bias, std, c.fp8, o));
  c_proj = register_module("c_proj", std::make_shared<Conv1D>(c.n_inner, c.n_embd, c.bias, proj_std, c.fp8, o));
}

Block::Block(const Gpt2Config& c, double proj_std, const at::TensorOptions& o) : Module("GPT2Block") {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon, o, c.bias));
  attn = register_module("attn", std::make_shared<Attention>(c, proj_std, o));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon, o, c.bias));
  mlp = register_module("mlp", std::make_shared<Mlp>(c, proj_std, o));
}

Transformer::Transformer(const Gpt2Config& c, const at::TensorOptions& o) : Module("GPT2Model") {
  // GPT-2's scheme: residual projections scaled by 1/sqrt(2 n_layer).
  const double std = c.initializer_range, proj_std = std / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, std, o));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.n_positions, c.n_embd, std, o));
  h = register_module("h", std::make_shared<ModuleList<Block>>());
  for (int64_t l = 0; l < c.n_layer; ++l) h->add(std::make_shared<Block>(c, proj_std, o));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_epsilon, o, c.bias));
}

}  // namespace gpt2

Gpt2::Gpt2(Gpt2Config c, const at::TensorOptions& options)
    : NnModel(std::make_shared<torch::nn::Module>("GPT2LMHeadModel")), c_(std::move(c)) {
  t_ = module_->register_module("transformer", std::make_shared<gpt2::Transformer>(c_, options));
}

void Gpt2::reset_parameters() { reset_tree(*module_); }

void Gpt2::to_empty(const c10::Device& device) { materialize_tree(*module_, device); }

TensorParallelPlan Gpt2::tensor_parallel_plan(int parts) const {
  check_divides(parts, c_.name, {{"n_head", c_.n_head}, {"n_inner", c_.n_inner}, {"vocab_size", c_.vocab_size}});
  return {{"transformer.wte", LayerStyle::VocabEmbedding},
          {"transformer.h.*.attn.c_attn", LayerStyle::Colwise, 3},
          {"transformer.h.*.attn.c_proj", LayerStyle::Rowwise},
          {"transformer.h.*.mlp.c_fc", LayerStyle::Colwise},
          {"transformer.h.*.mlp.c_proj", LayerStyle::Rowwise}};
}

at::Tensor Gpt2::embeddings(const at::Tensor& ids, const at::Tensor& positions) const {
  at::Tensor x =
      at::dropout(t_->wte->forward(ids) + t_->wpe->forward(positions), c_.embd_pdrop, module_->is_training());
  release_unit("transformer.wte");
  release_unit("transformer.wpe");
  return x;
}

at::Tensor Gpt2::blocks_and_head(const at::Tensor& embedded, int64_t B, int64_t T,
                                 const std::shared_ptr<SequenceSplit>& seq, const Masking& masking,
                                 KvCache* cache) const {
  return head(blocks(embedded, B, T, seq, masking, cache, 0, c_.n_layer));
}

void Gpt2::check_no_sequence_split(int64_t length) const {
  if (forward_split().split_sequence(length, false, c_.name))
    throw std::invalid_argument(c_.name + ": pipeline stages with context or sequence parallelism are not something "
                                          "libacc has");
}

at::Tensor Gpt2::blocks(const at::Tensor& embedded, int64_t B, int64_t T, const std::shared_ptr<SequenceSplit>& seq,
                        const Masking& masking, KvCache* cache, int64_t begin, int64_t end) const {
  const ForwardSplit& parallel = forward_split();
  // Tensor parallelism: this rank's heads, and its slice of the vocabulary in the logits.
  const int64_t parts = parallel.parts(), hd = c_.n_embd / c_.n_head;
  const bool train = module_->is_training();
  at::Tensor x = embedded;
  for (int64_t l = begin; l < end; ++l) {
    const std::string unit = "transformer.h." + std::to_string(l);
    double scale = c_.scale_attn_weights ? 1.0 / std::sqrt(static_cast<double>(hd)) : 1.0;
    if (c_.scale_attn_by_inverse_layer_idx) scale /= static_cast<double>(l + 1);
    // (A cache is used only by generate, without grad: then the block runs once.)
    x = run_unit(unit, x,
                 [b = t_->h->items[l], l, B, T, C = c_.n_embd / parts, hd, scale, heads = c_.n_head / parts, masking,
                  seq, cache, train, &parallel, attn_pdrop = c_.attn_pdrop, resid_pdrop = c_.resid_pdrop,
                  act = c_.activation_function](at::Tensor x) {
                   auto entered = [&parallel](const at::Tensor& h) { return parallel.enter_region(h); };
                   auto qkv = b->attn->c_attn->forward(entered(b->ln_1->forward(x))).split(C, 2);
                   auto split = [&](const at::Tensor& t) { return t.view({B, T, heads, hd}).transpose(1, 2); };
                   at::Tensor q = split(qkv[0]), k = split(qkv[1]), v = split(qkv[2]);
                   if (cache) std::tie(k, v) = cache->append(static_cast<size_t>(l), k, v);
                   at::Tensor y = seq ? seq->attention(q, k, v, train ? attn_pdrop : 0.0, scale)
                                      : masking.attention(q, k, v, train ? attn_pdrop : 0.0, scale, false);
                   y = b->attn->c_proj->forward(y.transpose(1, 2).reshape({B, T, C}));
                   x = x + at::dropout(y, resid_pdrop, train);
                   at::Tensor m =
                       b->mlp->c_proj->forward(activation(act, b->mlp->c_fc->forward(entered(b->ln_2->forward(x)))));
                   return x + at::dropout(m, resid_pdrop, train);
                 });
    release_unit(unit);
  }
  return x;
}

at::Tensor Gpt2::head(const at::Tensor& x) const {
  const ForwardSplit& parallel = forward_split();
  return run_head(x, [this, &parallel](const at::Tensor& x) {
    at::Tensor h = t_->ln_f->forward(x);
    release_unit("transformer.ln_f");
    h = parallel.enter_region(h);  // the tied head is split by vocabulary: column-wise
    at::Tensor logits = at::linear(h, t_->wte->param("weight"));
    release_unit("transformer.wte");
    return logits;
  });
}

at::Tensor compute_loss(const std::string& kind, const at::Tensor& output, const at::Tensor& targets,
                        int64_t ignore_index) {
  if (kind == "mse") {
    if (output.sizes() != targets.sizes())
      throw std::invalid_argument("mse loss: targets shape " + c10::str(targets.sizes()) +
                                  " differs from output shape " + c10::str(output.sizes()));
    return at::mse_loss(output, targets.to(output.scalar_type()));
  }
  if (kind == "cross_entropy") {
    // Class scores [N, C] (or [..., C]) against integer classes [N] (or [...]).
    auto logits = output.reshape({-1, output.size(-1)});
    auto classes = targets.reshape({-1}).to(at::kLong);
    if (classes.size(0) != logits.size(0))
      throw std::invalid_argument("cross_entropy loss: " + std::to_string(classes.size(0)) + " targets for " +
                                  std::to_string(logits.size(0)) + " predictions");
    return at::cross_entropy_loss(logits, classes, {}, at::Reduction::Mean, ignore_index);
  }
  throw std::invalid_argument("this model has no loss (loss: \"none\"); pass no targets");
}

std::unique_ptr<Model> make_builtin_model(const char* spec_json, c10::Device device) {
  // One definition of the spec and its shapes, shared with `acc estimate-memory` (base/).
  config::BuiltinSpec spec = config::parse_builtin_spec(spec_json ? spec_json : "");
  if (spec.device == "meta") device = c10::Device(c10::kMeta);
  if (spec.mlp) return std::make_unique<Mlp>(*spec.mlp, device);
  return std::make_unique<Gpt>(*spec.gpt, device);
}

}  // namespace acc::core
