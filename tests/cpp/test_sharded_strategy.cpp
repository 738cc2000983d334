// The sharded strategy (ZeRO / FSDP) on a one-process group: prefetching, freeing the root unit after the head's
// backward, the mixed-precision policy and CPU offload; and a tied weight stepped once under every strategy.
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core_test_util.hpp"
#include "models/model.hpp"
#include "parallel/ddp.hpp"
#include "parallel/sharded.hpp"
#include "train/optim.hpp"

namespace acc::core {
namespace {

// Three linear blocks reported as units "b0", "b1", "b2"; each block's body records which blocks' weights hold
// memory (are gathered) while it runs: "110" = b0 and b1.
class ThreeBlocks final : public NnModel {
 public:
  ThreeBlocks() : NnModel(std::make_shared<torch::nn::Module>()) {
    for (int i = 0; i < 3; ++i)
      blocks_.push_back(module_->register_module("b" + std::to_string(i), torch::nn::Linear(4, 4)));
  }
  std::vector<std::string> reported_units() const override { return {"b0", "b1", "b2"}; }
  TensorDict forward(const TensorDict& batch) override {
    at::Tensor x = batch.at("input");
    for (int i = 0; i < 3; ++i)
      x = run_unit("b" + std::to_string(i), x, [this, i](const at::Tensor& in) {
        std::string held;
        for (const auto& b : blocks_) held += b->weight.storage().nbytes() > 0 ? '1' : '0';
        seen.push_back("b" + std::to_string(i) + ":" + held);
        return at::tanh(blocks_[static_cast<size_t>(i)]->forward(in));
      });
    return TensorDict{{"output", x}, {"loss", x.pow(2).mean()}};
  }
  std::vector<std::string> seen;

 private:
  std::vector<torch::nn::Linear> blocks_;
};

TEST(Sharded, PrefetchGathersTheNextUnitAhead) {
  // Stage 3, FULL_SHARD: forward_prefetch starts the next unit's all-gather as a unit's forward starts; going
  // backward (here seen through activation checkpointing, whose recomputation runs each block again in backward)
  // BACKWARD_PRE starts the previous unit's when a unit's backward starts, BACKWARD_POST when it ends.
  auto comm = solo_group();
  struct Case {
    bool forward;
    std::string backward;
    std::vector<std::string> want;  // forward b0 b1 b2, then backward's recomputation b2 b1 b0
  };
  const std::vector<Case> cases = {
      {false, "", {"b0:100", "b1:010", "b2:001", "b2:001", "b1:010", "b0:100"}},
      {true, "BACKWARD_PRE", {"b0:110", "b1:011", "b2:001", "b2:011", "b1:110", "b0:100"}},
      {true, "BACKWARD_POST", {"b0:110", "b1:011", "b2:001", "b2:001", "b1:010", "b0:100"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.backward);
    auto model = std::make_shared<ThreeBlocks>();
    model->set_activation_checkpointing(true);
    ShardingOptions o;
    o.stage = 3;
    o.units = {"b0", "b1", "b2"};
    o.forward_prefetch = c.forward;
    o.backward_prefetch = c.backward;
    auto strategy = make_sharded_strategy(model, at::kCPU, comm, o);
    strategy->before_forward();
    at::Tensor loss = model->forward({{"input", at::randn({2, 4})}}).at("loss");
    strategy->after_forward();
    strategy->before_backward(true);
    loss.backward();
    strategy->after_backward();
    EXPECT_EQ(model->seen, c.want);
  }
}

// A stem (an embedding: its backward reads no weight), three blocks reported as units and a head tied to the stem's
// weight, run through run_head. `seen` records whether the root unit (the tied weight) holds memory as the stem's
// gradient arrives, as each block runs (forward, then backward's recomputation) and as the head runs.
class StemBlocksHead final : public NnModel {
 public:
  StemBlocksHead() : NnModel(std::make_shared<torch::nn::Module>()) {
    emb_ = module_->register_parameter("emb", at::randn({8, 4}));
    for (int i = 0; i < 3; ++i)
      blocks_.push_back(module_->register_module("b" + std::to_string(i), torch::nn::Linear(4, 4)));
  }
  std::vector<std::string> reported_units() const override { return {"b0", "b1", "b2"}; }
  TensorDict forward(const TensorDict& batch) override {
    at::Tensor x = at::embedding(emb_, batch.at("input"));
    x.register_hook([this](const at::Tensor& g) {
      seen.push_back(std::string("stem:") + root_held());
      return g;
    });
    for (int i = 0; i < 3; ++i)
      x = run_unit("b" + std::to_string(i), x, [this, i](const at::Tensor& in) {
        seen.push_back("b" + std::to_string(i) + ":" + root_held());
        return at::tanh(blocks_[static_cast<size_t>(i)]->forward(in));
      });
    at::Tensor logits = run_head(x, [this](const at::Tensor& in) {
      seen.push_back(std::string("head:") + root_held());
      return at::linear(in, emb_);
    });
    return TensorDict{{"output", logits}, {"loss", logits.pow(2).mean()}};
  }
  char root_held() const { return emb_.storage().nbytes() > 0 ? '1' : '0'; }
  std::vector<std::string> seen;

 private:
  at::Tensor emb_;
  std::vector<torch::nn::Linear> blocks_;
};

TEST(Sharded, TheHeadsBackwardFreesTheRootUnit) {
  // Stage 3: once backward is through the head, the root unit's parameters (what is outside the blocks) are freed,
  // not held to the end of backward: the blocks' backward (seen through activation checkpointing's recomputation)
  // and the stem's run without them. A block that is not a unit of its own is in the root: then it stays.
  auto comm = solo_group();
  const at::Tensor ids = at::randint(8, {2, 3});
  for (bool all_units : {true, false}) {
    SCOPED_TRACE(all_units);
    auto model = std::make_shared<StemBlocksHead>();
    model->set_activation_checkpointing(true);
    ShardingOptions o;
    o.stage = 3;
    o.units = all_units ? std::vector<std::string>{"b0", "b1", "b2"} : std::vector<std::string>{"b0", "b1"};
    auto strategy = make_sharded_strategy(model, at::kCPU, comm, o);
    strategy->before_forward();
    at::Tensor loss = model->forward({{"input", ids}}).at("loss");
    strategy->after_forward();
    strategy->before_backward(true);
    loss.backward();
    strategy->after_backward();
    const char b = all_units ? '0' : '1';
    const std::vector<std::string> want = {"b0:1",
                                           "b1:1",
                                           "b2:1",
                                           "head:1",
                                           std::string("b2:") + b,
                                           std::string("b1:") + b,
                                           std::string("b0:") + b,
                                           std::string("stem:") + b};
    EXPECT_EQ(model->seen, want);
  }
  // Two forwards, one backward: the first head's backward, after the second's freed the root, gathers it again; the
  // gradients are those of the model without a strategy.
  at::manual_seed(3);
  auto reference = std::make_shared<StemBlocksHead>();
  auto model = std::make_shared<StemBlocksHead>();
  {
    c10::NoGradGuard no_grad;
    for (auto& [name, t] : model->named_parameters())
      for (auto& [ref_name, r] : reference->named_parameters())
        if (name == ref_name) t.copy_(r);
  }
  const at::Tensor ids2 = at::randint(8, {2, 3});
  (reference->forward({{"input", ids}}).at("loss") + reference->forward({{"input", ids2}}).at("loss")).backward();
  ShardingOptions o;
  o.stage = 3;
  o.units = {"b0", "b1", "b2"};
  auto strategy = make_sharded_strategy(model, at::kCPU, comm, o);
  strategy->before_forward();
  at::Tensor first = model->forward({{"input", ids}}).at("loss");
  at::Tensor second = model->forward({{"input", ids2}}).at("loss");
  strategy->after_forward();
  strategy->before_backward(true);
  (first + second).backward();
  strategy->after_backward();
  const std::vector<at::Tensor> pieces = strategy->optimizer_parameters();
  const NamedTensors params = reference->trainable_parameters();
  ASSERT_EQ(pieces.size(), params.size());
  for (size_t i = 0; i < pieces.size(); ++i)
    EXPECT_TRUE(at::allclose(pieces[i].grad(), params[i].second.grad().reshape({-1}), 1e-6, 1e-7)) << params[i].first;
}

TEST(Sharded, MixedPrecisionPolicyComputesInBf16AndStepsFp32Masters) {
  // FSDP's MixedPrecision(param_dtype=bf16, reduce_dtype=bf16) on a one-process group: the model computes with
  // bf16 copies, the optimizer steps fp32 shards, and the state dict holds the fp32 masters.
  auto comm = solo_group();
  for (int stage : {2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    std::shared_ptr<Model> model = make_builtin_model(
        R"({"type": "gpt", "vocab_size": 37, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 16})");
    NamedTensors before;
    for (auto& [n, t] : model->state()) before.emplace_back(n, t.detach().clone());
    ShardingOptions o;
    o.stage = stage;
    o.param_dtype = o.reduce_dtype = at::kBFloat16;
    o.units = {"transformer.h.0", "transformer.h.1"};
    auto strategy = make_sharded_strategy(model, at::kCPU, comm, o);
    for (const auto& p : strategy->optimizer_parameters()) EXPECT_EQ(p.scalar_type(), at::kFloat);
    NamedTensors full = strategy->full_state_dict();
    ASSERT_EQ(full.size(), before.size());
    for (size_t i = 0; i < full.size(); ++i) {
      EXPECT_EQ(full[i].second.scalar_type(), at::kFloat) << full[i].first;
      EXPECT_TRUE(at::equal(full[i].second, before[i].second)) << full[i].first << ": the masters are the fp32 weights";
    }
    Optimizer opt(strategy->optimizer_parameters(), R"({"type": "sgd", "lr": 0.5})");
    at::Tensor ids = at::randint(37, {4, 8}, at::kLong);
    strategy->before_forward();
    if (stage == 2) {
      for (const auto& [n, p] : model->named_parameters()) EXPECT_EQ(p.scalar_type(), at::kBFloat16) << n;
    }
    at::Tensor loss = model->forward({{"input_ids", ids}, {"targets", (ids * 7 + 3) % 37}}).at("loss");
    EXPECT_EQ(loss.scalar_type(), at::kBFloat16) << "computed with the bf16 copies (no autocast here)";
    strategy->after_forward();
    strategy->before_backward(true);
    loss.backward();
    strategy->after_backward();
    for (const auto& p : strategy->optimizer_parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_EQ(p.grad().scalar_type(), at::kFloat);
    }
    opt.step();
    strategy->after_optimizer_step();
    NamedTensors after = strategy->full_state_dict();
    double moved = 0;
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_EQ(after[i].second.scalar_type(), at::kFloat);
      moved = std::max(moved, (after[i].second - before[i].second).abs().max().item<double>());
    }
    EXPECT_GT(moved, 1e-3) << "stage " << stage << ": the step changed the masters";
    if (stage == 2) {  // the bf16 copies follow the masters
      for (size_t i = 0; i < after.size(); ++i) {
        if (model->state()[i].second.scalar_type() == at::kBFloat16) {
          EXPECT_TRUE(at::equal(model->state()[i].second, after[i].second.to(at::kBFloat16))) << after[i].first;
        }
      }
    }
    // Loading puts the given fp32 values into the masters exactly.
    strategy->load_full_state_dict(before, "before");
    NamedTensors reloaded = strategy->full_state_dict();
    for (size_t i = 0; i < reloaded.size(); ++i) EXPECT_TRUE(at::equal(reloaded[i].second, before[i].second));
  }
}

TEST(Sharded, CpuOffloadStepsSeparateCopiesOfTheShards) {
  // fsdp cpu_offload / offload_optimizer_device cpu: the optimizer's parameters, their gradients and its state are
  // copies in CPU memory, never the model's own storage (here the training device is the CPU too, so this shows the
  // mechanics: a GPU run moves the same copies across); the step happens on them and reaches the model by the gather.
  auto comm = solo_group();
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    std::shared_ptr<Model> model = make_builtin_model(R"({"type": "mlp", "sizes": [6, 10, 2]})");
    std::shared_ptr<Model> plain_model = make_builtin_model(R"({"type": "mlp", "sizes": [6, 10, 2]})");
    plain_model->load_state_dict(model->state(), "model");
    ShardingOptions o;
    o.stage = stage;
    o.offload = true;
    auto strategy = make_sharded_strategy(model, at::kCPU, comm, o);
    ShardingOptions plain_o;
    plain_o.stage = stage;
    auto plain = make_sharded_strategy(plain_model, at::kCPU, comm, plain_o);
    auto storage_of = [](const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); };
    std::set<const void*> model_storages;
    strategy->before_forward();
    for (const auto& [n, p] : model->named_parameters()) model_storages.insert(storage_of(p));
    for (const auto& p : strategy->optimizer_parameters()) {
      EXPECT_TRUE(p.is_cpu());
      EXPECT_EQ(model_storages.count(storage_of(p)), 0u) << "an optimizer parameter is the model's own storage";
    }
    Optimizer opt(strategy->optimizer_parameters(), R"({"type": "adamw", "lr": 0.1})");
    Optimizer plain_opt(plain->optimizer_parameters(), R"({"type": "adamw", "lr": 0.1})");
    const at::Tensor x = at::randn({5, 6}), y = at::randn({5, 2});
    for (auto [s, m, op] :
         {std::tuple{strategy.get(), model.get(), &opt}, std::tuple{plain.get(), plain_model.get(), &plain_opt}}) {
      s->before_forward();
      at::Tensor loss = m->forward({{"input", x}, {"targets", y}}).at("loss");
      s->after_forward();
      s->before_backward(true);
      loss.backward();
      s->after_backward();
      op->step();
      s->after_optimizer_step();
    }
    for (const auto& p : strategy->optimizer_parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_EQ(model_storages.count(storage_of(p.grad())), 0u);
    }
    for (const auto& t : opt.save_state().tensors) {  // Adam's moments
      EXPECT_TRUE(t.second.is_cpu());
      EXPECT_EQ(model_storages.count(storage_of(t.second)), 0u) << t.first;
    }
    // The offloaded step is the step: the model's weights equal those of the same training without offload.
    NamedTensors a = strategy->full_state_dict(), b = plain->full_state_dict();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;
    if (stage < 3) {  // and the model's own parameters (whole below stage 3) hold the stepped values
      strategy->before_forward();
      for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(model->state()[i].second, a[i].second)) << a[i].first;
    }
  }
}

// A weight registered under two names (as a tied embedding and head are), or once, and a bias: the same
// computation either way.
class TiedOrNot final : public NnModel {
 public:
  explicit TiedOrNot(bool tied) : NnModel(std::make_shared<torch::nn::Module>()) {
    at::manual_seed(5);
    w_ = module_->register_parameter("embed", at::randn({4, 4}));
    if (tied) module_->register_parameter("head", w_);
    b_ = module_->register_parameter("bias", at::randn({4}));
  }
  TensorDict forward(const TensorDict& batch) override {
    at::Tensor y = at::tanh(at::matmul(batch.at("input"), w_) + b_);
    return TensorDict{{"output", y}, {"loss", at::matmul(y, w_.t()).pow(2).mean()}};
  }

 private:
  at::Tensor w_, b_;
};

TEST(Strategies, ATiedWeightIsSteppedOnce) {
  // torch's parameters() and DDP list a tied weight once: an optimizer over a model that registers its weight twice
  // steps it exactly as the model registering it once, under every strategy (the one selection of the trainable
  // parameters, Model::trainable_parameters).
  auto comm = solo_group();
  const std::vector<std::string> strategies = {"single", "ddp", "zero1", "zero2", "zero3"};
  for (const std::string& kind : strategies) {
    SCOPED_TRACE(kind);
    std::vector<NamedTensors> trained;
    for (bool tied : {false, true}) {
      auto model = std::make_shared<TiedOrNot>(tied);
      EXPECT_EQ(model->trainable_parameters().size(), 2u);
      std::unique_ptr<Strategy> strategy;
      if (kind == "single") {
        strategy = make_single_strategy(model, at::kCPU);
      } else if (kind == "ddp") {
        strategy = make_ddp_strategy(model, at::kCPU, comm, DdpOptions{});
      } else {
        ShardingOptions o;
        o.stage = kind.back() - '0';
        strategy = make_sharded_strategy(model, at::kCPU, comm, o);
      }
      Optimizer opt(strategy->optimizer_parameters(), R"({"type": "adamw", "lr": 0.1})");
      at::manual_seed(7);
      for (int step = 0; step < 3; ++step) {
        strategy->before_forward();
        at::Tensor loss = model->forward({{"input", at::randn({3, 4})}}).at("loss");
        strategy->after_forward();
        strategy->before_backward(true);
        loss.backward();
        strategy->after_backward();
        opt.step();
        strategy->after_optimizer_step();
        opt.zero_grad();
      }
      trained.push_back(strategy->full_state_dict());
    }
    ASSERT_EQ(trained[0].size(), 2u);
    std::map<std::string, at::Tensor> tied(trained[1].begin(), trained[1].end());
    for (const auto& [name, t] : trained[0]) EXPECT_TRUE(tied.count(name) && at::equal(tied.at(name), t)) << name;
  }
}

// The sharded strategy records where its pieces lie on the model (models/placement.hpp): on one rank, each parameter's
// flat ranges cover all of it.
TEST(Sharded, RecordsEachParametersFlatPieces) {
  at::manual_seed(0);
  auto model = std::make_shared<StemBlocksHead>();
  ShardingOptions o;
  o.stage = 3;
  o.units = {"b0", "b1", "b2"};
  auto strategy = make_sharded_strategy(model, at::kCPU, solo_group(), o);
  for (const auto& [name, p] : model->trainable_parameters()) {
    const Placement* placement = model->placements().find(name);
    ASSERT_TRUE(placement && placement->flat) << name;
    EXPECT_EQ(placement->flat->over, "dp_shard_cp") << name;
    int64_t held = 0;
    for (const auto& [offset, numel] : placement->flat->ranges) held += numel;
    EXPECT_EQ(held, p.numel()) << name;
  }
}

}  // namespace
}  // namespace acc::core
