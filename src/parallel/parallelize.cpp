#include "parallel/parallelize.hpp"

#include <acc/config.hpp>

#include <map>
#include <stdexcept>

#include "models/deferred.hpp"
#include "models/model.hpp"
#include "runtime/mesh.hpp"
#include "util/errors.hpp"

namespace acc::core {

namespace {

// Splits the model over the mesh's tp group: the same whole model on every process first (rank 0's, as the
// data-parallel strategies start from it; a pipeline's cut did that already, and its ranks now hold different stages).
// Returns the parameters it replaced by slices.
ReplacedParameters split_tensor_parallel(Model& model, const ProcessMesh& mesh, const ParallelPlan& plan) {
  if (model.deferred() && model.deferred()->pending())
    throw UnsupportedError(plan.tensor_key + ": tensor parallelism splits whole weights; the model's are still on the "
                                             "meta device (zero3_init_flag)");
  if (mesh.size("pp") == 1) broadcast_from_rank0(*mesh.world(), model);
  std::map<std::string, at::Tensor> before;
  for (const auto& [name, p] : model.named_parameters()) before.emplace(name, p);
  try {
    tp::parallelize(model, std::make_shared<const Collectives>(tp::collectives_of(mesh.group("tp"))), plan.tensor);
  } catch (const std::invalid_argument& e) {  // a size that does not divide what the plan splits
    throw config::Error(plan.tensor_key + ": " + e.what());
  } catch (const UnsupportedError& e) {  // a model without a plan, a LoRA adapter
    throw UnsupportedError(plan.tensor_key + ": " + e.what());
  }
  ReplacedParameters replaced;
  for (const auto& [name, p] : model.named_parameters())
    if (auto it = before.find(name); it != before.end() && !it->second.is_same(p))
      replaced.emplace_back(
          c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(it->second.getIntrusivePtr()), p);
  return replaced;
}

// The weights need no change (every cp rank holds them whole, DDP / FSDP start from rank 0's); the forward splits.
void make_context_parallel(Model& model, const ProcessMesh& mesh, const ParallelPlan& plan) {
  try {
    cp::parallelize(model, std::make_shared<const Collectives>(cp::collectives_of(mesh.group("cp"))), plan.context);
  } catch (const UnsupportedError& e) {  // a TorchScript module, a model without context-parallel attention
    throw UnsupportedError(plan.context_key + ": " + e.what());
  }
}

// Ulysses: as context parallelism, the weights need no change; the forward splits the sequence and trades it for heads
// around attention.
void make_sequence_parallel(Model& model, const ProcessMesh& mesh, const ParallelPlan& plan) {
  try {
    ulysses::parallelize(model, std::make_shared<const Collectives>(ulysses::collectives_of(mesh.group("sp"))),
                         plan.sequence);
  } catch (const std::invalid_argument& e) {  // sp not dividing the heads
    throw config::Error(plan.sequence_key + ": " + e.what());
  } catch (const UnsupportedError& e) {  // a TorchScript module, a model without a split attention
    throw UnsupportedError(plan.sequence_key + ": " + e.what());
  }
}

// Cuts the model into stages over the pp group (every rank starts from rank 0's weights) and keeps this rank's.
std::shared_ptr<pp::Pipeline> make_pipeline(Model& model, const ProcessMesh& mesh, const ParallelPlan& plan) {
  if (model.deferred() && model.deferred()->pending()) model.deferred()->make_whole(plan.device);
  model.to(plan.device);  // where the stages receive activations (the strategy places the model there too)
  broadcast_from_rank0(*mesh.world(), model);
  pp::Options options = plan.pipeline;
  try {
    options.split_points = pp::split_point_indices(model, plan.pipeline_split_points);
  } catch (const std::invalid_argument& e) {
    throw config::Error(plan.split_points_key + ": " + e.what());
  }
  try {
    return std::make_shared<pp::Pipeline>(model, mesh.group("pp"), options);
  } catch (const std::invalid_argument& e) {  // a schedule, layout or family the pipeline cannot take
    throw config::Error(plan.pipeline_key + ": " + e.what());
  }
}

std::unique_ptr<Strategy> data_parallel(const std::shared_ptr<Model>& model, const ProcessMesh* mesh,
                                        const ParallelPlan& plan) {
  // Over the ranks that hold the same piece of the model; none besides this one (tensor parallelism over every
  // process): nothing to synchronise, as Accelerate wraps no DDP then.
  if (!mesh || plan.data == ParallelPlan::Data::Replicated ||
      (plan.data == ParallelPlan::Data::Ddp && mesh->size("dp_cp") == 1))
    return make_single_strategy(model, plan.device);
  if (plan.data == ParallelPlan::Data::Ddp)
    return make_ddp_strategy(model, plan.device, mesh->group("dp_cp"), plan.ddp);
  ShardingOptions o = plan.sharding;
  const ParallelPlan::Wrap& w = plan.wrap;
  // Accelerate's default classes to wrap are the model's _no_split_modules.
  const auto classes = w.classes_given || w.policy != "TRANSFORMER_BASED_WRAP" ? w.classes : model->no_split_modules();
  try {
    o.units = wrap_units(*model, w.policy, classes, w.min_num_params);
  } catch (const std::invalid_argument& e) {
    throw config::Error(e.what());
  }
  if (w.reported_units) o.units = model->reported_units();
  // FSDP shards over dp_shard x cp x sp and replicates over dp_replicate (HSDP: HYBRID_SHARD's machines, or
  // parallelism_config's dp_replicate_size); weights start from the first rank holding the same piece of the model.
  const ShardGroups groups(mesh->group("dp_cp"), mesh->group("dp_shard_cp"),
                           mesh->size("dp_replicate") > 1 ? mesh->group("dp_replicate") : nullptr);
  return make_sharded_strategy(model, plan.device, groups, o);
}

}  // namespace

Parallelized parallelize(const std::shared_ptr<Model>& model, const ProcessMesh* mesh, const ParallelPlan& plan) {
  Parallelized out;
  if (mesh && mesh->size("pp") > 1) {
    out.pipeline = make_pipeline(*model, *mesh, plan);
    out.pipeline_kept = model->trainable_tensors();
  }
  if (mesh && mesh->size("tp") > 1) out.replaced = split_tensor_parallel(*model, *mesh, plan);
  if (mesh && mesh->size("cp") > 1) make_context_parallel(*model, *mesh, plan);
  if (mesh && mesh->size("sp") > 1) make_sequence_parallel(*model, *mesh, plan);
  // zero3_init_flag: parameters on the meta device that ZeRO-3's strategy makes shard by shard; any other strategy
  // gets them whole.
  const bool makes_shards = mesh && plan.data == ParallelPlan::Data::Sharded && plan.sharding.stage == 3;
  if (const auto& deferred = model->deferred(); deferred && deferred->pending() && !makes_shards)
    deferred->make_whole(plan.device);
  out.strategy = data_parallel(model, mesh, plan);
  return out;
}

}  // namespace acc::core
