// The C++ API's Hugging Face models (acc/torch.hpp, acc::HfModel): from_pretrained, fine-tuning through
// Accelerator::prepare with a torch::optim optimizer over module().parameters(), generate with a callback,
// save_pretrained that loads back.   test_hf_cxx FIXTURES_DIR
#include <acc/torch.hpp>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

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
  EXPECT_NE(empty.module_sizes().find(R"("": 13476831232)"), std::string::npos);
  const std::string map = empty.infer_auto_device_map(R"({"device_map": "sequential", "max_memory": {"cpu": "4GB"}})");
  EXPECT_NE(map.find(R"("model.layers.3": "cpu")"), std::string::npos) << map;
  EXPECT_NE(map.find(R"("lm_head": "disk")"), std::string::npos) << map;
  EXPECT_THROW(acc::HfModel::from_pretrained(g_fixtures + "/none"), std::exception);
  EXPECT_THROW(acc::HfModel::from_config(R"({"architectures": ["T5Model"]})"), std::exception);
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) return 2;
  g_fixtures = argv[1];
  return RUN_ALL_TESTS();
}
