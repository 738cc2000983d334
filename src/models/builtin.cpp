// The built-in families as torch::nn::Module trees: an MLP (torch.nn.Linear layers) and a GPT-2 style
// decoder with Hugging Face GPT-2's module names and Conv1D layout, so its state dict reads like
// GPT2LMHeadModel's ("transformer.h.0.attn.c_attn.weight" of shape [n_embd, 3 n_embd]).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <cmath>

#include "models/layers.hpp"
#include "models/lora.hpp"
#include "models/model.hpp"
#include "models/parallel_forward.hpp"
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

// GPT-2's Conv1D: y = x W + b, W [in, out]; normal(0, std) weights, zero bias. Splits as GPT-2's (tensor
// parallelism: output features are dim 1).
struct Conv1D : InitModule, lora::Host, SplittableLayer {
  Conv1D(int64_t in, int64_t out, bool with_bias, double std, c10::Device d) : std_(std) {
    register_parameter("weight", at::empty({in, out}, float_on(d)));
    if (with_bias) register_parameter("bias", at::empty({out}, float_on(d)));
  }
  void reset() override {
    param("weight").normal_(0, std_);
    if (at::Tensor b = bias_or_none(); b.defined()) b.zero_();
  }
  at::Tensor forward(const at::Tensor& x) {
    if (splits_input()) return rowwise_output(model_linear(x, param("weight").t(), at::Tensor()), bias_or_none());
    return with_lora(x, model_linear(x, param("weight").t(), bias_or_none()));
  }
  torch::nn::Module& host_module() override { return *this; }
  at::Tensor host_weight() override { return param("weight"); }
  bool fan_in_fan_out() const override { return true; }
  int64_t output_dim() const override { return 1; }
  double std_;
};

struct LayerNorm : InitModule {
  LayerNorm(int64_t n, bool with_bias, c10::Device d) : InitModule("LayerNorm"), n_(n) {
    register_parameter("weight", at::empty({n}, float_on(d)));
    if (with_bias) register_parameter("bias", at::empty({n}, float_on(d)));
  }
  void reset() override {
    param("weight").fill_(1);
    if (at::Tensor b = bias_or_none(); b.defined()) b.zero_();
  }
  at::Tensor forward(const at::Tensor& x) { return at::layer_norm(x, {n_}, param("weight"), bias_or_none()); }
  int64_t n_;
};

struct Embedding : InitModule, SplittableLayer {
  Embedding(int64_t n, int64_t dim, double std, c10::Device d) : std_(std) {
    register_parameter("weight", at::empty({n, dim}, float_on(d)));
  }
  void reset() override { param("weight").normal_(0, std_); }
  at::Tensor forward(const at::Tensor& ids) { return embed(param("weight"), ids); }
  int64_t output_dim() const override { return 0; }
  bool is_embedding() const override { return true; }
  double std_;
};

at::Tensor activation(const std::string& kind, const at::Tensor& x) {
  if (kind == "relu") return at::relu(x);
  if (kind == "gelu") return at::gelu(x);
  return at::tanh(x);
}

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

using GptShape = config::GptSpec;

// Class names as transformers' GPT-2 (FSDP's TRANSFORMER_BASED_WRAP and device maps name classes).
struct Attention : Module {
  Attention(const GptShape& s, double std, double proj_std, c10::Device d) : Module("GPT2Attention") {
    c_attn = register_module("c_attn", std::make_shared<Conv1D>(s.n_embd, 3 * s.n_embd, s.bias, std, d));
    c_proj = register_module("c_proj", std::make_shared<Conv1D>(s.n_embd, s.n_embd, s.bias, proj_std, d));
  }
  std::shared_ptr<Conv1D> c_attn, c_proj;
};

struct MlpBlock : Module {
  MlpBlock(const GptShape& s, double std, double proj_std, c10::Device d) : Module("GPT2MLP") {
    c_fc = register_module("c_fc", std::make_shared<Conv1D>(s.n_embd, 4 * s.n_embd, s.bias, std, d));
    c_proj = register_module("c_proj", std::make_shared<Conv1D>(4 * s.n_embd, s.n_embd, s.bias, proj_std, d));
  }
  std::shared_ptr<Conv1D> c_fc, c_proj;
};

struct Block : Module {
  Block(const GptShape& s, double std, double proj_std, c10::Device d) : Module("GPT2Block") {
    ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(s.n_embd, s.bias, d));
    attn = register_module("attn", std::make_shared<Attention>(s, std, proj_std, d));
    ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(s.n_embd, s.bias, d));
    mlp = register_module("mlp", std::make_shared<MlpBlock>(s, std, proj_std, d));
  }
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<MlpBlock> mlp;
};

struct Transformer : Module {
  Transformer(const GptShape& s, c10::Device d) : Module("GPT2Model") {
    const double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(s.n_layer));
    wte = register_module("wte", std::make_shared<Embedding>(s.vocab_size, s.n_embd, std, d));
    wpe = register_module("wpe", std::make_shared<Embedding>(s.block_size, s.n_embd, std, d));
    h = register_module("h", std::make_shared<ModuleList<Block>>());
    for (int64_t l = 0; l < s.n_layer; ++l) h->add(std::make_shared<Block>(s, std, proj_std, d));
    ln_f = register_module("ln_f", std::make_shared<LayerNorm>(s.n_embd, s.bias, d));
  }
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<ModuleList<Block>> h;
  std::shared_ptr<LayerNorm> ln_f;
};

// GPT2LMHeadModel's tree: "transformer" (wte, wpe, h.N, ln_f) and a head tied to wte (so not a
// parameter of its own, as in Hugging Face's named_parameters).
class Gpt final : public NnModel, public Parallelizable {
 public:
  Gpt(const GptShape& s, c10::Device d) : NnModel(std::make_shared<Module>("GPT2LMHeadModel")), s_(s) {
    t_ = module_->register_module("transformer", std::make_shared<Transformer>(s, d));
    reset_parameters();
  }
  void reset_parameters() override { reset_tree(*module_); }
  void to_empty(const c10::Device& device) override { materialize_tree(*module_, device); }
  std::string input_name() const override { return "input_ids"; }
  std::vector<std::string> reported_units() const override { return numbered_units("transformer.h.", s_.n_layer); }

  // GPT-2's (models/hf/gpt2.cpp): c_attn (q, k, v packed) and c_fc column-wise, the c_proj row-wise, wte and the
  // tied head vocabulary-parallel.
  TensorParallelPlan tensor_parallel_plan(int size) const override {
    auto divides = [&](const char* field, int64_t n) {
      if (n % size != 0)
        throw std::invalid_argument("tensor parallelism: tp_size " + std::to_string(size) + " does not divide gpt's " +
                                    field + " (" + std::to_string(n) + ")");
    };
    divides("n_head", s_.n_head);
    divides("vocab_size", s_.vocab_size);
    return {{"transformer.wte", LayerStyle::VocabEmbedding},
            {"transformer.h.*.attn.c_attn", LayerStyle::Colwise, 3},
            {"transformer.h.*.attn.c_proj", LayerStyle::Rowwise},
            {"transformer.h.*.mlp.c_fc", LayerStyle::Colwise},
            {"transformer.h.*.mlp.c_proj", LayerStyle::Rowwise}};
  }

  // input_ids [batch, time]; targets: the next token of each position (nanoGPT style, -1 ignored);
  // labels: Hugging Face's, shifted inside (-100 ignored). Outputs logits and, with either, loss.
  TensorDict forward(const TensorDict& batch) override {
    reject_unknown(batch, "gpt", {"input_ids", "targets", "labels"});
    const at::Tensor& input = batch.at("input_ids");
    if (input.dim() != 2 || at::isFloatingType(input.scalar_type()))
      throw std::invalid_argument("gpt forward: input_ids must be integer token ids of shape [batch, time]; got " +
                                  c10::str(input.scalar_type()) + " " + c10::str(input.sizes()));
    const int64_t B = input.size(0), whole = input.size(1), C = s_.n_embd, hd = C / s_.n_head;
    if (whole > s_.block_size)
      throw std::invalid_argument("gpt forward: sequence length " + std::to_string(whole) + " exceeds block_size " +
                                  std::to_string(s_.block_size));
    // Context parallelism: this rank's tokens of the sequence, at their own positions.
    const ForwardSplit& parallel = forward_split();
    const std::shared_ptr<SequenceSplit> seq = parallel.split_sequence(whole, false, "gpt");
    const int64_t T = seq ? seq->local_length() : whole;
    const bool train = module_->is_training();
    const double p = s_.dropout;
    // Tensor parallelism: this rank's heads, and its slice of the vocabulary in the logits.
    const int64_t parts = parallel.parts();
    parallel.check_length(T, false, "gpt");
    auto entered = [&parallel](const at::Tensor& h) { return parallel.enter_region(h); };
    at::Tensor idx = input.to(at::kLong);
    // With sequence or context parallelism the embeddings are this rank's tokens'.
    at::Tensor pos = at::arange(whole, idx.options()).unsqueeze(0);
    if (seq)
      idx = seq->local(idx), pos = seq->local(pos);
    else
      pos = parallel.local_positions(pos);
    at::Tensor x = t_->wte->forward(idx) + at::embedding(t_->wpe->param("weight"), pos);
    if (seq) seq->set_masks(at::Tensor(), 0, x.options());
    x = at::dropout(x, p, train);
    for (size_t l = 0; l < t_->h->items.size(); ++l) {
      x = run_unit("transformer.h." + std::to_string(l), x,
                   [b = t_->h->items[l], B, T, C = C / parts, hd, heads = s_.n_head / parts, train, p, seq,
                    entered](at::Tensor x) {
                     auto split = [&](const at::Tensor& t) { return t.view({B, T, heads, hd}).transpose(1, 2); };
                     auto qkv = b->attn->c_attn->forward(entered(b->ln_1->forward(x))).split(C, 2);
                     at::Tensor y =
                         seq ? seq->attention(split(qkv[0]), split(qkv[1]), split(qkv[2]), train ? p : 0.0, std::nullopt)
                             : at::scaled_dot_product_attention(split(qkv[0]), split(qkv[1]), split(qkv[2]), {},
                                                                train ? p : 0.0, /*is_causal=*/true);
                     y = y.transpose(1, 2).contiguous().view({B, T, C});
                     x = x + at::dropout(b->attn->c_proj->forward(y), p, train);
                     at::Tensor m =
                         b->mlp->c_proj->forward(at::gelu(b->mlp->c_fc->forward(entered(b->ln_2->forward(x)))));
                     return x + at::dropout(m, p, train);
                   });
    }
    at::Tensor logits = run_head(x, [t = t_, entered](const at::Tensor& x) {
      return at::linear(entered(t->ln_f->forward(x)), t->wte->param("weight"));
    });
    // Under tensor parallelism the loss reads this rank's vocabulary slice; the logits given back are whole.
    TensorDict out{{"logits", parallel.whole_logits(logits)}};
    // With a sequence split, t is this rank's tokens' and the loss the whole sequence's token mean.
    auto loss = [&](const at::Tensor& l, const at::Tensor& t, int64_t ignore) {
      return parallel.cross_entropy(l, t, ignore, seq.get());
    };
    if (at::Tensor t = batch.get("targets"); t.defined()) {
      if (t.sizes() != input.sizes())
        throw std::invalid_argument("gpt forward: targets shape " + c10::str(t.sizes()) + " differs from input_ids " +
                                    c10::str(input.sizes()));
      out.set("loss", loss(logits, seq ? seq->local(t) : t, -1));
    } else if (at::Tensor l = batch.get("labels"); l.defined()) {
      if (l.sizes() != input.sizes())
        throw std::invalid_argument("gpt forward: labels shape " + c10::str(l.sizes()) + " differs from input_ids " +
                                    c10::str(input.sizes()));
      if (seq)
        out.set("loss", loss(logits, seq->next_token_labels(l, -100), -100));
      else
        out.set("loss", loss(logits.narrow(1, 0, T - 1), l.narrow(1, 1, T - 1), -100));
    }
    return out;
  }

 private:
  GptShape s_;
  std::shared_ptr<Transformer> t_;
};

}  // namespace

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
  // One definition of the spec and its shapes, shared with `acc estimate-memory` (config/).
  config::BuiltinSpec spec = config::parse_builtin_spec(spec_json ? spec_json : "");
  if (spec.device == "meta") device = c10::Device(c10::kMeta);
  if (spec.mlp) return std::make_unique<Mlp>(*spec.mlp, device);
  return std::make_unique<Gpt>(*spec.gpt, device);
}

}  // namespace acc::core
