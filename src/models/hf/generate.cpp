#include "models/hf/generate.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <limits>

#include "models/hf/families.hpp"
#include "models/hf/layers.hpp"
#include "util/options.hpp"

namespace acc::core::hf {

GenerationOptions parse_generation_options(const char* json, GenerationOptions d) {
  Options o(json, "generation options",
            {"max_new_tokens", "do_sample", "temperature", "top_k", "top_p", "repetition_penalty", "eos_token_id",
             "pad_token_id", "seed"});
  d.max_new_tokens = o.get_int("max_new_tokens", d.max_new_tokens, 0);
  d.do_sample = o.get_bool("do_sample", d.do_sample);
  d.temperature = o.get_double("temperature", d.temperature);
  if (d.temperature <= 0) throw OptionsError("generation options: 'temperature' must be > 0");
  d.top_k = o.get_int("top_k", d.top_k, 0);
  d.top_p = o.get_double("top_p", d.top_p);
  if (d.top_p <= 0 || d.top_p > 1) throw OptionsError("generation options: 'top_p' must be in (0, 1]");
  d.repetition_penalty = o.get_double("repetition_penalty", d.repetition_penalty);
  if (d.repetition_penalty <= 0) throw OptionsError("generation options: 'repetition_penalty' must be > 0");
  if (o.has("eos_token_id")) d.eos_source = "generation options";
  d.eos_token_ids = o.get_id_list("eos_token_id", d.eos_token_ids);
  if (o.has("pad_token_id")) d.pad_source = "generation options";
  d.pad_token_id = o.get_int("pad_token_id", d.pad_token_id, 0);
  if (o.has("seed")) d.seed = static_cast<uint64_t>(o.get_int("seed", 0, 0));
  return d;
}

namespace {

// transformers' logits processors, in the order generate applies them: RepetitionPenalty, then (sampling)
// Temperature, TopK, TopP. scores [B, V] float32; seen [B, S] the ids so far.
at::Tensor process(at::Tensor scores, const at::Tensor& seen, const GenerationOptions& o) {
  if (o.repetition_penalty != 1.0) {
    at::Tensor s = scores.gather(1, seen);
    s = at::where(s < 0, s * o.repetition_penalty, s / o.repetition_penalty);
    scores = scores.scatter(1, seen, s);
  }
  if (!o.do_sample) return scores;
  const float lowest = -std::numeric_limits<float>::infinity();
  if (o.temperature != 1.0) scores = scores / o.temperature;
  if (o.top_k > 0 && o.top_k < scores.size(-1)) {
    at::Tensor kth = std::get<0>(scores.topk(o.top_k)).narrow(-1, o.top_k - 1, 1);
    scores = scores.masked_fill(scores < kth, lowest);
  }
  if (o.top_p < 1.0) {
    auto [sorted, order] = scores.sort(-1, /*descending=*/false);
    at::Tensor remove = sorted.softmax(-1).cumsum(-1) <= (1 - o.top_p);
    remove.narrow(-1, remove.size(-1) - 1, 1).fill_(false);  // keep at least one token
    scores = scores.masked_fill(remove.scatter(1, order, remove), lowest);
  }
  return scores;
}

}  // namespace

namespace {

CausalLM& causal_lm(Model& model) {
  auto* lm = dynamic_cast<CausalLM*>(&model);
  if (!lm)
    throw std::invalid_argument("generate: the model is not a causal language model (from_pretrained's *ForCausalLM)");
  return *lm;
}

}  // namespace

at::Tensor generate(Model& model, const at::Tensor& input_ids, const at::Tensor& attention_mask,
                    const char* options_json, const TokenCallback& on_tokens) {
  return generate(model, input_ids, attention_mask,
                  parse_generation_options(options_json, causal_lm(model).generation_defaults), on_tokens);
}

at::Tensor generate(Model& model, const at::Tensor& input_ids, const at::Tensor& attention_mask,
                    const GenerationOptions& o, const TokenCallback& on_tokens) {
  CausalLM* lm = &causal_lm(model);
  if (input_ids.dim() != 2 || input_ids.size(1) == 0 || at::isFloatingType(input_ids.scalar_type()))
    throw std::invalid_argument("generate: input_ids must be integer token ids of shape [batch, time], time > 0; got " +
                                c10::str(input_ids.scalar_type()) + " " + c10::str(input_ids.sizes()));
  if (attention_mask.defined() && !attention_mask.sizes().equals(input_ids.sizes()))
    throw std::invalid_argument("generate: attention_mask has shape " + c10::str(attention_mask.sizes()) +
                                "; input_ids has " + c10::str(input_ids.sizes()));
  // The ids generate writes (pad) or compares against (eos) must be tokens of the vocabulary: a pad id beyond it
  // would fail in the embedding lookup midway, an eos id beyond it would never stop anything.
  int64_t vocab = -1;
  for (const auto& [name, p] : model.named_parameters())
    if (name == lm->input_embedding_name()) vocab = p.size(0);
  // Under tensor parallelism the embedding holds this rank's slice of the vocabulary.
  if (vocab >= 0) vocab *= lm->forward_seams().parts();
  auto check_id = [&](const char* key, int64_t id, const std::string& source) {
    if (vocab >= 0 && (id < 0 || id >= vocab))
      throw OptionsError("generate: " + std::string(key) + " " + std::to_string(id) + " (from " + source +
                         ") is not a token of the model's vocabulary [0, " + std::to_string(vocab) + ")");
  };
  check_id("pad_token_id", o.pad_token_id, o.pad_source);
  for (int64_t id : o.eos_token_ids) check_id("eos_token_id", id, o.eos_source);
  check_attention_mask(attention_mask);  // before the conversion below turns 0.5 into 0
  c10::NoGradGuard no_grad;
  const int64_t B = input_ids.size(0);
  at::Tensor ids = input_ids.to(at::kLong);
  at::Tensor mask = attention_mask.defined() ? attention_mask.to(at::kLong) : at::ones_like(ids);
  std::optional<at::Generator> gen;
  if (o.seed) gen = at::make_generator<at::CPUGeneratorImpl>(*o.seed);
  at::Tensor eos = at::tensor(o.eos_token_ids, at::kLong);
  at::Tensor unfinished = at::ones({B}, at::kBool);
  KvCache cache;
  at::Tensor next_input = ids;
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    // Positions count the tokens present (left padding does not move them), as generate computes them.
    at::Tensor pos = (mask.cumsum(-1) - 1)
                         .masked_fill(mask.eq(0), 1)
                         .narrow(1, ids.size(1) - next_input.size(1), next_input.size(1));
    at::Tensor logits = lm->step(next_input, mask, pos, &cache);
    at::Tensor scores = process(logits.select(1, logits.size(1) - 1).to(at::kCPU, at::kFloat), ids, o);
    at::Tensor next = o.do_sample ? at::multinomial(scores.softmax(-1), 1, false, gen).squeeze(1) : scores.argmax(-1);
    next = at::where(unfinished, next, at::full_like(next, o.pad_token_id));
    ids = at::cat({ids, next.unsqueeze(1)}, 1);
    mask = at::cat({mask, at::ones({B, 1}, mask.options())}, 1);
    if (eos.numel() > 0) unfinished = unfinished.logical_and(at::isin(next, eos).logical_not());
    next_input = next.unsqueeze(1);
    if (on_tokens && !on_tokens(next)) break;
    if (!unfinished.any().item<bool>()) break;
  }
  return ids;
}

}  // namespace acc::core::hf
