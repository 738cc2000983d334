// One rank of the test of the sequence splits, started by `acc launch --num_processes N` (tests/mp/meson.build):
// context parallelism (cp), or with `sp` Ulysses sequence parallelism. On 2 processes the world is one group of 2; on
// 4, one group of 4, then a mesh of cp=2 x tp=2 (or sp=2 x tp=2: heads split by TP, tokens by CP / SP). Every rank gets
// the same whole batch. For Llama (GQA, padded rows), Mistral (sliding window; under sp=4 or sp=2 x tp=2 its key/value
// heads are fewer than the ranks, and repeated), Mixtral, GPT-2 (padded rows) and the built-in GPT, with each
// exchange (cp: allgather, alltoall; sp: the heads' all-to-all), a split model trains 20 SGD steps beside the whole
// model in the same process, its gradients averaged over the group as DDP / FSDP average them over dp_cp: the loss at
// every step within 1e-5 (relative) of the whole model's and equal on every rank of the group, this rank's logits
// equal to the whole model's at its positions, the parameters after 20 steps within 1e-5. Then bad input: a sequence
// the split cannot take, generate, a TorchScript module, a model without split attention, a second split, the other
// sequence split, heads that sp does not divide: each refused by name.
// Usage: mp_cp FIXTURES_DIR [sp] (tests/hf/fixtures). Prints "N passed, N failed"; exits non-zero on a failed check.
#include <ATen/ATen.h>
#include <acc/config.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/jit/api/module.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unistd.h>

#include "parallel/context_parallel.hpp"
#include "models/hf/generate.hpp"
#include "models/hf/pretrained.hpp"
#include "models/model.hpp"
#include "parallel/tensor_parallel.hpp"
#include "parallel/ulysses.hpp"
#include "runtime/comm.hpp"
#include "runtime/mesh.hpp"
#include "runtime/process_state.hpp"

#include "mp_check.hpp"
#include "mp_models.hpp"

using namespace acc::core;

namespace {

std::string decoder_config(const std::string& arch, const std::string& type, int heads, int kv,
                           const std::string& extra = "", int hidden = 32) {
  return R"({"architectures": [")" + arch + R"("], "model_type": ")" + type + R"(", "vocab_size": 96,
         "hidden_size": )" +
         std::to_string(hidden) + R"(, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": )" +
         std::to_string(heads) + R"(, "num_key_value_heads": )" + std::to_string(kv) + R"(, "head_dim": 4,
         "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "initializer_range": 0.2,
         "tie_word_embeddings": false)" +
         extra + "}";
}

const char* kGpt2 = R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 96,
  "n_positions": 32, "n_embd": 24, "n_layer": 2, "n_head": 4, "n_inner": 48, "embd_pdrop": 0, "attn_pdrop": 0,
  "resid_pdrop": 0, "initializer_range": 0.2})";
const char* kBuiltinGpt = R"({"type": "gpt", "vocab_size": 96, "block_size": 32, "n_layer": 2, "n_head": 4,
  "n_embd": 32})";

Maker builtin(const std::string& spec) {
  return [spec] {
    at::manual_seed(7);
    return make_builtin_model(spec.c_str());
  };
}

using Group = std::shared_ptr<const Collectives>;
Group shared(Collectives c) { return std::make_shared<const Collectives>(std::move(c)); }

struct Layout {
  Group cp;  // the group that splits the sequence (cp or sp)
  std::optional<Group> tp;
  std::string name;
};

// A sequence split under test: context parallelism with one exchange, or Ulysses.
struct Split {
  bool ulysses = false;
  cp::Exchange exchange = cp::Exchange::AllGather;
  std::string name() const { return ulysses ? "ulysses" : cp::exchange_name(exchange); }
  const char* what() const { return ulysses ? "sequence parallelism" : "context parallelism"; }
  void apply(Model& m, const Group& g) const {
    if (ulysses) ulysses::parallelize(m, g);
    else cp::parallelize(m, g, cp::Options{exchange});
  }
  bool is_split(const Model& m) const { return ulysses ? ulysses::is_split(m) : cp::is_split(m); }
  at::Tensor positions(int64_t T, int n, int rank) const {
    return ulysses ? ulysses::local_positions(T, n, rank) : cp::local_positions(T, n, rank);
  }
  // A length the split cannot take, and the words that refuse it.
  int64_t bad_length(int n) const { return ulysses ? n + 1 : 2 * n + 2; }  // (cp: never a multiple of 2 x cp)
  std::string refusal(int n) const {
    return ulysses ? "a multiple of sp_size (" + std::to_string(n) + ")"
                   : "2 x cp_size (" + std::to_string(2 * n) + ")";
  }
};

// The whole model and the context-parallel one (also split by TP in a cp x tp layout) train side by side.
void equivalence_of(const std::string& what, const Maker& make, const Layout& layout, const Split& how, bool hf_lm,
                    bool padded, bool checkpointing) {
  auto whole = make();
  auto split = make();
  split->load_state_dict(whole->state(), "the whole model");
  if (layout.tp) tp::parallelize(*split, *layout.tp);
  how.apply(*split, layout.cp);
  expect(how.is_split(*split), what + ": the model records its split");
  whole->train(true);
  split->train(true);
  if (checkpointing) split->set_activation_checkpointing(true);
  const std::string target = hf_lm ? "labels" : "targets";
  const int n = layout.cp->size;
  const int64_t T = 16;
  const at::Tensor mine = how.positions(T, n, layout.cp->rank);
  at::manual_seed(11);  // the same batches on every rank
  const double lr = 0.02;
  for (int step = 0; step < 20; ++step) {
    at::Tensor ids = at::randint(0, 96, {3, T}, at::kLong);
    at::Tensor labels = hf_lm ? ids.clone() : at::randint(0, 96, {3, T}, at::kLong);
    labels.index_put_({0, at::indexing::Slice(0, 3)}, hf_lm ? -100 : -1);  // ignored targets count as torch's do
    TensorDict batch{{"input_ids", ids}, {target, labels}};
    if (padded) {  // row 1 left-padded by 3 (its labels ignored there), row 2 right-padded by 2
      at::Tensor mask = at::ones({3, T}, at::kLong);
      mask.index_put_({1, at::indexing::Slice(0, 3)}, 0);
      mask.index_put_({2, at::indexing::Slice(T - 2, T)}, 0);
      labels.masked_fill_(mask.eq(0), -100);
      // The last padding place, which sees no key, would predict the first token: its attention is uniform over the
      // sequence in every implementation, but torch's CPU SDPA backward (the whole model's) differentiates it as if
      // each weight were 1, not 1 / time, where the ring takes the true derivative. Its label is left out.
      labels.index_put_({1, 3}, -100);
      batch.set("attention_mask", mask);
    }
    TensorDict a = whole->forward(batch), b = split->forward(batch);
    const double la = a.at("loss").item<double>(), lb = b.at("loss").item<double>();
    expect(std::abs(la - lb) <= 1e-5 * std::abs(la),
           what + ": loss at step " + std::to_string(step) + " " + num(lb) + " vs " + num(la));
    at::Tensor same = at::tensor({lb}, at::kDouble);
    at::Tensor low = same.clone(), high = same.clone();
    layout.cp->all_reduce_max(high);
    low.neg_();
    layout.cp->all_reduce_max(low);
    expect(high.item<double>() == -low.item<double>(), what + ": the loss is equal on every rank of the group");
    if (step == 0) {
      const at::Tensor ref = a.at("logits").detach().index_select(1, mine);
      const at::Tensor got = b.at("logits").detach();
      expect(got.sizes() == ref.sizes() &&
                 (got - ref).abs().max().item<double>() <= 1e-5 * std::max(1.0, ref.abs().max().item<double>()),
             what + ": this rank's logits are the whole model's at its positions");
    }
    a.at("loss").backward();
    b.at("loss").backward();
    c10::NoGradGuard no_grad;
    for (auto& [name, p] : split->named_parameters()) {  // DDP's mean over the group (dp_cp holds cp and sp)
      // (A Mixtral expert that none of this rank's tokens chose has no gradient here, but may have on another rank.)
      at::Tensor g = p.grad().defined() ? p.grad().contiguous() : at::zeros_like(p);
      layout.cp->all_reduce_sum(g);
      p.mutable_grad() = g / static_cast<double>(n);
    }
    for (Model* m : {whole.get(), split.get()})
      for (auto& [name, p] : m->named_parameters())
        if (p.grad().defined()) {
          p.sub_(p.grad() * lr);
          p.mutable_grad() = at::Tensor();
        }
  }
  const NamedTensors got = whole_state(split->placements(), split->state());
  const NamedTensors ref = whole->state();
  expect(got.size() == ref.size(), what + ": every tensor");
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    if (got[i].first != ref[i].first || got[i].second.sizes() != ref[i].second.sizes()) {
      expect(false, what + ": " + ref[i].first + " in the same place and shape");
      continue;
    }
    const double scale = std::max(1.0, ref[i].second.abs().max().item<double>());
    const double d = (got[i].second - ref[i].second).abs().max().item<double>() / scale;
    if (d > worst) worst = d, worst_name = ref[i].first;
  }
  expect(worst <= 1e-5,
         what + ": parameters after 20 steps within 1e-5 (worst " + num(worst) + " at " + worst_name + ")");
  if (launch_rank() == 0)
    std::printf("%s: worst parameter difference %s (%s)\n", what.c_str(), num(worst).c_str(), worst_name.c_str());
  if (hf_lm) {  // generate keeps a key/value cache: refused by name
    std::string message;
    try {
      split->train(false);
      hf::generate(*split, at::zeros({1, 4}, at::kLong), at::Tensor(), R"({"max_new_tokens": 2})");
    } catch (const std::exception& e) {
      message = e.what();
    }
    expect(message.find(std::string(how.what()) + " runs without a key/value cache") != std::string::npos,
           what + ": generate refused by name (got '" + message + "')");
  }
  // A sequence the split cannot take.
  std::string message;
  const int64_t odd = how.bad_length(n);
  try {
    at::Tensor ids = at::randint(0, 96, {1, odd}, at::kLong);
    split->forward(TensorDict{{"input_ids", ids}, {target, ids}});
  } catch (const std::exception& e) {
    message = e.what();
  }
  expect(message.find("sequence length (" + std::to_string(odd) + ")") != std::string::npos &&
             message.find(how.refusal(n)) != std::string::npos,
         what + ": a sequence of " + std::to_string(odd) + " refused by name (got '" + message + "')");
}

bool g_ulysses = false;  // the test's mechanism: argv[2] == "sp"

void equivalence(const std::string& what, const Maker& make, const Layout& layout, bool hf_lm, bool padded = false,
                 bool checkpointing = false) {
  const std::vector<Split> splits =
      g_ulysses ? std::vector<Split>{Split{true}}
                : std::vector<Split>{Split{false, cp::Exchange::AllGather}, Split{false, cp::Exchange::AllToAll}};
  for (const Split& how : splits) {
    const std::string name = what + " [" + layout.name + ", " + how.name() + "]";
    try {
      equivalence_of(name, make, layout, how, hf_lm, padded, checkpointing);
    } catch (const std::exception& e) {
      expect(false, name + ": " + e.what());
    }
  }
}

void refused(const std::string& what, const Maker& make, const Group& group, const std::string& needle,
             const std::function<void(Model&)>& prepare = {}) {
  std::string message;
  try {
    auto m = make();
    if (prepare) prepare(*m);
    const Split how{g_ulysses};
    try {
      how.apply(*m, group);
    } catch (const std::exception& e) {
      message = e.what();
    }
    expect(message.empty() || !how.is_split(*m) || what == "split twice",
           what + ": the model is left without the split");
  } catch (const std::exception& e) {
    expect(false, what + ": the model could not be made: " + e.what());
    return;
  }
  expect(message.find(needle) != std::string::npos, what + ": refused naming '" + needle + "' (got '" + message + "')");
}

void run_models(const Layout& layout, const std::string& fixtures) {
  const Maker llama = from_config(decoder_config("LlamaForCausalLM", "llama", 8, 4));
  equivalence("llama (GQA), padded", llama, layout, true, true);
  equivalence("llama (GQA), activation checkpointing", llama, layout, true, false, true);
  equivalence("mistral (sliding window 5), padded",
              from_config(decoder_config("MistralForCausalLM", "mistral", 4, 2, R"(, "sliding_window": 5)")), layout,
              true, true);
  equivalence("mixtral",
              from_config(decoder_config("MixtralForCausalLM", "mixtral", 8, 4,
                                         R"(, "num_local_experts": 4, "num_experts_per_tok": 2)")),
              layout, true);
  equivalence("gpt2, padded", from_config(kGpt2), layout, true, true);
  equivalence("built-in gpt", builtin(kBuiltinGpt), layout, false);
  equivalence(
      "llama fixture", [&fixtures] { return hf::from_pretrained(fixtures + "/llama/model", nullptr); }, layout, true);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && std::string(argv[2]) != "sp")) {
    std::fprintf(stderr, "usage: mp_cp FIXTURES_DIR [sp]\n");
    return 2;
  }
  const std::string fixtures = argv[1];
  g_ulysses = argc == 3;
  const char* dim = g_ulysses ? "sp" : "cp";
  auto comm =
      Comm::connect(ProcessState::from_environment(acc::config::current_environment()), std::chrono::minutes(5));
  const int n = comm->size();
  const Group world = shared(g_ulysses ? ulysses::collectives_of(comm) : cp::collectives_of(comm));

  run_models(Layout{world, std::nullopt, std::string(dim) + "=" + std::to_string(n)}, fixtures);
  if (n == 4) {
    // Accelerate's mesh order (cp and sp outside tp): cp=2 x tp=2, or sp=2 x tp=2.
    MeshSizes sizes{1, 1, g_ulysses ? 1 : 2, 2};
    if (g_ulysses) sizes.sp = 2;
    ProcessMesh mesh(comm, sizes);
    auto group_of = [&](const std::shared_ptr<Comm>& c) {
      return shared(g_ulysses ? ulysses::collectives_of(c) : cp::collectives_of(c));
    };
    run_models(Layout{group_of(mesh.group(dim)), shared(tp::collectives_of(mesh.group("tp"))),
                      std::string(dim) + "=2 x tp=2"},
               fixtures);
    // Over c10d process groups directly (the exchanges are c10d's all-to-all either way).
    auto pg = mesh.group(dim)->process_group();
    const Group direct = shared(g_ulysses ? ulysses::collectives_of(pg, mesh.rank(dim), mesh.size(dim))
                                          : cp::collectives_of(pg, mesh.rank(dim), mesh.size(dim)));
    equivalence("llama (GQA), c10d group", from_config(decoder_config("LlamaForCausalLM", "llama", 8, 4)),
                Layout{direct, std::nullopt, std::string(dim) + "=2 of 4"}, true, true);
  }

  // Bad input.
  {
    const ScriptFile script("mp_cp");
    refused("TorchScript", [&] { return load_torchscript_model(script.path, nullptr); }, world, "TorchScript module");
  }
  refused("built-in mlp", builtin(R"({"type": "mlp", "sizes": [4, 8, 1]})"), world,
          g_ulysses ? "Mlp has no split attention" : "Mlp has no context-parallel attention");
  const Maker llama = from_config(decoder_config("LlamaForCausalLM", "llama", 4, 4));
  refused("split twice", llama, world, "split already", [&](Model& m) { Split{g_ulysses}.apply(m, world); });
  refused("tensor parallelism's sequence parallelism", llama, world, g_ulysses ? "Ulysses splits" : "exclusive",
          [&](Model& m) {
            tp::Options o;
            o.sequence_parallel = true;
            tp::parallelize(m, world, o);
          });
  if (g_ulysses) {
    refused("context parallelism first", llama, world, "is context-parallel; the two are exclusive",
            [&](Model& m) { cp::parallelize(m, shared(cp::collectives_of(comm))); });
    // Heads sp does not divide (3 of them on 2 ranks, 6 on 4), and key/value heads neither dividing sp nor divided
    // by it (3 for sp 2, 6 for sp 4; each divides its query heads, as GQA needs). A hidden size of 48 takes them.
    const int h = 3 * n / 2;
    refused("heads", from_config(decoder_config("LlamaForCausalLM", "llama", h, h, "", 48)), world,
            "sp_size " + std::to_string(n) + " does not divide LlamaForCausalLM's num_attention_heads (" +
                std::to_string(h) + ")");
    // sp_seq_length_is_variable false: a batch of another length than sp_seq_length is refused by name.
    {
      auto m = llama();
      ulysses::parallelize(*m, world, ulysses::Options{2 * n});
      std::string message;
      try {
        at::Tensor ids = at::randint(0, 96, {1, n}, at::kLong);
        m->forward(TensorDict{{"input_ids", ids}, {"labels", ids}});
      } catch (const std::exception& e) {
        message = e.what();
      }
      expect(message.find("the sequence length (" + std::to_string(n) + ") is not parallelism_config.sp_seq_length (" +
                          std::to_string(2 * n) + ")") != std::string::npos,
             "a length other than sp_seq_length refused by name (got '" + message + "')");
    }
    refused("key/value heads", from_config(decoder_config("LlamaForCausalLM", "llama", 2 * h, h, "", 48)), world,
            "sp_size " + std::to_string(n) + " does not divide LlamaForCausalLM's num_key_value_heads (" +
                std::to_string(h) + "), nor they it");
  }

  return finish();
}
