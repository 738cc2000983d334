#include "checkpoint/adapter.hpp"

#include <c10/core/GradMode.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "acc/files.hpp"
#include "acc/limits.hpp"
#include "checkpoint/agree.hpp"
#include "formats/safetensors.hpp"
#include "models/deferred.hpp"
#include "models/hf/families.hpp"
#include "train/accelerator.hpp"
#include "util/errors.hpp"
#include <acc/json.hpp>

namespace fs = std::filesystem;

namespace acc::core {

namespace {

constexpr const char* kConfigName = "adapter_config.json";
constexpr const char* kWeightsName = "adapter_model.safetensors";
// Where save_adapter stages the two files (libacc's own name, inside the adapter's folder).
constexpr const char* kStagingName = ".adapter.acc-staging";

void refuse_prepared(const PreparedModel& slot, const char* what) {
  if (slot.owner)
    throw StateError(std::string(what) + ": the model is prepared; adapters are added, loaded and merged before "
                                         "acc_prepare (the strategy holds the parameters it was given)");
}

// zero3_init_flag: the base weights are made at prepare (models/deferred.hpp); the adapter's are made now.
bool made_at_prepare(const Model& model) { return model.deferred() && model.deferred()->pending(); }

}  // namespace

torch::nn::Module& lora_root(Model& model) {
  auto* nn = dynamic_cast<NnModel*>(&model);
  if (!nn) throw UnsupportedError("LoRA needs a module tree (a TorchScript model has none libacc can extend)");
  return *nn->module();
}

lora::ModelInfo lora_model_info(const Model& model) {
  lora::ModelInfo info;
  auto* nn = dynamic_cast<const NnModel*>(&model);
  info.base_model_class = nn ? nn->module()->name() : "";
  info.parent_library = "libacc";
  const auto* p = dynamic_cast<const hf::Pretrained*>(&model);
  if (!p || p->config_json.empty()) return info;
  info.transformers = true;
  info.tied_lm_head = !model.tied_lm_head().empty();
  const json::Document doc = json::Document::object(p->config_json, "config.json");
  const json::Value c = doc.root();
  info.model_type = c.get_string_or("model_type", "");
  if (c.has_value("architectures") && c.get("architectures").size() > 0)
    info.base_model_class = c.get("architectures").at(0).as_string();
  info.parent_library = "transformers.models." + info.model_type + ".modeling_" + info.model_type;
  if (c.has_value("_name_or_path") && !c.get_string("_name_or_path").empty())
    info.name_or_path = c.get_string("_name_or_path");
  return info;
}

void add_lora(PreparedModel& slot, const char* config_json, const lora::HostOf& host_of) {
  refuse_prepared(slot, "add_lora");
  if (!config_json) throw std::invalid_argument("the LoRA config is null");
  torch::nn::Module& root = lora_root(*slot.model);
  const lora::Config config = lora::parse_config(config_json, "LoRA config");
  auto adapter = lora::plan(root, config, lora_model_info(*slot.model), host_of);
  lora::apply(root, adapter, /*init=*/true, /*trainable=*/true, host_of, made_at_prepare(*slot.model));
}

void load_adapter(PreparedModel& slot, const std::string& dir, const char* options_json, const lora::HostOf& host_of) {
  refuse_prepared(slot, "load_adapter");
  bool trainable = false;
  if (options_json && *options_json) {
    const json::Document doc = json::Document::object(options_json, "load_adapter options");
    for (const auto& [key, v] : doc.root().items()) {
      if (key != "is_trainable") v.fail("unknown option '" + key + "' (load_adapter takes is_trainable)");
      trainable = v.as_bool();
    }
  }
  torch::nn::Module& root = lora_root(*slot.model);
  const std::string config_path = (fs::path(dir) / kConfigName).string();
  const std::string weights_path = (fs::path(dir) / kWeightsName).string();
  const lora::Config config =
      lora::parse_config(config::read_file(config_path, limits::kAdapterConfigBytes), config_path);
  auto adapter = lora::plan(root, config, lora_model_info(*slot.model), host_of);
  // Everything is checked before the model changes.
  const NamedTensors file = load_safetensors(weights_path);
  lora::match_fused_keys(*adapter, file);
  const NamedTensors values = lora::check_file_tensors(*adapter, file, weights_path);
  if (made_at_prepare(*slot.model)) {
    // The base's own tensors in the file (modules_to_save, biases) would land in weights that prepare makes afresh.
    std::map<std::string, at::Tensor> base;
    for (const auto& item : root.named_parameters(true)) base[item.key()] = item.value();
    for (const auto& [name, t] : values)
      if (auto b = base.find(name); b != base.end() && b->second.is_meta())
        throw UnsupportedError("load_adapter: " + weights_path + " holds the base model's '" + name +
                               "', and this "
                               "model's base weights are made at prepare (zero3_init_flag); set zero3_init_flag to "
                               "false to load it");
  }
  lora::apply(root, adapter, /*init=*/false, trainable, host_of, made_at_prepare(*slot.model));
  std::map<std::string, at::Tensor> params;
  for (const auto& item : root.named_parameters(true)) params[item.key()] = item.value();
  c10::NoGradGuard no_grad;
  for (const auto& [name, t] : values) params.at(name).copy_(t);
  if (!trainable) slot.model->train(false);  // peft: an adapter loaded for inference puts the model in eval mode
}

void save_adapter(PreparedModel& slot, const std::string& dir, const lora::HostOf& host_of) {
  auto adapter = lora::find(lora_root(*slot.model), host_of);
  if (!adapter) throw StateError("save_adapter: the model has no adapter (add_lora or load_adapter first)");
  Accelerator* acc = slot.owner.get();
  // The adapter's whole tensors on every process (a sharding strategy gathers only the groups holding them:
  // collective), the main process writes.
  std::set<std::string> names;
  for (const lora::Entry& e : adapter->entries) names.insert(e.name);
  const NamedTensors state = slot.strategy ? slot.strategy->full_state_dict(&names) : slot.model->state();
  const bool main = !acc || acc->state().rank == 0;
  agreed(acc, "save_adapter", [&] {
    if (!main) return;
    const NamedTensors tensors = lora::file_tensors(*adapter, state);
    const std::string text = lora::config_file_text(*adapter);
    config::make_directories(dir);
    const std::string weights = config::child_path(dir, kWeightsName, "save_adapter");
    const std::string cfg = config::child_path(dir, kConfigName, "save_adapter");
    // A folder of the user's under either name is refused before anything is written (a rename cannot replace
    // it, and the old config would be gone by then). A link under the name is replaced itself, never followed.
    for (const std::string& path : {weights, cfg}) {
      struct stat st{};
      if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        throw config::FileError("refusing to replace", path, "it is a folder, not a file of an adapter", EISDIR);
    }
    // Both files or neither (issue 36: a config that failed to write left new weights beside the old config).
    // They are written into one staging folder, then moved into place; the staging folder is inside `dir`, so
    // nothing is written outside the folder given, and the renames stay on its filesystem (a folder that is a
    // mount point, or whose parent is read-only, saves as before). A second save into `dir` at the same time is
    // refused by the staging folder's lock; one that died left a folder the next save empties and reuses.
    config::StagingFolder staged(config::child_path(dir, kStagingName, "save_adapter"));
    save_safetensors(tensors, staged.path() + "/" + kWeightsName, {{"format", "pt"}});
    config::write_file_atomic(staged.path() + "/" + kConfigName, text);
    // As a checkpoint's manifest: the old config goes first and the new one comes last, so a crash between the
    // renames leaves a folder load_adapter refuses (no config), never new weights read with an old config.
    if (::unlink(cfg.c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      throw config::FileError("cannot remove", cfg, std::strerror(err), err);
    }
    auto move_in = [&](const char* name, const std::string& to) {
      if (::rename((staged.path() + "/" + name).c_str(), to.c_str()) != 0) {
        const int err = errno;
        throw config::FileError("cannot move into place", to, std::strerror(err), err);
      }
    };
    move_in(kWeightsName, weights);
    move_in(kConfigName, cfg);
    config::sync_directory(dir);
    // The staging folder, now holding only its lock file, goes with `staged`.
  });
}

void merge_adapter(PreparedModel& slot, const lora::HostOf& host_of) {
  refuse_prepared(slot, "merge_adapter");
  slot.model->check_made("merge_adapter");
  lora::merge(lora_root(*slot.model), host_of);
}

}  // namespace acc::core
