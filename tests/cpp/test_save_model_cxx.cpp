// The C++ API's save_model: acc::save_model for a torch::nn::Module that is not prepared, and
// Accelerator::save_model for a prepared one (docs/checkpoints.md, "save_model").
#include <acc/torch.hpp>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("acc-save-model-cxx-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST(SaveModelCxx, ModuleShardsAndTiedWeights) {
  TempDir tmp;
  torch::nn::Sequential net(torch::nn::Linear(16, 16), torch::nn::Linear(16, 16));  // 1024 + 64 bytes per layer
  acc::save_model(*net, tmp.path.string(), "1100");
  EXPECT_TRUE(fs::exists(tmp.path / "model-00001-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(tmp.path / "model-00002-of-00002.safetensors"));
  const std::string index = slurp(tmp.path / "model.safetensors.index.json");
  EXPECT_NE(index.find("\"total_size\": 2176\n"), std::string::npos) << index;
  EXPECT_NE(index.find("\"1.weight\": \"model-00002-of-00002.safetensors\""), std::string::npos) << index;
  EXPECT_NE(index.find("\"0.bias\": \"model-00001-of-00002.safetensors\""), std::string::npos) << index;
  // The whole model fits: one model.safetensors, the shards and the index of the earlier save removed.
  acc::save_model(*net, tmp.path.string());
  EXPECT_TRUE(fs::exists(tmp.path / "model.safetensors"));
  EXPECT_FALSE(fs::exists(tmp.path / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(tmp.path / "model-00001-of-00002.safetensors"));
  EXPECT_THROW(acc::save_model(*net, tmp.path.string(), "10XB"), std::invalid_argument);
}

TEST(SaveModelCxx, PreparedModel) {
  TempDir tmp;
  acc::Accelerator accelerator;
  torch::nn::Linear lin(8, 4);
  auto model = accelerator.prepare(lin);
  accelerator.save_model(model, (tmp.path / "out").string(), "10GiB");
  EXPECT_TRUE(fs::exists(tmp.path / "out" / "model.safetensors"));
  EXPECT_EQ(fs::file_size(tmp.path / "out" / "model.safetensors") % 8, 0u);  // header padded, (32 + 4) floats
}
