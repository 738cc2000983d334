// Checkpoint files: safetensors round trips and corrupt files, the dtype rule of loading a state into a model or an
// optimizer, and SHARDED_STATE_DICT slice files (overlaps, the side JSON's size limit).
#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "acc/limits.hpp"
#include "checkpoint/sharded_state.hpp"
#include "core_test_util.hpp"
#include "formats/safetensors.hpp"
#include "models/model.hpp"
#include "train/optim.hpp"

namespace fs = std::filesystem;

namespace acc::core {
namespace {

TEST(Safetensors, RoundTripsEveryDtype) {
  NamedTensors in = {{"f32", at::randn({3, 4})},
                     {"f16", at::randn({5}).to(at::kHalf)},
                     {"bf16", at::randn({2, 2}).to(at::kBFloat16)},
                     {"i64", at::arange(7)},
                     {"u8", at::arange(9).to(at::kByte)},
                     {"flag", at::ones({2}, at::kBool)},
                     {"scalar", at::scalar_tensor(3.5)}};
  auto path = (temp_dir() / "x.safetensors").string();
  save_safetensors(in, path, {{"format", "pt"}});
  auto out = load_safetensors(path);
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].first, in[i].first);
    EXPECT_TRUE(at::equal(out[i].second, in[i].second)) << in[i].first;
  }
  // Atomic write: no temporary file is left beside the result.
  for (auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(Safetensors, RejectsCorruptFiles) {
  auto dir = temp_dir();
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  };
  EXPECT_THROW(load_safetensors(write("short", "abc")), std::ios_base::failure);
  EXPECT_THROW(load_safetensors(write("hugeheader", std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}")),
               std::ios_base::failure);
  std::string header = R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})";
  std::string len(8, '\0');
  len[0] = static_cast<char>(header.size());
  EXPECT_THROW(load_safetensors(write("truncated", len + header + "12345678")), std::ios_base::failure);
  std::string bad = R"({"w": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}})";
  len[0] = static_cast<char>(bad.size());
  EXPECT_THROW(load_safetensors(write("dtype", len + bad + "x")), std::ios_base::failure);
  EXPECT_THROW(load_safetensors((dir / "missing").string()), std::ios_base::failure);
}

// Loading converts floating point into floating point (transformers loads bf16 into fp32 and back), integers into
// integers, never one kind into the other: an integer tensor in a checkpoint was converted by value into a float
// parameter (a loss of 1e10). Model::load_state_dict is where every checkpoint path (load_state, each strategy's
// load_full_state_dict, acc_model_load_safetensors) copies tensors into the model.
TEST(LoadState, DtypesConvertOnlyWithinTheirKind) {
  EXPECT_TRUE(dtype_converts(at::kBFloat16, at::kFloat));
  EXPECT_TRUE(dtype_converts(at::kFloat, at::kHalf));
  EXPECT_TRUE(dtype_converts(at::kInt, at::kLong));
  EXPECT_FALSE(dtype_converts(at::kLong, at::kFloat));
  EXPECT_FALSE(dtype_converts(at::kBool, at::kFloat));
  EXPECT_FALSE(dtype_converts(at::kByte, at::kBFloat16));
  EXPECT_FALSE(dtype_converts(at::kFloat, at::kLong));
  EXPECT_FALSE(dtype_converts(at::kBool, at::kLong));

  auto model = make_builtin_model(R"({"type": "mlp", "sizes": [3, 2]})");
  const NamedTensors before = model->state();
  const std::string path = (temp_dir() / "int_state.safetensors").string();
  NamedTensors ints, halves;
  for (const auto& [name, t] : before) {
    ints.emplace_back(name, at::full(t.sizes(), 7, at::kLong));
    halves.emplace_back(name, at::full(t.sizes(), 0.5, at::kBFloat16));
  }
  save_safetensors(ints, path);
  try {
    model->load_state_dict(load_safetensors(path), path);
    ADD_FAILURE() << "an int64 checkpoint loaded into float parameters";
  } catch (const std::invalid_argument& e) {
    const std::string err = e.what();
    EXPECT_NE(err.find("'" + before[0].first + "' is Long in " + path + " but Float in the model"), std::string::npos)
        << err;
  }
  for (const auto& [name, t] : model->state()) EXPECT_FALSE(t.eq(7).all().item<bool>()) << name;  // untouched
  model->load_state_dict(halves, "bf16 tensors");
  for (const auto& [name, t] : model->state()) EXPECT_TRUE(t.eq(0.5).all().item<bool>()) << name;

  // The same rule for an optimizer's moments.
  auto params = model->trainable_parameters();
  std::vector<at::Tensor> ps;
  for (auto& [name, p] : params) ps.push_back(p);
  Optimizer opt(ps, R"({"type": "adamw", "lr": 0.1})");
  for (auto& p : ps) p.mutable_grad() = at::ones_like(p);
  opt.step();
  Optimizer::State st = opt.save_state();
  for (auto& [name, t] : st.tensors) t = t.to(at::kLong);
  try {
    opt.load_state(st, "optimizer.bin");
    ADD_FAILURE() << "int64 moments loaded into float ones";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is Long in optimizer.bin but Float in the model"), std::string::npos)
        << e.what();
  }
}

// SHARDED_STATE_DICT slices that overlap (hybrid sharding's replicas write the same slices) must agree bit for
// bit and share a dtype; slices of two checkpoints mixed in one folder were accepted, the last file's values
// winning. The files are named.
TEST(ShardedState, OverlappingSlicesMustAgree) {
  const fs::path dir = temp_dir() / "slices";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [&](int rank, const at::Tensor& values, int64_t offset) {
    const fs::path file = dir / ("model_slices_0.rank" + std::to_string(rank) + ".safetensors");
    save_safetensors({{"w", values}}, file.string());
    std::ofstream(fs::path(file).replace_extension(".json"))
        << R"({"slices": {"w": {"offset": )" << offset << R"(, "shape": [2, 3]}}})";
    return file.string();
  };
  const std::string r0 = write(0, at::tensor({1.f, 2.f, 3.f, 4.f}), 0);
  std::string r1 = write(1, at::tensor({3.f, 4.f, 5.f, 6.f}), 2);  // agrees on [2, 4)
  auto whole = load_model_slices(0, dir.string());
  ASSERT_TRUE(whole.has_value());
  EXPECT_TRUE(at::equal(whole->at(0).second, at::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}).view({2, 3})));
  r1 = write(1, at::tensor({3.f, 9.f, 5.f, 6.f}), 2);
  try {
    load_model_slices(0, dir.string());
    ADD_FAILURE() << "overlapping slices with other values were accepted";
  } catch (const std::invalid_argument& e) {
    const std::string err = e.what();
    EXPECT_NE(err.find(r1 + ": the slice of 'w' at [2, 6) overlaps what " + r0 + " holds, with other values"),
              std::string::npos)
        << err;
  }
  write(1, at::tensor({3., 4., 5., 6.}), 2);  // float64 after float32
  try {
    load_model_slices(0, dir.string());
    ADD_FAILURE() << "slices of two dtypes were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the slice of 'w' is Double, " + r0 + "'s is Float"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// Issue 36 (limits for every file libacc reads): a slice file's side JSON is read within the limit of a checkpoint's
// JSON files, as manifest.json and the others are (limits::kCheckpointJsonBytes); it was read whole at any size.
TEST(ShardedState, SideJsonIsReadWithinTheLimit) {
  const fs::path dir = temp_dir() / "slices_limit";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "model_slices_0.rank0.safetensors";
  save_safetensors({{"w", at::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f})}}, file.string());
  const std::string side = R"({"slices": {"w": {"offset": 0, "shape": [2, 3]}}})";
  const fs::path json = fs::path(file).replace_extension(".json");
  std::ofstream(json) << side << std::string(acc::limits::kCheckpointJsonBytes - side.size(), ' ');
  EXPECT_TRUE(load_model_slices(0, dir.string()).has_value());  // at the limit: read
  std::ofstream(json, std::ios::app) << ' ';
  try {
    load_model_slices(0, dir.string());
    ADD_FAILURE() << "a side JSON past the limit was read";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(json.string() + "': it holds " +
                                         std::to_string(acc::limits::kCheckpointJsonBytes + 1) +
                                         " bytes, more than the limit of " +
                                         std::to_string(acc::limits::kCheckpointJsonBytes)),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace acc::core
