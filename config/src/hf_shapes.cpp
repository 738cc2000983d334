#include "acc/hf_shapes.hpp"

#include <cjson/cJSON.h>

#include <cmath>
#include <memory>
#include <string_view>

#include "acc/limits.hpp"

namespace acc::config {

namespace {

struct HfConfig {
  const cJSON* root;
  const cJSON* item(const char* key) const {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(root, key);
    return v && !cJSON_IsNull(v) ? v : nullptr;
  }
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const cJSON* v = item(key);
    if (!v) {
      if (!fallback) throw Error(std::string("config.json: '") + key + "' is missing");
      return *fallback;
    }
    // Counts of blocks are bounded tighter than sizes: each one becomes tensors to describe.
    const std::string_view k(key);
    const bool blocks = k == "num_hidden_layers" || k == "n_layer" || k == "num_local_experts";
    const double most = static_cast<double>(blocks ? limits::kModelBlocks : limits::kModelSize);
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble != std::floor(v->valuedouble) || v->valuedouble > most)
      throw Error(std::string("config.json: '") + key + "' must be an integer between 1 and " +
                  std::to_string(static_cast<int64_t>(most)) + " (the limit)");
    return static_cast<int64_t>(v->valuedouble);
  }
  bool flag(const char* key, bool fallback) const {
    const cJSON* v = item(key);
    return v ? cJSON_IsTrue(v) : fallback;
  }
};

void decoder(const HfConfig& c, const std::string& arch, ParameterShapes& out) {
  const int64_t V = c.integer("vocab_size"), H = c.integer("hidden_size"), I = c.integer("intermediate_size"),
                L = c.integer("num_hidden_layers"), heads = c.integer("num_attention_heads"),
                kv = c.integer("num_key_value_heads", heads), hd = c.integer("head_dim", H / heads);
  const bool qwen = arch == "Qwen2ForCausalLM", mixtral = arch == "MixtralForCausalLM";
  const bool qkv_bias = qwen || c.flag("attention_bias", false), o_bias = !qwen && c.flag("attention_bias", false);
  const bool mlp_bias = !qwen && c.flag("mlp_bias", false);
  const auto linear = [&](const std::string& name, int64_t in, int64_t outs, bool bias) {
    out.push_back({name + ".weight", {outs, in}});
    if (bias) out.push_back({name + ".bias", {outs}});
  };
  out.push_back({"model.embed_tokens.weight", {V, H}});
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    linear(p + "self_attn.q_proj", H, heads * hd, qkv_bias);
    linear(p + "self_attn.k_proj", H, kv * hd, qkv_bias);
    linear(p + "self_attn.v_proj", H, kv * hd, qkv_bias);
    linear(p + "self_attn.o_proj", heads * hd, H, o_bias);
    if (mixtral) {
      linear(p + "block_sparse_moe.gate", H, c.integer("num_local_experts"), false);
      for (int64_t e = 0; e < c.integer("num_local_experts"); ++e) {
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
    out.push_back({p + "input_layernorm.weight", {H}});
    out.push_back({p + "post_attention_layernorm.weight", {H}});
  }
  out.push_back({"model.norm.weight", {H}});
  if (!c.flag("tie_word_embeddings", false)) out.push_back({"lm_head.weight", {V, H}});
}

void gpt2(const HfConfig& c, ParameterShapes& out) {
  const int64_t V = c.integer("vocab_size"), P = c.integer("n_positions", 1024), C = c.integer("n_embd"),
                L = c.integer("n_layer"), inner = c.integer("n_inner", 4 * C);
  const auto conv = [&](const std::string& name, int64_t in, int64_t outs) {  // Conv1D: [in, out]
    out.push_back({name + ".weight", {in, outs}});
    out.push_back({name + ".bias", {outs}});
  };
  const auto norm = [&](const std::string& name) {
    out.push_back({name + ".weight", {C}});
    out.push_back({name + ".bias", {C}});
  };
  out.push_back({"transformer.wte.weight", {V, C}});
  out.push_back({"transformer.wpe.weight", {P, C}});
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

void bert(const HfConfig& c, ParameterShapes& out) {
  const int64_t V = c.integer("vocab_size"), H = c.integer("hidden_size"), L = c.integer("num_hidden_layers"),
                I = c.integer("intermediate_size"), P = c.integer("max_position_embeddings", 512),
                T = c.integer("type_vocab_size", 2);
  const cJSON* labels = c.item("id2label");
  const int64_t n_labels = labels ? cJSON_GetArraySize(labels) : c.integer("num_labels", 2);
  const auto linear = [&](const std::string& name, int64_t in, int64_t outs) {
    out.push_back({name + ".weight", {outs, in}});
    out.push_back({name + ".bias", {outs}});
  };
  const auto norm = [&](const std::string& name) {
    out.push_back({name + ".weight", {H}});
    out.push_back({name + ".bias", {H}});
  };
  out.push_back({"bert.embeddings.word_embeddings.weight", {V, H}});
  out.push_back({"bert.embeddings.position_embeddings.weight", {P, H}});
  out.push_back({"bert.embeddings.token_type_embeddings.weight", {T, H}});
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

ParameterShapes hf_parameter_shapes(const std::string& config_json) {
  std::unique_ptr<cJSON, void (*)(cJSON*)> doc(cJSON_Parse(config_json.c_str()), cJSON_Delete);
  if (!doc || !cJSON_IsObject(doc.get())) throw Error("config.json is not a JSON object");
  const HfConfig c{doc.get()};
  const cJSON* archs = c.item("architectures");
  const cJSON* first = archs ? cJSON_GetArrayItem(archs, 0) : nullptr;
  if (!first || !cJSON_IsString(first)) throw Error("config.json: no 'architectures' list naming the model class");
  const std::string arch = first->valuestring;
  ParameterShapes out;
  if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM" || arch == "Qwen2ForCausalLM" ||
      arch == "MixtralForCausalLM")
    decoder(c, arch, out);
  else if (arch == "GPT2LMHeadModel")
    gpt2(c, out);
  else if (arch == "BertForSequenceClassification")
    bert(c, out);
  else
    throw Error("config.json: architecture '" + arch + "' is not one libacc has (LlamaForCausalLM, MistralForCausalLM, "
                "Qwen2ForCausalLM, MixtralForCausalLM, GPT2LMHeadModel, BertForSequenceClassification)");
  return out;
}

}  // namespace acc::config
