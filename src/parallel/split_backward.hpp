// A stage's backward in two, for the zero-bubble schedule (torch.distributed.pipelining's _backward.py:
// stage_backward_input and stage_backward_weight): first the gradient of the stage's input, which the previous stage
// waits for, then, later, the gradients of the weights, which nothing waits for. The first part runs the graph from
// the output down to the input only, capturing the gradient that reaches each node where a weight's part of the graph
// joins the input's; the second runs those weights' parts from the captured gradients, so no node runs twice.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace acc::core::pp {

class DeferredWeights {
 public:
  // The gradient of `input` (a leaf that requires grad) from `output` with gradient `grad` (undefined: a scalar loss,
  // ones), the graph kept for accumulate(); undefined where the input does not reach the output.
  static at::Tensor input_gradient(const at::Tensor& output, const at::Tensor& grad, const at::Tensor& input,
                                   DeferredWeights& rest);
  // Adds the weights' gradients to their .grad, as the whole backward would have (their gradient hooks do not run:
  // the pipeline's synchronisation after the step reads the accumulated gradients). Once.
  void accumulate();

  struct Group;  // weights and the nodes where their part of the graph joins the input's, with the gradients there

 private:
  std::vector<std::shared_ptr<Group>> groups_;
};

}  // namespace acc::core::pp
