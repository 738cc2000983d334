// Distributed data parallel (the "ddp" strategy): gradients are averaged across processes in buckets, each all-reduce
// launched from a post-accumulate-grad hook as soon as its bucket is full, overlapping backward.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "parallel/strategy.hpp"
#include "runtime/comm.hpp"

namespace acc::core {

class GradientReducer {
 public:
  GradientReducer(std::shared_ptr<Comm> comm, std::vector<std::string> names, std::vector<at::Tensor> params,
                  DdpOptions opts);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Arms the hooks for one backward pass; with sync false (accumulation steps) grads stay local.
  void prepare_for_backward(bool sync);
  // After backward: launches what is left, waits, and writes the averaged grads back.
  void finalize_backward();
  size_t num_buckets() const;
  // Buckets whose all-reduce a hook launched while backward was still running, in the last pass.
  size_t launched_during_backward() const;
  // Bytes the buckets' all-reduces carried in the last synchronised backward (what each process contributes).
  int64_t bytes_communicated() const;

  struct State;  // shared with the hooks

 private:
  std::shared_ptr<State> state_;
};

}  // namespace acc::core
