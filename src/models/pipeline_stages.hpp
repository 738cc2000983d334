// What pipeline parallelism (src/parallel/pipeline.hpp) needs from a family: its layers as a first part (the
// embeddings), numbered blocks and a last part (final norm, head, loss), each named by its modules, and the forward of
// any run of them on one micro-batch. The parts keep the whole model's names (torchtitan keeps full FQNs), so a
// stage's parameters and checkpoints read like the whole model's.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "data/batch.hpp"

namespace acc::core {

// The layers one pipeline stage runs: the embeddings when `first`, blocks [begin, end), and the final norm, the head
// and the loss when `last`.
struct StageLayers {
  bool first = false, last = false;
  int64_t begin = 0, end = 0;
};

class PipelineStages {
 public:
  virtual ~PipelineStages() = default;
  virtual int64_t num_blocks() const = 0;
  // The dotted module names of each part. A head tied to the input embedding names that embedding in last_modules too:
  // the first and the last stage then each hold it, and their gradients are summed (Megatron's embedding group).
  virtual std::vector<std::string> first_modules() const = 0;
  virtual std::string block_module(int64_t i) const = 0;
  virtual std::vector<std::string> last_modules() const = 0;
  // One micro-batch through `layers`: `x` is the previous stage's output [batch, time, hidden] (undefined on the first
  // stage, which reads the batch's token ids); every stage reads the batch's inputs it needs (masks, positions) and
  // the last its targets. Returns the activation for the next stage or, on the last stage, the loss the family's
  // forward returns (a mean over the micro-batch's targets), or without targets the logits (pipelined inference).
  virtual at::Tensor stage_forward(const TensorDict& batch, const at::Tensor& x, const StageLayers& layers) = 0;
};

}  // namespace acc::core
