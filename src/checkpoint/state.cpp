// Accelerator::save_state / load_state: Accelerate's checkpoint of everything prepared, without pickles
// (tensors in safetensors, the rest in JSON). docs/checkpoints.md describes every file.
//
// Saving is staged: every process writes its files into "<dir>.tmp" (each file fsynced), the main
// process adds manifest.json last and renames the directory into place. A directory without its
// manifest is never loaded. The processes agree on success after each phase, so one that fails makes
// all of them fail, none waits forever.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "acc/files.hpp"
#include "checkpoint/agree.hpp"
#include "checkpoint/safetensors.hpp"
#include "runtime/cuda.hpp"
#include "train/accelerator.hpp"
#include "checkpoint/sharded_state.hpp"
#include "util/errors.hpp"
#include "util/json.hpp"

namespace acc::core {
namespace {

namespace fs = std::filesystem;

constexpr const char* kManifest = "manifest.json";
constexpr const char* kFormat = "libacc-checkpoint";
constexpr int64_t kFormatVersion = 1;

// Accelerate's naming: the first object of a kind has the plain name, the next ones _1, _2, ...
std::string numbered(const std::string& stem, size_t i, const std::string& ext) {
  return stem + (i == 0 ? "" : "_" + std::to_string(i)) + ext;
}

std::string read_file(const fs::path& path) { return config::read_file(path.string()); }

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
  return "the checkpoint holds the random states of " + std::to_string(in_file) + " CUDA devices and this process has " +
         std::to_string(gens.size()) + ": those of the first " + std::to_string(std::min(in_file, gens.size())) +
         " are restored";
}

template <class T>
std::vector<std::shared_ptr<T>> alive(const std::vector<std::weak_ptr<T>>& list) {
  std::vector<std::shared_ptr<T>> v;
  for (const auto& w : list)
    if (auto p = w.lock()) v.push_back(std::move(p));
  return v;
}

// {project_dir}/checkpoints, where the automatic names live.
fs::path checkpoints_root(const config::Config& c) {
  if (!c.is_set("project_config.project_dir"))
    throw std::invalid_argument("save_state / load_state without a directory need project_config.project_dir (or "
                                "project_dir): the checkpoints are {project_dir}/checkpoints/checkpoint_{i}");
  return fs::path(c.get_string("project_config.project_dir")) / "checkpoints";
}

// The automatically named checkpoints under `root` by number: complete ones (with a manifest), and the
// rest (interrupted saves: no manifest, or a staging "checkpoint_{i}.tmp").
struct Automatic {
  std::vector<std::pair<int64_t, fs::path>> complete, partial;
};

Automatic list_automatic(const fs::path& root) {
  Automatic a;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return a;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    int64_t n = -1;
    char tail[8] = "";
    if (!e.is_directory() || std::sscanf(name.c_str(), "checkpoint_%" SCNd64 "%7s", &n, tail) < 1 || n < 0) continue;
    const bool done = tail[0] == '\0' && fs::exists(e.path() / kManifest);
    (done ? a.complete : a.partial).emplace_back(n, e.path());
  }
  std::sort(a.complete.begin(), a.complete.end());
  return a;
}

}  // namespace

Accelerator::Prepared Accelerator::live_objects() {
  std::lock_guard<std::mutex> lock(mu_);
  return {alive(models_), alive(optimizers_), alive(schedulers_), alive(loaders_), checkpointables_};
}

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

std::string Accelerator::save_state(const std::string& dir) {
  const bool automatic = dir.empty();
  if (automatic && !config_.get_bool("project_config.automatic_checkpoint_naming"))
    throw std::invalid_argument("save_state needs a directory, or project_config.automatic_checkpoint_naming "
                                "with a project_dir");
  const fs::path target =
      automatic ? checkpoints_root(config_) / ("checkpoint_" + std::to_string(save_iteration_)) : fs::path(dir).lexically_normal();
  if (automatic) {
    // As Accelerate: a checkpoint of this number must not exist already (set project_config.iteration).
    std::error_code ec;
    if (fs::exists(target / kManifest, ec))
      throw std::invalid_argument("save_state: checkpoint directory '" + target.string() + "' (" +
                                  std::to_string(save_iteration_) + ") already exists; set project_config.iteration "
                                  "to the number to continue from");
  }
  const fs::path staged = target.string() + ".tmp";
  const bool main = state_.rank == 0;
  const Prepared prepared = live_objects();
  const auto& [models, optimizers, schedulers, loaders, objects] = prepared;
  // Phase 1: the main process makes a fresh staging directory (and, with automatic naming and total_limit,
  // removes the oldest checkpoints so that, with this one, total_limit remain; and interrupted saves).
  agreed(this, "save_state", [&] {
    if (!main) return;
    std::error_code ec;
    if (automatic) {
      Automatic existing = list_automatic(target.parent_path());
      for (const auto& [n, path] : existing.partial)
        if (path != staged) fs::remove_all(path, ec);
      if (config_.is_set("project_config.total_limit")) {
        const size_t limit = static_cast<size_t>(config_.get_int("project_config.total_limit"));
        const size_t keep = limit > 0 ? limit - 1 : 0;
        for (size_t i = 0; i + keep < existing.complete.size(); ++i) fs::remove_all(existing.complete[i].second, ec);
      }
    }
    fs::remove_all(staged, ec);  // a crashed save's leftovers
    if (ec) throw std::ios_base::failure("save_state: cannot remove the stale '" + staged.string() + "'", ec);
    config::make_directories(staged.string());
  });
  // The models' and optimizers' whole state: a sharded strategy gathers it (a collective, so on every process).
  std::vector<NamedTensors> model_states;
  std::vector<Optimizer::State> optimizer_states;
  // Under SHARDED_STATE_DICT each process writes its slices instead (below), and nothing is gathered.
  const auto sliced = [&](const std::shared_ptr<ModelSlot>& m) { return m && sharded_checkpoint(*this, *m); };
  agreed(this, "save_state", [&] {
    for (const auto& m : models) model_states.push_back(sliced(m) ? NamedTensors() : m->strategy->full_state_dict());
    for (const auto& o : optimizers) {
      Optimizer::State st;
      if (!sliced(o->model)) {
        st = o->opt->save_state();
        if (o->model && o->model->strategy) o->model->strategy->optimizer_state_to_full(st.tensors, st.json);
      }
      optimizer_states.push_back(std::move(st));
    }
  });
  // Phase 2: every process writes its random states; the main process everything else.
  agreed(this, "save_state", [&] {
    const std::string d = staged.string() + "/";
    NamedTensors rng{{"torch.cpu", cpu_rng_state()}};
    add_cuda_rng_states(rng);
    for (size_t i = 0; i < loaders.size(); ++i) {
      at::Tensor g = loaders[i]->position().pass_generator;
      if (g.defined()) rng.emplace_back("dataloader." + std::to_string(i) + ".generator", g);
    }
    save_safetensors(rng, d + "random_states_" + std::to_string(state_.rank) + ".safetensors");
    for (size_t i = 0; i < models.size(); ++i)
      if (sliced(models[i])) save_model_slices(*models[i], i, state_.rank, d);
    for (size_t i = 0; i < optimizers.size(); ++i)
      if (sliced(optimizers[i]->model)) save_optimizer_slices(*optimizers[i], i, state_.rank, d);
    if (!main) return;
    for (size_t i = 0; i < models.size(); ++i)
      if (!sliced(models[i]))
        save_safetensors(model_states[i], d + numbered("model", i, ".safetensors"), {{"format", "pt"}});
    for (size_t i = 0; i < optimizers.size(); ++i) {
      if (sliced(optimizers[i]->model)) continue;
      const Optimizer::State& st = optimizer_states[i];
      save_safetensors(st.tensors, d + numbered("optimizer", i, ".safetensors"));
      config::write_file_atomic(d + numbered("optimizer", i, ".json"), st.json);
    }
    for (size_t i = 0; i < schedulers.size(); ++i) {
      JsonWriter j;
      j.begin_object();
      if (schedulers[i]->user)
        j.key("step_count").value(static_cast<int64_t>(SchedulerCount::of(*schedulers[i]->user)));
      else
        j.key("steps").value(schedulers[i]->steps);
      config::write_file_atomic(d + numbered("scheduler", i, ".json"), j.end_object().str());
    }
    for (size_t i = 0; i < loaders.size(); ++i) {
      const LoaderPosition p = loaders[i]->position();
      JsonWriter j;
      j.begin_object().key("epoch").value(p.epoch).key("batches").value(p.batches).end_object();
      config::write_file_atomic(d + numbered("dataloader", i, ".json"), j.str());
    }
    if (scaler_) {
      JsonWriter j;
      j.begin_object().key("scale").value(scaler_->scale()).key("growth_tracker").value(scaler_->growth_tracker());
      config::write_file_atomic(d + "scaler.json", j.end_object().str());
    }
    for (size_t i = 0; i < objects.size(); ++i)
      config::write_file_atomic(d + "custom_checkpoint_" + std::to_string(i) + ".bin", objects[i].save());
    JsonWriter j;
    j.begin_object()
        .key("step").value(grad_.step)
        .key("num_processes").value(static_cast<int64_t>(state_.world_size))
        .key("mixed_precision").value(mixed_precision_)
        .key("models").value(static_cast<int64_t>(models.size()))
        .key("optimizers").value(static_cast<int64_t>(optimizers.size()))
        .key("schedulers").value(static_cast<int64_t>(schedulers.size()))
        .key("dataloaders").value(static_cast<int64_t>(loaders.size()))
        .key("custom_objects").value(static_cast<int64_t>(objects.size()))
        .end_object();
    config::write_file_atomic(d + "accelerator_state.json", j.str());
  });
  // Phase 3: the manifest (every file and its size) makes the checkpoint complete; then it takes its place.
  agreed(this, "save_state", [&] {
    if (!main) return;
    JsonWriter j;
    j.begin_object().key("format").value(kFormat).key("version").value(kFormatVersion);
    j.key("num_processes").value(static_cast<int64_t>(state_.world_size)).key("files").begin_object();
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(staged))
      if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) j.key(f.filename().string()).value(static_cast<int64_t>(fs::file_size(f)));
    config::write_file_atomic(staged.string() + "/" + kManifest, j.end_object().end_object().str());
    config::replace_directory(staged.string(), target.string());
  });
  if (automatic) ++save_iteration_;
  return target.string();
}

std::string Accelerator::load_state(const std::string& dir_or_newest) {
  std::string dir = dir_or_newest;
  int64_t automatic_number = -1;
  if (dir.empty()) {
    const fs::path root = checkpoints_root(config_);
    Automatic found = list_automatic(root);
    if (found.complete.empty())
      throw std::ios_base::failure("load_state: no complete checkpoint under '" + root.string() + "'");
    dir = found.complete.back().second.string();
    automatic_number = found.complete.back().first;
  }
  const fs::path root(dir);
  const auto where = [&](const std::string& file) { return (root / file).string(); };
  // Complete: the manifest is there and every file it lists has its size (a truncated file is caught).
  if (!fs::is_directory(root)) throw std::ios_base::failure("load_state: '" + dir + "' is not a directory");
  if (!fs::exists(root / kManifest))
    throw std::ios_base::failure("load_state: '" + dir + "' is not a complete checkpoint: it has no " + kManifest +
                                 " (an interrupted save, or not a libacc checkpoint)");
  Json manifest(read_file(root / kManifest), where(kManifest));
  if (manifest.root().get_string("format") != kFormat || manifest.root().get_int("version") != kFormatVersion)
    throw std::invalid_argument(where(kManifest) + ": not a libacc checkpoint of format version " +
                                std::to_string(kFormatVersion));
  JsonValue files = manifest.root().get("files");
  for (const std::string& name : files.keys()) {
    std::error_code ec;
    const auto size = fs::file_size(root / name, ec);
    if (ec) throw std::ios_base::failure("load_state: '" + where(name) + "' is missing");
    if (static_cast<int64_t>(size) != files.get_int(name))
      throw std::ios_base::failure("load_state: '" + where(name) + "' has " + std::to_string(size) +
                                   " bytes; the manifest says " + std::to_string(files.get_int(name)) + " (truncated?)");
  }
  Json acc_state(read_file(root / "accelerator_state.json"), where("accelerator_state.json"));
  const JsonValue saved = acc_state.root();

  const Prepared prepared = live_objects();
  const auto& [models, optimizers, schedulers, loaders, objects] = prepared;
  // The same objects must be prepared (and registered) as when the checkpoint was saved.
  const auto check_count = [&](const char* key, size_t have, const char* what) {
    const int64_t n = saved.get_int(key);
    if (n != static_cast<int64_t>(have))
      throw std::invalid_argument("load_state: '" + dir + "' holds " + std::to_string(n) + " " + what + "; " +
                                  std::to_string(have) + " are prepared (or registered) now");
  };
  check_count("models", models.size(), "models");
  check_count("optimizers", optimizers.size(), "optimizers");
  check_count("schedulers", schedulers.size(), "schedulers");
  check_count("dataloaders", loaders.size(), "data loaders");
  check_count("custom_objects", objects.size(), "registered objects");
  const int64_t saved_world = saved.get_int("num_processes");
  const bool same_world = saved_world == state_.world_size;

  // A checkpoint holds whole tensors or every process's slices (SHARDED_STATE_DICT): either loads under any strategy.
  for (size_t i = 0; i < models.size(); ++i) {
    const std::string f = numbered("model", i, ".safetensors");
    if (auto whole = load_model_slices(i, dir))
      models[i]->strategy->load_full_state_dict(*whole, dir);
    else
      models[i]->strategy->load_full_state_dict(load_safetensors(where(f)), where(f));
  }
  for (size_t i = 0; i < optimizers.size(); ++i) {
    const std::string t = numbered("optimizer", i, ".safetensors"), j = numbered("optimizer", i, ".json");
    std::optional<Optimizer::State> slices;
    if (optimizers[i]->model) slices = load_optimizer_slices(*optimizers[i]->model, i, dir);
    Optimizer::State st = slices ? *slices : Optimizer::State{load_safetensors(where(t)), read_file(root / j)};
    if (const auto& m = optimizers[i]->model; m && m->strategy)
      m->strategy->optimizer_state_from_full(st.tensors, st.json, where(j));
    optimizers[i]->opt->load_state(st, where(j));
  }
  for (size_t i = 0; i < schedulers.size(); ++i) {
    const std::string f = numbered("scheduler", i, ".json");
    Json s(read_file(root / f), where(f));
    if (schedulers[i]->user) {
      SchedulerCount::of(*schedulers[i]->user) = static_cast<unsigned>(s.root().get_int("step_count"));
    } else {
      schedulers[i]->steps = s.root().get_int("steps");
      schedulers[i]->apply();
    }
  }
  if (scaler_) {
    if (!fs::exists(root / "scaler.json"))
      throw std::invalid_argument("load_state: '" + dir + "' has no scaler.json; this run uses fp16 loss scaling");
    Json s(read_file(root / "scaler.json"), where("scaler.json"));
    scaler_->load(s.root().get_double("scale"), s.root().get_int("growth_tracker"));
  }
  for (size_t i = 0; i < objects.size(); ++i)
    objects[i].load(read_file(root / ("custom_checkpoint_" + std::to_string(i) + ".bin")));
  grad_.step = saved.get_int("step");

  // Per-process state: only for the same number of processes.
  if (!same_world) {
    if (state_.rank == 0)
      std::cerr << "load_state: '" << dir << "' was saved by " << saved_world << " processes and this run has "
                << state_.world_size << ": models, optimizers, schedulers, the scaler and registered objects are "
                << "restored; random states and data loader positions (per process) are not\n";
  } else {
    const std::string rng_file = "random_states_" + std::to_string(state_.rank) + ".safetensors";
    NamedTensors rng = load_safetensors(where(rng_file));
    std::map<std::string, at::Tensor> by_name(rng.begin(), rng.end());
    if (!by_name.count("torch.cpu")) throw std::invalid_argument(where(rng_file) + ": no 'torch.cpu' state");
    for (size_t i = 0; i < loaders.size(); ++i) {
      const std::string f = numbered("dataloader", i, ".json");
      Json s(read_file(root / f), where(f));
      LoaderPosition p;
      p.epoch = s.root().get_int("epoch");
      p.batches = s.root().get_int("batches");
      auto g = by_name.find("dataloader." + std::to_string(i) + ".generator");
      if (g != by_name.end()) p.pass_generator = g->second.clone();  // not a view on the file
      loaders[i]->resume(p);
    }
    set_cpu_rng_state(by_name["torch.cpu"]);
    if (const std::string note = set_cuda_rng_states(by_name); !note.empty())
      std::cerr << "load_state: " << where(rng_file) << ": " << note << "\n";
  }
  // The automatic naming continues after the checkpoint loaded.
  if (automatic_number >= 0) save_iteration_ = automatic_number + 1;
  return dir;
}

std::string Accelerator::resume_from_checkpoint() {
  if (!config_.is_set("resume_from_checkpoint")) return "";
  const std::string what = config_.get_string("resume_from_checkpoint");
  if (what != "latest") return load_state(what);
  // Every process looks at the same directory; the main process's answer decides, so that all of them load
  // or none does.
  at::Tensor found = at::zeros({1}, at::kFloat);
  if (state_.rank == 0) found.fill_(list_automatic(checkpoints_root(config_)).complete.empty() ? 0.0 : 1.0);
  if (distributed()) found = broadcast(found, 0);
  return found.item<double>() > 0 ? load_state("") : "";
}

}  // namespace acc::core
