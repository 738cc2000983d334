// The mlflow tracker: MLflow's file store (the `mlruns/` layout of mlflow.store.tracking.file_store), so that
// the MLflow client and UI read the run (MLflow >= 3 reads a file store with MLFLOW_ALLOW_FILE_STORE=true):
//
//   <root>/0/meta.yaml                         the Default experiment, made with a new root (as FileStore does)
//   <root>/.trash/
//   <root>/<experiment_id>/meta.yaml           name, experiment_id, artifact_location, lifecycle_stage, times
//   <root>/<experiment_id>/tags/<name>         experiment tags
//   <root>/<experiment_id>/<run_id>/meta.yaml  run_id, run_name, status (1 running, 3 finished), times, user
//   <root>/<experiment_id>/<run_id>/params/<name>    str(value)
//   <root>/<experiment_id>/<run_id>/metrics/<name>   one line per value: "<timestamp ms> <value> <step>"
//   <root>/<experiment_id>/<run_id>/tags/<name>      mlflow.runName, mlflow.user, mlflow.source.*, user tags
//   <root>/<experiment_id>/<run_id>/artifacts/       (empty; the client requires it)
//
// <root>: the tracking URI (init_kwargs.mlflow.tracking_uri, else MLFLOW_TRACKING_URI) when it is a path or a file:
// URI, else <logging_dir>/mlruns, else ./mlruns; an http(s):// URI is a tracking server (mlflow_server.cpp).
// The experiment is MLFLOW_EXPERIMENT_NAME or the project name, reused when one of that name exists (as
// Accelerate's MLflowTracker does); MLFLOW_RUN_ID continues an existing run; MLFLOW_TAGS (a JSON object)
// tags the run and a new experiment.
#include <pwd.h>
#include <unistd.h>

#include <acc/files.hpp>
#include <acc/limits.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <dirent.h>
#include <ios>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <stdexcept>

#include "tracking/mlflow.hpp"
#include "tracking/tracking.hpp"

namespace acc::tracking {

namespace mlflow {

std::vector<std::pair<std::string, std::string>> loggable_params(const Values& hparams) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [k, v] : hparams) {
    std::string text = python_str(v);
    if (text.size() > kMaxParamValue) {
      std::cerr << "acc: mlflow tracker: the value of parameter '" << k << "' is longer than " << kMaxParamValue
                << " characters (MLflow's limit), so it is not logged\n";
      continue;
    }
    out.emplace_back(k, std::move(text));
  }
  return out;
}

std::string env_or(const std::map<std::string, std::string>& env, const char* key, const std::string& dflt) {
  auto it = env.find(key);
  return it == env.end() || it->second.empty() ? dflt : it->second;
}

namespace {

// A character of Python's \w (str.isalnum() or '_') that MLflow's name pattern ^[/\w.\- :]*$ accepts: ASCII letters
// and digits, and the Latin letters U+00C0..U+024F but for U+00D7 and U+00F7 (x and / signs). Other non-ASCII
// characters are refused (a subset of what MLflow accepts, but never a name it refuses).
size_t word_char(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return std::isalnum(c) || c == '_' ? 1 : 0;
  if (c < 0xC3 || c > 0xC9 || i + 1 >= s.size()) return 0;
  const auto c2 = static_cast<unsigned char>(s[i + 1]);
  if ((c2 & 0xC0) != 0x80) return 0;
  const unsigned cp = ((c & 0x1Fu) << 6) | (c2 & 0x3Fu);
  return cp >= 0xC0 && cp <= 0x24F && cp != 0xD7 && cp != 0xF7 ? 2 : 0;
}

}  // namespace

// Names of params, metrics and tags as MLflow's client validates them (mlflow.utils.validation:
// _validate_metric_name, _validate_param_name, _validate_tag_name), which its file store does again for each name it
// reads: at most 250 characters of [/\w.\- :], and posixpath.normpath(name) must be the name itself, not "." and
// not start with ".." or "/" (so "..x", "./a", "a//b", "a/" are refused; "a/..x" is fine).
void check_name(const std::string& name, const char* what) {
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument("mlflow: " + std::string(what) + " name '" + name + "' is not valid in MLflow: " + why);
  };
  if (name.empty()) bad("it is empty");
  size_t chars = 0;
  for (size_t i = 0; i < name.size(); ++chars) {
    const char c = name[i];
    if (c == '/' || c == '.' || c == '-' || c == ' ' || c == ':') {
      ++i;
    } else if (const size_t n = word_char(name, i)) {
      i += n;
    } else {
      bad("names may only contain alphanumerics, underscores (_), dashes (-), periods (.), spaces ( ), colons (:) "
          "and slashes (/) (libacc takes ASCII and Latin letters)");
    }
  }
  if (chars > kMaxKey) bad("it is longer than 250 characters");
  if (name.front() == '/' || name.back() == '/' || name.rfind("..", 0) == 0) bad("it would name another file");
  for (size_t start = 0; start <= name.size();) {
    const size_t end = std::min(name.find('/', start), name.size());
    const std::string_view part(name.data() + start, end - start);
    if (part.empty() || part == "." || part == "..") bad("it would name another file");
    start = end + 1;
  }
}

std::string user_name(const std::map<std::string, std::string>& env) {
  std::string u = env_or(env, "USER", env_or(env, "LOGNAME"));
  if (!u.empty()) return u;
  if (const passwd* pw = ::getpwuid(::getuid())) return pw->pw_name;
  return "unknown";
}

std::string program_path() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string default_run_name(const std::string& project_name, int64_t now_ms) {
  char stamp[32];
  std::time_t t = static_cast<std::time_t>(now_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  return project_name + "-" + stamp;
}

std::string experiment_name(const RunOptions& o) {
  const std::string name = env_or(o.env, "MLFLOW_EXPERIMENT_NAME", o.project_name);
  if (name.size() > kMaxExperimentName)  // mlflow.utils.validation._validate_experiment_name
    throw std::invalid_argument("mlflow: the experiment name '" + name.substr(0, 100) + "...' is longer than " +
                                std::to_string(kMaxExperimentName) + " characters (MLflow's limit)");
  return name;
}

std::vector<std::pair<std::string, std::string>> run_tags(const RunOptions& o) {
  std::vector<std::pair<std::string, std::string>> tags;
  if (auto t = env_or(o.env, "MLFLOW_TAGS"); !t.empty()) tags = parse_string_map(t, "MLFLOW_TAGS");
  else tags = kwarg_string_map(o, "mlflow", "tags");
  for (const auto& [k, v] : tags) check_name(k, "tag");
  return tags;
}

std::string run_id(const RunOptions& o) {
  return env_or(o.env, "MLFLOW_RUN_ID", kwarg_string(o, "mlflow", "run_id").value_or(""));
}

}  // namespace mlflow

namespace {

using namespace mlflow;

// A name checked as MLflow's client checks it, then made a path under the run's folder through name_path, as every
// tracker's names are.
std::string validated_path(const std::string& dir, const std::string& name, const char* what) {
  check_name(name, what);
  return name_path(dir, name, std::string("mlflow ") + what + " '" + name + "'", /*nested=*/true);
}

std::string file_uri(const std::string& abs) { return "file://" + abs; }

std::string random_hex(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<uint64_t>(wall_time_ms())};
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += digits[rng() & 15];
  return s;
}

uint64_t random_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<uint64_t>(wall_time_ms() * 31)};
  return 100000000000000000ull + rng() % 900000000000000000ull;  // 18 digits, as MLflow's ids
}

std::vector<std::string> subdirectories(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == ".." || n == ".trash") continue;
    if (exists(dir + "/" + n + "/meta.yaml")) out.push_back(n);
  }
  ::closedir(d);
  return out;
}

// A metric file's first line, as MLflow's file store writes it: "<timestamp ms> <value> <step>".
bool metric_line(std::string_view line) {
  size_t i = line.rfind('-', 0) == 0 ? 1 : 0;
  const size_t digits = i;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
  return i > digits && i < line.size() && line[i] == ' ';
}

YAML::Node load_yaml(const std::string& path) {
  try {
    return YAML::Load(read_file(path, limits::kConfigBytes));
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument("mlflow: '" + path + "' is not YAML: " + e.what());
  }
}

void write_experiment_meta(const std::string& root, const std::string& id, const std::string& name, int64_t now,
                           const std::string& artifact_location = "") {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "artifact_location" << YAML::Value << YAML::DoubleQuoted
    << (artifact_location.empty() ? file_uri(root + "/" + id) : artifact_location);
  e << YAML::Key << "creation_time" << YAML::Value << now;
  e << YAML::Key << "experiment_id" << YAML::Value << YAML::SingleQuoted << id;
  e << YAML::Key << "last_update_time" << YAML::Value << now;
  e << YAML::Key << "lifecycle_stage" << YAML::Value << "active";
  e << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << name;
  e << YAML::EndMap;
  config::make_directories(root + "/" + id);
  config::write_file_atomic(root + "/" + id + "/meta.yaml", std::string(e.c_str()) + "\n");
}

// init_kwargs.mlflow.logging_dir (Accelerate's MLflowTracker passes it to create_experiment as artifact_location): a
// URI as it is, a path as its file:// URI; "" for the store's default.
std::string artifact_location(const RunOptions& o) {
  const std::string dir = kwarg_string(o, "mlflow", "logging_dir").value_or("");
  if (dir.empty() || dir.find("://") != std::string::npos) return dir;
  return file_uri(absolute_path(dir));
}

class MlflowTracker final : public Tracker {
 public:
  explicit MlflowTracker(const RunOptions& o) {
    // The store's root.
    const auto kwarg_uri = kwarg_string(o, "mlflow", "tracking_uri");
    std::string uri = kwarg_uri.value_or(env_or(o.env, "MLFLOW_TRACKING_URI"));
    std::string root;
    if (!uri.empty()) {
      if (uri.rfind("file://", 0) == 0) {
        root = uri.substr(7);
      } else if (uri.find(':') != std::string::npos) {
        throw std::invalid_argument(std::string(kwarg_uri ? "init_kwargs.mlflow.tracking_uri="
                                                          : "MLFLOW_TRACKING_URI=") +
                                    uri +
                                    ": libacc's mlflow tracker takes a path or a file:// URI (MLflow's file store) or "
                                    "an http:// or https:// URI (a tracking server)");
      } else {
        root = uri;
      }
    } else {
      root = o.logging_dir.empty() ? std::string("mlruns") : o.logging_dir + "/mlruns";
    }
    const bool fresh = !exists(root);
    config::make_directories(root);
    root_ = absolute_path(root);
    const int64_t now = wall_time_ms();
    if (fresh) write_experiment_meta(root_, "0", "Default", now);  // as FileStore does with a new root
    config::make_directories(root_ + "/.trash");

    const auto tags = run_tags(o);
    const std::string existing_run = run_id(o);
    if (!existing_run.empty()) {
      resume(existing_run);
    } else {
      // The experiment: reused by name, or created.
      const std::string name = experiment_name(o);
      for (const auto& id : subdirectories(root_)) {
        YAML::Node m = load_yaml(root_ + "/" + id + "/meta.yaml");
        if (m["name"] && m["name"].as<std::string>() == name &&
            (!m["lifecycle_stage"] || m["lifecycle_stage"].as<std::string>() == "active")) {
          experiment_id_ = id;
          break;
        }
      }
      if (experiment_id_.empty()) {
        do experiment_id_ = std::to_string(random_id());
        while (exists(root_ + "/" + experiment_id_));
        write_experiment_meta(root_, experiment_id_, name, now, artifact_location(o));
        for (const auto& [k, v] : tags) write_tag(root_ + "/" + experiment_id_ + "/tags", k, v);
      }
      run_id_ = random_hex(32);
      run_dir_ = root_ + "/" + experiment_id_ + "/" + run_id_;
      run_name_ = kwarg_string(o, "mlflow", "run_name").value_or("");
      if (run_name_.empty()) run_name_ = default_run_name(o.project_name, now);
      user_ = user_name(o.env);
      start_time_ = now;
      for (const char* sub : {"metrics", "params", "tags", "artifacts"}) config::make_directories(run_dir_ + "/" + sub);
      write_run_meta(/*running=*/true);
      write_tag(run_dir_ + "/tags", "mlflow.runName", run_name_);
      write_tag(run_dir_ + "/tags", "mlflow.user", user_);
      write_tag(run_dir_ + "/tags", "mlflow.source.name", program_path());
      write_tag(run_dir_ + "/tags", "mlflow.source.type", "LOCAL");
    }
    for (const auto& [k, v] : tags) write_tag(run_dir_ + "/tags", k, v);
    if (auto d = kwarg_string(o, "mlflow", "description")) write_tag(run_dir_ + "/tags", "mlflow.note.content", *d);
  }

  ~MlflowTracker() override {
    try {
      finish();
    } catch (...) {
    }
  }

  const char* name() const override { return "mlflow"; }
  const std::string& location() const override { return run_dir_; }

  void store_init_configuration(const Values& hparams) override {
    const auto params = loggable_params(hparams);
    for (const auto& [k, text] : params) validated_path(run_dir_ + "/params", k, "parameter");
    for (const auto& [k, text] : params) {
      const std::string path = validated_path(run_dir_ + "/params", k, "parameter");
      refuse_unless_regular(path);
      if (exists(path)) {
        std::string old = read_file(path, limits::kConfigBytes);
        if (old != text)
          throw std::invalid_argument("mlflow: parameter '" + k + "' of run " + run_id_ + " is already '" + old +
                                      "'; MLflow does not allow changing it to '" + text + "'");
        continue;
      }
      make_parent(path);
      config::write_file_atomic(path, text);
    }
  }

  void check(const Values& values) const override {
    for (const auto& [k, v] : values)
      if (v.scalar()) validated_path(run_dir_ + "/metrics", k, "metric");
  }

  void log(const Values& values, std::optional<int64_t> step) override {
    const int64_t ts = wall_time_ms();
    for (const auto& [k, v] : values) {
      auto x = v.scalar();
      if (!x) {
        if (warned_.insert(k).second)
          std::cerr << "acc: mlflow tracker: '" << k
                    << "' is not a number; MLflow's metrics are numbers, so it is not logged\n";
        continue;
      }
      auto it = metrics_.find(k);
      if (it == metrics_.end()) {
        const std::string path = validated_path(run_dir_ + "/metrics", k, "metric");
        make_parent(path);
        it = metrics_.emplace(k, AppendFile::lines(path, metric_line, "MLflow metric")).first;
      }
      it->second.append(std::to_string(ts) + " " + format_number(*x) + " " + std::to_string(step.value_or(0)) + "\n");
    }
  }

  void finish() override {
    if (finished_ || run_dir_.empty()) return;
    finished_ = true;
    for (auto& [k, f] : metrics_) {
      f.sync();
      f.close();
    }
    metrics_.clear();
    end_time_ = wall_time_ms();
    write_run_meta(/*running=*/false);
  }

 private:
  void make_parent(const std::string& path) { config::make_directories(path.substr(0, path.rfind('/'))); }

  // Tags are MLflow's to replace (set_tag overwrites), but only as regular files in the run's folder.
  void write_tag(const std::string& dir, const std::string& key, const std::string& value) {
    const std::string path = validated_path(dir, key, "tag");
    refuse_unless_regular(path);
    make_parent(path);
    config::write_file_atomic(path, value);
  }

  void write_run_meta(bool running) {
    YAML::Emitter e;
    e << YAML::BeginMap;
    e << YAML::Key << "artifact_uri" << YAML::Value << YAML::DoubleQuoted << file_uri(run_dir_ + "/artifacts");
    e << YAML::Key << "end_time" << YAML::Value;
    if (running) e << YAML::Null;
    else e << end_time_;
    e << YAML::Key << "entry_point_name" << YAML::Value << YAML::SingleQuoted << "";
    e << YAML::Key << "experiment_id" << YAML::Value << YAML::SingleQuoted << experiment_id_;
    e << YAML::Key << "lifecycle_stage" << YAML::Value << "active";
    e << YAML::Key << "run_id" << YAML::Value << run_id_;
    e << YAML::Key << "run_name" << YAML::Value << YAML::DoubleQuoted << run_name_;
    e << YAML::Key << "source_name" << YAML::Value << YAML::SingleQuoted << "";
    e << YAML::Key << "source_type" << YAML::Value << 4;  // LOCAL
    e << YAML::Key << "source_version" << YAML::Value << YAML::SingleQuoted << "";
    e << YAML::Key << "start_time" << YAML::Value << start_time_;
    e << YAML::Key << "status" << YAML::Value << (running ? 1 : 3);  // RUNNING, FINISHED
    e << YAML::Key << "tags" << YAML::Value << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
    e << YAML::Key << "user_id" << YAML::Value << YAML::DoubleQuoted << user_;
    e << YAML::EndMap;
    config::write_file_atomic(run_dir_ + "/meta.yaml", std::string(e.c_str()) + "\n");
  }

  // MLFLOW_RUN_ID: the run continues (status running, no end time), in whichever experiment holds it.
  void resume(const std::string& run_id) {
    for (char c : run_id)
      if (!std::isxdigit(static_cast<unsigned char>(c)))
        throw std::invalid_argument("MLFLOW_RUN_ID=" + run_id + " is not a run id");
    for (const auto& id : subdirectories(root_)) {
      const std::string dir = root_ + "/" + id + "/" + run_id;
      if (!exists(dir + "/meta.yaml")) continue;
      YAML::Node m = load_yaml(dir + "/meta.yaml");
      experiment_id_ = id;
      run_id_ = run_id;
      run_dir_ = dir;
      run_name_ = m["run_name"] ? m["run_name"].as<std::string>() : std::string();
      user_ = m["user_id"] ? m["user_id"].as<std::string>() : std::string();
      start_time_ = m["start_time"] ? m["start_time"].as<int64_t>() : wall_time_ms();
      for (const char* sub : {"metrics", "params", "tags", "artifacts"}) config::make_directories(run_dir_ + "/" + sub);
      write_run_meta(/*running=*/true);
      return;
    }
    throw std::invalid_argument("MLFLOW_RUN_ID=" + run_id + ": no such run under '" + root_ + "'");
  }

  std::string root_, experiment_id_, run_id_, run_dir_, run_name_, user_;
  int64_t start_time_ = 0, end_time_ = 0;
  std::map<std::string, AppendFile> metrics_;
  std::set<std::string> warned_;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<Tracker> make_mlflow(const RunOptions& o) {
  // init_kwargs.mlflow: Accelerate's MLflowTracker arguments (logging_dir: a new experiment's artifact location), and
  // tracking_uri as mlflow.set_tracking_uri (before MLFLOW_TRACKING_URI).
  check_kwargs(o, "mlflow", {"run_name", "tags", "description", "run_id", "logging_dir", "tracking_uri"});
  const std::string uri = kwarg_string(o, "mlflow", "tracking_uri").value_or(env_or(o.env, "MLFLOW_TRACKING_URI"));
  if (uri.rfind("http://", 0) == 0 || uri.rfind("https://", 0) == 0) return mlflow::make_server(o, uri);
  return std::make_unique<MlflowTracker>(o);
}

}  // namespace acc::tracking
