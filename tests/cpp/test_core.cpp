// C++ unit tests of libacc's core pieces that need LibTorch: safetensors files, DLPack exchange,
// TorchScript models and learning-rate schedules.
#include <acc/acc.h>
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <ATen/DLConvertor.h>
#include <ATen/dlpack.h>
#include <torch/csrc/jit/api/module.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "formats/safetensors.hpp"
#include "checkpoint/sharded_state.hpp"
#include "acc/limits.hpp"
#include "models/model.hpp"
#include "train/optim.hpp"
#include "util/pattern.hpp"

namespace fs = std::filesystem;

namespace acc::core {
namespace {

fs::path temp_dir() {
  fs::path p = fs::temp_directory_path() / ("acc-core-" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

// Every regular expression runs on RE2 (util/pattern.hpp, issue 36): Python's re.fullmatch and re.search for the syntax
// both read, in time linear in the text; what RE2 cannot express, and a pattern past the length limit, refused naming
// the pattern (cut short) and the reason.
TEST(Pattern, FullmatchInLinearTimeAndRefusalsNamed) {
  EXPECT_TRUE(Pattern("a|ab", "p").full_match("ab"));  // fullmatch tries every alternative, not the first that fits
  EXPECT_FALSE(Pattern("q_proj", "p").full_match("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(Pattern(".*\\.(q_proj|v_proj)", "p").full_match("model.layers.0.self_attn.v_proj"));
  EXPECT_TRUE(Pattern("^.*(q|k|v)_proj$", "p").full_match("model.layers.0.self_attn.k_proj"));
  EXPECT_TRUE(Pattern("(?P<name>q)_proj", "p").full_match("q_proj"));  // Python's named groups
  EXPECT_TRUE(Pattern("norm", "p").search("model.norm.weight"));
  EXPECT_FALSE(Pattern("^norm", "p").search("model.norm.weight"));
  std::string group;
  EXPECT_TRUE(Pattern(R"(^.*?\.[^.]*\.(\d+)\.)", "p").search("model.layers.12.mlp.up_proj", &group));
  EXPECT_EQ(group, "12");
  EXPECT_TRUE(Pattern(R"((.*\.(layers|h)\.\d+)\..*)", "p").full_match("a.layers.1.b.h.2.w", &group));
  EXPECT_EQ(group, "a.layers.1.b.h.2");  // greedy, as Python's
  // (.|.)*x backtracks exponentially in std::regex (and in Python's re): here it is linear.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(Pattern("(.|.)*x", "p").full_match(std::string(100000, 'a')));
  EXPECT_FALSE(Pattern("(a*)*b", "p").search(std::string(100000, 'a')));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  auto refusal = [](const std::string& pattern) {
    try {
      Pattern(pattern, "target_modules");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(refusal("(q)\\1"), "target_modules: '(q)\\1' is not a regular expression libacc reads (invalid escape "
                               "sequence: \\1)");
  EXPECT_EQ(refusal("(?=q)q"), "target_modules: '(?=q)q' is not a regular expression libacc reads (invalid perl "
                               "operator: (?=)");
  EXPECT_EQ(refusal("(q"), "target_modules: '(q' is not a regular expression libacc reads (missing ): (q)");
  EXPECT_EQ(refusal("a{1001}"), "target_modules: 'a{1001}' is not a regular expression libacc reads (invalid "
                                "repetition size: {1001})");
  EXPECT_EQ(refusal(std::string(30000, '(') + std::string(30000, ')')),
            "target_modules: '" + std::string(200, '(') + "... (60000 bytes)' is not a regular expression libacc "
            "reads (longer than 4096 bytes, the limit)");
  EXPECT_EQ(refusal(std::string(4096, 'a')), "(no error)");
  EXPECT_EQ(refusal(std::string(2047, '(') + std::string(2047, ')')), "(no error)");  // deep, without recursion
  EXPECT_EQ(refusal("a\x1b" "b("), "target_modules: 'a\\x1bb(' is not a regular expression libacc reads (missing ): "
                                   "a\\x1bb()");  // a control byte escaped
}

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

int g_deleted = 0;

// A DLPack export of t whose deleter also counts its calls in g_deleted.
DLManagedTensorVersioned* counted_dlpack(const at::Tensor& t) {
  static void (*real)(DLManagedTensorVersioned*) = nullptr;
  DLManagedTensorVersioned* dl = at::toDLPackVersioned(t);
  real = dl->deleter;
  dl->deleter = [](DLManagedTensorVersioned* self) {
    ++g_deleted;
    real(self);
  };
  return dl;
}

TEST(DLPack, RoundTripIsZeroCopyAndDeletesOnce) {
  at::Tensor src = at::arange(6, at::kFloat).reshape({2, 3});
  DLManagedTensorVersioned* dl = at::toDLPackVersioned(src);
  acc_tensor* t = nullptr;
  ASSERT_EQ(acc_tensor_from_dlpack(dl, &t), ACC_OK) << acc_last_error_message();
  // Writes through the producer's memory show in the acc tensor: no copy was made.
  src.mul_(2);
  float host[6];
  ASSERT_EQ(acc_tensor_to_host(t, host, sizeof host), ACC_OK);
  EXPECT_EQ(host[5], 10.0f);
  DLManagedTensorVersioned* back = nullptr;
  ASSERT_EQ(acc_tensor_to_dlpack(t, &back), ACC_OK);
  acc_tensor_destroy(t);  // the export keeps the memory alive
  EXPECT_EQ(back->dl_tensor.ndim, 2);
  EXPECT_EQ(static_cast<float*>(back->dl_tensor.data)[1], 2.0f);
  back->deleter(back);

  // A producer of an unsupported major version: refused, and its deleter still runs once.
  DLManagedTensorVersioned* odd = counted_dlpack(at::ones({2}));
  odd->version.major = 99;
  EXPECT_EQ(acc_tensor_from_dlpack(odd, &t), ACC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(acc_last_error_message()).find("major version 99"), std::string::npos);
  EXPECT_EQ(g_deleted, 1);
  EXPECT_EQ(t, nullptr);
  // Was a segfault: ndim 2 with a NULL shape. Refused (and released once) like every malformed descriptor.
  struct Case {
    int32_t ndim;
    bool null_shape, null_data;
    int64_t dim0;
    const char* says;
  };
  for (const Case& c : {Case{2, true, false, 2, "shape is NULL with ndim 2"}, Case{-1, false, false, 2, "ndim -1"},
                        Case{1, false, false, -3, "shape[0] = -3"}, Case{1, false, true, 2, "data is NULL for 2 elements"}}) {
    DLManagedTensorVersioned* bad = counted_dlpack(at::ones({2}));
    int64_t* shape = bad->dl_tensor.shape;
    bad->dl_tensor.ndim = c.ndim;
    if (c.null_shape) bad->dl_tensor.shape = nullptr;
    if (c.null_data) bad->dl_tensor.data = nullptr;
    if (!c.null_shape) shape[0] = c.dim0;
    const int before = g_deleted;
    EXPECT_EQ(acc_tensor_from_dlpack(bad, &t), ACC_ERR_INVALID_ARGUMENT) << c.says;
    EXPECT_NE(std::string(acc_last_error_message()).find(c.says), std::string::npos) << acc_last_error_message();
    EXPECT_EQ(g_deleted, before + 1);
  }
}

TEST(TorchScript, LoadsTrainsAndRejectsGarbage) {
  auto dir = temp_dir();
  torch::jit::Module m("Affine");
  m.register_parameter("w", at::ones({2, 1}).requires_grad_(), false);
  m.register_parameter("b", at::zeros({1}).requires_grad_(), false);
  m.define("def forward(self, x):\n    return x.matmul(self.w) + self.b\n");
  auto path = (dir / "affine.pt").string();
  m.save(path);

  acc_model* model = nullptr;
  ASSERT_EQ(acc_model_load_torchscript(path.c_str(), R"({"loss": "mse"})", &model), ACC_OK) << acc_last_error_message();
  int64_t n = 0;
  ASSERT_EQ(acc_model_num_parameters(model, &n), ACC_OK);
  EXPECT_EQ(n, 3);
  float x[4] = {1, 2, 3, 4}, y[2] = {0, 0};
  int64_t xs[2] = {2, 2}, ys[2] = {2, 1};
  acc_tensor *tx, *ty, *out, *loss;
  ASSERT_EQ(acc_tensor_from_host(x, sizeof x, ACC_FLOAT32, xs, 2, &tx), ACC_OK);
  ASSERT_EQ(acc_tensor_from_host(y, sizeof y, ACC_FLOAT32, ys, 2, &ty), ACC_OK);
  ASSERT_EQ(acc_model_forward(model, tx, ty, &out, &loss), ACC_OK) << acc_last_error_message();
  double l = 0;
  ASSERT_EQ(acc_tensor_item(loss, &l), ACC_OK);
  EXPECT_DOUBLE_EQ(l, (9.0 + 49.0) / 2);  // outputs 3 and 7 against 0
  acc_accelerator* acc = nullptr;
  ASSERT_EQ(acc_accelerator_create(nullptr, &acc), ACC_OK) << acc_last_error_message();
  acc_optimizer* opt = nullptr;
  ASSERT_EQ(acc_optimizer_create(model, R"({"type": "sgd", "lr": 0.01})", &opt), ACC_OK);
  ASSERT_EQ(acc_prepare(acc, model, opt, nullptr, nullptr), ACC_OK) << acc_last_error_message();
  ASSERT_EQ(acc_backward(acc, loss), ACC_OK) << acc_last_error_message();
  ASSERT_EQ(acc_optimizer_step(opt), ACC_OK);
  acc_tensor* loss2;
  ASSERT_EQ(acc_model_forward(model, tx, ty, nullptr, &loss2), ACC_OK);
  double l2 = 0;
  ASSERT_EQ(acc_tensor_item(loss2, &l2), ACC_OK);
  EXPECT_LT(l2, l);
  for (auto* t : {tx, ty, out, loss, loss2}) acc_tensor_destroy(t);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);

  std::ofstream(dir / "garbage.pt") << "not a zip";
  EXPECT_EQ(acc_model_load_torchscript((dir / "garbage.pt").c_str(), nullptr, &model), ACC_ERR_IO);
  EXPECT_NE(std::string(acc_last_error_message()).find("garbage.pt"), std::string::npos);
  EXPECT_EQ(acc_model_load_torchscript(path.c_str(), R"({"loss": "l1"})", &model), ACC_ERR_INVALID_CONFIG);
}

// model(**batch): a TorchScript forward gets the batch's tensors by argument name (any order, defaults
// filled in) and may return Dict[str, Tensor] with its own "loss", as Hugging Face models do.
TEST(TorchScript, NamedArgumentsAndDictOutputs) {
  auto dir = temp_dir();
  torch::jit::Module m("Masked");
  m.register_parameter("w", at::full({1}, 2.0).requires_grad_(), false);
  m.define(R"JIT(
def forward(self, input_ids, attention_mask, labels, scale: float = 1.0):
    logits = input_ids * self.w * attention_mask * scale
    loss = ((logits - labels) ** 2).mean()
    return {"logits": logits, "loss": loss}
)JIT");
  auto path = (dir / "masked.pt").string();
  m.save(path);
  acc_model* model = nullptr;
  ASSERT_EQ(acc_model_load_torchscript(path.c_str(), R"({"loss": "none"})", &model), ACC_OK) << acc_last_error_message();

  auto tensor = [](std::vector<float> v) {
    acc_tensor* t = nullptr;
    int64_t n = static_cast<int64_t>(v.size());
    EXPECT_EQ(acc_tensor_from_host(v.data(), v.size() * sizeof(float), ACC_FLOAT32, &n, 1, &t), ACC_OK);
    return t;
  };
  acc_tensor* ids = tensor({1, 2, 3});
  acc_tensor* mask = tensor({1, 0, 1});
  acc_tensor* labels = tensor({2, 0, 0});
  acc_batch* batch = nullptr;
  ASSERT_EQ(acc_batch_create(&batch), ACC_OK);
  // Given in another order than the signature's.
  ASSERT_EQ(acc_batch_set(batch, "labels", labels), ACC_OK);
  ASSERT_EQ(acc_batch_set(batch, "input_ids", ids), ACC_OK);
  ASSERT_EQ(acc_batch_set(batch, "attention_mask", mask), ACC_OK);
  acc_batch* out = nullptr;
  ASSERT_EQ(acc_model_forward_batch(model, batch, &out), ACC_OK) << acc_last_error_message();
  acc_tensor *logits = nullptr, *loss = nullptr;
  ASSERT_EQ(acc_batch_get(out, "logits", &logits), ACC_OK);
  ASSERT_EQ(acc_batch_get(out, "loss", &loss), ACC_OK);
  float lv[3];
  ASSERT_EQ(acc_tensor_to_host(logits, lv, sizeof lv), ACC_OK);
  EXPECT_EQ(std::vector<float>(lv, lv + 3), (std::vector<float>{2, 0, 6}));
  double l = 0;
  ASSERT_EQ(acc_tensor_item(loss, &l), ACC_OK);
  EXPECT_DOUBLE_EQ(l, 36.0 / 3);  // the module's own loss, not the configured one

  // A missing argument without default, and a tensor the forward does not take, are named.
  acc_batch* partial = nullptr;
  ASSERT_EQ(acc_batch_create(&partial), ACC_OK);
  ASSERT_EQ(acc_batch_set(partial, "input_ids", ids), ACC_OK);
  acc_batch* none = nullptr;
  EXPECT_EQ(acc_model_forward_batch(model, partial, &none), ACC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(acc_last_error_message()).find("'attention_mask'"), std::string::npos);
  ASSERT_EQ(acc_batch_set(batch, "token_type_ids", ids), ACC_OK);
  EXPECT_EQ(acc_model_forward_batch(model, batch, &none), ACC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(acc_last_error_message()).find("token_type_ids"), std::string::npos);
  EXPECT_EQ(none, nullptr);
  for (auto* t : {ids, mask, labels, logits, loss}) acc_tensor_destroy(t);
  for (auto* b : {batch, partial, out}) acc_batch_destroy(b);
  acc_model_destroy(model);
}

TEST(Schedule, ShapesMatchTransformers) {
  Schedule constant(R"({"type": "constant", "warmup_steps": 4})");
  EXPECT_DOUBLE_EQ(constant.factor(0), 0.0);
  EXPECT_DOUBLE_EQ(constant.factor(2), 0.5);
  EXPECT_DOUBLE_EQ(constant.factor(100), 1.0);
  Schedule linear(R"({"type": "linear", "warmup_steps": 10, "total_steps": 110})");
  EXPECT_DOUBLE_EQ(linear.factor(10), 1.0);
  EXPECT_DOUBLE_EQ(linear.factor(60), 0.5);
  EXPECT_DOUBLE_EQ(linear.factor(200), 0.0);
  Schedule cosine(R"({"type": "cosine", "total_steps": 100, "min_lr_ratio": 0.1})");
  EXPECT_DOUBLE_EQ(cosine.factor(0), 1.0);
  EXPECT_NEAR(cosine.factor(50), 0.55, 1e-12);
  EXPECT_NEAR(cosine.factor(100), 0.1, 1e-12);
}

}  // namespace
}  // namespace acc::core

#include <condition_variable>
#include <mutex>
#include <thread>

#include "models/model.hpp"
#include "parallel/ddp.hpp"
#include "runtime/comm.hpp"

namespace acc::core {
namespace {

// A one-process group (the TCPStore server picks a free port): enough to run a strategy's whole path, hooks included.
std::shared_ptr<Comm> solo_group() {
  ProcessState solo;
  solo.master_port = 0;
  return Comm::connect(solo, std::chrono::seconds(30));
}

// A model's parameter names and tensors, as GradientReducer takes them.
std::pair<std::vector<std::string>, std::vector<at::Tensor>> names_and_params(const Model& model) {
  std::pair<std::vector<std::string>, std::vector<at::Tensor>> out;
  for (auto& [n, p] : model.named_parameters()) {
    out.first.push_back(n);
    out.second.push_back(p);
  }
  return out;
}

TEST(Ddp, BucketsFollowTheCapsAndLaunchDuringBackward) {
  auto comm = solo_group();
  // 4 layers of 512x512 floats (1 MiB each) + biases: 1 MiB first bucket, then 3 MiB caps.
  auto model = make_builtin_model(R"({"type": "mlp", "sizes": [512, 512, 512, 512, 512]})");
  auto [names, params] = names_and_params(*model);
  DdpOptions opts;
  opts.bucket_cap_mb = 3.0;
  GradientReducer reducer(comm, names, params, opts);
  // Filled from the last parameter: {bias 3} (weight 3 would overflow 1 MiB), then
  // {weight 3, bias 2, weight 2, bias 1} (weight 1 would overflow 3 MiB), then {weight 1, bias 0, weight 0}.
  EXPECT_EQ(reducer.num_buckets(), 3u);
  at::Tensor x = at::randn({8, 512});
  auto before = params[0].detach().clone();
  reducer.prepare_for_backward(true);
  model->forward({{"input", x}, {"targets", at::zeros({8, 512})}}).at("loss").backward();
  EXPECT_GE(reducer.launched_during_backward(), 2u);  // all but possibly the last went out early
  std::vector<at::Tensor> local;
  for (auto& p : params) local.push_back(p.grad().clone());
  reducer.finalize_backward();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(at::allclose(params[i].grad(), local[i]));  // world 1: mean = itself
}

TEST(Ddp, CompressionHooksHalveTheTraffic) {
  // ddp_kwargs.comm_hook fp16 / bf16: the buckets travel in 16 bits (half the bytes) and the gradients come
  // back rounded to that dtype (world 1: the mean is the gradient itself).
  auto comm = solo_group();
  auto model = make_builtin_model(R"({"type": "mlp", "sizes": [64, 64, 8]})");
  auto [names, params] = names_and_params(*model);
  const int64_t elements = 64 * 64 + 64 + 64 * 8 + 8;
  int64_t plain_bytes = 0;
  for (at::ScalarType dtype : {at::ScalarType::Undefined, at::kHalf, at::kBFloat16}) {
    DdpOptions opts;
    opts.compress = dtype;
    GradientReducer reducer(comm, names, params, opts);
    for (auto& p : params) p.mutable_grad().reset();
    reducer.prepare_for_backward(true);
    model->forward({{"input", at::randn({4, 64})}, {"targets", at::randn({4, 8})}}).at("loss").backward();
    std::vector<at::Tensor> local;
    for (auto& p : params) local.push_back(p.grad().clone());
    reducer.finalize_backward();
    if (dtype == at::ScalarType::Undefined) {
      plain_bytes = reducer.bytes_communicated();
      EXPECT_EQ(plain_bytes, elements * 4);
      continue;
    }
    EXPECT_EQ(reducer.bytes_communicated(), plain_bytes / 2) << dtype;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(at::equal(params[i].grad(), local[i].to(dtype).to(at::kFloat))) << names[i] << " " << dtype;
      EXPECT_FALSE(at::equal(params[i].grad(), local[i])) << "a 16-bit round trip changes some of " << names[i];
    }
  }
}

// One backward of the [32, 48, 8] MLP through the reducer; returns each parameter's local gradient (before reduction).
std::vector<at::Tensor> reduced_step(Model& model, GradientReducer& reducer, std::vector<at::Tensor>& params) {
  for (auto& p : params) p.mutable_grad().reset();
  reducer.prepare_for_backward(true);
  model.forward({{"input", at::randn({16, 32})}, {"targets", at::randn({16, 8})}}).at("loss").backward();
  std::vector<at::Tensor> fresh;
  for (auto& p : params) fresh.push_back(p.grad().clone());
  reducer.finalize_backward();
  return fresh;
}

TEST(Ddp, PowerSgdSendsLowRankFactorsWithErrorFeedback) {
  // ddp_kwargs.comm_hook power_sgd: plain all-reduces before start_powerSGD_iter, then each weight matrix travels
  // as P (n x r) and Q (m x r) and comes back as P Q^T of rank r; biases travel whole; what the approximation lost
  // is added to the next step's gradient (error feedback). World 1: the mean of a gradient is itself.
  auto comm = solo_group();
  auto model = make_builtin_model(R"({"type": "mlp", "sizes": [32, 48, 8]})");
  auto [names, params] = names_and_params(*model);
  DdpOptions opts;
  opts.power_sgd.on = true;
  opts.power_sgd.rank = 2;
  opts.power_sgd.start_iter = 1;
  GradientReducer reducer(comm, names, params, opts);
  const int64_t elements = 32 * 48 + 48 + 48 * 8 + 8;
  for (int step = 0; step < 3; ++step) {
    const std::vector<at::Tensor> fresh = reduced_step(*model, reducer, params);
    if (step == 0) {  // before start_powerSGD_iter: the plain all-reduce
      EXPECT_EQ(reducer.bytes_communicated(), elements * 4);
      for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(at::equal(params[i].grad(), fresh[i]));
      continue;
    }
    // layers.0.weight [48, 32] -> (48 + 32) x 2, layers.1.weight [8, 48] -> (8 + 48) x 2, biases whole.
    EXPECT_EQ(reducer.bytes_communicated(), ((48 + 32) * 2 + (8 + 48) * 2 + 48 + 8) * 4);
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].dim() == 1) {
        EXPECT_TRUE(at::allclose(params[i].grad(), fresh[i])) << names[i] << ": averaged whole, nothing lost";
        continue;
      }
      EXPECT_EQ(at::linalg_matrix_rank(params[i].grad()).item<int64_t>(), 2) << names[i];
      if (step == 1) {
        EXPECT_FALSE(at::allclose(params[i].grad(), fresh[i])) << names[i] << ": an approximation";
      }
    }
  }
}

TEST(Ddp, BatchedPowerSgdAndCompressionWrappers) {
  // ddp_kwargs.comm_hook batched_power_sgd: the whole bucket, zero-padded to a square, travels as one rank-r
  // factorisation; ddp_kwargs.comm_wrapper fp16 / bf16 runs the hook on a 16-bit copy of the bucket (half the bytes).
  auto comm = solo_group();
  auto model = make_builtin_model(R"({"type": "mlp", "sizes": [32, 48, 8]})");
  auto [names, params] = names_and_params(*model);
  const int64_t elements = 32 * 48 + 48 + 48 * 8 + 8, side = 45;  // 1976 elements: ceil(sqrt) = 45
  for (at::ScalarType wrapper : {at::ScalarType::Undefined, at::kHalf, at::kBFloat16}) {
    DdpOptions opts;
    opts.power_sgd.on = opts.power_sgd.batched = true;
    opts.power_sgd.rank = 2;
    opts.power_sgd.start_iter = 0;
    opts.wrapper = wrapper;
    GradientReducer reducer(comm, names, params, opts);
    ASSERT_EQ(reducer.num_buckets(), 1u);
    for (int step = 0; step < 2; ++step) {
      const std::vector<at::Tensor> fresh = reduced_step(*model, reducer, params);
      // P and Q, each side x rank, in the wrapper's dtype (4 bytes without one).
      const int64_t bytes = wrapper == at::ScalarType::Undefined ? 4 : 2;
      EXPECT_EQ(reducer.bytes_communicated(), 2 * side * 2 * bytes) << wrapper;
      // The bucket as it was flattened (parameters in reverse order) as the side x side matrix: its rows without
      // padding (which is not sent back) are of rank 2.
      std::vector<at::Tensor> pieces;
      for (size_t i = params.size(); i-- > 0;) pieces.push_back(params[i].grad().reshape({-1}));
      at::Tensor padded = at::zeros({side * side});
      padded.narrow(0, 0, elements).copy_(at::cat(pieces));
      // (In 16 bits the product P Q^T is rounded: rank 2 up to that rounding, about 1e-2 relative for bf16.)
      const std::optional<double> rtol = wrapper == at::ScalarType::Undefined ? std::nullopt : std::optional<double>(2e-2);
      at::Tensor rows = padded.view({side, side}).narrow(0, 0, elements / side);
      EXPECT_LE(at::linalg_matrix_rank(rows, std::nullopt, rtol, false).item<int64_t>(), 2) << wrapper;
      bool changed = false;
      for (size_t i = 0; i < params.size(); ++i) changed |= !at::allclose(params[i].grad(), fresh[i]);
      EXPECT_TRUE(changed) << "an approximation of the gradients";
      if (wrapper != at::ScalarType::Undefined) {
        // The hook ran in 16 bits: every gradient is a value of that dtype.
        for (auto& p : params) EXPECT_TRUE(at::equal(p.grad(), p.grad().to(wrapper).to(at::kFloat))) << wrapper;
      }
    }
  }
}

TEST(Ddp, UnusedParametersAreNamed) {
  auto comm = solo_group();
  at::Tensor used = at::ones({2}).requires_grad_(), unused = at::ones({2}).requires_grad_();
  GradientReducer strict(comm, {"used", "unused"}, {used, unused}, DdpOptions{});
  strict.prepare_for_backward(true);
  (used * 2).sum().backward();
  try {
    strict.finalize_backward();
    ADD_FAILURE() << "an unused parameter must be reported";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unused"), std::string::npos);
  }
}

// A dataset whose sample 0 blocks until released: one thread holds the loader while another tries it.
std::mutex g_mu;
std::condition_variable g_cv;
bool g_inside = false, g_release = false;

acc_status blocking_get(void*, int64_t, acc_tensor** input, acc_tensor** target) {
  {
    std::unique_lock<std::mutex> lock(g_mu);
    g_inside = true;
    g_cv.notify_all();
    g_cv.wait(lock, [] { return g_release; });
  }
  float v = 1;
  *target = nullptr;
  return acc_tensor_from_host(&v, sizeof v, ACC_FLOAT32, nullptr, 0, input);
}

TEST(Abi, ConcurrentUseOfOneHandleIsBusy) {
  acc_dataset* ds;
  ASSERT_EQ(acc_dataset_from_callback(1, blocking_get, nullptr, nullptr, &ds), ACC_OK);
  acc_dataloader* dl;
  ASSERT_EQ(acc_dataloader_create(ds, nullptr, &dl), ACC_OK);
  std::thread holder([&] {
    acc_tensor *x = nullptr, *y = nullptr;
    int32_t has = 0;
    EXPECT_EQ(acc_dataloader_next(dl, &x, &y, &has), ACC_OK) << acc_last_error_message();
    acc_tensor_destroy(x);
  });
  {
    std::unique_lock<std::mutex> lock(g_mu);
    g_cv.wait(lock, [] { return g_inside; });
  }
  acc_tensor *x = nullptr, *y = nullptr;
  int32_t has = 0;
  EXPECT_EQ(acc_dataloader_next(dl, &x, &y, &has), ACC_ERR_BUSY);
  EXPECT_NE(std::string(acc_last_error_message()).find("in use by another thread"), std::string::npos);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_release = true;
  }
  g_cv.notify_all();
  holder.join();
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
}

}  // namespace
}  // namespace acc::core

#include <torch/csrc/autograd/autograd.h>

#include "precision/fp8.hpp"

namespace acc::core {
namespace {

// The FP8 path runs on the CPU too (ATen emulates _scaled_mm there), so its numerics and gradients are
// tested here even though mixed_precision "fp8" is only accepted on FP8-capable GPUs.
TEST(Fp8, LinearMatchesFp32WithinE4M3Precision) {
  at::manual_seed(0);
  at::Tensor x = at::randn({2, 16, 64}).requires_grad_();
  at::Tensor w = (at::randn({32, 64}) * 0.1).requires_grad_();
  at::Tensor b = at::randn({32}).requires_grad_();
  at::Tensor ref = at::linear(x, w, b);
  at::Tensor y = fp8_linear(x, w, b);
  ASSERT_EQ(y.sizes(), ref.sizes());
  // e4m3 keeps 3 mantissa bits: each product is within ~2^-3 relative; sums average that out.
  double rel = ((y - ref).norm() / ref.norm()).item<double>();
  EXPECT_LT(rel, 0.08) << rel;
  EXPECT_GT(rel, 0.0) << "the FP8 path must actually quantize";
  at::Tensor gy = at::randn_like(ref);
  auto g_ref = torch::autograd::grad({ref}, {x, w, b}, {gy});
  auto g = torch::autograd::grad({y}, {x, w, b}, {gy});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(at::allclose(g[i], g_ref[i], 1e-4, 1e-4)) << i;  // backward in fp32
  // Dimensions that are not multiples of 16 fall back to a plain linear.
  at::Tensor odd = at::randn({3, 10});
  at::Tensor wo = at::randn({5, 10});
  EXPECT_TRUE(at::equal(fp8_linear(odd, wo, {}), at::linear(odd, wo)));
}

TEST(Fp8, ScopeSwitchesTheModelsLinearLayers) {
  at::manual_seed(1);
  auto model = make_builtin_model(R"({"type": "mlp", "sizes": [64, 64, 16]})");
  at::Tensor x = at::randn({16, 64});
  at::Tensor plain = model->forward({{"input", x}}).at("output");
  at::Tensor quantized;
  {
    Fp8Scope scope;
    quantized = model->forward({{"input", x}}).at("output");
  }
  EXPECT_FALSE(at::equal(plain, quantized));
  EXPECT_LT(((quantized - plain).norm() / plain.norm()).item<double>(), 0.1);
  EXPECT_TRUE(at::equal(model->forward({{"input", x}}).at("output"), plain));  // the scope ended
}

}  // namespace
}  // namespace acc::core

#include <torch/nn/modules/linear.h>

#include "parallel/sharded.hpp"

namespace acc::core {
namespace {

// Three linear blocks reported as units "b0", "b1", "b2"; each block's body records which blocks' weights hold
// memory (are gathered) while it runs: "110" = b0 and b1.
class ThreeBlocks final : public NnModel {
 public:
  ThreeBlocks() : NnModel(std::make_shared<torch::nn::Module>()) {
    for (int i = 0; i < 3; ++i) blocks_.push_back(module_->register_module("b" + std::to_string(i), torch::nn::Linear(4, 4)));
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
    for (int i = 0; i < 3; ++i) blocks_.push_back(module_->register_module("b" + std::to_string(i), torch::nn::Linear(4, 4)));
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
    const std::vector<std::string> want = {"b0:1", "b1:1", "b2:1", "head:1", std::string("b2:") + b,
                                           std::string("b1:") + b, std::string("b0:") + b, std::string("stem:") + b};
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
    for (auto [s, m, op] : {std::tuple{strategy.get(), model.get(), &opt}, std::tuple{plain.get(), plain_model.get(), &plain_opt}}) {
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

namespace acc::core {
namespace {

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

}  // namespace
}  // namespace acc::core
