// The strategy seam: one interface owns a prepared model's parameters across processes (placement,
// gradient synchronisation with no_sync, the global gradient norm, the parameters the optimizer sees,
// and state dicts). The Accelerator knows only this interface; single-process and DDP are its first
// implementations, sharded ones (ZeRO, FSDP) plug in beside them.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "data/batch.hpp"

namespace acc::core {

class Comm;
class Model;

struct DdpOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;  // as torch's DDP: a small first bucket starts communication early
  bool broadcast_buffers = true;
  bool find_unused_parameters = false;
  // ddp_kwargs.gradient_as_bucket_view (torch's): each gradient is a view into its bucket, so the all-reduced bucket
  // is the gradient (no copy back, no second copy of the gradients between backward and the optimizer's zero_grad).
  bool gradient_as_bucket_view = false;
  // ddp_kwargs.static_graph (torch's): the parameters that get no gradient are the same in every backward. The first
  // synchronised backward records them (tolerating them, as find_unused_parameters does); later ones mark them ready
  // before backward starts, so their buckets need not wait for the end of backward. A graph that changes is an error.
  bool static_graph = false;
  // ddp_kwargs.comm_hook "fp16" / "bf16" (torch's fp16_compress_hook, bf16_compress_hook): each bucket travels
  // divided by the world size in this dtype and comes back to the gradients' dtype. Undefined: uncompressed.
  at::ScalarType compress = at::ScalarType::Undefined;
  // ddp_kwargs.comm_hook "power_sgd" (torch's powerSGD_hook, PowerSGDState's options and defaults): from iteration
  // start_iter on, each bucket's matrices travel as rank-`rank` factors P, Q (M ~ P Q^T), with error feedback.
  struct PowerSgd {
    bool on = false;
    // "batched_power_sgd" (torch's batched_powerSGD_hook): the whole bucket, zero-padded to a square, is one matrix.
    bool batched = false;
    int64_t rank = 1, start_iter = 1000;
    double min_compression_rate = 2, epsilon = 0;
    bool error_feedback = true, warm_start = true;
    uint64_t seed = 0;
  } power_sgd;
  // ddp_kwargs.comm_wrapper "fp16" / "bf16" (torch's fp16_compress_wrapper, bf16_compress_wrapper) around a hook:
  // the hook runs on a copy of the bucket in this dtype, whose result comes back to the gradients' dtype.
  at::ScalarType wrapper = at::ScalarType::Undefined;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Around each forward (DDP: buffers follow rank 0 in training; stage 3: parameters are gathered).
  virtual void before_forward() {}
  virtual void after_forward() {}
  // Around each backward; sync false is no_sync (accumulation steps keep gradients local).
  virtual void before_backward(bool sync) { (void)sync; }
  virtual void after_backward() {}
  // The parameters the optimizer steps (a sharded strategy: this process's shards).
  virtual std::vector<at::Tensor> optimizer_parameters() const;
  // What the optimizer steps for the trainable parameter `param`: itself, or (sharded) this process's pieces of it,
  // possibly none. An optimizer's parameter groups map to groups of pieces in this order (Optimizer::rebind).
  virtual std::vector<at::Tensor> pieces_of(const at::Tensor& param) const { return {param}; }
  // Whether the optimizer steps shards (it must then be built over optimizer_parameters()).
  virtual bool sharded() const { return false; }
  // After the optimizer stepped optimizer_parameters() (a sharded strategy gathers the new values).
  virtual void after_optimizer_step() {}
  // Whether the model's own tensors hold its whole parameters between steps (not so under ZeRO-3: read
  // them through full_state_dict, a collective).
  virtual bool parameters_whole() const { return true; }
  // Whether the model's own tensors are its state as full_state_dict gives it (not so when they are shards, or
  // compute-dtype copies of sharded float32 masters under a mixed-precision policy, or a tensor-parallel model's slices).
  virtual bool state_in_model() const;
  // The norm of all gradients of the model across every process (torch's clip_grad_norm_ total), the parameters named
  // in `left_out` not counted (a pipeline stage's copy of a tied weight).
  virtual at::Tensor grad_norm(double norm_type, const std::set<std::string>& left_out = {}) const;
  // Every tensor of the model, whole, on every process (what save_model writes).
  // `only` (when given): just the tensors of those names (a sharded strategy then gathers only what holds them).
  virtual NamedTensors full_state_dict(const std::set<std::string>* only = nullptr) const;
  // This process's part of the state (equal to the full one for strategies that replicate).
  virtual NamedTensors sharded_state_dict() const { return full_state_dict(); }
  // Loads whole tensors: every name and shape must match (nothing changes when one does not).
  virtual void load_full_state_dict(const NamedTensors& tensors, const std::string& source);
  // A checkpoint's optimizer state (Optimizer::State's tensors and JSON) is about the model's trainable parameters,
  // indexed as an optimizer built over them (`whole`: its parameter groups of whole parameters,
  // Optimizer::whole_groups), whatever the strategy and world size. A sharded strategy's optimizer steps pieces of
  // them (pieces_of, group by group): these convert (collectives), the others leave the state as it is.
  // A tensor-parallel model's optimizer steps slices of its parameters: the state given out is about the whole
  // (un-split) parameters all the same (gathered over the tp group), and the state taken in is too (sliced).
  using ParamGroups = std::vector<std::vector<at::Tensor>>;
  virtual void optimizer_state_to_full(const ParamGroups& whole, NamedTensors& tensors, std::string& json) const {
    (void)json;
    state_to_whole_parameters(whole, tensors);
  }
  virtual void optimizer_state_from_full(const ParamGroups& whole, NamedTensors& tensors, std::string& json,
                                         const std::string& source) const {
    (void)json;
    state_to_slices(whole, tensors, source);
  }
  // SHARDED_STATE_DICT: where a piece lies in the model (a flattened slice of a parameter, by name), so that each
  // process can write its part.
  struct Slice {
    std::string name;
    int64_t offset = 0;
    std::vector<int64_t> shape;  // the whole parameter's
    at::Tensor piece;
  };
  // The optimizer's pieces, in its order (as optimizer_state_to_full's `whole`); empty for strategies that do not shard.
  virtual std::vector<Slice> optimizer_slices(const ParamGroups& whole) const {
    (void)whole;
    return {};
  }
  // Every sharded parameter's piece on this process, frozen ones too (the model's slices).
  virtual std::vector<Slice> model_slices() const { return {}; }

 protected:
  explicit Strategy(std::shared_ptr<Model> model) : model_(std::move(model)) {}
  // Tensor parallelism (nothing to do for a model not split): optimizer state tensors ("state.{i}.{name}", i indexing
  // `whole`'s parameters, the model's slices) gathered into whole-parameter ones (a collective over the tp group), and
  // whole-parameter ones sliced to this rank's part (a shape that is not the whole parameter's: invalid_argument).
  void state_to_whole_parameters(const ParamGroups& whole, NamedTensors& tensors) const;
  void state_to_slices(const ParamGroups& whole, NamedTensors& tensors, const std::string& source) const;
  std::shared_ptr<Model> model_;
};

// One process: the model is placed on the device, nothing else.
std::unique_ptr<Strategy> make_single_strategy(std::shared_ptr<Model> model, c10::Device device);
// DDP: parameters and buffers broadcast from rank 0; gradients averaged in buckets during backward.
std::unique_ptr<Strategy> make_ddp_strategy(std::shared_ptr<Model> model, c10::Device device,
                                            std::shared_ptr<Comm> comm, const DdpOptions& opts);

// Copies every tensor of rank 0 to the other ranks (parameters and buffers at prepare time).
void broadcast_from_rank0(Comm& comm, const std::vector<at::Tensor>& tensors);
// The same for every tensor of `model`'s state.
void broadcast_from_rank0(Comm& comm, const Model& model);

// Optimizer::State's tensor names, "state.{i}.{kind}": (i, kind). std::invalid_argument naming `source` and the key
// for any other name.
std::pair<size_t, std::string> optimizer_state_key(const std::string& key, const std::string& source);

}  // namespace acc::core
