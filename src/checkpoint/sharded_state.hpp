// SHARDED_STATE_DICT checkpoints (FSDP's fsdp_state_dict_type): every process writes the slices of the model and of
// the optimizer state its shards hold, nothing is gathered; loading reassembles whole tensors from every process's
// files, whatever their number, and hands them to the strategy, which keeps its own slices (N -> M processes).
//
// Files, per prepared model i and optimizer i, rank r: model_slices_{i}.rank{r}.safetensors holds this rank's
// slices (1-D, by parameter name; rank 0 also writes buffers and unsharded parameters whole), and its .json side
// {name: {"offset": o, "shape": [...]}} where each slice lies in the flattened whole tensor, or, for a parameter split
// by tensor parallelism, in this rank's part of it ("tp": {"dim", "packed", "rank", "size"} says which part);
// optimizer_slices_{i}.rank{r}.safetensors ("state.{name}.{kind}") and .json (type, lr, each name's step, slices).
#pragma once
#include <optional>
#include <set>
#include <string>

#include "train/accelerator.hpp"

namespace acc::core {

// True when the model's strategy shards it and the config asks for SHARDED_STATE_DICT.
bool sharded_checkpoint(const Accelerator& acc, const PreparedModel& model);

// The names of a model's state that its checkpoint holds: all of them, or, once some parameters are frozen (a LoRA
// adapter freezes the base), what training changes: the trainable parameters (under each of their names) and
// the buffers. The frozen rest comes from where the model was loaded, as it did the first time.
std::set<std::string> checkpointed_names(const Model& model);
// Loads a checkpoint's model tensors: every state tensor, or exactly checkpointed_names (the rest stays as it is);
// anything else is std::invalid_argument naming the first difference, before anything changes. Collective.
void load_checkpointed_state(const PreparedModel& model, const NamedTensors& tensors, const std::string& source);

void save_model_slices(const PreparedModel& model, size_t index, int rank, const std::string& dir);
void save_optimizer_slices(const PreparedOptimizer& opt, size_t index, int rank, const std::string& dir);

// The whole tensors of model / optimizer `index` from a directory's slice files; nullopt when it has none.
// Errors name the file.
std::optional<NamedTensors> load_model_slices(size_t index, const std::string& dir);
// As Optimizer::save_state writes for the unsharded model (what Strategy::optimizer_state_from_full takes), indexed by
// `opt`'s whole parameter groups.
std::optional<Optimizer::State> load_optimizer_slices(const PreparedOptimizer& opt, size_t index,
                                                      const std::string& dir);

}  // namespace acc::core
