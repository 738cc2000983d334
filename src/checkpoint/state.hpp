// Checkpoints of everything an accelerator prepared, as Accelerate's checkpointing.py: free functions over an
// Accelerator (which knows nothing of files). Collectives: every process calls them alike.
#pragma once
#include <string>

namespace acc::core {

class Accelerator;

// Writes every prepared object that is still alive (models, optimizers, schedulers, loaders, in preparation order),
// the scaler, the accumulation step, every process's random states and the registered objects into `dir`,
// atomically. An empty `dir`: ProjectConfiguration's automatic naming, {project_dir}/checkpoints/checkpoint_{iteration}
// (total_limit keeps the newest; iteration then advances). Returns the directory written.
std::string save_state(Accelerator& acc, const std::string& dir);
// Restores them. An empty `dir`: the newest complete checkpoint under {project_dir}/checkpoints (partial ones are
// skipped); the automatic naming then continues after it. Returns the directory read.
std::string load_state(Accelerator& acc, const std::string& dir);
// The config's resume_from_checkpoint: "latest" loads the newest complete checkpoint when there is one (a fresh start
// otherwise), a directory is loaded; unset does nothing. Returns the directory loaded, or "" when nothing was. With
// acc launch --max_restarts, a restarted job continues where it was saved.
std::string resume_from_checkpoint(Accelerator& acc);

}  // namespace acc::core
