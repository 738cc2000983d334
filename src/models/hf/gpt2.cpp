// GPT2LMHeadModel as transformers' modeling_gpt2 defines it: learned positions, pre-LayerNorm blocks, Conv1D
// layers (weights stored [in, out]), the head tied to the token embedding.
#include <ATen/ATen.h>

#include <cmath>
#include <tuple>

#include "models/hf/families.hpp"
#include "models/hf/layers.hpp"
#include "util/errors.hpp"

namespace acc::core::hf {

namespace {

using torch::nn::Module;

struct Gpt2Config {
  int64_t vocab = 0, positions = 0, embd = 0, layers = 0, heads = 0, inner = 0;
  double eps = 1e-5, std = 0.02, embd_pdrop = 0.1, attn_pdrop = 0.1, resid_pdrop = 0.1;
  std::string act;
  bool scale_weights = true, scale_by_layer = false;
};

// transformers' Conv1D: y = x W + b with W [in, out]; takes a LoRA adapter (fan_in_fan_out, as peft's) and a
// tensor-parallel split (a transposed nn.Linear: its output features are dim 1).
struct Conv1D : InitModule, lora::Host, SplittableLayer {
  Conv1D(int64_t in, int64_t out, double std, const at::TensorOptions& o) : std_(std) {
    register_parameter("weight", at::empty({in, out}, o));
    register_parameter("bias", at::empty({out}, o));
  }
  void reset() override {
    param("weight").normal_(0, std_);
    param("bias").zero_();
  }
  at::Tensor forward(const at::Tensor& x) {
    if (splits_input()) return rowwise_output(at::linear(x, param("weight").t()), param("bias"));
    return with_lora(x, at::linear(x, param("weight").t(), param("bias")));
  }
  torch::nn::Module& host_module() override { return *this; }
  at::Tensor host_weight() override { return param("weight"); }
  bool fan_in_fan_out() const override { return true; }
  int64_t output_dim() const override { return 1; }
  double std_;
};

struct Attention : Module {
  Attention(const Gpt2Config& c, double proj_std, const at::TensorOptions& o) {
    c_attn = register_module("c_attn", std::make_shared<Conv1D>(c.embd, 3 * c.embd, c.std, o));
    c_proj = register_module("c_proj", std::make_shared<Conv1D>(c.embd, c.embd, proj_std, o));
  }
  std::shared_ptr<Conv1D> c_attn, c_proj;
};

struct Mlp : Module {
  Mlp(const Gpt2Config& c, double proj_std, const at::TensorOptions& o) {
    c_fc = register_module("c_fc", std::make_shared<Conv1D>(c.embd, c.inner, c.std, o));
    c_proj = register_module("c_proj", std::make_shared<Conv1D>(c.inner, c.embd, proj_std, o));
  }
  std::shared_ptr<Conv1D> c_fc, c_proj;
};

struct Block : Module {
  Block(const Gpt2Config& c, double proj_std, const at::TensorOptions& o) : Module("GPT2Block") {
    ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.embd, c.eps, o));
    attn = register_module("attn", std::make_shared<Attention>(c, proj_std, o));
    ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.embd, c.eps, o));
    mlp = register_module("mlp", std::make_shared<Mlp>(c, proj_std, o));
  }
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<Mlp> mlp;
};

struct Transformer : Module {  // GPT2Model
  Transformer(const Gpt2Config& c, const at::TensorOptions& o) : Module("GPT2Model") {
    // GPT-2's scheme: residual projections scaled by 1/sqrt(2 n_layer).
    const double proj_std = c.std / std::sqrt(2.0 * static_cast<double>(c.layers));
    wte = register_module("wte", std::make_shared<Embedding>(c.vocab, c.embd, c.std, o));
    wpe = register_module("wpe", std::make_shared<Embedding>(c.positions, c.embd, c.std, o));
    h = register_module("h", std::make_shared<ModuleList<Block>>());
    for (int64_t l = 0; l < c.layers; ++l) h->add(std::make_shared<Block>(c, proj_std, o));
    ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.embd, c.eps, o));
  }
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<ModuleList<Block>> h;
  std::shared_ptr<LayerNorm> ln_f;
};

class Gpt2LMHead final : public NnModel,
                         public CausalLM,
                         public Pretrained,
                         public Parallelizable {
 public:
  Gpt2LMHead(Gpt2Config c, const at::TensorOptions& o)
      : NnModel(std::make_shared<Module>("GPT2LMHeadModel")), c_(std::move(c)) {
    t_ = module_->register_module("transformer", std::make_shared<Transformer>(c_, o));
  }
  std::vector<std::string> reported_units() const override { return numbered_units("transformer.h.", c_.layers); }
  void reset_parameters() override { reset_tree(*module_); }
  void to_empty(const c10::Device& device) override { materialize_tree(*module_, device); }
  std::string input_name() const override { return "input_ids"; }
  std::string target_name() const override { return "labels"; }
  bool ties_embeddings() const override { return true; }
  std::string input_embedding_name() const override { return "transformer.wte.weight"; }
  std::vector<std::string> no_split_modules() const override { return {"GPT2Block"}; }
  std::string tied_lm_head() const override { return ties_embeddings() ? input_embedding_name() : ""; }
  // transformers' dropout and activation modules: "drop" between the embeddings and the blocks, each block's
  // attention dropouts and its MLP's act and dropout.
  std::vector<WeightlessModule> weightless_modules() const override {
    std::vector<WeightlessModule> w{{"transformer.drop", "Dropout", "h", {}}};
    const std::string act = activation_class(c_.act);
    for (int64_t l = 0; l < c_.layers; ++l) {
      const std::string block = "transformer.h." + std::to_string(l);
      for (const char* d : {".attn.attn_dropout", ".attn.resid_dropout"}) w.push_back({block + d, "Dropout", "", {}});
      w.push_back({block + ".mlp.act", act, "", {}});
      w.push_back({block + ".mlp.dropout", "Dropout", "", {}});
    }
    return w;
  }

  TensorDict forward(const TensorDict& batch) override { return causal_lm_forward(*this, "GPT2LMHeadModel", batch); }

  // transformers has no plan for GPT-2; this is Megatron's for its layout: c_attn column-wise with q, k and v packed
  // (each rank takes its heads of each), c_fc column-wise, both c_proj row-wise, wte (and so the tied head)
  // vocabulary-parallel; wpe and the layer norms whole.
  TensorParallelPlan tensor_parallel_plan(int size) const override {
    auto divides = [&](const char* field, int64_t n) {
      if (n % size != 0)
        throw std::invalid_argument("tensor parallelism: tp_size " + std::to_string(size) +
                                    " does not divide GPT2LMHeadModel's " + field + " (" + std::to_string(n) + ")");
    };
    divides("n_head", c_.heads);
    divides("n_inner", c_.inner);
    divides("vocab_size", c_.vocab);
    return {{"transformer.wte", LayerStyle::VocabEmbedding},
            {"transformer.h.*.attn.c_attn", LayerStyle::Colwise, 3},
            {"transformer.h.*.attn.c_proj", LayerStyle::Rowwise},
            {"transformer.h.*.mlp.c_fc", LayerStyle::Colwise},
            {"transformer.h.*.mlp.c_proj", LayerStyle::Rowwise}};
  }
  const ForwardSplit& forward_seams() const override { return forward_split(); }

  at::Tensor local_step(const at::Tensor& input_ids, const at::Tensor& attention_mask, const at::Tensor& position_ids,
                        KvCache* cache) override {
    check_input_ids("GPT2LMHeadModel", input_ids);
    const at::Tensor& wte = t_->wte->param("weight");
    const int64_t B = input_ids.size(0), whole = input_ids.size(1), C = c_.embd, hd = C / c_.heads;
    // Context parallelism: this rank's tokens of the sequence, at their own positions.
    const ForwardSplit& parallel = forward_split();
    const std::shared_ptr<SequenceSplit> seq = parallel.split_sequence(whole, cache != nullptr, "GPT2LMHeadModel");
    const int64_t T = seq ? seq->local_length() : whole;
    const int64_t past = cache ? cache->length : 0;
    at::Tensor ids = input_ids.to(wte.device(), at::kLong);
    at::Tensor pos = position_ids.defined()
                         ? position_ids.to(wte.device(), at::kLong)
                         : at::arange(past, past + whole, ids.options()).unsqueeze(0).expand({B, whole});
    if (pos.max().item<int64_t>() >= c_.positions)
      throw std::invalid_argument("GPT2LMHeadModel forward: position " + std::to_string(pos.max().item<int64_t>()) +
                                  " is past n_positions " + std::to_string(c_.positions));
    const at::Tensor pos_whole = pos.expand({B, whole});
    if (seq) ids = seq->local(ids), pos = seq->local(pos);
    const bool train = module_->is_training();
    parallel.check_length(T, cache != nullptr, "GPT2LMHeadModel");
    // With sequence parallelism the embeddings are this rank's tokens'.
    at::Tensor x =
        at::dropout(t_->wte->forward(ids) + t_->wpe->forward(parallel.local_positions(pos)), c_.embd_pdrop, train);
    release("transformer.wte");
    release("transformer.wpe");
    Masking masking;
    // Packed samples (position ids that restart, no attention_mask, no cache) attend only within themselves.
    const at::Tensor packed =
        !attention_mask.defined() && !cache && position_ids.defined() ? packed_sequences(pos_whole) : at::Tensor();
    if (seq) {
      if (packed.defined())
        throw UnsupportedError("GPT2LMHeadModel: context parallelism over packed samples (position_ids that restart) "
                               "is not something libacc has");
      seq->set_masks(check_attention_mask(attention_mask) ? attention_mask : at::Tensor(), 0, x.options());
    } else {
      masking = decoder_masking(attention_mask, B, past, T, 0, x.options(), packed);
    }
    // Tensor parallelism: this rank's heads.
    const int64_t parts = parallel.parts();
    for (int64_t l = 0; l < c_.layers; ++l) {
      const std::string unit = "transformer.h." + std::to_string(l);
      double scale = c_.scale_weights ? 1.0 / std::sqrt(static_cast<double>(hd)) : 1.0;
      if (c_.scale_by_layer) scale /= static_cast<double>(l + 1);
      // (A cache is used only by generate, without grad: then the block runs once.)
      x = run_unit(unit, x, [b = t_->h->items[l], l, B, T, C = C / parts, hd, scale, heads = c_.heads / parts, masking,
                             seq, cache, train, &parallel, attn_pdrop = c_.attn_pdrop, resid_pdrop = c_.resid_pdrop,
                             act = c_.act](at::Tensor x) {
        auto entered = [&parallel](const at::Tensor& h) { return parallel.enter_region(h); };
        auto qkv = b->attn->c_attn->forward(entered(b->ln_1->forward(x))).split(C, 2);
        auto split = [&](const at::Tensor& t) { return t.view({B, T, heads, hd}).transpose(1, 2); };
        at::Tensor q = split(qkv[0]), k = split(qkv[1]), v = split(qkv[2]);
        if (cache) std::tie(k, v) = cache->append(static_cast<size_t>(l), k, v);
        at::Tensor y = seq ? seq->attention(q, k, v, train ? attn_pdrop : 0.0, scale)
                           : masking.attention(q, k, v, train ? attn_pdrop : 0.0, scale, false);
        y = b->attn->c_proj->forward(y.transpose(1, 2).reshape({B, T, C}));
        x = x + at::dropout(y, resid_pdrop, train);
        at::Tensor m = b->mlp->c_proj->forward(activation(act, b->mlp->c_fc->forward(entered(b->ln_2->forward(x)))));
        return x + at::dropout(m, resid_pdrop, train);
      });
      release(unit);
    }
    if (cache) cache->length = past + T;
    return run_head(x, [&](const at::Tensor& x) {
      at::Tensor h = t_->ln_f->forward(x);
      release("transformer.ln_f");
      h = parallel.enter_region(h);  // the tied head is split by vocabulary: column-wise
      at::Tensor logits = at::linear(h, wte);
      release("transformer.wte");
      return logits;
    });
  }

 private:
  Gpt2Config c_;
  std::shared_ptr<Transformer> t_;
};

}  // namespace

std::unique_ptr<Model> make_gpt2(const json::Value& j, const at::TensorOptions& options, const std::string& source) {
  Gpt2Config c;
  c.vocab = j.get_int("vocab_size");
  c.positions = j.get_int_or("n_positions", 1024);
  c.embd = j.get_int("n_embd");
  c.layers = j.get_int("n_layer");
  c.heads = j.get_int("n_head");
  c.inner = j.get_int_or("n_inner", 4 * c.embd);
  c.eps = j.get_double_or("layer_norm_epsilon", 1e-5);
  c.std = j.get_double_or("initializer_range", 0.02);
  c.embd_pdrop = j.get_double_or("embd_pdrop", 0.1);
  c.attn_pdrop = j.get_double_or("attn_pdrop", 0.1);
  c.resid_pdrop = j.get_double_or("resid_pdrop", 0.1);
  c.act = j.get_string_or("activation_function", "gelu_new");
  c.scale_weights = j.get_bool_or("scale_attn_weights", true);
  c.scale_by_layer = j.get_bool_or("scale_attn_by_inverse_layer_idx", false);
  check_activation(c.act, source, "activation_function");
  if (c.vocab <= 0 || c.positions <= 0 || c.embd <= 0 || c.layers <= 0 || c.heads <= 0 || c.inner <= 0 ||
      c.embd % c.heads != 0)
    throw std::invalid_argument(source + ": sizes must be positive and n_embd a multiple of n_head");
  auto model = std::make_unique<Gpt2LMHead>(c, options);
  if (options.device() != c10::kMeta) model->reset_parameters();
  return model;
}

}  // namespace acc::core::hf
