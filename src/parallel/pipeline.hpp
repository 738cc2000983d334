// Pipeline-parallel training at the core level (torch.distributed.pipelining's PipelineStage and schedules, cut as
// torchtitan cuts a model): a family's layers (models/pipeline_stages.hpp) split into stages, this rank's stages kept
// and the others' parameters freed, and a step that runs this rank's actions in the schedule's order
// (pipeline_schedule.hpp), exchanging activations and their gradients with the neighbouring stages over c10d
// point-to-point send / recv on the pipeline group.
#pragma once
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "data/batch.hpp"
#include "models/model.hpp"
#include "models/pipeline_stages.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "runtime/comm.hpp"

namespace acc::core::pp {

// torchtitan's _generate_llm_fqn_per_model_part: the blocks of `num_stages` stages, the embeddings counted as
// `input_weight` blocks and the norm and head as `output_weight`, the stages balanced by that count (the first ones
// taking one more when it does not divide). std::invalid_argument with torchtitan's words where it refuses.
std::vector<StageLayers> balanced_stages(int64_t num_blocks, int num_stages, int input_weight = 1,
                                         int output_weight = 1);
// The stages the user's split points make: the blocks where stages 1, 2, ... begin (increasing, within the blocks).
std::vector<StageLayers> stages_at(int64_t num_blocks, const std::vector<int64_t>& split_points);

// Split points as the user gives them, block indices ("4") or the blocks stages begin with ("model.layers.4",
// Accelerate's prepare_pippy split_points), as block indices of `model`. std::invalid_argument naming a point that
// names no block of the model, or a model that has no blocks.
std::vector<int64_t> split_point_indices(const Model& model, const std::vector<std::string>& points);

struct Options {
  // "GPipe", "1F1B", "Interleaved1F1B" or "InterleavedZeroBubble" (torch's names, any case)
  std::string schedule = "1F1B";
  int microbatches = 1;     // the batch is split into this many along dim 0
  int stages_per_rank = 1;  // virtual stages per rank (the interleaved schedules: 2 or more)
  // torchtitan's pipeline_parallel_layers_per_stage (0: none): the stage count follows from it, overriding
  // stages_per_rank; it must come out a multiple of the group's size.
  int layers_per_stage = 0;
  // Block indices where stages 1, 2, ... begin (pp_size x stages_per_rank - 1 of them); empty: balanced_stages.
  std::vector<int64_t> split_points;
  int first_stage_less_layers = 1, last_stage_less_layers = 1;  // torchtitan's input and output weights
};

class Pipeline {
 public:
  // Cuts `model` (which must outlive the pipeline) into group->size() x stages-per-rank stages and keeps this rank's:
  // every other stage's modules leave the model's tree (their parameters freed), so model.named_parameters() is this
  // rank's stages' under the whole model's names. Every rank of the group passes the same model (same weights).
  // std::invalid_argument naming the value for a schedule, a layout or a model family it cannot take.
  Pipeline(Model& model, std::shared_ptr<Comm> group, const Options& options);

  // One training step's forward and backward: `batch` (every rank of the group passes the same) split into the
  // micro-batches along dim 0, this rank's actions run in the schedule's order, each micro-batch's loss computed by
  // the last stage; the parameters' gradients accumulate the mean over micro-batches (torch's scale_grads with a mean
  // loss), times `loss_scale` (gradient accumulation's 1 / steps). A head tied to the embedding has its two copies'
  // gradients summed. Returns the mean loss (unscaled) on every rank.
  double step(const TensorDict& batch, double loss_scale = 1.0);
  // The same forward without gradients (torch's schedule eval()): the mean loss on every rank, nothing kept.
  double eval_step(const TensorDict& batch);
  // Pipelined inference (Accelerate's prepare_pippy forward, GPipe's forwards): `batch` without targets, its
  // micro-batches' outputs (the logits) concatenated along dim 0 on the last stage's rank, or with `gather_output` on
  // every rank; undefined on the others.
  at::Tensor infer(const TensorDict& batch, bool gather_output);

  // The whole model's tensors on every rank of the group (a collective): `mine` (this rank's stages' state) and every
  // other rank's, a tensor both the first and the last stage hold (a tied head) once. Names in stage-rank order.
  NamedTensors whole_state(const NamedTensors& mine) const;

  Schedule schedule() const { return schedule_; }
  const std::vector<StageLayers>& layout() const { return layout_; }  // every stage, by index
  std::vector<int> local_stages() const;  // this rank's, in order
  // The parameters here that are the second copy of a tied one (the last stage's of a head tied to the embedding,
  // whose gradient equals the first stage's copy's): what a norm over the group counts once.
  std::set<std::string> tied_copies() const {
    return rank_ != 0 ? std::set<std::string>(tied_.begin(), tied_.end()) : std::set<std::string>();
  }
  // The modules of stage `s` (the whole model's dotted names).
  std::vector<std::string> stage_modules(int s) const;

 private:
  struct Local;
  class Exchange;
  void build_layout(const Options& o);
  Exchange exchange(bool training) const;  // a step's, its first receives posted
  void keep_local_modules();
  std::vector<TensorDict> micro_batches(const TensorDict& batch) const;
  void forward(const Action& a, const std::vector<TensorDict>& mbs, Exchange& ex, std::vector<at::Tensor>& losses);
  // Every micro-batch's forward without gradients; the last stage's outputs (on its rank), by micro-batch.
  std::vector<at::Tensor> forward_only(const TensorDict& batch);
  int last_rank() const { return static_cast<int>(layout_.size() - 1) % pp_; }
  std::pair<at::Tensor, at::Tensor> backward_root(const Local& st, size_t microbatch, Exchange& ex);
  void send_input_gradient(const Local& st, size_t microbatch, const at::Tensor& grad, Exchange& ex);
  void backward(const Action& a, Exchange& ex);
  void backward_input(const Action& a, Exchange& ex);
  void backward_weight(const Action& a);
  double mean_loss(const std::vector<at::Tensor>& losses) const;
  void sync_tied_copies();
  std::vector<at::Tensor> tied_gradients() const;  // the tied parameters' gradients now (copies; undefined: none)
  void sum_tied_gradients(const std::vector<at::Tensor>& before);
  at::Tensor parameter(const std::string& name) const;
  Local& local(int stage);

  Model& model_;
  PipelineStages* stages_;
  std::shared_ptr<Comm> group_;
  Schedule schedule_;
  int rank_, pp_, per_rank_, microbatches_;
  double loss_scale_ = 1.0;  // step's
  c10::Device device_ = c10::kCPU;  // where this rank's stages' parameters are (received activations go there)
  std::vector<StageLayers> layout_;
  std::vector<std::shared_ptr<Local>> locals_;  // this rank's stages' state, by local index
  std::vector<std::string> tied_;  // parameters both the first and the last stage hold
};

}  // namespace acc::core::pp
