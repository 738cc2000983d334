// One rank of the tensor-parallelism test, started by `acc launch --num_processes N` (tests/mp/meson.build): every
// rank is one TP group of N (the world), all get the same batch. For the Llama and Mixtral fixtures and Llama (GQA),
// Mixtral, Qwen2 (tied head, q/k/v bias), GPT-2 and built-in GPT configs, a split model trains 20 SGD steps beside
// the whole model in the same process: the loss at every step within 1e-5 (relative) of the whole model's, the
// gradient norm too, the gathered parameters after 20 steps within 1e-5, greedy generation equal; the same with
// sequence parallelism (a sequence that does not split and generate refused). bf16 autocast. The vocabulary-parallel
// embedding's pad row (config.json's pad_token_id, in another rank's slice) gets no gradient. Then bad input:
// sizes that do not divide, a model without a plan, a TorchScript module, a LoRA adapter, a second split, each
// refused by name with the model left as it was.
// Usage: mp_tp FIXTURES_DIR (tests/hf/fixtures). Prints "N passed, N failed"; exits non-zero on a failed check.
//
// mp_tp --train FIXTURES_DIR [MODEL]: the same through the Accelerator, as a user runs it: the layout comes from the
// launch config (parallelism_config: tp alone, tp x dp_shard under FSDP2, dp_replicate x dp_shard x tp), prepare
// splits and wraps the model, each data-parallel rank trains its rows of a global batch with acc backward, clipping
// and the prepared SGD (momentum) optimizer. Beside it every rank trains the whole model on the whole batch in
// process: the loss each step (averaged over the processes) within 1e-5 (relative), the clipped gradient norm too, the
// gathered state and the optimizer state made whole (what checkpoints read) within 1e-5 after 20 steps, state dicts
// loaded back, greedy generation where the strategy keeps whole slices; bad models refused naming tp_size.
// MODEL (llama, mixtral, gpt2) runs one model only. Under mixed_precision bf16, 3 steps within bf16's rounding.
#include <ATen/ATen.h>
#include <acc/config.hpp>
#include <torch/csrc/jit/api/module.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unistd.h>

#include "models/hf/generate.hpp"
#include "models/hf/pretrained.hpp"
#include "models/lora.hpp"
#include "models/model.hpp"
#include "parallel/strategy.hpp"
#include "precision/precision.hpp"
#include "parallel/tensor_parallel.hpp"
#include "runtime/comm.hpp"
#include "runtime/process_state.hpp"
#include "train/accelerator.hpp"
#include "train/optim.hpp"

#include "mp_check.hpp"
#include "mp_models.hpp"

using namespace acc::core;

// The collectives tensor parallelism splits over.
using TpGroup = std::shared_ptr<const Collectives>;
namespace {

// A llama-family config.json text.
std::string decoder_config(const std::string& arch, const std::string& type, int heads, int kv, int intermediate,
                           int vocab, bool tie, const std::string& extra = "", int hidden = 32) {
  return R"({"architectures": [")" + arch + R"("], "model_type": ")" + type + R"(", "vocab_size": )" +
         std::to_string(vocab) + R"(, "hidden_size": )" + std::to_string(hidden) + R"(, "intermediate_size": )" +
         std::to_string(intermediate) + R"(, "num_hidden_layers": 2, "num_attention_heads": )" + std::to_string(heads) +
         R"(, "num_key_value_heads": )" + std::to_string(kv) + R"(, "head_dim": 4, "max_position_embeddings": 64,
         "rms_norm_eps": 1e-6, "initializer_range": 0.2, "tie_word_embeddings": )" +
         (tie ? "true" : "false") + extra + "}";
}

std::string gpt2_config(int heads, int vocab) {
  return R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": )" + std::to_string(vocab) +
         R"(, "n_positions": 32, "n_embd": 24, "n_layer": 2, "n_head": )" + std::to_string(heads) +
         R"(, "n_inner": 48, "embd_pdrop": 0, "attn_pdrop": 0, "resid_pdrop": 0, "initializer_range": 0.2})";
}

bool close(const at::Tensor& a, const at::Tensor& b, double tol) {
  return a.sizes() == b.sizes() && (a - b).abs().max().item<double>() <= tol;
}

// Two models from `make` with the same weights: the whole one, and one split over `group`.
std::pair<std::unique_ptr<Model>, std::unique_ptr<Model>> whole_and_split(const Maker& make, const TpGroup& group,
                                                                          bool sequence_parallel) {
  auto whole = make();
  auto split = make();
  split->load_state_dict(whole->state(), "the whole model");
  tp::Options options;
  options.sequence_parallel = sequence_parallel;
  tp::parallelize(*split, group, options);
  return {std::move(whole), std::move(split)};
}

// The whole model and the split one train side by side from the same weights on the same batches.
void equivalence_of(const std::string& what, const Maker& make, const TpGroup& group, bool hf_lm, bool checkpointing,
                    bool sequence_parallel) {
  auto [whole, split] = whole_and_split(make, group, sequence_parallel);
  const Placements& sh = split->placements();
  expect(sh.any_split(), what + ": the model records its placements");
  if (!sh.any_split()) return;
  // Each split parameter holds 1/size of the whole one.
  for (const auto& [name, placement] : sh.all()) {
    int64_t whole_n = 1;
    for (int64_t d : placement.whole_shape) whole_n *= d;
    for (const auto& [n, p] : split->named_parameters())
      if (n == name) expect(p.numel() * group->size == whole_n, what + ": " + name + " holds its slice");
  }
  whole->train(true);
  split->train(true);
  if (checkpointing) split->set_activation_checkpointing(true);
  const std::string target = hf_lm ? "labels" : "targets";
  at::manual_seed(11 + 0);  // the same batches on every rank
  const double lr = 0.02;
  for (int step = 0; step < 20; ++step) {
    at::Tensor ids = at::randint(0, 96, {3, 12}, at::kLong);
    at::Tensor labels = hf_lm ? ids.clone() : at::randint(0, 96, {3, 12}, at::kLong);
    labels.index_put_({0, at::indexing::Slice(0, 3)}, hf_lm ? -100 : -1);  // ignored targets count as torch's do
    const TensorDict batch{{"input_ids", ids}, {target, labels}};
    TensorDict a = whole->forward(batch), b = split->forward(batch);
    const double la = a.at("loss").item<double>(), lb = b.at("loss").item<double>();
    expect(std::abs(la - lb) <= 1e-5 * std::abs(la),
           what + ": loss at step " + std::to_string(step) + " " + num(lb) + " vs " + num(la));
    if (step == 0)
      expect(close(a.at("logits"), b.at("logits").detach(),
                   1e-5 * std::max(1.0, a.at("logits").abs().max().item<double>())),
             what + ": whole logits given back");
    a.at("loss").backward();
    b.at("loss").backward();
    if (step == 0) {  // (later steps start from weights that differ by rounding)
      std::vector<at::Tensor> norms;
      for (const auto& [n, p] : whole->named_parameters())
        if (p.grad().defined()) norms.push_back(p.grad().norm());
      const double na = at::stack(norms).norm().item<double>(), nb = grad_norm(*split, 2).item<double>();
      expect(std::abs(na - nb) <= 1e-5 * na,
             what + ": gradient norm at step " + std::to_string(step) + " " + num(nb) + " vs " + num(na));
    }
    c10::NoGradGuard no_grad;
    for (Model* m : {whole.get(), split.get()})
      for (auto& [n, p] : m->named_parameters())
        if (p.grad().defined()) {
          p.sub_(p.grad() * lr);
          p.mutable_grad() = at::Tensor();
        }
  }
  const NamedTensors full = whole_state(sh, split->state());
  const NamedTensors ref = whole->state();
  expect(full.size() == ref.size(), what + ": the gathered state has every tensor");
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < std::min(full.size(), ref.size()); ++i) {
    expect(full[i].first == ref[i].first && full[i].second.sizes() == ref[i].second.sizes(),
           what + ": " + ref[i].first + " gathered whole");
    if (full[i].second.sizes() != ref[i].second.sizes()) continue;
    // Within 1e-5 of the whole model's, relative to the tensor's scale where that is above 1.
    const double scale = std::max(1.0, ref[i].second.abs().max().item<double>());
    const double d = (full[i].second - ref[i].second).abs().max().item<double>() / scale;
    if (d > worst) worst = d, worst_name = ref[i].first;
  }
  expect(worst <= 1e-5,
         what + ": parameters after 20 steps within 1e-5 (worst " + num(worst) + " at " + worst_name + ")");
  std::printf("%s: worst parameter difference %s (%s)\n", what.c_str(), num(worst).c_str(), worst_name.c_str());
  // Slicing the gathered state gives this rank's tensors back.
  const NamedTensors local = split->state();
  const NamedTensors sliced = local_state(sh, full);
  bool same = sliced.size() == local.size();
  for (size_t i = 0; same && i < local.size(); ++i) same = sliced[i].second.equal(local[i].second);
  expect(same, what + ": slice_state inverts full_state");
  // What save_model and checkpoints read and write through the strategy: whole tensors.
  std::shared_ptr<Model> owned(std::move(split));
  auto strategy = make_single_strategy(owned, c10::kCPU);
  const NamedTensors saved = strategy->full_state_dict();
  same = saved.size() == full.size();
  for (size_t i = 0; same && i < full.size(); ++i)
    same = saved[i].first == full[i].first && saved[i].second.equal(full[i].second);
  expect(same, what + ": the strategy's full_state_dict gathers whole tensors");
  strategy->load_full_state_dict(ref, "the whole model");
  same = true;
  for (const auto& [name, t] : whole_state(sh, owned->state())) {
    for (const auto& [rn, rt] : ref)
      if (rn == name) same = same && rt.equal(t);
  }
  expect(same, what + ": the strategy loads whole tensors into the slices");
  Model* split_model = owned.get();
  if (sequence_parallel) {
    // A sequence that does not split, and generate (a key/value cache), are refused by name.
    std::string message;
    try {
      at::Tensor ids = at::randint(0, 96, {1, 9}, at::kLong);
      split_model->forward(TensorDict{{"input_ids", ids}, {target, ids}});
    } catch (const std::exception& e) {
      message = e.what();
    }
    expect(message.find("sequence length (9)") != std::string::npos,
           what + ": a sequence of 9 refused by name (got '" + message + "')");
    if (hf_lm) {
      message.clear();
      try {
        hf::generate(*split_model, at::zeros({1, 4}, at::kLong), at::Tensor(), R"({"max_new_tokens": 2})");
      } catch (const std::exception& e) {
        message = e.what();
      }
      expect(message.find("key/value cache") != std::string::npos,
             what + ": generate refused by name (got '" + message + "')");
    }
  } else if (hf_lm) {
    whole->train(false);
    split_model->train(false);
    at::Tensor prompt = at::randint(0, 96, {2, 5}, at::kLong);
    const char* opts = R"({"max_new_tokens": 6, "do_sample": false})";
    at::Tensor ga = hf::generate(*whole, prompt, at::Tensor(), opts);
    at::Tensor gb = hf::generate(*split_model, prompt, at::Tensor(), opts);
    expect(ga.equal(gb), what + ": greedy generation equal");
  }
}

void equivalence(const std::string& what, const Maker& make, const TpGroup& group, bool hf_lm,
                 bool checkpointing = false, bool sequence_parallel = false) {
  try {
    equivalence_of(what, make, group, hf_lm, checkpointing, sequence_parallel);
  } catch (const std::exception& e) {
    expect(false, what + ": " + e.what());
  }
}

// Mixed precision (bf16 autocast, as the Accelerator's): the split model's loss and gradient norm stay within bf16's
// rounding of the whole model's.
void mixed_precision(const std::string& what, const Maker& make, const TpGroup& group) {
  try {
    auto [whole, split] = whole_and_split(make, group, /*sequence_parallel=*/false);
    at::manual_seed(5);
    at::Tensor ids = at::randint(0, 96, {3, 10}, at::kLong);
    const TensorDict batch{{"input_ids", ids}, {"labels", ids}};
    double loss[2] = {}, norm[2] = {};
    Model* models[2] = {whole.get(), split.get()};
    for (int i = 0; i < 2; ++i) {
      at::Tensor l;
      {
        AutocastScope autocast(c10::DeviceType::CPU, at::kBFloat16, true, true);
        l = models[i]->forward(batch).at("loss");
      }
      l.backward();
      loss[i] = l.item<double>();
      if (i == 0) {
        std::vector<at::Tensor> norms;
        for (const auto& [n, p] : whole->named_parameters()) norms.push_back(p.grad().norm());
        norm[0] = at::stack(norms).norm().item<double>();
      } else {
        norm[1] = grad_norm(*split, 2).item<double>();
      }
    }
    expect(std::abs(loss[0] - loss[1]) <= 2e-2 * std::abs(loss[0]),
           what + ": bf16 loss " + num(loss[1]) + " vs " + num(loss[0]));
    expect(std::abs(norm[0] - norm[1]) <= 5e-2 * norm[0],
           what + ": bf16 gradient norm " + num(norm[1]) + " vs " + num(norm[0]));
  } catch (const std::exception& e) {
    expect(false, what + ": " + e.what());
  }
}

// The vocabulary-parallel embedding keeps nn.Embedding's padding_idx: config.json's pad_token_id `pad` (chosen in a
// slice other than rank 0's, so the rank holding it passes its local row) gets no gradient from the lookup on any
// rank, the gathered gradient equals the whole model's, and resetting the split model zeroes that row only.
void padding_row(const std::string& what, const std::string& config, int64_t pad, const TpGroup& group,
                 bool sequence_parallel = false) {
  try {
    auto [whole, split] = whole_and_split(from_config(config), group, sequence_parallel);
    const Placements& sh = split->placements();
    const std::string name = "model.embed_tokens.weight";
    auto param = [&](Model& m) {
      for (const auto& [n, p] : m.named_parameters())
        if (n == name) return p;
      throw std::runtime_error(name + " not found");
    };
    at::manual_seed(3);
    at::Tensor ids = at::randint(0, 96, {3, 12}, at::kLong);
    ids.index_put_({at::indexing::Slice(), at::indexing::Slice(0, 12, 3)}, pad);  // attended, labelled pad tokens
    const TensorDict batch{{"input_ids", ids}, {"labels", ids}};
    whole->forward(batch).at("loss").backward();
    split->forward(batch).at("loss").backward();
    const at::Tensor g = param(*whole).grad(), gathered = whole_tensor(sh, name, param(*split).grad());
    expect(g[pad].abs().max().item<double>() == 0, what + ": the whole model's pad row has no gradient");
    expect(gathered[pad].abs().max().item<double>() == 0, what + ": the split model's pad row has no gradient");
    expect(close(gathered, g, 1e-5 * g.abs().max().item<double>()),
           what + ": the gathered embedding gradient equals the whole model's");
    at::manual_seed(9);
    split->reset_parameters();
    const at::Tensor w = whole_tensor(sh, name, param(*split));
    const at::Tensor zero_rows = w.abs().amax(1).eq(0).nonzero().flatten();
    expect(zero_rows.numel() == 1 && zero_rows.item<int64_t>() == pad,
           what + ": reset zeroes the pad row only (" + std::to_string(zero_rows.numel()) + " zero rows)");
  } catch (const std::exception& e) {
    expect(false, what + ": " + e.what());
  }
}

// `make`'s model split over `group` is refused with a message that holds `needle`, and left as it was.
void refused(const std::string& what, const Maker& make, const TpGroup& group, const std::string& needle,
             const std::function<void(Model&)>& prepare = {}) {
  std::unique_ptr<Model> m;
  try {
    m = make();
    if (prepare) prepare(*m);
  } catch (const std::exception& e) {
    expect(false, what + ": the model could not be made: " + e.what());
    return;
  }
  const NamedTensors before = m->named_parameters();
  std::string message;
  try {
    tp::parallelize(*m, group);
  } catch (const std::exception& e) {
    message = e.what();
  }
  expect(message.find(needle) != std::string::npos, what + ": refused naming '" + needle + "' (got '" + message + "')");
  const NamedTensors after = m->named_parameters();
  bool same = before.size() == after.size();
  for (size_t i = 0; same && i < before.size(); ++i) same = before[i].second.is_same(after[i].second);
  expect(same, what + ": the model is left as it was");
}

// The prepared model trains on this data-parallel rank's rows of each global batch, the whole model on all of them.
void train_equivalence(Accelerator& acc, const std::string& what, const Maker& make) {
  const bool bf16 = acc.mixed_precision() == "bf16";
  const int steps = bf16 ? 3 : 20;
  const double loss_tol = bf16 ? 2e-2 : 1e-5, norm_tol = bf16 ? 5e-2 : 1e-5;
  const char* const sgd = R"({"type": "sgd", "lr": 0.02, "momentum": 0.9})";
  auto whole = make();
  {
    // FSDP's cpu_ram_efficient_loading: only the first process of a machine loads weights; the others get rank 0's.
    std::vector<at::Tensor> state;
    for (auto& [name, t] : whole->state()) state.push_back(t);
    acc.broadcast_from_main(state);
  }
  auto slot = std::make_shared<PreparedModel>();
  slot->model = std::shared_ptr<Model>(make());
  auto opt = std::make_shared<PreparedOptimizer>();
  opt->model = slot;
  opt->opt = std::make_unique<Optimizer>(slot->model->trainable_parameters(), sgd);  // built before prepare
  acc.prepare(slot, opt, nullptr, nullptr);
  const int tp = acc.mesh()->size("tp"), dp = acc.mesh()->size("dp"), dp_rank = acc.mesh()->rank("dp");
  const Placement::Split* sh = nullptr;
  for (const auto& [name, placement] : slot->model->placements().all())
    if (placement.split) sh = &*placement.split;
  expect(sh && sh->over->size == tp, what + ": prepare split the model over the tp group of " + std::to_string(tp));
  expect(slot->model->activation_checkpointing() == acc.settings().fsdp_plugin.activation_checkpointing,
         what + ": activation checkpointing as the config says");
  expect(opt->opt->params().size() == slot->strategy->optimizer_parameters().size(),
         what + ": the optimizer steps what the strategy gives it");
  whole->train(true);
  slot->model->train(true);
  std::map<std::string, at::Tensor> momentum;  // the whole model's SGD buffers
  at::manual_seed(11);  // the same global batches on every rank
  const int64_t rows = 4;
  double max_norm = 0;
  for (int step = 0; step < steps; ++step) {
    at::Tensor ids = at::randint(0, 96, {rows, 12}, at::kLong);
    // The reference: the whole model on the whole batch, clipped, torch's SGD with momentum.
    at::Tensor ref_loss;
    {
      std::optional<AutocastScope> autocast;
      if (bf16) autocast.emplace(c10::DeviceType::CPU, at::kBFloat16, true, true);
      ref_loss = whole->forward(TensorDict{{"input_ids", ids}, {"labels", ids}}).at("loss");
    }
    ref_loss.backward();
    std::vector<at::Tensor> norms;
    for (const auto& [n, p] : whole->named_parameters())
      if (p.grad().defined()) norms.push_back(p.grad().norm());
    const double ref_norm = at::stack(norms).norm().item<double>();
    if (step == 0) max_norm = 0.7 * ref_norm;  // clipping acts, at least at first
    {
      c10::NoGradGuard no_grad;
      const double coef = std::min(1.0, max_norm / (ref_norm + 1e-6));
      for (auto& [n, p] : whole->named_parameters()) {
        if (!p.grad().defined()) continue;
        at::Tensor g = p.grad() * coef;
        auto it = momentum.find(n);
        if (it == momentum.end()) it = momentum.emplace(n, g.clone()).first;
        else it->second.mul_(0.9).add_(g);
        p.sub_(it->second * 0.02);
        p.mutable_grad() = at::Tensor();
      }
    }
    // The prepared model on this data-parallel rank's rows.
    at::Tensor mine = ids.narrow(0, dp_rank * (rows / dp), rows / dp);
    at::Tensor loss = slot->forward(TensorDict{{"input_ids", mine}, {"labels", mine}}).at("loss");
    acc.backward(loss);
    const double norm = acc.clip_grad_norm(*slot, max_norm, 2.0);
    opt->step();
    opt->zero_grad();
    const double mean = acc.reduce(loss.detach(), ReduceOp::Sum).item<double>() / acc.state().world_size;
    const double la = ref_loss.item<double>();
    expect(std::abs(mean - la) <= loss_tol * std::abs(la),
           what + ": loss at step " + std::to_string(step) + " " + num(mean) + " vs " + num(la));
    expect(std::abs(norm - ref_norm) <= norm_tol * ref_norm,
           what + ": gradient norm at step " + std::to_string(step) + " " + num(norm) + " vs " + num(ref_norm));
  }
  if (bf16) return;
  // The gathered state (what save_model writes) against the whole model's.
  const NamedTensors full = slot->strategy->full_state_dict();
  const NamedTensors ref = whole->state();
  expect(full.size() == ref.size(), what + ": the gathered state has every tensor");
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < std::min(full.size(), ref.size()); ++i) {
    const bool same_shape = full[i].first == ref[i].first && full[i].second.sizes() == ref[i].second.sizes();
    expect(same_shape, what + ": " + ref[i].first + " gathered whole");
    if (!same_shape) continue;
    const double scale = std::max(1.0, ref[i].second.abs().max().item<double>());
    const double d = (full[i].second - ref[i].second).abs().max().item<double>() / scale;
    if (d > worst) worst = d, worst_name = ref[i].first;
  }
  expect(worst <= 1e-5,
         what + ": parameters after 20 steps within 1e-5 (worst " + num(worst) + " at " + worst_name + ")");
  // The optimizer's state made whole (what save_state writes): the whole model's momentum buffers, by parameter.
  const Optimizer::State saved = opt->opt->save_state();
  NamedTensors state = saved.tensors;
  std::string json = saved.json;
  const auto groups = opt->opt->whole_groups();
  slot->strategy->optimizer_state_to_full(groups, state, json);
  std::map<const void*, std::string> names;
  for (const auto& [n, p] : slot->model->named_parameters()) names.emplace(p.unsafeGetTensorImpl(), n);
  std::vector<std::string> order;
  for (const auto& g : groups)
    for (const auto& p : g) order.push_back(names.at(p.unsafeGetTensorImpl()));
  double worst_state = 0;
  size_t buffers = 0;
  for (const auto& [key, t] : state) {
    const size_t i = std::stoul(key.substr(6, key.find('.', 6) - 6));
    const at::Tensor& r = momentum.at(order.at(i));
    if (!t.sizes().equals(r.sizes())) {
      expect(false, what + ": optimizer state '" + key + "' of " + order[i] + " has shape " + c10::str(t.sizes()) +
                        ", the whole parameter's momentum " + c10::str(r.sizes()));
      continue;
    }
    ++buffers;
    worst_state =
        std::max(worst_state, (t - r).abs().max().item<double>() / std::max(1.0, r.abs().max().item<double>()));
  }
  expect(buffers == momentum.size(), what + ": a whole momentum buffer per parameter (" + std::to_string(buffers) +
                                         " of " + std::to_string(momentum.size()) + ")");
  // (The momentum sums 20 clipped gradients: its rounding grows with them; a misplaced slice would be off by O(1).)
  expect(worst_state <= 1e-4, what + ": optimizer state made whole within 1e-4 (worst " + num(worst_state) + ")");
  // ... and back: this rank's part of it is the optimizer's own state.
  slot->strategy->optimizer_state_from_full(groups, state, json, "the whole state");
  bool back = state.size() == saved.tensors.size();
  for (size_t k = 0; back && k < state.size(); ++k)
    back = state[k].first == saved.tensors[k].first && state[k].second.equal(saved.tensors[k].second);
  expect(back, what + ": the whole optimizer state sliced back equals the optimizer's");
  // Whole tensors loaded through the strategy are what it gives back.
  slot->strategy->load_full_state_dict(ref, "the whole model");
  const NamedTensors again = slot->strategy->full_state_dict();
  bool same = again.size() == ref.size();
  for (size_t i = 0; same && i < ref.size(); ++i) same = again[i].second.equal(ref[i].second);
  expect(same, what + ": whole tensors loaded into the prepared model come back the same");
  // Greedy generation on the split model, where the strategy keeps its slices whole (not ZeRO-3 / FSDP2).
  if (slot->strategy->parameters_whole()) {
    whole->train(false);
    slot->model->train(false);
    at::Tensor prompt = at::randint(0, 96, {2, 5}, at::kLong);
    const char* gen = R"({"max_new_tokens": 6, "do_sample": false})";
    expect(hf::generate(slot->tensors("generate"), prompt, at::Tensor(), gen)
               .equal(hf::generate(*whole, prompt, at::Tensor(), gen)),
           what + ": greedy generation on the prepared split model equals the whole model's");
  }
  std::printf("%s: tp %d, dp %d, %s%s: worst parameter difference %s (%s), optimizer state %s\n", what.c_str(), tp, dp,
              slot->strategy->name().c_str(),
              slot->model->activation_checkpointing() ? ", activation checkpointing" : "", num(worst).c_str(),
              worst_name.c_str(), num(worst_state).c_str());
}

// prepare refuses `make`'s model naming parallelism_config.tp_size and `needle`.
void prepare_refuses(Accelerator& acc, const std::string& what, const std::function<std::unique_ptr<Model>()>& make,
                     const std::string& needle) {
  auto slot = std::make_shared<PreparedModel>();
  slot->model = std::shared_ptr<Model>(make());
  std::string message;
  try {
    acc.prepare(slot, nullptr, nullptr, nullptr);
  } catch (const std::exception& e) {
    message = e.what();
  }
  expect(message.find("'parallelism_config.tp_size' = ") != std::string::npos &&
             message.find(needle) != std::string::npos,
         what + ": prepare refused naming tp_size and '" + needle + "' (got '" + message + "')");
  expect(!slot->owner, what + ": the model is not prepared");
}

int train_main(const std::string& fixtures, const std::string& only) {
  auto acc = Accelerator::create(nullptr);  // the launch config's parallelism_config
  const int tp = acc->mesh()->size("tp");
  auto pretrained = [&](const std::string& name) -> Maker {
    return [&fixtures, name] { return hf::from_pretrained(fixtures + "/" + name + "/model", nullptr); };
  };
  // The fixtures have 2 key/value heads: over 4, models of 4.
  const Maker llama = tp <= 2 ? pretrained("llama")
                              : from_config(decoder_config("LlamaForCausalLM", "llama", 8, 4, 64, 96, false));
  const Maker mixtral = tp <= 2 ? pretrained("mixtral")
                                : from_config(decoder_config("MixtralForCausalLM", "mixtral", 8, 4, 32, 96, false,
                                                             R"(, "num_local_experts": 4, "num_experts_per_tok": 2)"));
  const std::pair<std::string, Maker> models[] = {{std::string("llama") + (tp <= 2 ? " fixture" : " (GQA)"), llama},
                                                  {std::string("mixtral") + (tp <= 2 ? " fixture" : ""), mixtral},
                                                  {"gpt2", from_config(gpt2_config(4, 96))}};
  for (const auto& [what, make] : models) {
    if (!only.empty() && what.rfind(only, 0) != 0) continue;
    try {
      train_equivalence(*acc, what, make);
    } catch (const std::exception& e) {
      expect(false, what + ": " + e.what());
    }
  }
  if (only.empty() && tp == 4) {
    prepare_refuses(*acc, "llama fixture over 4", pretrained("llama"), "num_key_value_heads (2)");
    prepare_refuses(
        *acc, "built-in mlp", [] { return make_builtin_model(R"({"type": "mlp", "sizes": [4, 8, 1]})"); },
        "Mlp has no tensor-parallel plan");
    const ScriptFile script("mp_tp_train");
    prepare_refuses(*acc, "TorchScript", [&] { return load_torchscript_model(script.path, nullptr); }, "TorchScript");
  }
  return finish();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--train") return train_main(argv[2], argc >= 4 ? argv[3] : "");
  if (argc != 2) {
    std::fprintf(stderr, "usage: mp_tp FIXTURES_DIR | mp_tp --train FIXTURES_DIR [MODEL]\n");
    return 2;
  }
  const std::string fixtures = argv[1];
  auto comm =
      Comm::connect(ProcessState::from_environment(acc::config::current_environment()), std::chrono::minutes(5));
  const int n = comm->size();
  const TpGroup group = std::make_shared<const Collectives>(tp::collectives_of(comm));

  auto pretrained = [&](const std::string& name) -> Maker {
    return [&fixtures, name] { return hf::from_pretrained(fixtures + "/" + name + "/model", nullptr); };
  };
  // The fixtures have 2 key/value heads: split over 2, refused over 4.
  if (n == 2) {
    equivalence("llama fixture", pretrained("llama"), group, true);
    equivalence("mixtral fixture", pretrained("mixtral"), group, true);
  } else {
    refused("llama fixture", pretrained("llama"), group, "num_key_value_heads (2)");
  }
  equivalence("llama (GQA)", from_config(decoder_config("LlamaForCausalLM", "llama", 8, 4, 64, 96, false)), group,
              true);
  equivalence("llama (GQA), activation checkpointing",
              from_config(decoder_config("LlamaForCausalLM", "llama", 8, 4, 64, 96, false)), group, true, true);
  mixed_precision("llama (GQA), bf16 autocast",
                  from_config(decoder_config("LlamaForCausalLM", "llama", 8, 4, 64, 96, false)), group);
  equivalence("mixtral",
              from_config(decoder_config("MixtralForCausalLM", "mixtral", 8, 4, 32, 96, false,
                                         R"(, "num_local_experts": 4, "num_experts_per_tok": 2)")),
              group, true);
  equivalence("qwen2 (tied head, q/k/v bias)",
              from_config(decoder_config("Qwen2ForCausalLM", "qwen2", 8, 4, 64, 96, true)), group, true);
  equivalence("gpt2", from_config(gpt2_config(4, 96)), group, true);
  // Pad id 70: rank 1's slice of 2 (local row 22), rank 2's of 4 (local row 22).
  padding_row("llama (pad_token_id 70)",
              decoder_config("LlamaForCausalLM", "llama", 8, 4, 64, 96, false, R"(, "pad_token_id": 70)"), 70, group);
  padding_row("qwen2 (pad_token_id 70), sequence parallel",
              decoder_config("Qwen2ForCausalLM", "qwen2", 8, 4, 64, 96, false, R"(, "pad_token_id": 70)"), 70, group,
              true);
  // Sequence parallelism.
  equivalence("llama (GQA), sequence parallel",
              from_config(decoder_config("LlamaForCausalLM", "llama", 8, 4, 64, 96, false)), group, true, false, true);
  equivalence("llama (GQA), sequence parallel, activation checkpointing",
              from_config(decoder_config("LlamaForCausalLM", "llama", 8, 4, 64, 96, false)), group, true, true, true);
  equivalence("mixtral, sequence parallel",
              from_config(decoder_config("MixtralForCausalLM", "mixtral", 8, 4, 32, 96, false,
                                         R"(, "num_local_experts": 4, "num_experts_per_tok": 2)")),
              group, true, false, true);
  equivalence("qwen2, sequence parallel", from_config(decoder_config("Qwen2ForCausalLM", "qwen2", 8, 4, 64, 96, true)),
              group, true, false, true);
  equivalence("gpt2, sequence parallel", from_config(gpt2_config(4, 96)), group, true, false, true);
  equivalence(
      "built-in gpt, sequence parallel",
      [] {
        at::manual_seed(7);
        return make_builtin_model(R"({"type": "gpt", "vocab_size": 96, "block_size": 16, "n_layer": 2, "n_head": 4,
                                  "n_embd": 32})");
      },
      group, false, false, true);
  equivalence(
      "built-in gpt",
      [] {
        at::manual_seed(7);
        return make_builtin_model(R"({"type": "gpt", "vocab_size": 96, "block_size": 16, "n_layer": 2, "n_head": 4,
                                  "n_embd": 32})");
      },
      group, false);

  // Bad input (odd sizes: divisible by neither 2 nor 4).
  refused("heads", from_config(decoder_config("LlamaForCausalLM", "llama", 3, 3, 64, 96, false, "", 24)), group,
          "num_attention_heads (3)");
  refused("kv heads", from_config(decoder_config("MistralForCausalLM", "mistral", 4, 1, 64, 96, false)), group,
          "num_key_value_heads (1)");
  refused("intermediate", from_config(decoder_config("Qwen2ForCausalLM", "qwen2", 4, 4, 63, 96, false)), group,
          "intermediate_size (63)");
  refused("vocabulary",
          from_config(decoder_config("MixtralForCausalLM", "mixtral", 4, 4, 64, 95, false,
                                     R"(, "num_local_experts": 2, "num_experts_per_tok": 1)")),
          group, "vocab_size (95)");
  refused("gpt2 heads", from_config(gpt2_config(3, 96)), group, "n_head (3)");
  refused("gpt2 vocabulary", from_config(gpt2_config(4, 95)), group, "vocab_size (95)");
  refused(
      "built-in gpt heads",
      [] {
        return make_builtin_model(R"({"type": "gpt", "vocab_size": 96, "block_size": 8, "n_layer": 1, "n_head": 3,
                                  "n_embd": 24})");
      },
      group, "n_head (3)");
  refused(
      "built-in mlp", [] { return make_builtin_model(R"({"type": "mlp", "sizes": [4, 8, 1]})"); }, group,
      "Mlp has no tensor-parallel plan");
  {
    const ScriptFile script("mp_tp");
    refused("TorchScript", [&] { return load_torchscript_model(script.path, nullptr); }, group, "TorchScript");
  }
  const Maker llama = from_config(decoder_config("LlamaForCausalLM", "llama", 4, 4, 64, 96, false));
  refused("LoRA", llama, group, "LoRA adapter", [](Model& m) {
    auto& root = *dynamic_cast<NnModel&>(m).module();
    auto adapter = lora::plan(root, lora::parse_config(R"({"target_modules": ["q_proj"]})", "test"), {});
    lora::apply(root, adapter, true, true);
  });
  refused("split twice", llama, group, "split already", [&](Model& m) { tp::parallelize(m, group); });

  return finish();
}
