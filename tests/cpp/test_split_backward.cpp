// The zero-bubble schedule's split backward (src/parallel/split_backward.cpp): the input gradient first, the weights'
// later, together what one backward gives, with no node of the graph run twice and nothing of the weights' part run
// before it is asked for.
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

#include "parallel/split_backward.hpp"

namespace acc::core::pp {
namespace {

// The identity, counting how often its backward runs.
struct Count : torch::autograd::Function<Count> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, int64_t which) {
    ctx->saved_data["which"] = which;
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    ++runs[ctx->saved_data["which"].toInt()];
    return {grads[0], at::Tensor()};
  }
  static int runs[2];  // 0: on the input's path, 1: on a weight's only
};
int Count::runs[2] = {0, 0};

at::Tensor counted(const at::Tensor& x, int64_t which) { return Count::apply(x, which); }

struct Net {
  std::vector<at::Tensor> weights;
  Net() {
    at::manual_seed(0);
    for (auto shape : std::vector<std::vector<int64_t>>{{8, 8}, {8}, {8, 8}, {8}, {3}})
      weights.push_back(at::randn(shape).requires_grad_(true));
  }
  // A weight joining the input's path through a function of its own (w[3] * 2, counted), one joining at the output
  // (w[4]), two matrices, a bias and a counted node on the input's path.
  at::Tensor operator()(const at::Tensor& x) const {
    at::Tensor h = at::relu(at::matmul(x, weights[0]) + weights[1]);
    h = at::matmul(counted(h, 0), weights[2]) * counted(weights[3] * 2, 1);
    return h.sum(-1, true) + weights[4].sum();
  }
};

TEST(SplitBackward, InputThenWeightsEqualsOneBackward) {
  Net reference, split;
  for (size_t k = 0; k < split.weights.size(); ++k)
    split.weights[k] = reference.weights[k].detach().clone().requires_grad_(true);
  const at::Tensor x0 = at::randn({4, 8});
  const at::Tensor grad = at::randn({4, 1});
  at::Tensor x = x0.clone().requires_grad_(true);
  torch::autograd::backward({reference(x)}, {grad});

  at::Tensor y = x0.clone().requires_grad_(true);
  const at::Tensor out = split(y);
  Count::runs[0] = Count::runs[1] = 0;
  DeferredWeights rest;
  const at::Tensor dy = DeferredWeights::input_gradient(out, grad, y, rest);
  EXPECT_TRUE(at::allclose(dy, x.grad(), 1e-6, 1e-6));
  EXPECT_FALSE(y.grad().defined());  // returned, not accumulated
  for (const auto& w : split.weights) EXPECT_FALSE(w.grad().defined());
  EXPECT_EQ(Count::runs[0], 1);
  EXPECT_EQ(Count::runs[1], 0);  // the weight's own part waits
  rest.accumulate();
  for (size_t k = 0; k < split.weights.size(); ++k)
    EXPECT_TRUE(at::allclose(split.weights[k].grad(), reference.weights[k].grad(), 1e-6, 1e-6)) << "weight " << k;
  EXPECT_EQ(Count::runs[0], 1);  // the input's path is not run again
  EXPECT_EQ(Count::runs[1], 1);
  // Accumulated onto what is there, as a backward does.
  at::Tensor z = x0.clone().requires_grad_(true);
  DeferredWeights again;
  DeferredWeights::input_gradient(split(z), grad, z, again);
  again.accumulate();
  EXPECT_TRUE(at::allclose(split.weights[0].grad(), 2 * reference.weights[0].grad(), 1e-6, 1e-6));
}

// A scalar loss (undefined gradient: ones), and weights that the input never meets (the input unused): theirs come
// from the output's own node.
TEST(SplitBackward, LossAndWeightsApartFromTheInput) {
  at::Tensor w = at::randn({5}).requires_grad_(true), v = at::randn({5}).requires_grad_(true);
  at::Tensor x = at::randn({5}).requires_grad_(true);
  DeferredWeights rest;
  const at::Tensor loss = (x * w).sum() + (v * v).sum();
  const at::Tensor dx = DeferredWeights::input_gradient(loss, at::Tensor(), x, rest);
  EXPECT_TRUE(at::allclose(dx, w.detach()));
  EXPECT_FALSE(v.grad().defined());
  rest.accumulate();
  EXPECT_TRUE(at::allclose(w.grad(), x.detach()));
  EXPECT_TRUE(at::allclose(v.grad(), 2 * v.detach()));

  at::Tensor unused = at::randn({5}).requires_grad_(true);
  DeferredWeights apart;
  const at::Tensor only_weights = (v * 3).sum();
  EXPECT_FALSE(DeferredWeights::input_gradient(only_weights, at::Tensor(), unused, apart).defined());
  apart.accumulate();
  EXPECT_TRUE(at::allclose(v.grad(), 2 * v.detach() + 3));
}

}  // namespace
}  // namespace acc::core::pp
