#include "acc/hf_shapes.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string_view>

#include "acc/files.hpp"
#include "acc/limits.hpp"
#include "internal.hpp"

namespace acc::config {

DecoderDefaults decoder_defaults(const std::string& arch) {
  if (arch == "MistralForCausalLM") return {8, 4096 * 32, 4096, 1e-6, 10000.0};
  if (arch == "Qwen2ForCausalLM") return {32, 32768, 4096, 1e-6, 10000.0};
  if (arch == "MixtralForCausalLM") return {8, 4096 * 32, 0, 1e-5, 1000000.0};  // MixtralConfig.default_theta
  return {0, 2048, 0, 1e-6, 10000.0};
}

namespace {

using detail::Kind;
using detail::Node;

// Strict JSON (acc/json.hpp's reader; the file's size is bounded where it is read); errors start with `where`.
Node parse_object(std::string_view text, const std::string& where) {
  Node doc;
  try {
    doc = detail::parse_json(text, json::kDocumentLimits);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  if (doc.kind != Kind::Map) throw Error(where + ": not a JSON object");
  return doc;
}

// A value for messages: its JSON, shortened.
std::string shown(const Node* v) {
  std::string s;
  detail::write_json(s, *v, -1);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// A number's value, NaN for anything else.
double number_of(const Node* v) {
  if (v->kind == Kind::Int) return static_cast<double>(v->i);
  return v->kind == Kind::Double ? v->d : NAN;
}

// config.json (or an object in it, `prefix` "rope_parameters.") read with the types transformers' strict
// configuration classes give its keys; every failure names the file and the key. A null value is a missing one.
struct HfConfig {
  const Node* root;
  std::string source, prefix;

  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw Error(source + ": '" + prefix + std::string(key) + "' " + what);
  }
  const Node* item(const char* key) const {
    const Node* v = root->find(key);
    return v && v->kind != Kind::Null ? v : nullptr;
  }
  bool has(const char* key) const { return item(key) != nullptr; }

  // An integer between lo and hi (sizes: 1 .. kModelSize).
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt, int64_t lo = 1,
                  int64_t hi = limits::kModelSize) const {
    const Node* v = item(key);
    if (!v) {
      if (!fallback) fail(key, "is missing");
      return *fallback;
    }
    const double d = number_of(v);
    if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi) && d == std::floor(d)))
      fail(key, "must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi) +
                    (hi == limits::kModelSize || hi == limits::kModelBlocks ? " (the limit)" : ""));
    return static_cast<int64_t>(d);
  }
  // A count of repeated blocks (layers, experts): bounded tighter than sizes, each one becomes modules and tensors.
  int64_t blocks(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    return integer(key, fallback, 1, limits::kModelBlocks);
  }
  // A finite number within [lo, hi] (`open_lo`: above lo).
  double number(const char* key, double fallback, double lo, double hi = HUGE_VAL, bool open_lo = false) const {
    const Node* v = item(key);
    if (!v) return fallback;
    const double d = number_of(v);
    if (!std::isfinite(d) || d < lo || (open_lo && d == lo) || d > hi) {
      std::string range = open_lo ? "above " + num(lo) : "at least " + num(lo);
      if (hi != HUGE_VAL) range = "between " + num(lo) + " and " + num(hi);
      fail(key, "must be a number " + range + "; got " + shown(v));
    }
    return d;
  }
  double probability(const char* key, double fallback) const { return number(key, fallback, 0, 1); }
  bool flag(const char* key, bool fallback) const {
    const Node* v = item(key);
    if (!v) return fallback;
    if (v->kind != Kind::Bool) fail(key, "must be true or false; got " + shown(v));
    return v->b;
  }
  std::string text(const char* key, const std::string& fallback) const {
    const Node* v = item(key);
    if (!v) return fallback;
    if (v->kind != Kind::String) fail(key, "must be a string; got " + shown(v));
    return v->s;
  }
  static std::string num(double d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", d);
    return buf;
  }
};

// a * b, refused above kModelSize (a projection's width: heads x head_dim).
int64_t product(const HfConfig& c, const char* a, int64_t x, const char* b, int64_t y) {
  if (x > limits::kModelSize / y)
    c.fail(a, "times '" + std::string(b) + "' must be at most " + std::to_string(limits::kModelSize) + " (the limit)");
  return x * y;
}

// pad_token_id, which the families that take it give their token embedding as nn.Embedding's padding_idx: null, or an
// id in the vocabulary (a negative one counts from the end, as padding_idx does); nn.Embedding refuses any other.
void check_padding(const HfConfig& c, int64_t vocab) {
  const Node* v = c.item("pad_token_id");
  if (!v) return;
  const double d = number_of(v);
  if (!(d >= static_cast<double>(-vocab) && d < static_cast<double>(vocab) && d == std::floor(d)))
    c.fail("pad_token_id", "must be null or a token id of the vocabulary (" + std::to_string(vocab) +
                               " tokens; a negative one counts from the end), as the embedding's padding_idx; got " +
                               shown(v));
}

// Rotary embeddings: rope_theta and transformers 5's rope_parameters (4's rope_scaling), as RotaryEmbeddingConfigMixin
// standardizes and validates them (modeling_rope_utils), plus what it only warns about and computes garbage from.
void check_rope(const HfConfig& c, int64_t max_positions) {
  c.number("rope_theta", 10000, 0, HUGE_VAL, /*open_lo=*/true);
  // partial_rotary_factor beside the rope parameters goes into them (RotaryEmbeddingConfigMixin).
  if (c.has("partial_rotary_factor") && c.number("partial_rotary_factor", 1, 0, 1, true) != 1)
    c.fail("partial_rotary_factor", "must be 1 (libacc rotates whole heads)");
  // transformers takes `rope_scaling or rope_parameters`: a non-empty rope_scaling wins.
  const Node* scaling = c.item("rope_scaling");
  const char* key = scaling && !(scaling->kind == Kind::Map && scaling->map.empty()) ? "rope_scaling"
                                                                                     : "rope_parameters";
  const Node* r = c.item(key);
  if (!r) return;
  if (r->kind != Kind::Map) c.fail(key, "must be an object (rope_type, rope_theta, factor, ...); got " + shown(r));
  const HfConfig p{r, c.source, std::string(key) + "."};
  for (const auto& [name, e] : r->map)
    if (e.kind == Kind::Map)  // transformers 5's rope parameters per layer type ({"full_attention": {...}})
      p.fail(name, "is an object: rope parameters per layer type are not something libacc has");
  const std::string type = p.text("rope_type", p.text("type", "default"));
  p.number("rope_theta", 10000, 0, HUGE_VAL, /*open_lo=*/true);
  // transformers requires a factor for these (KeyError); below 1 it only warns, and 0 or less divides by it.
  const bool scaled = type == "linear" || type == "dynamic" || type == "yarn" || type == "llama3";
  if (scaled && !p.has("factor")) p.fail("factor", "is missing (rope_type '" + type + "' requires it)");
  p.number("factor", 1, 0, HUGE_VAL, /*open_lo=*/true);
  // libacc rotates whole heads.
  if (p.has("partial_rotary_factor") && p.number("partial_rotary_factor", 1, 0, 1, true) != 1)
    p.fail("partial_rotary_factor", "must be 1 (libacc rotates whole heads)");
  p.integer("original_max_position_embeddings", max_positions);
  if (type == "llama3") {
    for (const char* k : {"low_freq_factor", "high_freq_factor"})
      if (!p.has(k)) p.fail(k, "is missing (rope_type 'llama3' requires it)");
    const double low = p.number("low_freq_factor", 1, 0, HUGE_VAL, true);
    // Equal factors divide by zero in the smoothing between them.
    if (p.number("high_freq_factor", 4, 0, HUGE_VAL, true) <= low)
      p.fail("high_freq_factor", "must be above 'low_freq_factor'");
  }
}

// (Llama|Mistral|Qwen2|Mixtral)Config.
void decoder(const HfConfig& c, const std::string& arch, ParameterShapes* out) {
  const int64_t V = c.integer("vocab_size"), H = c.integer("hidden_size"), I = c.integer("intermediate_size"),
                L = c.blocks("num_hidden_layers");
  const int64_t heads = c.integer("num_attention_heads");
  const bool qwen = arch == "Qwen2ForCausalLM", mixtral = arch == "MixtralForCausalLM",
             llama = arch == "LlamaForCausalLM";
  const DecoderDefaults defaults = decoder_defaults(arch);
  // Missing, the class default (MistralConfig's and MixtralConfig's 8, Qwen2Config's 32); null, num_attention_heads.
  const Node* kv_given = c.root->find("num_key_value_heads");
  const int64_t kv = c.integer("num_key_value_heads", !kv_given && defaults.kv_heads ? defaults.kv_heads : heads);
  // LlamaConfig.validate_architecture; the others derive head_dim by integer division.
  if (arch == "LlamaForCausalLM" && H % heads != 0)
    c.fail("hidden_size", "(" + std::to_string(H) + ") must be a multiple of 'num_attention_heads' (" +
                              std::to_string(heads) + "), as LlamaConfig requires");
  if (heads % kv != 0)
    c.fail("num_attention_heads", "(" + std::to_string(heads) + ") must be a multiple of 'num_key_value_heads' (" +
                                      std::to_string(kv) + (kv_given ? ")" : ", the default when it is missing)"));
  if (!c.has("head_dim") && H / heads == 0)
    c.fail("hidden_size", "(" + std::to_string(H) + ") must be at least 'num_attention_heads' (" +
                              std::to_string(heads) + ") for a head_dim of hidden_size / num_attention_heads");
  const int64_t hd = c.integer("head_dim", H / heads);
  if (hd % 2 != 0)
    c.fail("head_dim", "must be even (rotary embeddings turn pairs of dimensions); got " + std::to_string(hd));
  product(c, "num_attention_heads", heads, "head_dim", hd);
  const int64_t max_positions = c.integer("max_position_embeddings", defaults.max_positions);
  c.number("rms_norm_eps", defaults.eps, 0);
  // LlamaConfig bounds it to [0, 1]; the others only need a standard deviation.
  c.number("initializer_range", 0.02, 0, arch == "LlamaForCausalLM" ? 1 : HUGE_VAL);
  c.probability("attention_dropout", 0);
  c.text("hidden_act", "silu");
  c.flag("use_sliding_window", false);
  c.integer("sliding_window", 1);  // a window of 0 attends to nothing
  if (qwen) c.integer("max_window_layers", 28, 0);  // Qwen2: the first layer that slides (layer_types absent)
  if (const Node* types = c.item("layer_types")) {  // Qwen2: PreTrainedConfig.validate_layer_type
    if (types->kind != Kind::List || static_cast<int64_t>(types->list.size()) != L)
      c.fail("layer_types", "must be a list of one attention type per layer (" + std::to_string(L) + ")");
    for (const Node& t : types->list)
      if (t.kind != Kind::String) c.fail("layer_types", "must hold strings; got " + shown(&t));
  }
  check_rope(c, max_positions);
  check_padding(c, V);
  int64_t experts = 0;
  if (mixtral) {
    experts = c.blocks("num_local_experts", 8);
    c.integer("num_experts_per_tok", 2, 1, experts);
    c.flag("output_router_logits", false);
    c.number("router_aux_loss_coef", 0.001, 0);
    c.number("router_jitter_noise", 0, 0);
    if (L > limits::kModelBlocks / experts)
      c.fail("num_hidden_layers",
             "times 'num_local_experts' must be at most " + std::to_string(limits::kModelBlocks) + " (the limit)");
  }
  // Qwen2Attention: q, k and v with bias; only Llama reads attention_bias and mlp_bias (Mistral's and Mixtral's
  // projections have none whatever the config says).
  const bool qkv_bias = qwen || (llama && c.flag("attention_bias", false)),
             o_bias = llama && c.flag("attention_bias", false);
  const bool mlp_bias = llama && c.flag("mlp_bias", false);
  const bool tied = c.flag("tie_word_embeddings", false);
  if (!out) return;
  const auto linear = [&](const std::string& name, int64_t in, int64_t outs, bool bias) {
    out->push_back({name + ".weight", {outs, in}});
    if (bias) out->push_back({name + ".bias", {outs}});
  };
  out->push_back({"model.embed_tokens.weight", {V, H}});
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    linear(p + "self_attn.q_proj", H, heads * hd, qkv_bias);
    linear(p + "self_attn.k_proj", H, kv * hd, qkv_bias);
    linear(p + "self_attn.v_proj", H, kv * hd, qkv_bias);
    linear(p + "self_attn.o_proj", heads * hd, H, o_bias);
    if (mixtral) {
      linear(p + "block_sparse_moe.gate", H, experts, false);
      for (int64_t e = 0; e < experts; ++e) {
        const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        linear(x + "w1", H, I, false);
        linear(x + "w3", H, I, false);
        linear(x + "w2", I, H, false);
      }
    } else {
      linear(p + "mlp.gate_proj", H, I, mlp_bias);
      linear(p + "mlp.up_proj", H, I, mlp_bias);
      linear(p + "mlp.down_proj", I, H, mlp_bias);
    }
    out->push_back({p + "input_layernorm.weight", {H}});
    out->push_back({p + "post_attention_layernorm.weight", {H}});
  }
  out->push_back({"model.norm.weight", {H}});
  if (!tied) out->push_back({"lm_head.weight", {V, H}});
}

// GPT2Config.
void gpt2(const HfConfig& c, ParameterShapes* out) {
  const int64_t V = c.integer("vocab_size"), P = c.integer("n_positions", 1024), C = c.integer("n_embd"),
                L = c.blocks("n_layer"), heads = c.integer("n_head"), inner = c.integer("n_inner", 4 * C);
  // GPT2Attention raises unless the heads divide the width.
  if (C % heads != 0)
    c.fail("n_embd", "(" + std::to_string(C) + ") must be a multiple of 'n_head' (" + std::to_string(heads) + ")");
  c.number("layer_norm_epsilon", 1e-5, 0);
  c.number("initializer_range", 0.02, 0);
  for (const char* k : {"embd_pdrop", "attn_pdrop", "resid_pdrop"}) c.probability(k, 0.1);
  c.text("activation_function", "gelu_new");
  c.flag("scale_attn_weights", true);
  c.flag("scale_attn_by_inverse_layer_idx", false);
  // GPT2LMHeadModel's lm_head is its own weight when untied; libacc's head is wte.
  if (!c.flag("tie_word_embeddings", true))
    c.fail("tie_word_embeddings", "must be true: libacc's GPT2LMHeadModel has no lm_head of its own (its head is "
                                  "transformer.wte)");
  if (!out) return;
  const auto conv = [&](const std::string& name, int64_t in, int64_t outs) {  // Conv1D: [in, out]
    out->push_back({name + ".weight", {in, outs}});
    out->push_back({name + ".bias", {outs}});
  };
  const auto norm = [&](const std::string& name) {
    out->push_back({name + ".weight", {C}});
    out->push_back({name + ".bias", {C}});
  };
  out->push_back({"transformer.wte.weight", {V, C}});
  out->push_back({"transformer.wpe.weight", {P, C}});
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    norm(p + "ln_1");
    conv(p + "attn.c_attn", C, 3 * C);
    conv(p + "attn.c_proj", C, C);
    norm(p + "ln_2");
    conv(p + "mlp.c_fc", C, inner);
    conv(p + "mlp.c_proj", inner, C);
  }
  norm("transformer.ln_f");
}

// The number of labels of a classifier: id2label's entries (an object of integer keys, as PreTrainedConfig converts
// them with int()), else num_labels.
int64_t label_count(const HfConfig& c) {
  const Node* labels = c.item("id2label");
  if (!labels) return c.integer("num_labels", 2);
  if (labels->kind != Kind::Map) c.fail("id2label", "must be an object of label ids to names; got " + shown(labels));
  int64_t n = 0;
  for (const auto& entry : labels->map) {
    ++n;
    const std::string_view k = entry.first;
    int64_t id = 0;
    const auto r = std::from_chars(k.data() + (!k.empty() && k[0] == '-'), k.data() + k.size(), id);
    if (k.empty() || r.ec != std::errc() || r.ptr != k.data() + k.size())
      c.fail("id2label", "has the key \"" + std::string(k.substr(0, 40)) + "\", which is not an integer label id");
  }
  if (n < 1 || n > limits::kModelSize)
    c.fail("id2label", "must name between 1 and " + std::to_string(limits::kModelSize) + " labels");
  return n;
}

// BertConfig, with the classifier of BertForSequenceClassification.
void bert(const HfConfig& c, ParameterShapes* out) {
  const int64_t V = c.integer("vocab_size"), H = c.integer("hidden_size"), L = c.blocks("num_hidden_layers"),
                heads = c.integer("num_attention_heads"), I = c.integer("intermediate_size"),
                P = c.integer("max_position_embeddings", 512), T = c.integer("type_vocab_size", 2);
  // BertSelfAttention raises unless the heads divide the hidden size.
  if (H % heads != 0)
    c.fail("hidden_size",
           "(" + std::to_string(H) + ") must be a multiple of 'num_attention_heads' (" + std::to_string(heads) + ")");
  const int64_t n_labels = label_count(c);
  check_padding(c, V);
  c.number("layer_norm_eps", 1e-12, 0);
  c.number("initializer_range", 0.02, 0);
  for (const char* k : {"hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"})
    c.probability(k, 0.1);
  c.text("hidden_act", "gelu");
  c.text("position_embedding_type", "absolute");
  // is_decoder makes BERT's self-attention causal; libacc's classifier attends both ways.
  if (c.flag("is_decoder", false))
    c.fail("is_decoder", "must be false: libacc's BertForSequenceClassification has no causal (decoder) attention");
  const std::string problem = c.text("problem_type", "");
  if (!problem.empty() && problem != "regression" && problem != "single_label_classification" &&
      problem != "multi_label_classification")
    c.fail("problem_type",
           "must be regression, single_label_classification or multi_label_classification; got '" + problem + "'");
  if (problem == "single_label_classification" && n_labels == 1)
    c.fail("problem_type", "single_label_classification needs more than one label (PreTrainedConfig refuses it)");
  if (!out) return;
  const auto linear = [&](const std::string& name, int64_t in, int64_t outs) {
    out->push_back({name + ".weight", {outs, in}});
    out->push_back({name + ".bias", {outs}});
  };
  const auto norm = [&](const std::string& name) {
    out->push_back({name + ".weight", {H}});
    out->push_back({name + ".bias", {H}});
  };
  out->push_back({"bert.embeddings.word_embeddings.weight", {V, H}});
  out->push_back({"bert.embeddings.position_embeddings.weight", {P, H}});
  out->push_back({"bert.embeddings.token_type_embeddings.weight", {T, H}});
  norm("bert.embeddings.LayerNorm");
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    linear(p + "attention.self.query", H, H);
    linear(p + "attention.self.key", H, H);
    linear(p + "attention.self.value", H, H);
    linear(p + "attention.output.dense", H, H);
    norm(p + "attention.output.LayerNorm");
    linear(p + "intermediate.dense", H, I);
    linear(p + "output.dense", I, H);
    norm(p + "output.LayerNorm");
  }
  linear("bert.pooler.dense", H, H);
  linear("classifier", H, n_labels);
}

}  // namespace

std::optional<std::string> causal_lm_class(const std::string& model_type) {
  static const std::pair<const char*, const char*> kCausalLM[] = {{"llama", "LlamaForCausalLM"},
                                                                  {"mistral", "MistralForCausalLM"},
                                                                  {"qwen2", "Qwen2ForCausalLM"},
                                                                  {"mixtral", "MixtralForCausalLM"},
                                                                  {"gpt2", "GPT2LMHeadModel"}};
  for (const auto& [type, cls] : kCausalLM)
    if (model_type == type) return std::string(cls);
  return std::nullopt;
}

namespace {

// Checks the config and, with `out`, lists its shapes. Returns the architecture, `known` false for one libacc lacks.
std::string read_config(std::string_view text, const std::string& source, ParameterShapes* out, bool* known) {
  const Node doc = parse_object(text, source);
  const HfConfig c{&doc, source, ""};
  const Node* archs = c.item("architectures");
  const Node* first = archs && archs->kind == Kind::List && !archs->list.empty() ? &archs->list[0] : nullptr;
  const Node* type = c.item("model_type");
  std::string arch;
  if (first && first->kind == Kind::String) {
    arch = first->s;
  } else if (!archs && type && type->kind == Kind::String) {  // AutoModelForCausalLM.from_config's choice
    arch = causal_lm_class(type->s).value_or("");
    if (arch.empty()) {
      *known = false;
      return type->s;
    }
  } else {
    throw Error(source + ": " +
                (archs ? "no 'architectures' list naming the model class"
                       : "neither an 'architectures' list naming the model class nor a 'model_type'"));
  }
  if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM" || arch == "Qwen2ForCausalLM" ||
      arch == "MixtralForCausalLM")
    decoder(c, arch, out);
  else if (arch == "GPT2LMHeadModel") gpt2(c, out);
  else if (arch == "BertForSequenceClassification") bert(c, out);
  else *known = false;
  return arch;
}

}  // namespace

void check_hf_config(std::string_view config_json, const std::string& source) {
  bool known = true;
  (void)read_config(config_json, source, nullptr, &known);
}

ParameterShapes hf_parameter_shapes(const std::string& config_json, const std::string& source) {
  ParameterShapes out;
  bool known = true;
  const std::string arch = read_config(config_json, source, &out, &known);
  if (!known)
    throw Error(source + ": architecture '" + arch +
                "' is not one libacc has (LlamaForCausalLM, MistralForCausalLM, "
                "Qwen2ForCausalLM, MixtralForCausalLM, GPT2LMHeadModel, BertForSequenceClassification)");
  return out;
}

HfIndex parse_hf_index(std::string_view index_json, const std::string& dir, const std::string& source) {
  const Node doc = parse_object(index_json, source + ": bad index");
  const Node* map = doc.find("weight_map");
  if (!map || map->kind != Kind::Map) throw Error(source + ": bad index: no \"weight_map\" object");
  HfIndex out;
  std::set<std::string> shards;
  // One pass over the entries (the index of a large model lists 100k tensors): no lookup by key.
  for (const auto& [name, e] : map->map) {
    if (e.kind != Kind::String) throw Error(source + ": bad index: weight_map['" + name + "'] is not a file name");
    const std::string path = child_path(dir, e.s, source + " weight_map['" + name + "']");
    out.weight_map.emplace_back(name, path);
    shards.insert(path);
  }
  if (out.weight_map.empty()) throw Error(source + ": bad index: the weight_map is empty");
  out.shards.assign(shards.begin(), shards.end());
  return out;
}

HfIndex read_hf_index(const std::string& dir) {
  const std::string path = child_path(dir, kHfIndexName, "the index");
  return parse_hf_index(read_file(path, limits::kHfIndexBytes), dir, path);
}

}  // namespace acc::config
