// The Llama family of decoders, as transformers' modeling_llama / mistral / qwen2 / mixtral define them
// (same module names, so Hub checkpoints load without renaming): RMSNorm, rotary position embeddings
// (default, linear, dynamic NTK and llama3 scaling), grouped-query attention, SwiGLU, and Mixtral's sparse
// mixture of experts with top-k routing.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <numbers>

#include "acc/hf_shapes.hpp"
#include "models/hf/families.hpp"
#include "models/hf/layers.hpp"
#include "models/pipeline_stages.hpp"
#include "util/errors.hpp"

namespace acc::core::hf {

// Named, not anonymous: the core is compiled in unity units, where GPT-2's and BERT's anonymous Attention and Layer
// would be the same names as these.
namespace decoder {

using torch::nn::Module;

struct DecoderConfig {
  std::string architecture;
  int64_t vocab = 0, hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_positions = 0, sliding_window = 0, experts = 0, top_k = 0;
  // Per layer, whether it attends through the sliding window (Qwen2's layer_types; every layer for Mistral and
  // Mixtral); none does when sliding_window is 0.
  std::vector<bool> sliding;
  int64_t padding_idx = -1;  // the embedding's (config.pad_token_id; -1: none)
  std::string act;
  double eps = 1e-6, init_std = 0.02, attention_dropout = 0;
  bool tie = false, qkv_bias = false, o_bias = false, mlp_bias = false;
  bool router_aux = false;  // Mixtral: output_router_logits with a router_aux_loss_coef
  double router_jitter = 0;  // Mixtral: router_jitter_noise
  // Rotary embeddings
  std::string rope_type = "default";
  double theta = 10000, factor = 1, low_freq = 1, high_freq = 4;
  int64_t original_max_positions = 0;
};

// An optional size whose null transformers reads as None (`none`), unlike a missing key (the class default).
int64_t int_or_none(const json::Value& c, const char* key, int64_t absent, int64_t none) {
  if (!c.has(key)) return absent;
  return c.has_value(key) ? c.get_int(key) : none;
}

DecoderConfig parse(const json::Value& c, const std::string& arch, const std::string& source) {
  DecoderConfig d;
  const config::DecoderDefaults f = config::decoder_defaults(arch);
  d.architecture = arch;
  d.vocab = c.get_int("vocab_size");
  d.hidden = c.get_int("hidden_size");
  d.intermediate = c.get_int("intermediate_size");
  d.layers = c.get_int("num_hidden_layers");
  d.heads = c.get_int("num_attention_heads");
  d.kv_heads = int_or_none(c, "num_key_value_heads", f.kv_heads ? f.kv_heads : d.heads, d.heads);
  d.head_dim = c.get_int_or("head_dim", d.heads > 0 ? d.hidden / d.heads : 0);
  d.max_positions = c.get_int_or("max_position_embeddings", f.max_positions);
  d.act = c.get_string_or("hidden_act", "silu");
  check_activation(d.act, source);
  d.eps = c.get_double_or("rms_norm_eps", f.eps);
  d.init_std = c.get_double_or("initializer_range", 0.02);
  d.attention_dropout = c.get_double_or("attention_dropout", 0.0);
  d.tie = c.get_bool_or("tie_word_embeddings", false);
  if (d.vocab <= 0 || d.hidden <= 0 || d.intermediate <= 0 || d.layers <= 0 || d.heads <= 0 || d.kv_heads <= 0 ||
      d.head_dim <= 0 || d.heads % d.kv_heads != 0 || d.head_dim % 2 != 0)
    throw std::invalid_argument(source + ": sizes must be positive, num_attention_heads a multiple of "
                                         "num_key_value_heads and head_dim even");
  d.padding_idx = padding_idx(c, d.vocab, /*absent: None*/ -1, source);
  if (arch == "Qwen2ForCausalLM") {
    d.qkv_bias = true;  // Qwen2Attention: q, k and v with bias, o without
    if (c.get_bool_or("use_sliding_window", false))
      d.sliding_window = int_or_none(c, "sliding_window", f.sliding_window, 0);
    // Qwen2Config: layer_types as given, else the layers from max_window_layers on slide (when a window is set).
    const int64_t first_sliding = c.get_int_or("max_window_layers", 28);
    for (int64_t l = 0; l < d.layers; ++l) {
      if (c.has_value("layer_types")) {
        const std::string type = c.get("layer_types").at(static_cast<size_t>(l)).as_string();
        if (type != "full_attention" && type != "sliding_attention")
          throw UnsupportedError(source + ": 'layer_types' names '" + type +
                                 "', which is not an attention type Qwen2 has (full_attention, sliding_attention)");
        d.sliding.push_back(type == "sliding_attention");
      } else {
        d.sliding.push_back(d.sliding_window > 0 && l >= first_sliding);
      }
    }
  } else if (arch == "LlamaForCausalLM") {
    // Only Llama reads these; Mistral's and Mixtral's projections have no biases whatever the config says.
    d.qkv_bias = d.o_bias = c.get_bool_or("attention_bias", false);
    d.mlp_bias = c.get_bool_or("mlp_bias", false);
  } else {
    d.sliding_window = int_or_none(c, "sliding_window", f.sliding_window, 0);
  }
  if (d.sliding.empty()) d.sliding.assign(static_cast<size_t>(d.layers), d.sliding_window > 0);
  if (d.sliding_window == 0) d.sliding.assign(static_cast<size_t>(d.layers), false);  // a sliding layer without one
  if (arch == "MixtralForCausalLM") {
    d.experts = c.get_int_or("num_local_experts", 8);
    d.top_k = c.get_int_or("num_experts_per_tok", 2);
    // transformers adds router_aux_loss_coef x the load-balancing loss to the loss when output_router_logits is set;
    // router_jitter_noise scales the experts' input by noise in training. Refused where they apply (forward).
    d.router_aux = c.get_bool_or("output_router_logits", false) && c.get_double_or("router_aux_loss_coef", 0.001) != 0;
    d.router_jitter = c.get_double_or("router_jitter_noise", 0.0);
    if (d.experts <= 0 || d.top_k <= 0 || d.top_k > d.experts)
      throw std::invalid_argument(source + ": num_experts_per_tok must be between 1 and num_local_experts");
  }
  // transformers 4 writes rope_theta and rope_scaling; 5 writes rope_parameters (theta and scaling together).
  d.theta = c.get_double_or("rope_theta", f.theta);
  // transformers takes `rope_scaling or rope_parameters`: a non-empty rope_scaling wins.
  const bool scaling = c.has_value("rope_scaling") &&
                       !(c.get("rope_scaling").is_object() && c.get("rope_scaling").size() == 0);
  const char* key = scaling ? "rope_scaling" : "rope_parameters";
  if (c.has_value(key)) {
    json::Value r = c.get(key);
    d.theta = r.get_double_or("rope_theta", d.theta);
    d.rope_type = r.get_string_or("rope_type", r.get_string_or("type", "default"));
    if (d.rope_type != "default") d.factor = r.get_double("factor");
    d.low_freq = r.get_double_or("low_freq_factor", 1.0);
    d.high_freq = r.get_double_or("high_freq_factor", 4.0);
    d.original_max_positions = r.get_int_or("original_max_position_embeddings", d.max_positions);
    if (d.rope_type != "default" && d.rope_type != "linear" && d.rope_type != "dynamic" && d.rope_type != "llama3")
      throw UnsupportedError(source + ": " + key + ".rope_type '" + d.rope_type +
                             "' is not one libacc has (default, linear, dynamic, llama3)");
  }
  return d;
}

// transformers' rope_init_fn for the types above: the inverse frequencies of the rotary embedding.
at::Tensor inverse_frequencies(const DecoderConfig& d, double theta) {
  at::Tensor inv = 1.0 / at::pow(theta, at::arange(0, d.head_dim, 2, at::kLong).to(at::kFloat) / d.head_dim);
  if (d.rope_type == "linear") return inv / d.factor;
  if (d.rope_type != "llama3") return inv;
  const double old = static_cast<double>(d.original_max_positions);
  const double low_wavelen = old / d.low_freq, high_wavelen = old / d.high_freq;
  at::Tensor wavelen = 2 * std::numbers::pi / inv;
  at::Tensor scaled = at::where(wavelen > low_wavelen, inv / d.factor, inv);
  at::Tensor smooth = (old / wavelen - d.low_freq) / (d.high_freq - d.low_freq);
  at::Tensor smoothed = (1 - smooth) * scaled / d.factor + smooth * scaled;
  at::Tensor medium = wavelen.ge(high_wavelen).logical_and(wavelen.le(low_wavelen));
  return at::where(medium, smoothed, scaled);
}

struct Attention : Module {
  Attention(const DecoderConfig& d, const at::TensorOptions& o) {
    q_proj =
        register_module("q_proj", std::make_shared<Linear>(d.hidden, d.heads * d.head_dim, d.qkv_bias, d.init_std, o));
    k_proj = register_module("k_proj",
                             std::make_shared<Linear>(d.hidden, d.kv_heads * d.head_dim, d.qkv_bias, d.init_std, o));
    v_proj = register_module("v_proj",
                             std::make_shared<Linear>(d.hidden, d.kv_heads * d.head_dim, d.qkv_bias, d.init_std, o));
    o_proj =
        register_module("o_proj", std::make_shared<Linear>(d.heads * d.head_dim, d.hidden, d.o_bias, d.init_std, o));
  }
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;
};

struct GatedMlp : Module {  // LlamaMLP: down(act(gate(x)) * up(x))
  GatedMlp(const DecoderConfig& d, const at::TensorOptions& o, const char* gate, const char* up, const char* down) {
    gate_ = register_module(gate, std::make_shared<Linear>(d.hidden, d.intermediate, d.mlp_bias, d.init_std, o));
    up_ = register_module(up, std::make_shared<Linear>(d.hidden, d.intermediate, d.mlp_bias, d.init_std, o));
    down_ = register_module(down, std::make_shared<Linear>(d.intermediate, d.hidden, d.mlp_bias, d.init_std, o));
  }
  at::Tensor forward(const at::Tensor& x, const std::string& act) {
    at::Tensor gate = gate_->forward(x);
    if (c10::GradMode::is_enabled()) return down_->forward(activation(act, gate) * up_->forward(x));
    // Without autograd, in place: the activation and the product reuse the gate's memory (what torch.compile's
    // fusion of this chain saves).
    if (act == "silu" || act == "swish") gate = at::silu_(gate);
    else gate = activation(act, gate);
    return down_->forward(gate.mul_(up_->forward(x)));
  }
  std::shared_ptr<Linear> gate_, up_, down_;
};

// MixtralSparseMoeBlock: a router ("gate") picks the top-k experts of each token; their outputs are summed,
// weighted by the router's softmax renormalised over the chosen ones.
struct SparseMoe : Module {
  SparseMoe(const DecoderConfig& d, const at::TensorOptions& o) : top_k(d.top_k) {
    gate = register_module("gate", std::make_shared<Linear>(d.hidden, d.experts, false, d.init_std, o));
    experts = register_module("experts", std::make_shared<ModuleList<GatedMlp>>());
    for (int64_t e = 0; e < d.experts; ++e) experts->add(std::make_shared<GatedMlp>(d, o, "w1", "w3", "w2"));
  }
  // `tp`: the experts are split (each expert's w1 / w3 column-wise, w2 row-wise): the router reads x whole, the
  // experts its entered copy, the weighted partial outputs are summed over the group once (transformers'
  // moe_tp_experts), and the router weights' gradient is summed over the group as the experts' partial products are.
  // With sequence parallelism x holds this rank's tokens: they are routed here, then the tokens and their routing
  // gathered for the experts, and the output scattered back.
  at::Tensor forward(const at::Tensor& x, const std::string& act, const ForwardSplit& split) {
    const auto shape = x.sizes().vec();
    const int64_t B = shape[0], T = shape[1];
    at::Tensor weights = at::softmax(gate->forward(x.reshape({-1, shape.back()})), 1, at::kFloat);
    auto [top, chosen] = weights.topk(top_k, -1);
    top = top / top.sum(-1, true);  // float32 as in transformers' router: experts' outputs weighted in float32
    // The tokens and their routing enter the split experts (with sequence parallelism, gathered along time).
    const at::Tensor entered = split.enter_region(x);
    const auto whole_shape = entered.sizes().vec();
    at::Tensor flat = entered.reshape({-1, shape.back()});
    top = split.enter_region(top.view({B, T, top_k})).reshape({-1, top_k});
    chosen = split.enter_region(chosen.view({B, T, top_k})).reshape({-1, top_k});
    at::Tensor out = at::zeros_like(flat);
    for (size_t e = 0; e < experts->items.size(); ++e) {
      at::Tensor hit = chosen.eq(static_cast<int64_t>(e));  // [tokens, k]
      at::Tensor where = hit.nonzero();  // rows: (token, slot)
      if (where.size(0) == 0) continue;
      at::Tensor tokens = where.select(1, 0), slots = where.select(1, 1);
      at::Tensor y =
          experts->items[e]->forward(flat.index_select(0, tokens), act) * top.index({tokens, slots}).unsqueeze(-1);
      out.index_add_(0, tokens, y.to(out.scalar_type()));  // then rounded to the model's dtype and summed
    }
    return split.leave_region(out.view(whole_shape));
  }
  int64_t top_k;
  std::shared_ptr<Linear> gate;
  std::shared_ptr<ModuleList<GatedMlp>> experts;
};

// transformers' class names (LlamaDecoderLayer, ...): device maps keep a no-split class's modules whole.
std::string class_prefix(const DecoderConfig& d) {
  return d.architecture.substr(0, d.architecture.find("ForCausalLM"));
}

struct Layer : Module {
  Layer(const DecoderConfig& d, const at::TensorOptions& o) : Module(class_prefix(d) + "DecoderLayer") {
    self_attn = register_module("self_attn", std::make_shared<Attention>(d, o));
    if (d.experts > 0) moe = register_module("block_sparse_moe", std::make_shared<SparseMoe>(d, o));
    else mlp = register_module("mlp", std::make_shared<GatedMlp>(d, o, "gate_proj", "up_proj", "down_proj"));
    input_layernorm = register_module("input_layernorm", std::make_shared<RMSNorm>(d.hidden, d.eps, o));
    post_attention_layernorm =
        register_module("post_attention_layernorm", std::make_shared<RMSNorm>(d.hidden, d.eps, o));
  }
  std::shared_ptr<Attention> self_attn;
  std::shared_ptr<GatedMlp> mlp;
  std::shared_ptr<SparseMoe> moe;
  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;
};

struct Backbone : Module {  // LlamaModel
  Backbone(const DecoderConfig& d, const at::TensorOptions& o) : Module(class_prefix(d) + "Model") {
    embed_tokens =
        register_module("embed_tokens", std::make_shared<Embedding>(d.vocab, d.hidden, d.init_std, o, d.padding_idx));
    layers = register_module("layers", std::make_shared<ModuleList<Layer>>());
    for (int64_t l = 0; l < d.layers; ++l) layers->add(std::make_shared<Layer>(d, o));
    norm = register_module("norm", std::make_shared<RMSNorm>(d.hidden, d.eps, o));
  }
  std::shared_ptr<Embedding> embed_tokens;
  std::shared_ptr<ModuleList<Layer>> layers;
  std::shared_ptr<RMSNorm> norm;
};

// (LlamaFor|MistralFor|Qwen2For|MixtralFor)CausalLM: "model" and, unless tied to the embedding, "lm_head".
class CausalDecoder final : public NnModel,
                            public CausalLM,
                            public Pretrained,
                            public Parallelizable,
                            public PipelineStages {
 public:
  CausalDecoder(DecoderConfig d, const at::TensorOptions& o)
      : NnModel(std::make_shared<Module>(d.architecture)), d_(std::move(d)) {
    model_ = module_->register_module("model", std::make_shared<Backbone>(d_, o));
    if (!d_.tie)
      lm_head_ =
          module_->register_module("lm_head", std::make_shared<Linear>(d_.hidden, d_.vocab, false, d_.init_std, o));
    base_inv_freq_ = dynamic_inv_freq_ = inverse_frequencies(d_, d_.theta);
    cached_len_ = d_.max_positions;
  }
  std::vector<std::string> reported_units() const override { return numbered_units("model.layers.", d_.layers); }
  void reset_parameters() override { reset_tree(*module_); }
  void to_empty(const c10::Device& device) override { materialize_tree(*module_, device); }
  std::string input_name() const override { return "input_ids"; }
  std::string target_name() const override { return "labels"; }
  bool ties_embeddings() const override { return d_.tie; }
  std::string input_embedding_name() const override { return "model.embed_tokens.weight"; }
  std::vector<std::string> no_split_modules() const override { return {class_prefix(d_) + "DecoderLayer"}; }
  std::string tied_lm_head() const override { return ties_embeddings() ? input_embedding_name() : ""; }
  // Each MLP's act_fn (each expert's, as the checkpoints' per-expert layout had it) and, last in the backbone,
  // LlamaRotaryEmbedding with its float32 inv_freq and original_inv_freq (head_dim / 2 each), which this model
  // computes instead (base_inv_freq_).
  std::vector<WeightlessModule> weightless_modules() const override {
    std::vector<WeightlessModule> w;
    const std::string act = activation_class(d_.act);
    for (int64_t l = 0; l < d_.layers; ++l) {
      const std::string layer = "model.layers." + std::to_string(l);
      if (d_.experts == 0) w.push_back({layer + ".mlp.act_fn", act, "", {}});
      for (int64_t e = 0; e < d_.experts; ++e)
        w.push_back({layer + ".block_sparse_moe.experts." + std::to_string(e) + ".act_fn", act, "", {}});
    }
    const ModuleTree::Tensor freq{d_.head_dim / 2, 4, false};
    w.push_back({"model.rotary_emb",
                 class_prefix(d_) + "RotaryEmbedding",
                 "",
                 {{"inv_freq", freq}, {"original_inv_freq", freq}}});
    return w;
  }

  TensorDict forward(const TensorDict& batch) override {
    check_forward(batch);
    return causal_lm_forward(*this, d_.architecture, batch);
  }

  AttentionHeads attention_heads() const override {
    return {{"num_attention_heads", d_.heads}, {"num_key_value_heads", d_.kv_heads}};
  }

  // transformers' base_model_tp_plan (q/k/v and gate/up column-wise, o and down row-wise; Mixtral: each expert's
  // w1 / w3 column-wise and w2 row-wise, reduced once by the block, the router whole) and a vocabulary-parallel
  // embedding and head (lm_head, or the tied embedding).
  TensorParallelPlan tensor_parallel_plan(int size) const override {
    check_divides(size, d_.architecture,
                  {{"num_attention_heads", d_.heads},
                   {"num_key_value_heads", d_.kv_heads},
                   {"intermediate_size", d_.intermediate},
                   {"vocab_size", d_.vocab}});
    const std::string layer = "model.layers.*.";
    using S = LayerStyle;
    TensorParallelPlan plan{{"model.embed_tokens", S::VocabEmbedding}, {"lm_head", S::Colwise}};
    for (const char* p : {"q_proj", "k_proj", "v_proj"}) plan.push_back({layer + "self_attn." + p, S::Colwise});
    plan.push_back({layer + "self_attn.o_proj", S::Rowwise});
    if (d_.experts > 0) {
      for (const char* p : {"w1", "w3"}) plan.push_back({layer + "block_sparse_moe.experts.*." + p, S::Colwise});
      plan.push_back({layer + "block_sparse_moe.experts.*.w2", S::RowwisePartial});
    } else {
      for (const char* p : {"gate_proj", "up_proj"}) plan.push_back({layer + "mlp." + p, S::Colwise});
      plan.push_back({layer + "mlp.down_proj", S::Rowwise});
    }
    return plan;
  }
  const ForwardSplit& forward_seams() const override { return forward_split(); }

  at::Tensor local_step(const at::Tensor& input_ids, const at::Tensor& attention_mask, const at::Tensor& position_ids,
                        KvCache* cache) override {
    check_input_ids(d_.architecture, input_ids);
    const at::Tensor& emb = model_->embed_tokens->param("weight");
    const int64_t B = input_ids.size(0), whole = input_ids.size(1);
    // Context parallelism: this rank's tokens of the sequence, at their own positions.
    const ForwardSplit& split = forward_split();
    const std::shared_ptr<SequenceSplit> seq = split.split_sequence(whole, cache != nullptr, d_.architecture);
    const int64_t T = seq ? seq->local_length() : whole;
    split.check_length(T, cache != nullptr, d_.architecture);
    const int64_t past = cache ? cache->length : 0;
    at::Tensor ids = input_ids.to(emb.device(), at::kLong);
    at::Tensor pos = position_ids.defined()
                         ? position_ids.to(emb.device(), at::kLong)
                         : at::arange(past, past + whole, ids.options()).unsqueeze(0).expand({B, whole});
    const at::Tensor whole_pos = pos;  // (dynamic rotary scaling reads the whole sequence's length)
    if (seq) ids = seq->local(ids), pos = seq->local(pos);
    at::Tensor x = model_->embed_tokens->forward(ids);
    release("model.embed_tokens");
    const LayerInputs in = layer_inputs(attention_mask, position_ids, pos, whole_pos, B, T, seq, cache, x.options());
    x = run_layers(x, in, 0, d_.layers);
    if (cache) cache->length = past + T;
    return head(x);
  }

  // A pipeline stage's part of forward on one micro-batch (models/pipeline_stages.hpp): causal_lm_forward's inputs,
  // masks and loss, without a cache or a sequence split.
  int64_t num_blocks() const override { return d_.layers; }
  std::vector<std::string> first_modules() const override { return {"model.embed_tokens"}; }
  std::string block_module(int64_t i) const override { return "model.layers." + std::to_string(i); }
  std::vector<std::string> last_modules() const override {
    return {"model.norm", lm_head_ ? "lm_head" : "model.embed_tokens"};
  }
  at::Tensor stage_forward(const TensorDict& batch, const at::Tensor& x, const StageLayers& layers) override {
    check_forward(batch);
    check_batch(batch);
    const at::Tensor& input_ids = batch.at("input_ids");
    check_input_ids(d_.architecture, input_ids);
    const int64_t B = input_ids.size(0), T = input_ids.size(1);
    const ForwardSplit& split = forward_split();
    if (split.split_sequence(T, false, d_.architecture))
      throw std::invalid_argument(d_.architecture + ": pipeline stages with context or sequence parallelism are not "
                                                    "something libacc has");
    split.check_length(T, false, d_.architecture);
    const at::Tensor attention_mask = batch.get("attention_mask"), position_ids = batch.get("position_ids");
    const c10::Device device = x.defined() ? x.device() : model_->embed_tokens->param("weight").device();
    const at::Tensor pos = position_ids.defined()
                               ? position_ids.to(device, at::kLong)
                               : at::arange(T, at::TensorOptions(device).dtype(at::kLong)).unsqueeze(0).expand({B, T});
    at::Tensor h = layers.first ? model_->embed_tokens->forward(input_ids.to(device, at::kLong)) : x;
    const LayerInputs in = layer_inputs(attention_mask, position_ids, pos, pos, B, T, nullptr, nullptr, h.options());
    h = run_layers(h, in, layers.begin, layers.end);
    if (!layers.last) return h;
    const at::Tensor labels = batch.get("labels");
    return labels.defined() ? causal_lm_loss(head(h), labels, split) : head(h);  // pipelined inference: the logits
  }

 private:
  // What every layer of one forward reads: its sizes, rotary embeddings, masks (full and sliding-window), the
  // sequence split and the cache.
  struct LayerInputs {
    int64_t B = 0, T = 0;
    at::Tensor cos, sin;
    Masking full, sliding;
    std::shared_ptr<SequenceSplit> seq;
    KvCache* cache = nullptr;
  };

  // forward's refusals of what transformers computes and libacc does not.
  void check_forward(const TensorDict& batch) const {
    if (d_.router_aux && batch.contains("labels"))
      throw UnsupportedError(d_.architecture +
                             ": config.json's output_router_logits is true, so transformers adds "
                             "router_aux_loss_coef times the routers' load-balancing loss to the loss; libacc does not "
                             "compute that loss (set output_router_logits to false or router_aux_loss_coef to 0)");
    if (d_.router_jitter > 0 && module_->is_training())
      throw UnsupportedError(d_.architecture + ": config.json's router_jitter_noise is " + c10::str(d_.router_jitter) +
                             ": in training transformers scales the experts' input "
                             "by uniform noise, which libacc does not (set it to 0)");
  }
  void check_batch(const TensorDict& batch) const {
    for (const auto& [name, t] : batch.items())
      if (name != "input_ids" && name != "attention_mask" && name != "position_ids" && name != "labels")
        throw std::invalid_argument(d_.architecture + " forward: unexpected batch entry '" + name +
                                    "' (it takes input_ids, attention_mask, position_ids, labels)");
  }

  // The masks and rotary embeddings of B sequences of T tokens (this rank's, under context parallelism: `seq`) at
  // positions `pos`; `whole_pos` are the whole sequence's.
  LayerInputs layer_inputs(const at::Tensor& attention_mask, const at::Tensor& position_ids, const at::Tensor& pos,
                           const at::Tensor& whole_pos, int64_t B, int64_t T, std::shared_ptr<SequenceSplit> seq,
                           KvCache* cache, const at::TensorOptions& o) {
    LayerInputs in;
    in.B = B, in.T = T, in.seq = std::move(seq), in.cache = cache;
    const int64_t past = cache ? cache->length : 0, whole = whole_pos.size(-1);
    // The masks of the full-attention layers and of the sliding-window ones (Qwen2 may mix them).
    const bool any_sliding = std::find(d_.sliding.begin(), d_.sliding.end(), true) != d_.sliding.end();
    const bool any_full = std::find(d_.sliding.begin(), d_.sliding.end(), false) != d_.sliding.end();
    // Packed samples (position ids that restart, no attention_mask, no cache) attend only within themselves.
    const at::Tensor packed = !attention_mask.defined() && !cache && position_ids.defined()
                                  ? packed_sequences(pos.expand({B, whole}))
                                  : at::Tensor();
    if (in.seq) {
      if (packed.defined())
        throw UnsupportedError(d_.architecture + ": context parallelism over packed samples (position_ids that "
                                                 "restart) is not something libacc has");
      if (any_sliding && any_full)
        throw UnsupportedError(d_.architecture +
                               ": context parallelism over layers that mix full and sliding-window "
                               "attention (config.json's layer_types / max_window_layers) is not something libacc has");
      in.seq->set_masks(check_attention_mask(attention_mask) ? attention_mask : at::Tensor(),
                        any_sliding ? d_.sliding_window : 0, o);
    } else {
      if (any_full) in.full = decoder_masking(attention_mask, B, past, T, 0, o, packed);
      if (any_sliding) in.sliding = decoder_masking(attention_mask, B, past, T, d_.sliding_window, o, packed);
    }
    std::tie(in.cos, in.sin) = rotary(pos, whole_pos, o);
    return in;
  }

  // Layers [begin, end) on x.
  at::Tensor run_layers(at::Tensor x, const LayerInputs& in, int64_t begin, int64_t end) const {
    const ForwardSplit& split = forward_split();
    const bool train = module_->is_training();
    const int64_t hd = d_.head_dim, rep = d_.heads / d_.kv_heads;
    // Tensor parallelism: this rank's heads (a whole number of key/value groups).
    const int64_t parts = split.parts();
    for (int64_t l = begin; l < end; ++l) {
      const std::string unit = "model.layers." + std::to_string(l);
      // (A cache is used only by generate, without grad: then the block runs once.)
      x = run_unit(unit, x,
                   [layer = model_->layers->items[l], l, B = in.B, T = in.T, hd, rep, cos = in.cos, sin = in.sin,
                    masking = d_.sliding[static_cast<size_t>(l)] ? in.sliding : in.full, seq = in.seq, cache = in.cache,
                    train, &split, heads = d_.heads / parts, kv_heads = d_.kv_heads / parts,
                    dropout = d_.attention_dropout, act = d_.act,
                    in_place = !activation_checkpointing()](at::Tensor x) {
                     Attention& a = *layer->self_attn;
                     at::Tensor h = layer->input_layernorm->forward(x);
                     h = split.enter_region(h);  // with sequence parallelism, gathered: [B, T, hidden]
                     at::Tensor q = a.q_proj->forward(h).view({B, T, heads, hd}).transpose(1, 2);
                     at::Tensor k = a.k_proj->forward(h).view({B, T, kv_heads, hd}).transpose(1, 2);
                     at::Tensor v = a.v_proj->forward(h).view({B, T, kv_heads, hd}).transpose(1, 2);
                     q = q * cos + rotate_half(q) * sin;
                     k = k * cos + rotate_half(k) * sin;
                     if (cache) std::tie(k, v) = cache->append(static_cast<size_t>(l), k, v);
                     // Grouped-query attention: query head h reads key/value head h / rep (transformers' repeat_kv).
                     at::Tensor y =
                         seq ? seq->attention(q, k, v, train ? dropout : 0.0, std::nullopt)
                             : masking.attention(q, k, v, train ? dropout : 0.0, std::nullopt, /*gqa=*/rep > 1);
                     y = a.o_proj->forward(y.transpose(1, 2).reshape({B, T, heads * hd}));
                     x = residual(x, y, in_place);
                     h = layer->post_attention_layernorm->forward(x);
                     if (layer->moe) return residual(x, layer->moe->forward(h, act, split), in_place);
                     return residual(x, layer->mlp->forward(split.enter_region(h), act), in_place);
                   });
      release(unit);
    }
    return x;
  }

  // The final norm and the head (lm_head, or the tied embedding): logits, this rank's vocabulary slice under tensor
  // parallelism.
  at::Tensor head(const at::Tensor& x) const {
    const ForwardSplit& split = forward_split();
    return run_head(x, [&](const at::Tensor& x) {
      at::Tensor h = model_->norm->forward(x);
      release("model.norm");
      h = split.enter_region(h);  // the head is split by vocabulary: column-wise
      at::Tensor logits = lm_head_ ? lm_head_->forward(h) : at::linear(h, model_->embed_tokens->param("weight"));
      release(lm_head_ ? "lm_head" : "model.embed_tokens");
      return logits;
    });
  }

  // x + y, in place without autograd (x is this forward's own activation) unless `in_place` is false: a
  // checkpointed block's first run is without autograd, and its input is kept for the second.
  static at::Tensor residual(at::Tensor& x, const at::Tensor& y, bool in_place) {
    return in_place && !c10::GradMode::is_enabled() ? x.add_(y) : x + y;
  }

  static at::Tensor rotate_half(const at::Tensor& x) {
    const int64_t half = x.size(-1) / 2;
    return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  }

  // cos and sin [B, 1, T, head_dim] in the compute dtype, from float32 frequencies (LlamaRotaryEmbedding). `whole`:
  // the whole sequence's positions, whose length dynamic scaling reads (pos is this rank's part under context
  // parallelism, the same otherwise).
  std::pair<at::Tensor, at::Tensor> rotary(const at::Tensor& pos, const at::Tensor& whole, const at::TensorOptions& o) {
    at::Tensor inv = base_inv_freq_;
    if (d_.rope_type == "dynamic") inv = dynamic_frequencies(whole);
    at::Tensor freqs = pos.to(at::kFloat).unsqueeze(-1) * inv.to(pos.device()).view({1, 1, -1});
    at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);
    return {emb.cos().to(o.dtype()), emb.sin().to(o.dtype())};
  }

  // transformers' dynamic_rope_update: past the trained length, the base grows with the sequence
  // (NTK-aware); the frequencies are kept until a longer sequence comes, and reset when a shorter one than
  // the trained length does.
  at::Tensor dynamic_frequencies(const at::Tensor& pos) {
    const int64_t seq = pos.max().item<int64_t>() + 1;
    const int64_t original = d_.max_positions;
    if (seq > cached_len_) {
      const double base = d_.theta * std::pow(d_.factor * static_cast<double>(seq) / original - (d_.factor - 1),
                                              static_cast<double>(d_.head_dim) / (d_.head_dim - 2));
      dynamic_inv_freq_ = inverse_frequencies(d_, base);
      cached_len_ = seq;
    }
    if (seq < original && cached_len_ > original) {
      dynamic_inv_freq_ = base_inv_freq_;
      cached_len_ = original;
    }
    return dynamic_inv_freq_;
  }

  DecoderConfig d_;
  std::shared_ptr<Backbone> model_;
  std::shared_ptr<Linear> lm_head_;
  at::Tensor base_inv_freq_, dynamic_inv_freq_;
  int64_t cached_len_ = 0;
};

}  // namespace decoder

std::unique_ptr<Model> make_decoder(const json::Value& config, const std::string& architecture,
                                    const at::TensorOptions& options, const std::string& source) {
  auto model = std::make_unique<decoder::CausalDecoder>(decoder::parse(config, architecture, source), options);
  if (options.device() != c10::kMeta) model->reset_parameters();
  return model;
}

at::Tensor CausalLM::step(const at::Tensor& input_ids, const at::Tensor& attention_mask, const at::Tensor& position_ids,
                          KvCache* cache) {
  return forward_seams().whole_logits(local_step(input_ids, attention_mask, position_ids, cache));
}

TensorDict causal_lm_forward(CausalLM& lm, const std::string& architecture, const TensorDict& batch) {
  for (const auto& [name, t] : batch.items())
    if (name != "input_ids" && name != "attention_mask" && name != "position_ids" && name != "labels")
      throw std::invalid_argument(architecture + " forward: unexpected batch entry '" + name +
                                  "' (it takes input_ids, attention_mask, position_ids, labels)");
  at::Tensor local =
      lm.local_step(batch.at("input_ids"), batch.get("attention_mask"), batch.get("position_ids"), nullptr);
  const ForwardSplit& split = lm.forward_seams();
  // Under tensor parallelism the loss reads this rank's vocabulary slice (loss_parallel); the logits given back are
  // whole (transformers' colwise_gather_output head).
  TensorDict out{{"logits", split.whole_logits(local)}};
  at::Tensor labels = batch.get("labels");
  if (!labels.defined()) return out;
  if (const auto seq = split.split_sequence(batch.at("input_ids").size(1), false, architecture)) {
    // This rank's tokens' logits: their next-token labels come from the whole sequence; the loss is its token mean.
    at::Tensor targets = seq->next_token_labels(labels.to(local.device()), -100);
    out.set("loss", split.cross_entropy(local, targets, -100, seq.get()));
  } else {
    out.set("loss", causal_lm_loss(local, labels, split));
  }
  return out;
}

void check_input_ids(const std::string& architecture, const at::Tensor& input_ids) {
  if (input_ids.dim() != 2 || at::isFloatingType(input_ids.scalar_type()))
    throw std::invalid_argument(architecture +
                                " forward: input_ids must be integer token ids of shape [batch, time]; "
                                "got " +
                                c10::str(input_ids.scalar_type()) + " " + c10::str(input_ids.sizes()));
}

at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels, const ForwardSplit& split) {
  if (labels.dim() != 2 || labels.size(0) != logits.size(0) || labels.size(1) != logits.size(1))
    throw std::invalid_argument("labels have shape " + c10::str(labels.sizes()) + "; expected [" +
                                std::to_string(logits.size(0)) + ", " + std::to_string(logits.size(1)) + "]");
  // transformers' ForCausalLMLoss: float32 logits, labels shifted left, -100 ignored, mean over the rest.
  const int64_t T = logits.size(1);
  at::Tensor l = logits.narrow(1, 0, T - 1).to(at::kFloat).reshape({-1, logits.size(-1)});
  at::Tensor t = labels.narrow(1, 1, T - 1).to(logits.device(), at::kLong).reshape({-1});
  return split.cross_entropy(l, t, -100, nullptr);
}

}  // namespace acc::core::hf
