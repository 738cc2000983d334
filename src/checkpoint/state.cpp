// save_state / load_state over an accelerator (as Accelerate's checkpointing.py): a checkpoint of everything
// prepared, without pickles (tensors in safetensors, the rest in JSON). docs/checkpoints.md describes every file.
//
// Saving is staged: every process writes its files into ".<name>.acc-staging" beside the checkpoint (each
// file fsynced; the folder claimed by the main process with a lock, so two jobs never mix their files), the
// main process adds manifest.json last and puts the checkpoint in place without touching anybody else's
// files (put_in_place). A directory without its manifest is never loaded. The processes agree on success
// after each phase, so one that fails makes all of them fail, none waits forever.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <set>

#include "acc/files.hpp"
#include "acc/limits.hpp"
#include "checkpoint/agree.hpp"
#include "checkpoint/state.hpp"
#include "checkpoint/manifest.hpp"
#include "checkpoint/pipeline_state.hpp"
#include "formats/safetensors.hpp"
#include "runtime/cuda.hpp"
#include "runtime/mesh.hpp"
#include "train/accelerator.hpp"
#include "checkpoint/sharded_state.hpp"
#include "util/errors.hpp"
#include <acc/json.hpp>

namespace acc::core {
namespace {

namespace fs = std::filesystem;

// Accelerate's naming: the first object of a kind has the plain name, the next ones _1, _2, ...
std::string numbered(const std::string& stem, size_t i, const std::string& ext) {
  return stem + (i == 0 ? "" : "_" + std::to_string(i)) + ext;
}

std::string read_json_file(const fs::path& path) {
  return config::read_file(path.string(), limits::kCheckpointJsonBytes);
}

// LibTorch keeps a scheduler's step count protected; this reaches it without changing the scheduler.
struct SchedulerCount : torch::optim::LRScheduler {
  static unsigned& of(torch::optim::LRScheduler& s) { return s.*(&SchedulerCount::step_count_); }
};

at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state().clone();
}

void set_cpu_rng_state(const at::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// torch.cuda.get_rng_state_all: "torch.cuda.{i}" for every CUDA device (none without CUDA).
void add_cuda_rng_states(NamedTensors& out) {
  auto gens = cuda::default_generators();
  for (size_t i = 0; i < gens.size(); ++i) {
    std::lock_guard<std::mutex> lock(gens[i].mutex());
    out.emplace_back("torch.cuda." + std::to_string(i), gens[i].get_state().clone());
  }
}

// torch.cuda.set_rng_state_all for the devices both the checkpoint and this process have; returns a note on
// those that only one of them has ("" when they agree).
std::string set_cuda_rng_states(const std::map<std::string, at::Tensor>& saved) {
  auto gens = cuda::default_generators();
  size_t in_file = 0;
  while (saved.count("torch.cuda." + std::to_string(in_file))) ++in_file;
  for (size_t i = 0; i < std::min(in_file, gens.size()); ++i) {
    std::lock_guard<std::mutex> lock(gens[i].mutex());
    gens[i].set_state(saved.at("torch.cuda." + std::to_string(i)));
  }
  if (in_file == gens.size()) return "";
  return "the checkpoint holds the random states of " + std::to_string(in_file) +
         " CUDA devices and this process has " + std::to_string(gens.size()) + ": those of the first " +
         std::to_string(std::min(in_file, gens.size())) + " are restored";
}

// The process mesh a checkpoint records (accelerator_state.json's "mesh"): its sizes; all 1 for one process.
MeshSizes mesh_of(const Accelerator& a) { return a.mesh() ? a.mesh()->sizes() : MeshSizes{}; }

bool same_mesh(const MeshSizes& a, const MeshSizes& b) {
  return a.dp_replicate == b.dp_replicate && a.dp_shard == b.dp_shard && a.cp == b.cp && a.sp == b.sp && a.tp == b.tp &&
         a.pp == b.pp;
}

// "tp=2 x dp_shard=2" (Accelerate's names, the sizes above 1), "1 process".
std::string mesh_text(const MeshSizes& m) {
  std::string s;
  for (const auto& [name, n] : {std::pair<const char*, int>{"pp", m.pp},
                                {"dp_replicate", m.dp_replicate},
                                {"dp_shard", m.dp_shard},
                                {"cp", m.cp},
                                {"sp", m.sp},
                                {"tp", m.tp}})
    if (n > 1) s += (s.empty() ? "" : " x ") + std::string(name) + "=" + std::to_string(n);
  return s.empty() ? "1 process" : s;
}

// {project_dir}/checkpoints, where the automatic names live.
fs::path checkpoints_root(const config::AcceleratorSettings& c) {
  if (!c.project_config.project_dir)
    throw std::invalid_argument("save_state / load_state without a directory need project_config.project_dir (or "
                                "project_dir): the checkpoints are {project_dir}/checkpoints/checkpoint_{i}");
  return fs::path(*c.project_config.project_dir) / "checkpoints";
}

// The complete checkpoints named checkpoint_{n} under `root`, by number: only folders of exactly that name
// that are libacc's (checkpoint_7_notes or a folder without manifest is the user's).
struct Automatic {
  int64_t number;
  fs::path dir;
  std::vector<std::string> files;  // checkpoint_files: what removing it may remove
  bool operator<(const Automatic& o) const { return number < o.number; }
};

std::vector<Automatic> list_automatic(const fs::path& root) {
  std::vector<Automatic> found;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return found;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    const std::string digits = name.substr(std::min(name.size(), sizeof "checkpoint_" - 1));
    if (name.rfind("checkpoint_", 0) != 0 || digits.empty() || digits.size() > 18 ||
        digits.find_first_not_of("0123456789") != std::string::npos || !e.is_directory(ec))
      continue;
    if (auto files = checkpoint_files(e.path().string())) found.push_back({std::stoll(digits), e.path(), *files});
  }
  std::sort(found.begin(), found.end());
  return found;
}

// The folder save_state was given, as one name in its parent ("dir/" is "dir"; "." its absolute name).
fs::path folder_named(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  if (p.filename() == "." || p.filename() == "..") p = fs::absolute(p).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  if (p.filename().empty() || p.filename() == "." || p.filename() == "..")
    throw std::invalid_argument("save_state: '" + dir + "' does not name a folder to save the checkpoint in");
  return p;
}

// Removes a checkpoint libacc wrote: its own files (and a staging lock file a save killed right after putting it in
// place left), then the folder when nothing of anybody else's is in it.
void remove_checkpoint(const fs::path& dir, std::vector<std::string> files, const char* what) {
  files.push_back(config::StagingFolder::kLockName);
  config::remove_files_then_folder(dir.string(), files, what);
}

// Puts the staged checkpoint (its `files`, manifest.json last) at `target`:
// - nothing there: renamed into place, never over something that appeared meanwhile;
// - a libacc checkpoint holding nothing else: swapped with it atomically (a crash leaves the old or the new one);
// - a folder with other files (the user's; or empty): the files are moved into it one by one, the old manifest
//   removed first and the new one written last, replacing only the old checkpoint's own files; a file of the
//   user's under a checkpoint file's name is refused before anything moves.
void put_in_place(config::StagingFolder& staged, const fs::path& target, const std::vector<std::string>& files) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(target, ec))) {
    config::rename_no_replace(staged.path(), target.string());
    staged.moved_to(target.string());
    return;
  }
  const std::optional<std::vector<std::string>> old = checkpoint_files(target.string());
  if (!fs::is_directory(target, ec))
    throw config::FileError("cannot save a checkpoint to", target.string(), "it exists and is not a folder", ENOTDIR);
  const std::set<std::string> ours = old ? std::set<std::string>(old->begin(), old->end()) : std::set<std::string>();
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(target)) {
    ++entries;
    const std::string name = e.path().filename().string();
    if (!ours.count(name) && std::find(files.begin(), files.end(), name) != files.end())
      throw config::FileError("refusing to replace", e.path().string(),
                              "it is not a file of a libacc checkpoint in this folder (the checkpoint would "
                              "overwrite it): save into another folder",
                              EEXIST);
  }
  if (old && entries == ours.size() && !fs::is_symlink(target, ec) &&
      config::exchange_paths(staged.path(), target.string())) {
    staged.moved_to(target.string());
    remove_checkpoint(staged.path(), *old, "the replaced checkpoint");
    return;
  }
  if (old && ::unlink((target / kManifest).c_str()) != 0)
    throw config::FileError("cannot remove", (target / kManifest).string(), std::strerror(errno), errno);
  for (const std::string& name : files)
    if (name != kManifest && ::rename((fs::path(staged.path()) / name).c_str(), (target / name).c_str()) != 0)
      throw config::FileError("cannot move into place", (target / name).string(), std::strerror(errno), errno);
  for (const std::string& name : ours)
    if (name != kManifest && std::find(files.begin(), files.end(), name) == files.end()) fs::remove(target / name, ec);
  if (::rename((fs::path(staged.path()) / kManifest).c_str(), (target / kManifest).c_str()) != 0)
    throw config::FileError("cannot move into place", (target / kManifest).string(), std::strerror(errno), errno);
  config::sync_directory(target.string());
}

}  // namespace

void agreed(Accelerator* acc, const char* what, const std::function<void()>& phase) {
  std::exception_ptr error;
  try {
    phase();
  } catch (...) {
    error = std::current_exception();
  }
  if (acc && acc->distributed()) {
    at::Tensor failed = at::full({1}, error ? 1.0 : 0.0, at::kFloat);
    const bool any = acc->reduce(failed, ReduceOp::Max).item<double>() > 0;
    if (!error && any) throw DistributedError(std::string(what) + " failed on another process (see its error)");
  }
  if (error) std::rethrow_exception(error);
}

namespace {

// Under SHARDED_STATE_DICT each process writes its slices of the model and its optimizer, and nothing is gathered.
bool sliced(const Accelerator& acc, const std::shared_ptr<PreparedModel>& m) {
  return m && sharded_checkpoint(acc, *m);
}

// Phase 1 of save_state: the main process claims the staging folder (refused while another job saves to the same
// place). Null on the other processes.
std::unique_ptr<config::StagingFolder> claim_staging(Accelerator& acc, const fs::path& target,
                                                     const fs::path& staged_path, bool automatic) {
  std::unique_ptr<config::StagingFolder> staged;
  agreed(&acc, "save_state", [&] {
    if (acc.state().rank != 0) return;
    std::error_code ec;
    config::make_directories(target.parent_path().empty() ? "." : target.parent_path().string());
    // As Accelerate: a checkpoint of this number must not exist already (set project_config.iteration).
    if (automatic && fs::exists(fs::symlink_status(target, ec)))
      throw std::invalid_argument("save_state: checkpoint directory '" + target.string() + "' (" +
                                  std::to_string(acc.save_iteration()) +
                                  ") already exists; set "
                                  "project_config.iteration to the number to continue from");
    if (fs::exists(target, ec) && !fs::is_directory(target, ec))
      throw config::FileError("cannot save a checkpoint to", target.string(), "it exists and is not a folder", ENOTDIR);
    staged = std::make_unique<config::StagingFolder>(staged_path.string());
  });
  return staged;
}

// The models' and optimizers' whole state (a sharded strategy gathers it: a collective, so on every process); empty
// for those written as slices.
struct WholeStates {
  std::vector<NamedTensors> models;
  std::vector<Optimizer::State> optimizers;
};

WholeStates gather_whole_states(Accelerator& acc, const Accelerator::Prepared& prepared) {
  WholeStates out;
  agreed(&acc, "save_state", [&] {
    for (const auto& m : prepared.models) {
      NamedTensors st;
      if (!sliced(acc, m)) {
        const std::set<std::string> held = checkpointed_names(*m->model);
        st = m->strategy->full_state_dict(&held);
        if (m->pipeline) st = pipeline_checkpoint::whole_model(*m, st);  // every stage's
      }
      out.models.push_back(std::move(st));
    }
    for (const auto& o : prepared.optimizers) {
      Optimizer::State st;
      if (!sliced(acc, o->model)) {
        st = o->opt->save_state();
        if (o->model && o->model->strategy)
          o->model->strategy->optimizer_state_to_full(o->opt->whole_groups(), st.tensors, st.json);
        if (o->model && o->model->pipeline) st = pipeline_checkpoint::whole_optimizer(*o, st);
      }
      out.optimizers.push_back(std::move(st));
    }
  });
  return out;
}

// What every process writes into the staging folder `d`: its random states and its slices.
void write_process_files(const Accelerator& acc, const Accelerator::Prepared& prepared, const std::string& d) {
  const int rank = acc.state().rank;
  NamedTensors rng{{"torch.cpu", cpu_rng_state()}};
  add_cuda_rng_states(rng);
  for (size_t i = 0; i < prepared.loaders.size(); ++i) {
    at::Tensor g = prepared.loaders[i]->position().pass_generator;
    if (g.defined()) rng.emplace_back("dataloader." + std::to_string(i) + ".generator", g);
  }
  save_safetensors(rng, d + "random_states_" + std::to_string(rank) + ".safetensors");
  for (size_t i = 0; i < prepared.models.size(); ++i)
    if (sliced(acc, prepared.models[i])) save_model_slices(*prepared.models[i], i, rank, d);
  for (size_t i = 0; i < prepared.optimizers.size(); ++i)
    if (sliced(acc, prepared.optimizers[i]->model)) save_optimizer_slices(*prepared.optimizers[i], i, rank, d);
}

// accelerator_state.json: the step, the run's shape and how many objects of each kind the checkpoint holds.
std::string accelerator_state_json(const Accelerator& acc, const Accelerator::Prepared& prepared) {
  const MeshSizes mesh = mesh_of(acc);
  json::Writer j;
  // clang-format off: one key a line
  j.begin_object()
      .key("step").value(acc.gradient_state().step)
      .key("num_processes").value(static_cast<int64_t>(acc.state().world_size))
      .key("mixed_precision").value(acc.mixed_precision())
      .key("models").value(static_cast<int64_t>(prepared.models.size()))
      .key("optimizers").value(static_cast<int64_t>(prepared.optimizers.size()))
      .key("schedulers").value(static_cast<int64_t>(prepared.schedulers.size()))
      .key("dataloaders").value(static_cast<int64_t>(prepared.loaders.size()))
      .key("custom_objects").value(static_cast<int64_t>(prepared.objects.size()))
      .key("mesh").begin_object()
          .key("pp").value(static_cast<int64_t>(mesh.pp))
          .key("dp_replicate").value(static_cast<int64_t>(mesh.dp_replicate))
          .key("dp_shard").value(static_cast<int64_t>(mesh.dp_shard))
          .key("cp").value(static_cast<int64_t>(mesh.cp))
          .key("sp").value(static_cast<int64_t>(mesh.sp))
          .key("tp").value(static_cast<int64_t>(mesh.tp))
      .end_object()
      .end_object();
  // clang-format on
  return j.str();
}

// What the main process writes into the staging folder `d`: the whole states, the schedulers, the loaders'
// positions, the scaler, the registered objects and accelerator_state.json.
void write_main_files(Accelerator& acc, const Accelerator::Prepared& prepared, const WholeStates& whole,
                      const std::string& d) {
  const auto& [models, optimizers, schedulers, loaders, objects] = prepared;
  for (size_t i = 0; i < models.size(); ++i)
    if (!sliced(acc, models[i]))
      save_safetensors(whole.models[i], d + numbered("model", i, ".safetensors"), {{"format", "pt"}});
  for (size_t i = 0; i < optimizers.size(); ++i) {
    if (sliced(acc, optimizers[i]->model)) continue;
    const Optimizer::State& st = whole.optimizers[i];
    save_safetensors(st.tensors, d + numbered("optimizer", i, ".safetensors"));
    config::write_file_atomic(d + numbered("optimizer", i, ".json"), st.json);
  }
  for (size_t i = 0; i < schedulers.size(); ++i) {
    json::Writer j;
    j.begin_object();
    if (schedulers[i]->user) j.key("step_count").value(static_cast<int64_t>(SchedulerCount::of(*schedulers[i]->user)));
    else j.key("steps").value(schedulers[i]->steps);
    config::write_file_atomic(d + numbered("scheduler", i, ".json"), j.end_object().str());
  }
  for (size_t i = 0; i < loaders.size(); ++i) {
    const LoaderPosition p = loaders[i]->position();
    json::Writer j;
    // samples_per_step: what a batch of the position means in samples, so that another mesh can continue there.
    j.begin_object()
        .key("epoch")
        .value(p.epoch)
        .key("batches")
        .value(p.batches)
        .key("samples_per_step")
        .value(loaders[i]->samples_per_step())
        .end_object();
    config::write_file_atomic(d + numbered("dataloader", i, ".json"), j.str());
  }
  if (const GradScaler* scaler = acc.scaler()) {
    json::Writer j;
    j.begin_object().key("scale").value(scaler->scale()).key("growth_tracker").value(scaler->growth_tracker());
    config::write_file_atomic(d + "scaler.json", j.end_object().str());
  }
  for (size_t i = 0; i < objects.size(); ++i)
    config::write_file_atomic(d + "custom_checkpoint_" + std::to_string(i) + ".bin", objects[i].save());
  config::write_file_atomic(d + "accelerator_state.json", accelerator_state_json(acc, prepared));
}

// Phase 3 of save_state, on the main process: the manifest (every file and its size) makes the checkpoint complete;
// then it takes its place, and with automatic naming and total_limit the oldest checkpoints go.
void place_checkpoint(const Accelerator& acc, config::StagingFolder& staged, const fs::path& staged_path,
                      const fs::path& target, bool automatic) {
  std::vector<std::pair<std::string, int64_t>> sizes;
  for (const auto& e : fs::directory_iterator(staged_path))
    if (e.is_regular_file() && e.path().filename().string()[0] != '.')
      sizes.emplace_back(e.path().filename().string(), static_cast<int64_t>(e.file_size()));
  std::sort(sizes.begin(), sizes.end());
  config::write_file_atomic((staged_path / kManifest).string(), manifest_json(sizes, acc.state().world_size));
  std::vector<std::string> files{kManifest};
  for (const auto& [name, size] : sizes) files.push_back(name);
  put_in_place(staged, target, files);
  // total_limit keeps that many, this one included; only now, so that a failed save never costs a checkpoint.
  if (automatic && acc.settings().project_config.total_limit) {
    const auto existing = list_automatic(target.parent_path());
    const size_t keep = static_cast<size_t>(std::max<int64_t>(*acc.settings().project_config.total_limit, 1));
    for (size_t i = 0; i + keep < existing.size(); ++i)
      remove_checkpoint(existing[i].dir, existing[i].files, "an old checkpoint");
  }
}

// A pipelined model's checkpoint is the whole model's (checkpoint/pipeline_state.hpp); its stages' slices are not.
void refuse_pipeline(const Accelerator& acc, const Accelerator::Prepared& prepared, const char* what) {
  for (const auto& m : prepared.models)
    if (m->pipeline && sliced(acc, m))
      throw UnsupportedError(std::string(what) +
                             ": a pipeline-parallel model's checkpoint is written whole; "
                             "fsdp_state_dict_type SHARDED_STATE_DICT is not supported with parallelism_config.pp_size "
                             "> 1 (use FULL_STATE_DICT)");
}

}  // namespace

std::string save_state(Accelerator& acc, const std::string& dir) {
  refuse_pipeline(acc, acc.live_objects(), "save_state");
  const bool automatic = dir.empty();
  if (automatic && !acc.settings().project_config.automatic_checkpoint_naming)
    throw std::invalid_argument("save_state needs a directory, or project_config.automatic_checkpoint_naming "
                                "with a project_dir");
  const fs::path target =
      automatic ? checkpoints_root(acc.settings()) / ("checkpoint_" + std::to_string(acc.save_iteration()))
                : folder_named(dir);
  const fs::path staged_path = target.parent_path() / ("." + target.filename().string() + ".acc-staging");
  const Accelerator::Prepared prepared = acc.live_objects();
  std::unique_ptr<config::StagingFolder> staged = claim_staging(acc, target, staged_path, automatic);
  const WholeStates whole = gather_whole_states(acc, prepared);
  // Phase 2: every process writes its random states and slices; the main process everything else.
  agreed(&acc, "save_state", [&] {
    const std::string d = staged_path.string() + "/";
    write_process_files(acc, prepared, d);
    if (acc.state().rank == 0) write_main_files(acc, prepared, whole, d);
  });
  agreed(&acc, "save_state", [&] {
    if (acc.state().rank != 0) return;
    place_checkpoint(acc, *staged, staged_path, target, automatic);
    staged.reset();
  });
  if (automatic) acc.set_save_iteration(acc.save_iteration() + 1);
  return target.string();
}

namespace {

// The checkpoint load_state reads: `dir`, or (empty) the newest complete one under {project_dir}/checkpoints with its
// number (-1 for a directory given).
std::pair<std::string, int64_t> checkpoint_to_load(const Accelerator& acc, const std::string& dir) {
  if (!dir.empty()) return {dir, -1};
  const fs::path root = checkpoints_root(acc.settings());
  const auto found = list_automatic(root);
  if (found.empty()) throw std::ios_base::failure("load_state: no complete checkpoint under '" + root.string() + "'");
  return {found.back().dir.string(), found.back().number};
}

// The same objects must be prepared (and registered) as when the checkpoint was saved.
void check_counts(const json::Value& saved, const Accelerator::Prepared& prepared, const std::string& dir) {
  const auto check_count = [&](const char* key, size_t have, const char* what) {
    const int64_t n = saved.get_int(key);
    if (n != static_cast<int64_t>(have))
      throw std::invalid_argument("load_state: '" + dir + "' holds " + std::to_string(n) + " " + what + "; " +
                                  std::to_string(have) + " are prepared (or registered) now");
  };
  check_count("models", prepared.models.size(), "models");
  check_count("optimizers", prepared.optimizers.size(), "optimizers");
  check_count("schedulers", prepared.schedulers.size(), "schedulers");
  check_count("dataloaders", prepared.loaders.size(), "data loaders");
  check_count("custom_objects", prepared.objects.size(), "registered objects");
}

// How this run's processes compare with the checkpoint's.
struct Layout {
  bool same_world = true;   // as many processes
  bool same_layout = true;  // and the same mesh
  std::string meshes;       // both, in words
};

Layout compare_layout(const Accelerator& acc, const json::Value& saved) {
  Layout l;
  const int64_t saved_world = saved.get_int("num_processes");
  l.same_world = saved_world == acc.state().world_size;
  // The mesh it was saved under (checkpoints of libacc before 1.3 record only the number of processes).
  std::optional<MeshSizes> saved_mesh;
  if (saved.has("mesh")) {
    const json::Value m = saved.get("mesh");
    saved_mesh = MeshSizes{static_cast<int>(m.get_int("dp_replicate")),
                           static_cast<int>(m.get_int("dp_shard")),
                           static_cast<int>(m.get_int("cp")),
                           static_cast<int>(m.get_int("tp")),
                           static_cast<int>(m.has("sp") ? m.get_int("sp") : 1),   // (before 1.4: no sp)
                           static_cast<int>(m.has("pp") ? m.get_int("pp") : 1)};  // (nor pp)
  }
  const MeshSizes mesh_now = mesh_of(acc);
  l.same_layout = l.same_world && (!saved_mesh || same_mesh(*saved_mesh, mesh_now));
  l.meshes = "the checkpoint was saved under " +
             (saved_mesh ? mesh_text(*saved_mesh) : std::to_string(saved_world) + " processes") + ", this run is " +
             mesh_text(mesh_now);
  return l;
}

// A checkpoint holds whole tensors or every process's slices (SHARDED_STATE_DICT), the slices of tensor-parallel
// parameters in their parts' coordinates: either loads under any strategy and mesh. Tensors that do not fit the model
// name the file; where the mesh changed, both meshes too.
void load_models_and_optimizers(const Accelerator::Prepared& prepared, const std::string& dir, const Layout& layout) {
  const fs::path root(dir);
  const auto where = [&](const std::string& file) { return (root / file).string(); };
  const auto naming_meshes = [&](bool always, const std::function<void()>& load) {
    try {
      load();
    } catch (const std::invalid_argument& e) {
      if (!always && layout.same_layout) throw;
      throw std::invalid_argument(std::string(e.what()) + " (" + layout.meshes + ")");
    }
  };
  const auto& [models, optimizers, schedulers, loaders, objects] = prepared;
  for (size_t i = 0; i < models.size(); ++i) {
    const std::string f = numbered("model", i, ".safetensors");
    std::optional<NamedTensors> whole;
    naming_meshes(true, [&] { whole = load_model_slices(i, dir); });
    naming_meshes(false, [&] {
      const std::string source = whole ? dir : where(f);
      NamedTensors tensors = whole ? *whole : load_safetensors(where(f));
      if (models[i]->pipeline) tensors = pipeline_checkpoint::stage_model(*models[i], tensors, source);
      load_checkpointed_state(*models[i], tensors, source);
    });
  }
  for (size_t i = 0; i < optimizers.size(); ++i) {
    const std::string t = numbered("optimizer", i, ".safetensors"), j = numbered("optimizer", i, ".json");
    std::optional<Optimizer::State> slices;
    if (optimizers[i]->model) naming_meshes(true, [&] { slices = load_optimizer_slices(*optimizers[i], i, dir); });
    Optimizer::State st = slices ? *slices : Optimizer::State{load_safetensors(where(t)), read_json_file(root / j)};
    naming_meshes(false, [&] {
      if (const auto& m = optimizers[i]->model; m && m->pipeline)
        st = pipeline_checkpoint::stage_optimizer(*optimizers[i], st, where(j));
      if (const auto& m = optimizers[i]->model; m && m->strategy)
        m->strategy->optimizer_state_from_full(optimizers[i]->opt->whole_groups(), st.tensors, st.json, where(j));
      optimizers[i]->opt->load_state(st, where(j));
    });
  }
}

// The schedulers, the scaler and the registered objects.
void load_job_state(Accelerator& acc, const Accelerator::Prepared& prepared, const std::string& dir) {
  const fs::path root(dir);
  const auto where = [&](const std::string& file) { return (root / file).string(); };
  for (size_t i = 0; i < prepared.schedulers.size(); ++i) {
    const std::string f = numbered("scheduler", i, ".json");
    const json::Document s = json::Document::object(read_json_file(root / f), where(f));
    PreparedScheduler& sched = *prepared.schedulers[i];
    if (sched.user) {
      SchedulerCount::of(*sched.user) = static_cast<unsigned>(s.root().get_int("step_count"));
    } else {
      sched.steps = s.root().get_int("steps");
      sched.apply();
    }
  }
  if (GradScaler* scaler = acc.scaler()) {
    if (!fs::exists(root / "scaler.json"))
      throw std::invalid_argument("load_state: '" + dir + "' has no scaler.json; this run uses fp16 loss scaling");
    const json::Document s = json::Document::object(read_json_file(root / "scaler.json"), where("scaler.json"));
    scaler->load(s.root().get_double("scale"), s.root().get_int("growth_tracker"));
  }
  for (size_t i = 0; i < prepared.objects.size(); ++i)
    prepared.objects[i].load(config::read_file((root / ("custom_checkpoint_" + std::to_string(i) + ".bin")).string()));
}

// Per-process state. Under the same mesh each process continues exactly where it was. Under another one, as
// Accelerate: the random states by process index where the number of processes is the same (they are per process;
// with another number there is no process to take them from, and they are not restored). A data loader's position is
// the whole job's (the shuffling generator is rank 0's on every process) and counts steps; where a step takes another
// number of samples than when it was saved (another data-parallel size or batch size) it continues at the same sample
// of its pass when this run's steps divide the samples taken, and otherwise starts its pass again. Returns those.
std::vector<std::string> load_process_state(const Accelerator& acc, const Accelerator::Prepared& prepared,
                                            const std::string& dir, const Layout& layout) {
  const fs::path root(dir);
  const auto where = [&](const std::string& file) { return (root / file).string(); };
  const std::string rng_file =
      "random_states_" + std::to_string(layout.same_world ? acc.state().rank : 0) + ".safetensors";
  NamedTensors rng = load_safetensors(where(rng_file));
  std::map<std::string, at::Tensor> by_name(rng.begin(), rng.end());
  if (!by_name.count("torch.cpu")) throw std::invalid_argument(where(rng_file) + ": no 'torch.cpu' state");
  std::vector<std::string> not_continued;
  for (size_t i = 0; i < prepared.loaders.size(); ++i) {
    DataLoader& loader = *prepared.loaders[i];
    const std::string f = numbered("dataloader", i, ".json");
    const json::Document s = json::Document::object(read_json_file(root / f), where(f));
    LoaderPosition p;
    p.epoch = s.root().get_int("epoch");
    p.batches = s.root().get_int("batches");
    // A checkpoint of libacc before 1.3 has no samples_per_step: its position holds under the same mesh.
    const int64_t was = s.root().get_int_or("samples_per_step", 0), now = loader.samples_per_step();
    if (p.batches > 0 && (was != now || (was <= 0 && !layout.same_layout))) {
      if (was <= 0 || now <= 0 || p.batches * was % now != 0) {
        not_continued.push_back(f + " (" + std::to_string(p.batches) + " steps of " + std::to_string(was) +
                                " samples; this run's steps take " + std::to_string(now) + ")");
        p.batches = 0;
      } else {
        p.batches = p.batches * was / now;
      }
    }
    auto g = by_name.find("dataloader." + std::to_string(i) + ".generator");
    if (g != by_name.end()) p.pass_generator = g->second.clone();  // not a view on the file
    loader.resume(p);
  }
  if (layout.same_world) {
    set_cpu_rng_state(by_name["torch.cpu"]);
    if (const std::string note = set_cuda_rng_states(by_name); !note.empty())
      std::cerr << "load_state: " << where(rng_file) << ": " << note << "\n";
  }
  return not_continued;
}

// What was restored how, where the mesh changed or a loader starts its pass again.
std::string layout_note(const std::string& dir, const Layout& layout, bool has_loaders,
                        const std::vector<std::string>& not_continued) {
  std::string note = "load_state: '" + dir + "': " + layout.meshes + ": models, optimizers, schedulers, the scaler " +
                     "and registered objects are restored";
  note += layout.same_world ? "; random states by process index" : "; random states (per process) are not";
  if (!has_loaders) return note;
  if (not_continued.empty()) return note + "; data loaders continue at the same sample";
  std::string l;
  for (const auto& n : not_continued) l += (l.empty() ? "" : ", ") + n;
  return note +
         "; these data loaders start their pass again, their position is not a whole number of this run's "
         "steps: " +
         l;
}

}  // namespace

std::string load_state(Accelerator& acc, const std::string& dir_or_newest) {
  const auto [dir, automatic_number] = checkpoint_to_load(acc, dir_or_newest);
  const fs::path root(dir);
  check_complete(dir);
  const json::Document acc_state = json::Document::object(read_json_file(root / "accelerator_state.json"),
                                                          (root / "accelerator_state.json").string());
  const json::Value saved = acc_state.root();
  const Accelerator::Prepared prepared = acc.live_objects();
  check_counts(saved, prepared, dir);
  const Layout layout = compare_layout(acc, saved);
  load_models_and_optimizers(prepared, dir, layout);
  load_job_state(acc, prepared, dir);
  acc.restore_step(saved.get_int("step"));
  const std::vector<std::string> not_continued = load_process_state(acc, prepared, dir, layout);
  if ((!layout.same_layout || !not_continued.empty()) && acc.state().rank == 0)
    std::cerr << layout_note(dir, layout, !prepared.loaders.empty(), not_continued) << "\n";
  // The automatic naming continues after the checkpoint loaded.
  if (automatic_number >= 0) acc.set_save_iteration(automatic_number + 1);
  return dir;
}

std::string resume_from_checkpoint(Accelerator& acc) {
  const auto& what = acc.settings().resume_from_checkpoint;
  if (!what) return "";
  if (*what != "latest") return load_state(acc, *what);
  // Every process looks at the same directory; the main process's answer decides, so that all of them load
  // or none does.
  at::Tensor found = at::zeros({1}, at::kFloat);
  if (acc.state().rank == 0) found.fill_(list_automatic(checkpoints_root(acc.settings())).empty() ? 0.0 : 1.0);
  if (acc.distributed()) found = acc.broadcast(found, 0);
  return found.item<double>() > 0 ? load_state(acc, "") : "";
}

}  // namespace acc::core
