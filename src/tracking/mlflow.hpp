// What MLflow's two trackers share: the file store (mlflow.cpp) and the REST client of a tracking server
// (mlflow_server.cpp). make_mlflow picks one by the tracking URI.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tracking/tracking.hpp"

namespace acc::tracking::mlflow {

constexpr size_t kMaxParamValue = 6000;     // mlflow.utils.validation.MAX_PARAM_VAL_LENGTH
constexpr size_t kMaxKey = 250;             // MAX_ENTITY_KEY_LENGTH
constexpr size_t kMaxExperimentName = 500;  // MAX_EXPERIMENT_NAME_LENGTH

// The hyperparameters as MLflow logs them: (name, Python's str of the value); a value longer than kMaxParamValue is
// left out with a warning on stderr, as MLflow refuses it.
std::vector<std::pair<std::string, std::string>> loggable_params(const Values& hparams);

std::string env_or(const std::map<std::string, std::string>& env, const char* key, const std::string& dflt = "");
// A metric, parameter or tag name as MLflow's client validates it (mlflow.utils.validation); std::invalid_argument
// naming `what` and the name otherwise.
void check_name(const std::string& name, const char* what);
std::string user_name(const std::map<std::string, std::string>& env);
std::string program_path();
// "<project>-YYYYmmdd-HHMMSS" (UTC) when init_kwargs.mlflow.run_name is not given.
std::string default_run_name(const std::string& project_name, int64_t now_ms);
// MLFLOW_EXPERIMENT_NAME or the project name, at most 500 characters.
std::string experiment_name(const RunOptions& o);
// MLFLOW_TAGS (a JSON object) or init_kwargs.mlflow.tags, names checked.
std::vector<std::pair<std::string, std::string>> run_tags(const RunOptions& o);
// MLFLOW_RUN_ID or init_kwargs.mlflow.run_id ("" for a new run).
std::string run_id(const RunOptions& o);

std::unique_ptr<Tracker> make_server(const RunOptions& o, const std::string& uri);

}  // namespace acc::tracking::mlflow
