// DeepSpeed ZeRO-3's zero3_init_flag in one process (models/deferred.hpp): from_config and from_pretrained build on
// the meta device while the flag is held, refuse what needs the weights, and make exactly the weights (and leave the
// generator exactly where) the model without the flag would. The sharded path on 2 processes: tests/mp/mp-zero3_init.
//   test_deferred FIXTURES_DIR [gtest flags]
#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include <unistd.h>

#include <filesystem>
#include <set>

#include "models/deferred.hpp"
#include "models/hf/pretrained.hpp"
#include "runtime/process_state.hpp"
#include "train/accelerator.hpp"
#include "train/optim.hpp"
#include "util/errors.hpp"

namespace acc::core {
namespace {

namespace fs = std::filesystem;
std::string g_fixtures;

const char* const kLlama =
    R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 37, "hidden_size": 16,
        "intermediate_size": 20, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 16, "rms_norm_eps": 1e-05, "hidden_act": "silu", "initializer_range": 0.02,
        "tie_word_embeddings": false})";

// The flag as an Accelerator of a ZeRO-3 job holds it, for one scope.
struct Zero3Init {
  Zero3Init() { hold_zero3_init(true); }
  ~Zero3Init() { hold_zero3_init(false); }
};

void expect_same_state(const Model& a, const Model& b) {
  const NamedTensors sa = a.state(), sb = b.state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_FALSE(sb[i].second.is_meta()) << sb[i].first;
    EXPECT_TRUE(at::equal(sa[i].second, sb[i].second)) << sa[i].first;
  }
}

bool all_meta(const Model& m) {
  for (const auto& [n, t] : m.state())
    if (!t.is_meta()) return false;
  return true;
}

TEST(Zero3Init, FromConfigMakesConstructionsWeightsAndLeavesTheGeneratorAsConstructionDoes) {
  set_seed(3, false);
  auto whole = hf::from_config(kLlama, nullptr);
  const at::Tensor after_whole = at::rand({8});
  set_seed(3, false);
  std::unique_ptr<Model> deferred;
  {
    Zero3Init flag;
    deferred = hf::from_config(kLlama, nullptr);
  }
  EXPECT_TRUE(at::equal(at::rand({8}), after_whole)) << "the generator continues as after construction";
  ASSERT_TRUE(deferred->deferred() && deferred->deferred()->pending());
  EXPECT_TRUE(all_meta(*deferred));
  EXPECT_EQ(deferred->num_parameters(), whole->num_parameters());
  try {
    deferred->check_made("forward");
    ADD_FAILURE() << "no error";
  } catch (const StateError& e) {
    EXPECT_NE(std::string(e.what()).find("zero3_init_flag"), std::string::npos) << e.what();
  }
  // An optimizer built before the weights exist steps them once made (prepare gives it their replacements).
  Optimizer opt(deferred->trainable_parameters(), R"({"type": "adamw"})");
  // Made later, from whatever the generator does meanwhile: the same weights, and the generator untouched.
  set_seed(99, false);
  (void)at::rand({4});
  deferred->deferred()->make_whole(c10::kCPU);
  const at::Tensor next = at::rand({4});
  set_seed(99, false);
  (void)at::rand({4});
  EXPECT_TRUE(at::equal(next, at::rand({4}))) << "making the weights draws nothing from the caller's generator";
  EXPECT_FALSE(deferred->deferred()->pending());
  expect_same_state(*whole, *deferred);
  std::set<const void*> model_params;
  for (const auto& p : deferred->trainable_tensors()) model_params.insert(p.unsafeGetTensorImpl());
  opt.replace_parameters([&](const at::Tensor& p) { return deferred->deferred()->replacement(p); });
  std::set<const void*> held;
  for (const auto& p : opt.params()) held.insert(p.unsafeGetTensorImpl());
  EXPECT_EQ(held, model_params);
  for (const auto& p : deferred->trainable_tensors()) EXPECT_TRUE(p.requires_grad() && p.is_leaf());
}

TEST(Zero3Init, FromPretrainedReadsEachModuleWhenMadeAndFailsCleanly) {
  const std::string fixture = g_fixtures + "/llama/model";  // three shards and an index
  auto whole = hf::from_pretrained(fixture, nullptr);
  const fs::path tmp = fs::temp_directory_path() / ("acc_zero3_init_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::copy(fixture, tmp);
  std::unique_ptr<Model> deferred;
  {
    Zero3Init flag;
    deferred = hf::from_pretrained(tmp.string(), nullptr);
  }
  ASSERT_TRUE(deferred->deferred() && deferred->deferred()->pending());
  EXPECT_TRUE(all_meta(*deferred));
  EXPECT_FALSE(deferred->is_training());
  // A shard gone by the time the weights are made: an I/O error naming it, and the model still waits, untouched.
  const fs::path shard = tmp / "model-00002-of-00003.safetensors", away = tmp / "away";
  fs::rename(shard, away);
  try {
    deferred->deferred()->make_whole(c10::kCPU);
    ADD_FAILURE() << "no error";
  } catch (const std::ios_base::failure& e) {
    EXPECT_NE(std::string(e.what()).find("model-00002-of-00003.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(deferred->deferred()->pending());
  EXPECT_TRUE(all_meta(*deferred));
  fs::rename(away, shard);
  deferred->deferred()->make_whole(c10::kCPU);
  expect_same_state(*whole, *deferred);
  fs::remove_all(tmp);
}

TEST(Zero3Init, AStrategyThatDoesNotShardGetsTheWholeModel) {
  // A deferred model prepared by an accelerator without ZeRO-3 (here one process): made whole at prepare, its
  // optimizer stepping the made parameters.
  set_seed(5, false);
  auto whole = hf::from_config(kLlama, nullptr);
  set_seed(5, false);
  auto slot = std::make_shared<PreparedModel>();
  {
    Zero3Init flag;
    slot->model = hf::from_config(kLlama, nullptr);
  }
  auto opt = std::make_shared<PreparedOptimizer>();
  opt->model = slot;
  opt->opt = make_optimizer(*slot->model, R"({"type": "sgd", "lr": 0.1})");
  auto acc = Accelerator::create("{}");
  acc->prepare(slot, opt, nullptr, nullptr);
  expect_same_state(*whole, *slot->model);
  std::set<const void*> model_params, held;
  for (const auto& p : slot->model->trainable_tensors()) model_params.insert(p.unsafeGetTensorImpl());
  for (const auto& p : opt->opt->params()) held.insert(p.unsafeGetTensorImpl());
  EXPECT_EQ(held, model_params);
  TensorDict batch{{"input_ids", at::arange(8).view({1, 8})}, {"labels", at::arange(8).view({1, 8})}};
  at::Tensor loss = slot->forward(batch).at("loss");
  acc->backward(loss);
  const at::Tensor before = slot->model->named_parameters().front().second.clone();
  opt->step();
  EXPECT_FALSE(at::equal(before, slot->model->named_parameters().front().second)) << "the optimizer steps the model";
}

}  // namespace
}  // namespace acc::core

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: test_deferred FIXTURES_DIR\n");
    return 2;
  }
  acc::core::g_fixtures = argv[1];
  return RUN_ALL_TESTS();
}
