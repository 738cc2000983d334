// What the configuration keys that issue 26 found ignored now do (docs/configuration.md, "What each key does"):
// ddp_kwargs.gradient_as_bucket_view and static_graph in the DDP reducer, enable_cpu_affinity's shares of the cores,
// device_placement's choice of device.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <set>

#include "models/model.hpp"
#include "parallel/ddp.hpp"
#include "runtime/affinity.hpp"
#include "runtime/comm.hpp"
#include "runtime/cuda.hpp"
#include "train/accelerator.hpp"

namespace acc::core {
namespace {

std::shared_ptr<Comm> solo_group() {
  ProcessState solo;
  solo.master_port = 0;
  return Comm::connect(solo, std::chrono::seconds(30));
}

struct Net {
  std::shared_ptr<Model> model = make_builtin_model(R"({"type": "mlp", "sizes": [64, 64, 64, 8]})");
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  Net() {
    for (auto& [n, p] : model->named_parameters()) {
      names.push_back(n);
      params.push_back(p);
    }
  }
  void backward(int step) {
    at::manual_seed(step);
    model->forward({{"input", at::randn({16, 64})}, {"targets", at::randn({16, 8})}}).at("loss").backward();
  }
};

// Distinct storages behind the gradients: what the gradients cost beside the buckets.
size_t grad_storages(const std::vector<at::Tensor>& params) {
  std::set<const void*> s;
  for (const auto& p : params) s.insert(p.grad().storage().unsafeGetStorageImpl());
  return s.size();
}

TEST(DdpKwargs, GradientAsBucketViewMakesGradientsViewsOfTheBucketsWithEqualValues) {
  auto comm = solo_group();
  std::vector<std::vector<at::Tensor>> grads(2);
  for (bool view : {false, true}) {
    Net net;
    at::manual_seed(0);
    for (auto& p : net.params) p.detach().copy_(at::randn(p.sizes()));  // the same weights for both runs
    DdpOptions o;
    o.bucket_cap_mb = o.first_bucket_cap_mb = 0.01;  // several buckets (the 64x64 weights, 16 KiB, each alone)
    o.gradient_as_bucket_view = view;
    GradientReducer reducer(comm, net.names, net.params, o);
    ASSERT_GT(reducer.num_buckets(), 2u);
    for (int step = 0; step < 3; ++step) {
      // Step 1 keeps the gradients and zeroes them in place (torch's zero_grad(set_to_none=False)): autograd then adds
      // into the bucket itself; the others start from none, as acc's optimizer leaves them.
      if (step == 1) {
        for (auto& p : net.params) p.mutable_grad().zero_();
      } else {
        for (auto& p : net.params) p.mutable_grad().reset();
      }
      std::vector<const void*> before;
      for (auto& p : net.params) before.push_back(p.grad().defined() ? p.grad().data_ptr() : nullptr);
      reducer.prepare_for_backward(true);
      net.backward(step);
      reducer.finalize_backward();
      for (auto& p : net.params) grads[view].push_back(p.grad().clone());
      if (!view) {
        EXPECT_EQ(grad_storages(net.params), net.params.size()) << "each gradient its own tensor, beside the buckets";
        continue;
      }
      EXPECT_EQ(grad_storages(net.params), reducer.num_buckets())
          << "step " << step << ": the gradients are the buckets";
      if (step == 1) {
        for (size_t i = 0; i < net.params.size(); ++i)
          EXPECT_EQ(net.params[i].grad().data_ptr(), before[i]) << net.names[i] << ": accumulated in place, not moved";
      }
    }
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(at::equal(grads[0][i], grads[1][i])) << i;
}

TEST(DdpKwargs, GradientAsBucketViewKeepsAccumulationUnderNoSync) {
  // no_sync micro-steps accumulate into the gradients (the bucket views) and the synchronised one adds to them: the
  // result equals the copying reducer's.
  auto comm = solo_group();
  std::vector<at::Tensor> out[2];
  for (bool view : {false, true}) {
    Net net;
    at::manual_seed(1);
    for (auto& p : net.params) p.detach().copy_(at::randn(p.sizes()));
    DdpOptions o;
    o.gradient_as_bucket_view = view;
    GradientReducer reducer(comm, net.names, net.params, o);
    for (int micro = 0; micro < 3; ++micro) {
      const bool sync = micro == 2;
      reducer.prepare_for_backward(sync);
      net.backward(10 + micro);
      if (sync) reducer.finalize_backward();
    }
    for (auto& p : net.params) out[view].push_back(p.grad().clone());
  }
  for (size_t i = 0; i < out[0].size(); ++i) EXPECT_TRUE(at::equal(out[0][i], out[1][i])) << i;
}

// Three parameters, each its own bucket; `unused` (the last, so the first bucket) gets no gradient.
struct ThreeBuckets {
  at::Tensor a = at::ones({4}).requires_grad_(), b = at::ones({4}).requires_grad_(),
             unused = at::ones({4}).requires_grad_();
  DdpOptions opts(bool static_graph, bool find_unused) {
    DdpOptions o;
    o.bucket_cap_mb = o.first_bucket_cap_mb = 1e-9;
    o.static_graph = static_graph;
    o.find_unused_parameters = find_unused;
    return o;
  }
  void step(GradientReducer& r, bool use_unused = false) {
    for (auto* t : {&a, &b, &unused}) t->mutable_grad().reset();
    r.prepare_for_backward(true);
    at::Tensor loss = (a * 2).sum() + (b * 3).sum();
    if (use_unused) loss = loss + unused.sum();
    loss.backward();
    r.finalize_backward();
  }
};

TEST(DdpKwargs, StaticGraphLaunchesTheUnusedParametersBucketsDuringBackward) {
  auto comm = solo_group();
  {
    ThreeBuckets m;
    GradientReducer r(comm, {"a", "b", "unused"}, {m.a, m.b, m.unused}, m.opts(false, true));
    ASSERT_EQ(r.num_buckets(), 3u);
    for (int i = 0; i < 2; ++i) {
      m.step(r);
      EXPECT_EQ(r.launched_during_backward(), 0u) << "find_unused_parameters: the first bucket waits for the end";
    }
  }
  ThreeBuckets m;
  GradientReducer r(comm, {"a", "b", "unused"}, {m.a, m.b, m.unused}, m.opts(true, false));
  m.step(r);  // the first backward records the unused parameter (no error without find_unused_parameters)
  EXPECT_EQ(r.launched_during_backward(), 0u);
  for (int i = 0; i < 2; ++i) {
    m.step(r);
    EXPECT_EQ(r.launched_during_backward(), 2u) << "its bucket is ready before backward: the others go out at once";
    EXPECT_TRUE(at::equal(m.a.grad(), at::full({4}, 2.0)));
    EXPECT_TRUE(at::equal(m.b.grad(), at::full({4}, 3.0)));
    EXPECT_TRUE(at::equal(m.unused.grad(), at::zeros({4})));
  }
  // The graph changes: named.
  try {
    m.step(r, /*use_unused=*/true);
    ADD_FAILURE() << "a parameter recorded as unused got a gradient";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("static_graph"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unused (now used)"), std::string::npos) << e.what();
  }
}

TEST(EnableCpuAffinity, SharesAreDisjointAndCoverTheAllowedCores) {
  const std::vector<int> eight = {0, 1, 2, 3, 4, 5, 6, 7};
  // No NUMA information: even blocks in order.
  EXPECT_EQ(cpu_share(eight, {}, 0, 2), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(cpu_share(eight, {}, 1, 2), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(cpu_share(eight, {}, 2, 3), (std::vector<int>{5, 6, 7}));
  // Two nodes whose cores interleave: each process stays on one node.
  const std::vector<std::vector<int>> nodes = {{0, 2, 4, 6}, {1, 3, 5, 7}};
  EXPECT_EQ(cpu_share(eight, nodes, 0, 2), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(cpu_share(eight, nodes, 1, 2), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(cpu_share(eight, nodes, 1, 4), (std::vector<int>{4, 6}));
  EXPECT_EQ(cpu_share(eight, nodes, 2, 4), (std::vector<int>{1, 3}));
  EXPECT_EQ(cpu_share(eight, nodes, 0, 1), eight);  // one process: every node
  // Only the allowed cores count; more processes than cores share one.
  EXPECT_EQ(cpu_share({2, 3}, nodes, 0, 2), (std::vector<int>{2}));
  EXPECT_EQ(cpu_share({2, 3}, nodes, 1, 2), (std::vector<int>{3}));
  EXPECT_EQ(cpu_share({5}, {}, 2, 3), (std::vector<int>{5}));
  for (int w = 1; w <= 11; ++w) {  // any count: disjoint shares that cover everything
    std::vector<int> all;
    for (int r = 0; r < w; ++r) {
      auto s = cpu_share(eight, nodes, r, w);
      EXPECT_FALSE(s.empty());
      all.insert(all.end(), s.begin(), s.end());
    }
    std::sort(all.begin(), all.end());
    if (w <= 8) {
      EXPECT_EQ(all, eight) << w << " processes";
    }
  }
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n", "x"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_THROW(parse_cpu_list("3-1", "x"), std::invalid_argument);
  EXPECT_THROW(parse_cpu_list("a", "x"), std::invalid_argument);
}

TEST(DevicePlacement, FalseLeavesTheModelOnItsOwnDevice) {
  // A CUDA accelerator device needs no GPU to be named: the choice is what is tested here (the move itself is
  // LibTorch's).
  auto model = make_builtin_model(R"({"type": "mlp", "sizes": [4, 2]})");
  const c10::Device gpu(c10::kCUDA, 1);
  EXPECT_EQ(placement_device(true, gpu, *model), gpu);
  EXPECT_EQ(placement_device(false, gpu, *model), c10::Device(c10::kCPU));
}

TEST(AcceleratorKeys, RefusedByNameWhereThisProcessCannotHonourThem) {
  if (!cuda::default_generators().empty()) GTEST_SKIP() << "a CUDA machine: both are honoured there";
  for (const char* json :
       {R"({"rng_types": ["generator", "cuda"]})", R"({"init_process_group_kwargs": {"backend": "NCCL"}})"}) {
    try {
      Accelerator::create(json);
      ADD_FAILURE() << json << " must be refused on the CPU";
    } catch (const config::Error& e) {
      const std::string m = e.what();
      EXPECT_TRUE(m.find("'rng_types'") != std::string::npos ||
                  m.find("'init_process_group_kwargs.backend'") != std::string::npos)
          << m;
      EXPECT_NE(m.find("acc_accelerator_create"), std::string::npos) << "the source: " << m;
    }
  }
  EXPECT_NO_THROW(Accelerator::create(
      R"({"rng_types": ["torch", "generator"], "init_process_group_kwargs": {"backend": "gloo"}})"));
}

}  // namespace
}  // namespace acc::core
