// The core v2 pieces: models as module trees (names, meta init), the named forward, the strategy seam's
// state dicts, and the fused optimizers against LibTorch's loops.
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/csrc/autograd/function.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <set>

#include <acc/builtin_models.hpp>

#include "models/model.hpp"
#include "parallel/strategy.hpp"
#include "train/optim.hpp"
#include "util/errors.hpp"
#include "util/options.hpp"

namespace acc::core {
namespace {

const char* kGpt = R"({"type": "gpt", "vocab_size": 50, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 8})";

TEST(ModuleTree, BuiltinNamesAndShapesAreTheSpecsOnes) {
  for (const char* spec : {kGpt, R"({"type": "mlp", "sizes": [3, 7, 2]})",
                           R"({"type": "gpt", "vocab_size": 9, "block_size": 4, "n_layer": 1, "n_head": 1,
                               "n_embd": 4, "bias": false})"}) {
    auto model = make_builtin_model(spec);
    auto expected = config::builtin_parameter_shapes(config::parse_builtin_spec(spec));
    auto params = model->named_parameters();
    ASSERT_EQ(params.size(), expected.size()) << spec;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].first, expected[i].first);
      EXPECT_EQ(params[i].second.sizes().vec(), expected[i].second) << params[i].first;
    }
  }
  auto gpt = make_builtin_model(kGpt);
  auto modules = gpt->module_names();
  for (const char* m : {"", "transformer", "transformer.h.1", "transformer.h.0.attn.c_attn", "transformer.ln_f"})
    EXPECT_NE(std::find(modules.begin(), modules.end(), m), modules.end()) << m;
}

TEST(ModuleTree, MetaInitThenMaterialiseEqualsDirectInit) {
  at::manual_seed(3);
  auto direct = make_builtin_model(kGpt);
  auto meta = make_builtin_model(R"({"type": "gpt", "vocab_size": 50, "block_size": 16, "n_layer": 2, "n_head": 2,
                                     "n_embd": 8, "device": "meta"})");
  for (auto& [name, p] : meta->named_parameters()) EXPECT_TRUE(p.is_meta()) << name;
  EXPECT_EQ(meta->num_parameters(), direct->num_parameters());
  EXPECT_THROW(meta->to(c10::kCPU), std::invalid_argument);  // names the meta tensor
  meta->to_empty(c10::kCPU);
  at::manual_seed(3);
  meta->reset_parameters();
  for (auto& [name, p] : meta->named_parameters()) EXPECT_TRUE(p.is_cpu() && p.requires_grad()) << name;
  auto a = direct->named_parameters(), b = meta->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;
}

TEST(ModuleTree, NamedForwardTakesHuggingFaceLabelsAndAlignedTargets) {
  auto gpt = make_builtin_model(kGpt);
  gpt->train(false);
  EXPECT_FALSE(gpt->is_training());
  at::Tensor ids = at::randint(50, {2, 6}, at::kLong);
  auto logits = gpt->forward({{"input_ids", ids}}).at("logits");
  EXPECT_EQ(logits.sizes().vec(), (std::vector<int64_t>{2, 6, 50}));
  // labels are shifted inside (Hugging Face); targets are already the next tokens.
  auto with_labels = gpt->forward({{"input_ids", ids}, {"labels", ids}}).at("loss");
  at::Tensor targets = at::full({2, 6}, -1, at::kLong);
  targets.narrow(1, 0, 5).copy_(ids.narrow(1, 1, 5));
  auto with_targets = gpt->forward({{"input_ids", ids}, {"targets", targets}}).at("loss");
  EXPECT_NEAR(with_labels.item<double>(), with_targets.item<double>(), 1e-6);
  try {
    gpt->forward({{"input_ids", ids}, {"mask", ids}});
    FAIL() << "an unknown batch entry was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'mask'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpt->forward({{"labels", ids}}), std::invalid_argument);  // no input_ids
}

// One forward and backward of `model` on a fixed batch, the RNG seeded (dropout): the loss and every gradient.
std::pair<double, NamedTensors> loss_and_grads(Model& model, const at::Tensor& ids) {
  for (auto& [name, p] : model.named_parameters()) p.mutable_grad() = at::Tensor();
  at::manual_seed(11);
  at::Tensor loss = model.forward({{"input_ids", ids}, {"labels", ids}}).at("loss");
  // Backward draws nothing, but a recomputation must not move the generator on for what follows either.
  loss.backward();
  NamedTensors grads;
  for (auto& [name, p] : model.named_parameters())
    grads.emplace_back(name, p.grad().defined() ? p.grad().clone() : at::Tensor());
  grads.emplace_back("(next draw)", at::rand({4}));
  return {loss.item<double>(), grads};
}

TEST(ActivationCheckpointing, RecomputedBlocksGiveTheGradientsOfTheForwardThatHappened) {
  const char* spec = R"({"type": "gpt", "vocab_size": 50, "block_size": 16, "n_layer": 3, "n_head": 2, "n_embd": 8,
                         "dropout": 0.2})";
  auto plain = make_builtin_model(spec);
  auto checkpointed = make_builtin_model(spec);
  checkpointed->load_state_dict(plain->state(), "the plain model");
  checkpointed->set_activation_checkpointing(true);
  at::Tensor ids = at::randint(50, {2, 12}, at::kLong);
  auto [loss_a, grads_a] = loss_and_grads(*plain, ids);
  auto [loss_b, grads_b] = loss_and_grads(*checkpointed, ids);
  EXPECT_EQ(loss_a, loss_b);  // the same dropout masks: the first run is the forward
  ASSERT_EQ(grads_a.size(), grads_b.size());
  for (size_t i = 0; i < grads_a.size(); ++i) {
    ASSERT_TRUE(grads_a[i].second.defined() && grads_b[i].second.defined()) << grads_a[i].first;
    // Dropout in the recomputation draws the saved masks again: were the RNG not restored, these would differ.
    EXPECT_TRUE(at::allclose(grads_a[i].second, grads_b[i].second, 1e-6, 1e-7)) << grads_a[i].first;
  }

  // The blocks' outputs come from the recomputing node, and the block's own graph is not kept.
  at::Tensor x = checkpointed->forward({{"input_ids", ids}}).at("logits");
  std::vector<std::string> nodes;
  std::vector<torch::autograd::Node*> todo{x.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  while (!todo.empty()) {
    auto* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    nodes.push_back(n->name());
    for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
  }
  auto has = [&](const char* what) {
    return std::count_if(nodes.begin(), nodes.end(),
                         [&](const std::string& n) { return n.find(what) != std::string::npos; });
  };
  EXPECT_EQ(has("Checkpointed"), 3);
  EXPECT_EQ(has("Attention"), 0) << "an attention node is in the graph: the blocks' activations were kept";

  // Frozen embeddings: the blocks' input needs no gradient, their parameters still get theirs.
  for (auto& [name, p] : checkpointed->named_parameters())
    if (name.find(".wte.") != std::string::npos || name.find(".wpe.") != std::string::npos) p.requires_grad_(false);
  auto [loss_c, grads_c] = loss_and_grads(*checkpointed, ids);
  for (auto& [name, g] : grads_c) {
    if (name.find("transformer.h.") == 0) {
      EXPECT_TRUE(g.defined() && g.abs().sum().item<double>() > 0) << name;
    }
  }

  // Without grad (evaluation, generation) a block runs once, as without checkpointing.
  c10::NoGradGuard no_grad;
  at::manual_seed(5);
  at::Tensor a = plain->forward({{"input_ids", ids}}).at("logits");
  at::manual_seed(5);
  at::Tensor b = checkpointed->forward({{"input_ids", ids}}).at("logits");
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_FALSE(b.requires_grad());
}

TEST(Strategy, SingleOwnsTheStateDictAndRefusesAForeignOne) {
  std::shared_ptr<Model> mlp = make_builtin_model(R"({"type": "mlp", "sizes": [3, 4, 1]})");
  auto strategy = make_single_strategy(mlp, c10::kCPU);
  auto state = strategy->full_state_dict();
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(strategy->optimizer_parameters().size(), 4u);
  NamedTensors changed;
  for (auto& [n, t] : state) changed.emplace_back(n, at::ones_like(t));
  strategy->load_full_state_dict(changed, "test");
  EXPECT_TRUE(at::equal(mlp->named_parameters()[0].second, at::ones({4, 3})));
  NamedTensors wrong = changed;
  wrong[1].second = at::zeros({5});
  EXPECT_THROW(strategy->load_full_state_dict(wrong, "test"), std::invalid_argument);
  EXPECT_TRUE(at::equal(mlp->named_parameters()[0].second, at::ones({4, 3})));  // untouched
  // The global gradient norm (one process: the local one).
  for (auto& p : strategy->optimizer_parameters()) p.mutable_grad() = at::full_like(p, 2.0);
  EXPECT_NEAR(strategy->grad_norm(2.0).item<double>(), 2.0 * std::sqrt(12.0 + 4 + 4 + 1), 1e-5);
}

// Each fused optimizer (ATen's _fused_* kernel) against LibTorch's per-tensor loop, over 5 steps.
TEST(Optimizer, FusedKernelsMatchLibTorchsLoop) {
  struct Case {
    const char* options;
    std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)> reference;
  };
  std::vector<Case> cases = {
      {R"({"type": "adamw", "lr": 0.01})",
       [](auto p) { return std::make_shared<torch::optim::AdamW>(p, torch::optim::AdamWOptions(0.01)); }},
      {R"({"type": "adam", "lr": 0.01, "weight_decay": 0.1, "amsgrad": true})",
       [](auto p) {
         return std::make_shared<torch::optim::Adam>(p,
                                                     torch::optim::AdamOptions(0.01).weight_decay(0.1).amsgrad(true));
       }},
      {R"({"type": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true})",
       [](auto p) {
         return std::make_shared<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
       }},
  };
  for (const auto& c : cases) {
    at::manual_seed(0);
    std::vector<at::Tensor> a = {at::randn({5, 3}).requires_grad_(), at::randn({7}).requires_grad_()};
    std::vector<at::Tensor> b, start;
    for (auto& t : a) {
      b.push_back(t.detach().clone().requires_grad_());
      start.push_back(t.detach().clone());
    }
    Optimizer fused(a, c.options);
    ASSERT_TRUE(fused.fused()) << c.options;
    auto loop = c.reference(b);
    for (int step = 0; step < 5; ++step) {
      for (size_t i = 0; i < a.size(); ++i) {
        at::Tensor g = at::randn(a[i].sizes());
        a[i].mutable_grad() = g.clone();
        b[i].mutable_grad() = g.clone();
      }
      fused.step();
      loop->step();
    }
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_LT((a[i] - b[i]).abs().max().item<double>(), 1e-6) << c.options;
      EXPECT_GT((a[i] - start[i]).abs().max().item<double>(), 1e-3) << c.options << ": the steps moved nothing";
    }
  }
}

// Parameter groups (issue 25): groups select parameters by name (regular expressions over the whole name), each with
// its own hyperparameters; the rest get the top-level options; the "transformers" preset is the Trainer's split.
TEST(Optimizer, ParameterGroups) {
  const auto named = [] {
    return NamedTensors{{"w", at::zeros({2}).requires_grad_()},
                        {"b", at::zeros({2}).requires_grad_()},
                        {"head.weight", at::zeros({3}).requires_grad_()}};
  };
  const auto error_of = [&](const char* options, std::function<std::vector<std::string>()> no_decay = {}) {
    try {
      Optimizer o(named(), options, no_decay);
    } catch (const OptionsError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  {
    NamedTensors p = named();
    Optimizer o(p, R"({"type": "sgd", "lr": 0.1, "param_groups": [{"params": ["w", ".*\\.weight"], "lr": 0.5}]})");
    ASSERT_EQ(o.impl().param_groups().size(), 2u);
    EXPECT_EQ(o.impl().param_groups()[0].params().size(), 2u);  // w, head.weight: the listed group first
    for (auto& [name, t] : p) t.mutable_grad() = at::ones_like(t);
    o.step();
    EXPECT_NEAR(p[0].second[0].item<double>(), -0.5, 1e-7);
    EXPECT_NEAR(p[1].second[0].item<double>(), -0.1, 1e-7);  // b: the top-level lr
    EXPECT_NEAR(p[2].second[0].item<double>(), -0.5, 1e-7);
    o.scale_lr(0.5);  // a schedule acts on every group, from each group's own initial lr
    EXPECT_NEAR(o.impl().param_groups()[0].options().get_lr(), 0.25, 1e-12);
    EXPECT_NEAR(o.impl().param_groups()[1].options().get_lr(), 0.05, 1e-12);
    // A checkpoint holds every group; an optimizer grouped otherwise refuses it.
    const Optimizer::State saved = o.save_state();
    Optimizer same(named(), R"({"type": "sgd", "lr": 0.1, "param_groups": [{"params": "w|head\\.weight"}]})");
    EXPECT_NO_THROW(same.load_state(saved, "test"));
    Optimizer one(named(), R"({"type": "sgd", "lr": 0.1})");
    EXPECT_THROW(one.load_state(saved, "test"), std::invalid_argument);
  }
  {
    // The Trainer's split: what decays first (top-level weight_decay), then the rest without decay.
    NamedTensors p = named();
    Optimizer o(p, R"({"type": "adamw", "weight_decay": 0.1, "param_groups": "transformers"})",
                [] { return std::vector<std::string>{"b"}; });
    ASSERT_EQ(o.impl().param_groups().size(), 2u);
    const auto& g = o.impl().param_groups();
    EXPECT_EQ(g[0].params().size(), 2u);
    EXPECT_EQ(static_cast<const torch::optim::AdamWOptions&>(g[0].options()).weight_decay(), 0.1);
    EXPECT_EQ(static_cast<const torch::optim::AdamWOptions&>(g[1].options()).weight_decay(), 0.0);
    EXPECT_TRUE(g[1].params()[0].is_same(p[1].second));
  }
  EXPECT_NE(error_of(R"({"type": "sgd", "param_groups": [{"params": "w"}, {"params": "w|b"}]})")
                .find("parameter 'w' is in param_groups[0] and param_groups[1]"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "sgd", "param_groups": [{"params": "nothing"}]})")
                .find("param_groups[0] selects no trainable parameter (the model's: w, b, head.weight)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "sgd", "param_groups": [{"params": "("}]})").find("not a regular expression"),
            std::string::npos);
  // Patterns run on RE2 (issue 36): one that made std::regex backtrack for minutes on names this long finishes at
  // once; 20,000 nested groups (a stack overflow in std::regex's compiler) are refused naming the limit.
  {
    const auto t0 = std::chrono::steady_clock::now();
    std::string m;
    try {
      Optimizer o(NamedTensors{{"model.layers.0.self_attn.q_proj.weight", at::zeros({2}).requires_grad_()},
                               {"model.layers.0.self_attn.v_proj.weight", at::zeros({2}).requires_grad_()}},
                  R"({"type": "sgd", "param_groups": [{"params": "(.|.)*x"}]})");
    } catch (const OptionsError& e) {
      m = e.what();
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
    EXPECT_NE(m.find("param_groups[0] selects no trainable parameter"), std::string::npos) << m;
  }
  const std::string nested = std::string(20000, '(') + "w" + std::string(20000, ')');
  const std::string m = error_of((R"({"type": "sgd", "param_groups": [{"params": ")" + nested + "\"}]}").c_str());
  EXPECT_NE(m.find("param_groups[0]: 'params': '((((("), std::string::npos) << m.substr(0, 300);
  EXPECT_NE(m.find("is not a regular expression libacc reads (longer than 4096 bytes, the limit)"), std::string::npos)
      << m.substr(0, 400);
  EXPECT_NE(error_of(R"({"type": "sgd", "param_groups": [{"params": "w", "lrr": 1}]})").find("unknown key 'lrr'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "sgd", "param_groups": [{"params": "w", "lr": -1}]})")
                .find("param_groups[0]: 'lr' must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "sgd", "param_groups": "transformers"})").find("with a model"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "sgd", "param_groups": "huggingface"})", [] { return std::vector<std::string>{}; })
                .find("'param_groups' must be a list of groups or \"transformers\""),
            std::string::npos);
}

}  // namespace
}  // namespace acc::core
