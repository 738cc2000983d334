// save_model's pieces (src/formats/hf_weights.hpp): max_shard_size parsed as Accelerate's
// convert_file_size_to_int, and the split of huggingface_hub's split_torch_state_dict_into_shards.
#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include <stdexcept>

#include "formats/hf_weights.hpp"

using acc::core::parse_shard_size;
using acc::core::plan_shards;

TEST(SaveModel, ParsesSizesAsAccelerate) {
  EXPECT_EQ(parse_shard_size("10GB"), 10'000'000'000LL);
  EXPECT_EQ(parse_shard_size("10GiB"), 10LL * (1LL << 30));
  EXPECT_EQ(parse_shard_size("500MB"), 500'000'000LL);
  EXPECT_EQ(parse_shard_size("2KB"), 2000);
  EXPECT_EQ(parse_shard_size("2kB"), 2000);
  EXPECT_EQ(parse_shard_size("2kb"), 250);  // kilobits, as Accelerate
  EXPECT_EQ(parse_shard_size("3MiB"), 3LL << 20);
  EXPECT_EQ(parse_shard_size("1KiB"), 1024);
  EXPECT_EQ(parse_shard_size("1.5GB"), 1'500'000'000LL);
  EXPECT_EQ(parse_shard_size("1TB"), 1'000'000'000'000LL);
  EXPECT_EQ(parse_shard_size("8Gb"), 1'000'000'000LL);  // a lowercase b: bits
  EXPECT_EQ(parse_shard_size("1234"), 1234);
  for (const char* bad : {"", "GB", "10XB", "ten", "-1GB", "1e400GB", "10 G", "nanGB"}) {
    try {
      parse_shard_size(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(SaveModel, SplitsAsHuggingfaceHub) {
  auto t = [](int64_t n) { return at::zeros({n}, at::kFloat); };  // 4n bytes
  acc::core::NamedTensors state = {{"a", t(100)}, {"b", t(100)}, {"big", t(1000)}, {"c", t(100)}, {"d", t(151)}};
  auto plan = plan_shards(state, 1000);  // a+b = 800 bytes; big alone (placed first); c: 800+400 > 1000
  ASSERT_EQ(plan.files.size(), 4u);
  EXPECT_EQ(plan.files[0].name, "model-00001-of-00004.safetensors");
  EXPECT_EQ(plan.files[0].tensors, (std::vector<size_t>{2}));     // big, appended while a+b is being filled
  EXPECT_EQ(plan.files[1].tensors, (std::vector<size_t>{0, 1}));  // a, b
  EXPECT_EQ(plan.files[2].tensors, (std::vector<size_t>{3}));     // c (400+604 > 1000: d starts another)
  EXPECT_EQ(plan.files[3].tensors, (std::vector<size_t>{4}));
  EXPECT_EQ(plan.total_size, 4 * 1451);
  auto one = plan_shards(state, 10'000);
  ASSERT_EQ(one.files.size(), 1u);
  EXPECT_EQ(one.files[0].name, "model.safetensors");
  EXPECT_FALSE(one.sharded());
  // Tied weights: the same storage under a second name is written once.
  at::Tensor w = t(10);
  auto tied = plan_shards({{"wte", w}, {"head", w}, {"x", t(1)}}, 10'000);
  EXPECT_EQ(tied.files[0].tensors, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(tied.total_size, 44);
}
