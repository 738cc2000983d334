// A pipelined model's checkpoint as one process's (save_state / load_state under pp_size > 1): every stage's tensors
// gathered over the pp group into the whole model's, the optimizer's state indexed by the whole model's parameters as
// the optimizer held them before prepare cut the model; and back, each rank taking its stages' part. A checkpoint
// saved with pp=2 so loads with pp=1 or on another layout, and back.
#pragma once
#include <string>

#include "train/accelerator.hpp"

namespace acc::core::pipeline_checkpoint {

// The whole model's tensors from `mine` (this rank's stages', whole over tp and the shards): collective over pp.
NamedTensors whole_model(const PreparedModel& model, const NamedTensors& mine);
// `mine` (Optimizer::save_state after Strategy::optimizer_state_to_full: indexed by this rank's whole groups) indexed
// by every stage's parameters instead: collective over pp. StateError where the optimizer was built after prepare
// (the whole model's order is not known then).
Optimizer::State whole_optimizer(const PreparedOptimizer& opt, const Optimizer::State& mine);

// The tensors of `whole` that this rank's stages hold; a name no stage holds is std::invalid_argument naming `source`.
NamedTensors stage_model(const PreparedModel& model, const NamedTensors& whole, const std::string& source);
// whole_optimizer's inverse: this rank's stages' entries, indexed by its whole groups. std::invalid_argument naming
// `source` where the groups do not match the optimizer's.
Optimizer::State stage_optimizer(const PreparedOptimizer& opt, const Optimizer::State& whole,
                                 const std::string& source);

}  // namespace acc::core::pipeline_checkpoint
