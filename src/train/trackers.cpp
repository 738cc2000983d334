// The Accelerator's trackers: init_trackers, log, end_training (Accelerate's, main process only).
#include <cctype>
#include <ios>

#include "train/accelerator.hpp"
#include "util/errors.hpp"

namespace acc::core {

void Accelerator::init_trackers(const std::string& project_name, std::string_view config_json,
                                std::string_view init_kwargs_json) {
  // Arguments are checked on every process, so a bad call fails alike everywhere.
  tracking::check_project_name(project_name);  // each tracker's run folder: one plain name
  tracking::Values hparams = tracking::parse_hparams(config_json);
  std::string_view trimmed = config_json;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.front()))) trimmed.remove_prefix(1);
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back()))) trimmed.remove_suffix(1);
  const bool has_config = !trimmed.empty() && trimmed != "null";  // Accelerate: `if config is not None`
  if (state_.rank != 0) return;  // @on_main_process
  if (trackers_ && !trackers_->finished())
    throw StateError("init_trackers: the trackers of this accelerator are running; call end_training first");
  const std::string logging_dir = settings_.project_config.logging_dir.value_or("");
  auto set = std::make_unique<tracking::TrackerSet>(log_with_, project_name, logging_dir, init_kwargs_json,
                                                    config::current_environment());
  if (has_config) set->store_init_configuration(hparams, config_json);
  trackers_ = std::move(set);
}

void Accelerator::log(const tracking::Values& values, std::optional<int64_t> step) {
  if (state_.rank != 0 || log_with_.empty()) return;
  if (!trackers_) throw StateError("log: no trackers are running; call init_trackers first");
  if (trackers_->finished()) throw StateError("log: the trackers were finished by end_training");
  trackers_->log(values, step);
}

void Accelerator::end_training() {
  if (trackers_) trackers_->finish();
}

}  // namespace acc::core
