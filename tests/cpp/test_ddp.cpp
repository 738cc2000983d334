// DDP's GradientReducer on a one-process group: buckets and their caps, the communication hooks (fp16/bf16
// compression, PowerSGD and its batched form, the compression wrappers) and unused parameters.
#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core_test_util.hpp"
#include "models/model.hpp"
#include "parallel/ddp.hpp"
#include "runtime/comm.hpp"

namespace acc::core {
namespace {

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
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(at::allclose(params[i].grad(), local[i]));  // world 1: mean = itself
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
      const std::optional<double> rtol = wrapper == at::ScalarType::Undefined ? std::nullopt
                                                                              : std::optional<double>(2e-2);
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

}  // namespace
}  // namespace acc::core
