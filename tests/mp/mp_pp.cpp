// One rank of the test of pipeline parallelism (src/parallel/pipeline.cpp), started by `acc launch --num_processes N`
// (tests/mp/meson.build). On 2 processes: pp=2 with GPipe, 1F1B, Interleaved1F1B and InterleavedZeroBubble (2 stages
// per rank), and each process a pipeline of its own (pp=1: every stage on one rank). On 4: pp=4 with each schedule
// (Interleaved1F1B with 1 and 2 stages per rank, InterleavedZeroBubble with 1), then two groups of pp=2 with 2 stages
// per rank.
// For the built-in GPT, GPT-2 and Llama (from a config; its head tied or not; Hugging Face's batches left-padded), a
// pipelined model trains 20 SGD steps beside the whole model in the same process on the same batches: the loss at
// every step within 1e-5 (relative) of the whole model's and equal on every rank of the group, this rank's parameters
// (named as in the whole model) within 1e-5 of the whole model's after 20 steps, and every parameter held by some rank
// of the group; then the loss of a forward without gradients (eval_step). Then torchtitan's stage layouts, and bad
// input, each refused by name: microbatches that do not divide the batch, stage layouts torchtitan refuses, an unknown
// schedule, a model without stages.
// Usage: mp_pp. Prints "N passed, N failed"; exits non-zero on a failed check.
#include <ATen/ATen.h>
#include <acc/config.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>

#include "models/model.hpp"
#include "parallel/pipeline.hpp"
#include "runtime/comm.hpp"
#include "runtime/process_state.hpp"

#include "mp_check.hpp"
#include "mp_models.hpp"

using namespace acc::core;

namespace {

const char* kBuiltinGpt = R"({"type": "gpt", "vocab_size": 96, "block_size": 32, "n_layer": 6, "n_head": 4,
  "n_embd": 32})";
const char* kGpt2 = R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 96,
  "n_positions": 32, "n_embd": 24, "n_layer": 6, "n_head": 4, "n_inner": 48, "embd_pdrop": 0, "attn_pdrop": 0,
  "resid_pdrop": 0, "initializer_range": 0.2})";
const char* kLlama = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 96,
  "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
  "initializer_range": 0.2, "tie_word_embeddings": false})";
// Its head tied to the embedding: the first and the last stage each hold model.embed_tokens.weight.
const char* kLlamaTied = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 96,
  "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
  "initializer_range": 0.2, "tie_word_embeddings": true})";

Maker builtin(const std::string& spec) {
  return [spec] {
    at::manual_seed(7);
    return make_builtin_model(spec.c_str());
  };
}

struct Case {
  std::string schedule;
  int stages_per_rank;
};

void sgd(const NamedTensors& params, double lr) {
  at::NoGradGuard no_grad;
  for (const auto& [name, p] : params)
    if (p.grad().defined()) {
      p.sub_(p.grad(), lr);
      p.mutable_grad() = at::Tensor();
    }
}

// Whether every rank of the group got the same value.
bool same_on_group(Comm& group, double v) {
  at::Tensor high = at::tensor({v}, at::kDouble), low = at::tensor({-v}, at::kDouble);
  group.all_reduce(high, ReduceOp::Max);
  group.all_reduce(low, ReduceOp::Max);
  return high.item<double>() == -low.item<double>();
}

// Every whole-model parameter is held by some rank of the group (and this rank holds fewer when pp > 1).
void check_held(const std::string& what, Comm& group, const NamedTensors& whole, const NamedTensors& mine) {
  at::Tensor held = at::zeros({static_cast<int64_t>(whole.size())}, at::kFloat);
  for (size_t k = 0; k < whole.size(); ++k)
    for (const auto& [name, t] : mine)
      if (name == whole[k].first) held[static_cast<int64_t>(k)] = 1;
  const bool split = mine.size() < whole.size();
  group.all_reduce(held, ReduceOp::Sum);
  expect(held.min().item<float>() >= 1, what + ": every parameter is held by a rank of the group");
  expect(group.size() == 1 || split, what + ": this rank holds only its stages' parameters (" +
                                         std::to_string(mine.size()) + " of " + std::to_string(whole.size()) + ")");
}

// Random tokens. Hugging Face's batches: every row left-padded by 2 (attention_mask 0, labels -100 there), so that
// every micro-batch has as many targets and the mean of their means is the batch's mean (as the whole model's).
TensorDict batch_of(bool hf, int64_t rows, int64_t T) {
  at::Tensor ids = at::randint(0, 96, {rows, T}, at::kLong);
  if (hf) {
    at::Tensor mask = at::ones({rows, T}, at::kLong), labels = ids.clone();
    mask.narrow(1, 0, 2).zero_();
    labels.narrow(1, 0, 2).fill_(-100);
    return TensorDict{{"input_ids", ids}, {"attention_mask", mask}, {"labels", labels}};
  }
  return TensorDict{{"input_ids", ids}, {"targets", at::randint(0, 96, {rows, T}, at::kLong)}};
}

void equivalence(const std::string& model, const Maker& make, bool hf, const std::shared_ptr<Comm>& group,
                 const Case& c) {
  const std::string what =
      model + " " + c.schedule + " pp=" + std::to_string(group->size()) + " x " + std::to_string(c.stages_per_rank);
  auto whole = make();
  auto split = make();
  whole->train(true);
  split->train(true);
  pp::Options o;
  o.schedule = c.schedule;
  o.microbatches = 4;
  o.stages_per_rank = c.stages_per_rank;
  pp::Pipeline pipe(*split, group, o);
  check_held(what, *group, whole->named_parameters(), split->named_parameters());
  at::manual_seed(11);  // the same batches on every rank
  const double lr = 0.05;
  for (int step = 0; step < 20; ++step) {
    const TensorDict batch = batch_of(hf, 8, 16);
    at::Tensor loss = whole->forward(batch).at("loss");
    loss.backward();
    const double la = loss.item<double>(), lb = pipe.step(batch);
    expect(std::abs(la - lb) <= 1e-5 * std::abs(la),
           what + ": loss at step " + std::to_string(step) + " " + num(lb) + " vs " + num(la));
    expect(same_on_group(*group, lb), what + ": the loss is equal on every rank of the group");
    sgd(whole->named_parameters(), lr);
    sgd(split->named_parameters(), lr);
  }
  {  // evaluation: the forward alone, without gradients
    const TensorDict batch = batch_of(hf, 8, 16);
    at::NoGradGuard no_grad;
    const double la = whole->forward(batch).at("loss").item<double>(), lb = pipe.eval_step(batch);
    expect(std::abs(la - lb) <= 1e-5 * std::abs(la), what + ": evaluation loss " + num(lb) + " vs " + num(la));
    expect(same_on_group(*group, lb), what + ": the evaluation loss is equal on every rank of the group");
  }
  std::map<std::string, at::Tensor> ref;
  for (const auto& [name, t] : whole->named_parameters()) ref[name] = t;
  double worst = 0;
  std::string where;
  for (const auto& [name, t] : split->named_parameters()) {
    const at::Tensor& r = ref.at(name);
    const double d = t.sizes() == r.sizes() ? (t - r).abs().max().item<double>() : 1e9;
    if (d > worst) worst = d, where = name;
  }
  expect(worst <= 1e-5, what + ": parameters after 20 steps within 1e-5 (worst " + num(worst) + " at " + where + ")");
}

void equivalences(const std::shared_ptr<Comm>& group, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    equivalence("built-in gpt", builtin(kBuiltinGpt), false, group, c);
    equivalence("gpt2", from_config(kGpt2), true, group, c);
    equivalence("llama", from_config(kLlama), true, group, c);
    equivalence("llama (tied head)", from_config(kLlamaTied), true, group, c);
  }
}

// `make_pipeline` throws std::invalid_argument containing `words` (before any message between ranks).
void refused(const std::string& what, const std::function<void()>& make_pipeline, const std::string& words) {
  try {
    make_pipeline();
    expect(false, what + ": refused");
  } catch (const std::invalid_argument& e) {
    expect(std::string(e.what()).find(words) != std::string::npos,
           what + ": refused naming '" + words + "' (got: " + e.what() + ")");
  }
}

// The stage layouts against torchtitan's examples (_generate_llm_fqn_per_model_part) and the user's split points.
std::string layout_text(const std::vector<StageLayers>& stages) {
  std::string out;
  for (const StageLayers& s : stages)
    out += std::string("[") + (s.first ? "emb " : "") + std::to_string(s.begin) + "-" + std::to_string(s.end) +
           (s.last ? " head" : "") + "]";
  return out;
}

void layouts() {
  const std::string two = layout_text(pp::balanced_stages(8, 2));
  expect(two == "[emb 0-4][4-8 head]", "8 layers in 2 stages: tok, l0-3 | l4-7, norm, head (got " + two + ")");
  const std::string four = layout_text(pp::balanced_stages(8, 4));
  expect(four == "[emb 0-2][2-5][5-7][7-8 head]",
         "8 layers in 4 stages: tok, l0, l1 | l2-l4 | l5, l6 | l7, norm, head (got " + four + ")");
  const std::string one = layout_text(pp::balanced_stages(3, 1));
  expect(one == "[emb 0-3 head]", "one stage holds everything (got " + one + ")");
  const std::string weights = layout_text(pp::balanced_stages(6, 4, 2, 1));
  expect(weights == "[emb 0-1][1-3][3-5][5-6 head]",
         "input_weight 2: 9 effective layers, 3 2 2 2 (got " + weights + ")");
  const std::string user = layout_text(pp::stages_at(6, {1, 5}));
  expect(user == "[emb 0-1][1-5][5-6 head]", "split points 1 and 5 (got " + user + ")");
  const std::string ends = layout_text(pp::stages_at(6, {0, 6}));
  expect(ends == "[emb 0-0][0-6][6-6 head]", "split points at the ends (got " + ends + ")");
  refused("split points out of order", [] { pp::stages_at(6, {3, 3}); }, "split point 3 (number 1)");
  refused("a split point past the blocks", [] { pp::stages_at(6, {7}); }, "split point 7 (number 0)");
}

void refusals(const std::shared_ptr<Comm>& group) {
  const int n = group->size();
  auto with = [&](const char* spec, std::function<void(pp::Options&)> set) {
    return [spec, set, group] {
      auto m = builtin(spec)();
      pp::Options o;
      o.microbatches = 4;
      set(o);
      pp::Pipeline pipe(*m, group, o);
      at::manual_seed(3);
      pipe.step(batch_of(false, 6, 8));
    };
  };
  refused("microbatches", with(kBuiltinGpt, [](pp::Options&) {}),
          "4 microbatches do not divide the batch of 6 rows ('input_ids')");
  refused("unknown schedule", with(kBuiltinGpt, [](pp::Options& o) { o.schedule = "ZeroBubble"; }),
          "unknown pipeline schedule 'ZeroBubble'");
  refused(
      "built-in mlp",
      [&] {
        auto m = builtin(R"({"type": "mlp", "sizes": [4, 8, 1]})")();
        pp::Pipeline pipe(*m, group, pp::Options{});
      },
      "Mlp cannot be cut into pipeline stages");
  // torchtitan's rules: 6 layers + 2 in 3 stages of 3 are not a multiple of pp_size (2 or 4).
  refused("layers per stage", with(kBuiltinGpt, [](pp::Options& o) { o.layers_per_stage = 3; }),
          "Number of virtual stages (3) must be divisible by pipeline parallel size (" + std::to_string(n) + ")");
  const char* two_layers = R"({"type": "gpt", "vocab_size": 96, "block_size": 32, "n_layer": 2, "n_head": 4,
    "n_embd": 32})";
  refused("stages past the layers",
          with(two_layers,
               [](pp::Options& o) {
                 o.schedule = "Interleaved1F1B";
                 o.stages_per_rank = 3;
               }),
          "Number of stages (" + std::to_string(3 * n) + ") cannot be greater than effective layers (4)");
  refused("input weight", with(kBuiltinGpt, [](pp::Options& o) { o.first_stage_less_layers = 8; }),
          "input_weight (8) exceeds minimum layers per stage");
  refused("split points", with(kBuiltinGpt, [](pp::Options& o) { o.split_points = {1, 2, 3, 4, 5, 6, 7}; }),
          "7 split points make 8 stages");
  refused("1F1B microbatches", with(kBuiltinGpt, [n](pp::Options& o) { o.microbatches = n - 1; }),
          "must be greater than or equal to the number of stages (" + std::to_string(n) + ")");
}

}  // namespace

int main() {
  auto comm =
      Comm::connect(ProcessState::from_environment(acc::config::current_environment()), std::chrono::minutes(5));
  const int n = comm->size();
  if (n == 2) {
    equivalences(comm, {{"GPipe", 1}, {"1F1B", 1}, {"Interleaved1F1B", 2}, {"InterleavedZeroBubble", 2}});
    // A group of one: every stage on this rank, handed over in memory (the interleaved ones: 2 stages).
    auto solo = comm->subgroup({comm->rank()}, "solo" + std::to_string(comm->rank()));
    equivalences(solo, {{"GPipe", 1}, {"Interleaved1F1B", 2}, {"InterleavedZeroBubble", 2}});
  } else if (n == 4) {
    equivalences(comm, {{"GPipe", 1},
                        {"1F1B", 1},
                        {"Interleaved1F1B", 1},
                        {"Interleaved1F1B", 2},
                        {"InterleavedZeroBubble", 1}});
    // Two pipelines of 2 side by side (as under dp=2 x pp=2), each with 2 stages per rank.
    const int first = comm->rank() < 2 ? 0 : 2;
    auto pair = comm->subgroup({first, first + 1}, "pp" + std::to_string(first));
    equivalences(pair, {{"Interleaved1F1B", 2}, {"gpipe", 1}});
  }
  layouts();
  refusals(comm);
  comm->barrier();
  return finish();
}
