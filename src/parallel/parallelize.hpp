// The one composition step (torchtitan's parallelize_llama): over the process mesh, pipeline parallelism first (the
// model cut into stages over the pp group, this rank's kept; parallel/pipeline.hpp), then tensor parallelism (the
// model's layers split by its family's plan), then context or Ulysses sequence parallelism (its forward keeps this
// rank's part of each sequence), then data parallelism and sharding (the Strategy that owns what the others left: DDP, ZeRO-1/2,
// FSDP / ZeRO-3, HSDP). Accelerator::prepare calls it and nothing else of the mechanisms; each mechanism records the
// placements it makes on the model (models/placement.hpp).
#pragma once
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/context_parallel.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/sharded.hpp"
#include "parallel/strategy.hpp"
#include "parallel/tensor_parallel.hpp"
#include "parallel/ulysses.hpp"

namespace acc::core {

class Model;
class ProcessMesh;

// What to apply, resolved from the settings (the mesh's sizes say which of tp, cp and sp apply).
struct ParallelPlan {
  c10::Device device{c10::kCPU};  // where the strategy places the model
  tp::Options tensor;
  cp::Options context;
  ulysses::Options sequence;
  pp::Options pipeline;  // its split_points from pipeline_split_points
  std::vector<std::string> pipeline_split_points;
  // How errors name the settings: `key` = value (from where).
  std::string pipeline_key = "parallelism_config.pp_size", split_points_key = "parallelism_config.pp_split_points",
              sharding_key = "distributed_type";
  std::string tensor_key = "parallelism_config.tp_size", context_key = "parallelism_config.cp_size",
              sequence_key = "parallelism_config.sp_size";
  enum class Data { Replicated, Ddp, Sharded };
  Data data = Data::Replicated;  // Replicated: one process, or nothing to synchronise
  DdpOptions ddp;
  ShardingOptions sharding;  // its units from `wrap` (over the model as tensor parallelism left it)
  struct Wrap {
    std::string policy;  // fsdp_auto_wrap_policy
    std::vector<std::string> classes;  // classes to wrap (empty and not given: the model's _no_split_modules)
    bool classes_given = false;
    int64_t min_num_params = 0;
    bool reported_units = false;  // DeepSpeed's ZeRO-3: the model's blocks are the units
  } wrap;
};

// A parameter tensor that tensor parallelism replaced by this rank's slice: (the old tensor, held weakly so that its
// memory goes once nothing else holds it, the slice). An optimizer built before prepare moves onto the slices.
using ReplacedParameters =
    std::vector<std::pair<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>, at::Tensor>>;

struct Parallelized {
  std::unique_ptr<Strategy> strategy;
  ReplacedParameters replaced;
  // Pipeline parallelism: the cut (it runs the model's training steps), and the trainable parameters right after it,
  // before tensor parallelism replaced any (this rank's stages'; an optimizer built before prepare holds every stage's).
  std::shared_ptr<pp::Pipeline> pipeline;
  std::vector<at::Tensor> pipeline_kept;
};

// Applies `plan` to `model` over `mesh` (null: one process). Refused, naming the setting, before the model changes
// where the mechanisms can tell (a plan that does not divide, a model without a plan or context-parallel attention).
Parallelized parallelize(const std::shared_ptr<Model>& model, const ProcessMesh* mesh, const ParallelPlan& plan);

}  // namespace acc::core
