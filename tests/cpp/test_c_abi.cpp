// The C ABI (acc/acc.h) over LibTorch objects: DLPack exchange, TorchScript models (training, named arguments and
// dict outputs), and a handle used by two threads at once.
#include <acc/acc.h>
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <ATen/DLConvertor.h>
#include <ATen/dlpack.h>
#include <torch/csrc/jit/api/module.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core_test_util.hpp"

namespace acc::core {
namespace {

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
  for (const Case& c :
       {Case{2, true, false, 2, "shape is NULL with ndim 2"}, Case{-1, false, false, 2, "ndim -1"},
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
  ASSERT_EQ(acc_model_load_torchscript(path.c_str(), R"({"loss": "none"})", &model), ACC_OK)
      << acc_last_error_message();

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
