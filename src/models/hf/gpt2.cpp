// GPT2LMHeadModel from a config.json: GPT-2 (models/gpt2.hpp) as transformers configures it (gelu_new, three dropouts,
// biases, the layer norms' epsilon, attention scaling), with its masks, key/value cache and generation.
#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "models/gpt2.hpp"
#include "models/hf/families.hpp"
#include "models/hf/layers.hpp"
#include "util/errors.hpp"

namespace acc::core::hf {

namespace {

// GPT2LMHeadModel: a causal LM whose head is tied to wte, with transformers' module tree (the weightless dropouts and
// activations), its masks (attention_mask, packed samples) and the key/value cache of generate.
class Gpt2LMHead final : public Gpt2, public CausalLM, public Pretrained {
 public:
  using Gpt2::Gpt2;
  std::string target_name() const override { return "labels"; }
  bool ties_embeddings() const override { return true; }
  std::string input_embedding_name() const override { return "transformer.wte.weight"; }
  std::vector<std::string> no_split_modules() const override { return {"GPT2Block"}; }
  std::string tied_lm_head() const override { return ties_embeddings() ? input_embedding_name() : ""; }
  // transformers' dropout and activation modules: "drop" between the embeddings and the blocks, each block's
  // attention dropouts and its MLP's act and dropout.
  std::vector<WeightlessModule> weightless_modules() const override {
    std::vector<WeightlessModule> w{{"transformer.drop", "Dropout", "h", {}}};
    const std::string act = activation_class(c_.activation_function);
    for (int64_t l = 0; l < c_.n_layer; ++l) {
      const std::string block = "transformer.h." + std::to_string(l);
      for (const char* d : {".attn.attn_dropout", ".attn.resid_dropout"}) w.push_back({block + d, "Dropout", "", {}});
      w.push_back({block + ".mlp.act", act, "", {}});
      w.push_back({block + ".mlp.dropout", "Dropout", "", {}});
    }
    return w;
  }

  TensorDict forward(const TensorDict& batch) override { return causal_lm_forward(*this, c_.name, batch); }
  const ForwardSplit& forward_seams() const override { return forward_split(); }

  at::Tensor local_step(const at::Tensor& input_ids, const at::Tensor& attention_mask, const at::Tensor& position_ids,
                        KvCache* cache) override {
    const std::string& arch = c_.name;
    check_input_ids(arch, input_ids);
    const c10::Device device = t_->wte->param("weight").device();
    const int64_t B = input_ids.size(0), whole = input_ids.size(1);
    // Context parallelism: this rank's tokens of the sequence, at their own positions.
    const ForwardSplit& parallel = forward_split();
    const std::shared_ptr<SequenceSplit> seq = parallel.split_sequence(whole, cache != nullptr, arch);
    const int64_t T = seq ? seq->local_length() : whole;
    const int64_t past = cache ? cache->length : 0;
    at::Tensor ids = input_ids.to(device, at::kLong);
    at::Tensor pos = position_ids.defined()
                         ? position_ids.to(device, at::kLong)
                         : at::arange(past, past + whole, ids.options()).unsqueeze(0).expand({B, whole});
    if (pos.max().item<int64_t>() >= c_.n_positions)
      throw std::invalid_argument(arch + " forward: position " + std::to_string(pos.max().item<int64_t>()) +
                                  " is past n_positions " + std::to_string(c_.n_positions));
    const at::Tensor pos_whole = pos.expand({B, whole});
    if (seq) ids = seq->local(ids), pos = seq->local(pos);
    parallel.check_length(T, cache != nullptr, arch);
    // With sequence parallelism the embeddings are this rank's tokens'.
    const at::Tensor x = embeddings(ids, parallel.local_positions(pos));
    Masking masking;
    // Packed samples (position ids that restart, no attention_mask, no cache) attend only within themselves.
    const at::Tensor packed =
        !attention_mask.defined() && !cache && position_ids.defined() ? packed_sequences(pos_whole) : at::Tensor();
    if (seq) {
      if (packed.defined())
        throw UnsupportedError(arch + ": context parallelism over packed samples (position_ids that restart) is not "
                                      "something libacc has");
      seq->set_masks(check_attention_mask(attention_mask) ? attention_mask : at::Tensor(), 0, x.options());
    } else {
      masking = decoder_masking(attention_mask, B, past, T, 0, x.options(), packed);
    }
    at::Tensor logits = blocks_and_head(x, B, T, seq, masking, cache);
    if (cache) cache->length = past + T;
    return logits;
  }

  // A pipeline stage's part of forward on one micro-batch (models/pipeline_stages.hpp): causal_lm_forward's inputs,
  // masks and loss, without a cache or a sequence split.
  at::Tensor stage_forward(const TensorDict& batch, const at::Tensor& x, const StageLayers& layers) override {
    const std::string& arch = c_.name;
    for (const auto& [name, t] : batch.items())
      if (name != "input_ids" && name != "attention_mask" && name != "position_ids" && name != "labels")
        throw std::invalid_argument(arch + " forward: unexpected batch entry '" + name +
                                    "' (it takes input_ids, attention_mask, position_ids, labels)");
    const at::Tensor& input_ids = batch.at("input_ids");
    check_input_ids(arch, input_ids);
    const int64_t B = input_ids.size(0), T = input_ids.size(1);
    check_no_sequence_split(T);
    const ForwardSplit& parallel = forward_split();
    parallel.check_length(T, false, arch);
    const at::Tensor attention_mask = batch.get("attention_mask"), position_ids = batch.get("position_ids");
    const c10::Device device = x.defined() ? x.device() : t_->wte->param("weight").device();
    at::Tensor pos = position_ids.defined()
                         ? position_ids.to(device, at::kLong)
                         : at::arange(T, at::TensorOptions(device).dtype(at::kLong)).unsqueeze(0).expand({B, T});
    at::Tensor h = x;
    if (layers.first) {
      if (pos.max().item<int64_t>() >= c_.n_positions)
        throw std::invalid_argument(arch + " forward: position " + std::to_string(pos.max().item<int64_t>()) +
                                    " is past n_positions " + std::to_string(c_.n_positions));
      h = embeddings(input_ids.to(device, at::kLong), parallel.local_positions(pos));
    }
    const at::Tensor packed = !attention_mask.defined() && position_ids.defined() ? packed_sequences(pos.expand({B, T}))
                                                                                  : at::Tensor();
    const Masking masking = decoder_masking(attention_mask, B, 0, T, 0, h.options(), packed);
    h = blocks(h, B, T, nullptr, masking, nullptr, layers.begin, layers.end);
    if (!layers.last) return h;
    const at::Tensor labels = batch.get("labels");
    return labels.defined() ? causal_lm_loss(head(h), labels, parallel) : head(h);  // pipelined inference
  }

 private:
  void release_unit(const std::string& unit) const override { release(unit); }
};

}  // namespace

std::unique_ptr<Model> make_gpt2(const json::Value& j, const at::TensorOptions& options, const std::string& source) {
  Gpt2Config c;
  c.name = "GPT2LMHeadModel";
  c.vocab_size = j.get_int("vocab_size");
  c.n_positions = j.get_int_or("n_positions", 1024);
  c.n_embd = j.get_int("n_embd");
  c.n_layer = j.get_int("n_layer");
  c.n_head = j.get_int("n_head");
  c.n_inner = j.get_int_or("n_inner", 4 * c.n_embd);
  c.layer_norm_epsilon = j.get_double_or("layer_norm_epsilon", 1e-5);
  c.initializer_range = j.get_double_or("initializer_range", 0.02);
  c.embd_pdrop = j.get_double_or("embd_pdrop", 0.1);
  c.attn_pdrop = j.get_double_or("attn_pdrop", 0.1);
  c.resid_pdrop = j.get_double_or("resid_pdrop", 0.1);
  c.activation_function = j.get_string_or("activation_function", "gelu_new");
  c.scale_attn_weights = j.get_bool_or("scale_attn_weights", true);
  c.scale_attn_by_inverse_layer_idx = j.get_bool_or("scale_attn_by_inverse_layer_idx", false);
  check_activation(c.activation_function, source, "activation_function");
  if (c.vocab_size <= 0 || c.n_positions <= 0 || c.n_embd <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_inner <= 0 ||
      c.n_embd % c.n_head != 0)
    throw std::invalid_argument(source + ": sizes must be positive and n_embd a multiple of n_head");
  auto model = std::make_unique<Gpt2LMHead>(c, options);
  if (options.device() != c10::kMeta) model->reset_parameters();
  return model;
}

}  // namespace acc::core::hf
