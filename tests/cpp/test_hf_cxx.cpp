// The C++ API's Hugging Face models (acc/torch.hpp, acc::HfModel): from_pretrained, fine-tuning through
// Accelerator::prepare with a torch::optim optimizer over module().parameters(), generate with a callback,
// save_pretrained that loads back.   test_hf_cxx FIXTURES_DIR
#include <acc/torch.hpp>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>

namespace {

std::string g_fixtures;

TEST(HfModelCxx, FineTuneGenerateSave) {
  acc::Accelerator accelerator(R"({"seed": 3})");
  acc::HfModel model = acc::HfModel::from_pretrained(g_fixtures + "/qwen2/model");
  EXPECT_FALSE(model.module().is_training());
  model.module().train();
  auto adamw = std::make_shared<torch::optim::AdamW>(model.module().parameters(), torch::optim::AdamWOptions(1e-2));
  acc::Model prepared = accelerator.prepare(model);
  acc::Optimizer opt = accelerator.prepare(adamw);
  torch::Tensor ids = torch::tensor({{5, 9, 14, 3, 77, 12, 40, 8}}, torch::kLong);
  acc::Batch batch({{"input_ids", ids}, {"labels", ids}});
  double first = 0, last = 0;
  for (int step = 0; step < 10; ++step) {
    torch::Tensor loss = model(batch).at("loss");
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    accelerator.backward(loss);
    opt.step();
    opt.zero_grad();
  }
  std::printf("qwen2 fine-tuned on one sequence: loss %.4f -> %.4f\n", first, last);
  EXPECT_LT(last, first * 0.8);

  model.module().eval();
  int calls = 0;
  torch::Tensor out = model.generate(ids.narrow(1, 0, 4), {}, R"({"max_new_tokens": 4})", [&](const torch::Tensor& t) {
    EXPECT_EQ(t.numel(), 1);
    return ++calls < 10;
  });
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(calls, 4);
  // It learned the sequence: greedy decoding continues the prompt as trained.
  std::printf("continues [5, 9, 14, 3] with %s\n", c10::str(out.narrow(1, 4, 4)).c_str());
  EXPECT_TRUE(out.equal(ids));

  const auto dir = std::filesystem::temp_directory_path() / ("acc-hf-cxx-" + std::to_string(::getpid()));
  model.save_pretrained(dir.string());
  acc::HfModel back = acc::HfModel::from_pretrained(dir.string());
  acc::Batch in({{"input_ids", ids}});
  EXPECT_TRUE(back(in).at("logits").equal(model(in).at("logits")));
  std::filesystem::remove_all(dir);
  // Device maps for an empty model.
  acc::HfModel empty = acc::HfModel::from_config(
      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
          "num_hidden_layers": 32, "num_attention_heads": 32})",
      R"({"device": "meta", "dtype": "float16"})");
  // Accelerate's sizes: 2 bytes a weight, and rotary_emb's inv_freq and original_inv_freq (64 float32 each).
  EXPECT_NE(empty.module_sizes().find(R"("": 13476831744)"), std::string::npos);
  const std::string map = empty.infer_auto_device_map(R"({"device_map": "sequential", "max_memory": {"cpu": "4GB"}})");
  EXPECT_NE(map.find(R"("model.layers.3": "cpu")"), std::string::npos) << map;
  EXPECT_NE(map.find(R"("lm_head": "disk")"), std::string::npos) << map;
  EXPECT_THROW(acc::HfModel::from_pretrained(g_fixtures + "/none"), std::exception);
  EXPECT_THROW(acc::HfModel::from_config(R"({"architectures": ["T5Model"]})"), std::exception);
}

// Freezing by pattern and libacc's parameter groups from the C++ API, on an HfModel and on a module of one's own.
TEST(HfModelCxx, FrozenAndParameterGroups) {
  acc::Accelerator accelerator(R"({"seed": 3})");
  acc::HfModel model = acc::HfModel::from_pretrained(g_fixtures + "/qwen2/model");
  model.module().train();
  EXPECT_EQ(acc::set_requires_grad(model, R"(model\.embed_tokens\..*|model\.layers\.0\..*)", false), 1 + 12);
  EXPECT_THROW(acc::set_requires_grad(model, "nothing", false), std::invalid_argument);
  // The Trainer's split over what trains: decay first, then biases and norms without.
  auto opt =
      acc::make_optimizer(model,
                          R"({"type": "adamw", "lr": 0.01, "weight_decay": 0.1, "param_groups": "transformers"})");
  ASSERT_EQ(opt->param_groups().size(), 2u);
  const auto& no_decay = opt->param_groups()[1];
  EXPECT_EQ(static_cast<const torch::optim::AdamWOptions&>(no_decay.options()).weight_decay(), 0.0);
  EXPECT_EQ(static_cast<const torch::optim::AdamWOptions&>(opt->param_groups()[0].options()).weight_decay(), 0.1);
  size_t trainable = 0;
  for (const auto& p : model.module().parameters()) trainable += p.requires_grad();
  EXPECT_EQ(opt->param_groups()[0].params().size() + no_decay.params().size(), trainable);
  std::map<const void*, torch::Tensor> before;
  for (const auto& p : model.module().named_parameters())
    before[p.value().unsafeGetTensorImpl()] = p.value().detach().clone();
  acc::Model prepared = accelerator.prepare(model);
  acc::Optimizer prepared_opt = accelerator.prepare(opt);
  EXPECT_THROW(acc::set_requires_grad(model, ".*", true), std::runtime_error);
  torch::Tensor ids = torch::tensor({{5, 9, 14, 3, 77, 12, 40, 8}}, torch::kLong);
  accelerator.backward(model(acc::Batch({{"input_ids", ids}, {"labels", ids}})).at("loss"));
  prepared_opt.step();
  for (const auto& p : model.module().named_parameters()) {
    const bool moved = !p.value().equal(before[p.value().unsafeGetTensorImpl()]);
    EXPECT_EQ(moved, p.value().requires_grad()) << p.key();
  }

  struct Net : torch::nn::Module {
    Net()
        : fc(register_module("fc", torch::nn::Linear(3, 2))), head(register_module("head", torch::nn::Linear(2, 1))) {}
    torch::nn::Linear fc, head;
  };
  auto net = std::make_shared<Net>();
  EXPECT_EQ(acc::set_requires_grad(*net, R"(fc\.bias)", false), 1);
  auto sgd =
      acc::make_optimizer(*net, R"({"type": "sgd", "lr": 0.1, "param_groups": [{"params": "head\\..*", "lr": 1.0}]})");
  ASSERT_EQ(sgd->param_groups().size(), 2u);
  EXPECT_EQ(sgd->param_groups()[0].params().size(), 2u);  // head.weight, head.bias
  EXPECT_EQ(sgd->param_groups()[0].options().get_lr(), 1.0);
  EXPECT_EQ(sgd->param_groups()[1].params().size(), 1u);  // fc.weight (fc.bias is frozen)
  EXPECT_THROW(acc::make_optimizer(*net, R"({"type": "sgd", "param_groups": [{"params": "nope"}]})"), std::exception);
}

}  // namespace

// LoRA through the C++ API: a Hugging Face model with peft's adapter (test_lora checks the numbers against peft).
TEST(LoraCxx, HfModelAdapterLoadsMergesAndSaves) {
  const std::string adapter = g_fixtures + "/../../finetune/fixtures/llama_qv";
  acc::HfModel model = acc::HfModel::from_pretrained(g_fixtures + "/llama/model", R"({"dtype": "float32"})");
  torch::Tensor ids = torch::tensor({{5, 17, 42, 8, 63, 29, 71}}, torch::kLong);
  acc::Batch batch({{"input_ids", ids}});
  torch::NoGradGuard no_grad;
  torch::Tensor base = model(batch).at("logits");
  acc::load_adapter(model, adapter);
  torch::Tensor adapted = model(batch).at("logits");
  EXPECT_GT((adapted - base).abs().max().item<double>(), 1e-2);
  const std::string dir = testing::TempDir() + "/lora_cxx_hf";
  std::filesystem::remove_all(dir);
  acc::save_adapter(model, dir);
  acc::HfModel again = acc::HfModel::from_pretrained(g_fixtures + "/llama/model", R"({"dtype": "float32"})");
  acc::load_adapter(again, dir);
  EXPECT_TRUE(again(batch).at("logits").equal(adapted));
  acc::merge_adapter(model);
  EXPECT_LE((model(batch).at("logits") - adapted).abs().max().item<double>(), 1e-5);
  EXPECT_THROW(acc::merge_adapter(model), std::runtime_error);  // no adapter left
  std::filesystem::remove_all(dir);
}

// A module of one's own: acc::Linear layers take adapters, a torch::nn::Linear is named as the one that cannot.
struct LoraNet : torch::nn::Module {
  LoraNet() {
    fc1 = register_module("fc1", acc::Linear(6, 16));
    fc2 = register_module("fc2", acc::Linear(16, 3));
    plain = register_module("plain", torch::nn::Linear(3, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return plain(fc2(torch::relu(fc1(x)))); }
  acc::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Linear plain{nullptr};
};

TEST(LoraCxx, UserModuleWithAccLinear) {
  torch::manual_seed(7);
  auto net = std::make_shared<LoraNet>();
  torch::Tensor x = torch::randn({5, 6});
  torch::Tensor base = net->forward(x).detach();
  try {
    acc::add_lora(*net, R"({"target_modules": ["plain"]})");
    ADD_FAILURE() << "a torch::nn::Linear target was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'plain' is a torch::nn::Linear"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("acc::Linear"), std::string::npos) << e.what();
  }
  acc::add_lora(*net, R"({"r": 2, "lora_alpha": 4, "target_modules": ["fc1", "fc2"]})");
  std::vector<std::string> trainable;
  for (const auto& p : net->named_parameters())
    if (p.value().requires_grad()) trainable.push_back(p.key());
  EXPECT_EQ(trainable, (std::vector<std::string>{"fc1.lora_A.weight", "fc1.lora_B.weight", "fc2.lora_A.weight",
                                                 "fc2.lora_B.weight"}));
  EXPECT_TRUE(net->forward(x).equal(base));  // B = 0: the adapter starts as a no-op
  std::vector<torch::Tensor> params;
  for (const auto& p : net->parameters())
    if (p.requires_grad()) params.push_back(p);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  for (int i = 0; i < 3; ++i) {
    sgd.zero_grad();
    net->forward(x).pow(2).sum().backward();
    sgd.step();
  }
  torch::Tensor trained = net->forward(x).detach();
  EXPECT_GT((trained - base).abs().max().item<double>(), 1e-4);

  const std::string dir = testing::TempDir() + "/lora_cxx_net";
  std::filesystem::remove_all(dir);
  acc::save_adapter(*net, dir);
  auto other = std::make_shared<LoraNet>();  // the same base weights, then the saved adapter
  {
    torch::NoGradGuard no_grad;
    auto from = net->named_parameters();
    for (auto& p : other->named_parameters()) p.value().copy_(from[p.key()]);
  }
  acc::load_adapter(*other, dir);
  EXPECT_TRUE(other->forward(x).equal(trained));
  acc::merge_adapter(*net);
  EXPECT_LE((net->forward(x) - trained).abs().max().item<double>(), 1e-5);
  for (const auto& p : net->named_parameters()) EXPECT_EQ(p.key().find("lora_"), std::string::npos) << p.key();
  std::filesystem::remove_all(dir);
}

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) return 2;
  g_fixtures = argv[1];
  return RUN_ALL_TESTS();
}
