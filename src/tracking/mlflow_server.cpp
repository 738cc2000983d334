// The mlflow tracker with a tracking server (an http:// or https:// tracking URI): MLflow's REST API
// (mlflow/protos/service.proto, served under <uri>/api/2.0/mlflow/ by mlflow/server/handlers.py), with the requests
// MLflow's Python client makes for Accelerate's MLflowTracker:
//
//   init_trackers   GET experiments/get-by-name; POST experiments/create {name, artifact_location, tags} when there
//                   is none; POST runs/create {experiment_id, user_id, start_time, run_name, tags}, or with
//                   MLFLOW_RUN_ID: GET runs/get, POST runs/update {status RUNNING}, its tags by runs/log-batch
//   the config      POST runs/log-batch {params}, at most 100 a request (MAX_PARAMS_TAGS_PER_BATCH)
//   log             POST runs/log-batch {metrics: key, value, timestamp, step}, at most 1000 a request
//   end_training    POST runs/update {status FINISHED, end_time}; FAILED when the accelerator goes away while an
//                   exception unwinds (MLflow's `with start_run()` on an exception)
//
// Every request has a timeout (MLFLOW_HTTP_REQUEST_TIMEOUT, 120 s) and answers of 429 and 5xx are retried as MLflow's
// client retries them (MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR); a server that cannot be
// reached fails the call at once, naming the URL. Only the main process has trackers, so only it talks to the server.
#include <acc/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <exception>
#include <ios>
#include <iostream>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "tracking/http.hpp"
#include "tracking/mlflow.hpp"
#include "tracking/tracking.hpp"

namespace acc::tracking::mlflow {

namespace {

constexpr size_t kMetricsPerBatch = 1000;  // mlflow.utils.validation.MAX_METRICS_PER_BATCH
constexpr size_t kParamsTagsPerBatch = 100;  // MAX_PARAMS_TAGS_PER_BATCH

long env_long(const std::map<std::string, std::string>& env, const char* key, long dflt, long min) {
  const std::string text = env_or(env, key);
  if (text.empty()) return dflt;
  long v = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || v < min)
    throw std::invalid_argument(std::string(key) + "=" + text + " is not an integer >= " + std::to_string(min));
  return v;
}

bool env_true(const std::map<std::string, std::string>& env, const char* key) {
  std::string v = env_or(env, key);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return v == "true" || v == "1";  // MLflow's _BooleanEnvironmentVariable takes true/1, false/0
}

// A metric value in proto3's JSON mapping, as MLflow's client sends it: NaN and the infinities as strings.
void metric_value(json::Writer& w, double v) {
  if (std::isnan(v)) w.value("NaN");
  else if (std::isinf(v)) w.value(v > 0 ? "Infinity" : "-Infinity");
  else w.value(v);
}

using Pairs = std::vector<std::pair<std::string, std::string>>;

void key_values(json::Writer& w, const char* field, const Pairs& kv, size_t begin, size_t end) {
  w.key(field).begin_array();
  for (size_t i = begin; i < end; ++i)
    w.begin_object().key("key").value(kv[i].first).key("value").value(kv[i].second).end_object();
  w.end_array();
}

class Server {
 public:
  Server(const std::string& uri, const std::map<std::string, std::string>& env) : uri_(uri) {
    while (uri_.size() > 8 && uri_.back() == '/') uri_.pop_back();
    api_ = uri_ + "/api/2.0/mlflow/";
    opts_.timeout_s = env_long(env, "MLFLOW_HTTP_REQUEST_TIMEOUT", 120, 1);
    opts_.connect_timeout_s = std::min<long>(opts_.timeout_s, 10);
    opts_.bearer_token = env_or(env, "MLFLOW_TRACKING_TOKEN");
    opts_.username = env_or(env, "MLFLOW_TRACKING_USERNAME");
    opts_.password = env_or(env, "MLFLOW_TRACKING_PASSWORD");
    opts_.insecure_tls = env_true(env, "MLFLOW_TRACKING_INSECURE_TLS");
    opts_.ca_path = env_or(env, "MLFLOW_TRACKING_SERVER_CERT_PATH");
    opts_.client_cert_path = env_or(env, "MLFLOW_TRACKING_CLIENT_CERT_PATH");
    max_retries_ = env_long(env, "MLFLOW_HTTP_REQUEST_MAX_RETRIES", 7, 0);
    backoff_ = env_long(env, "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", 2, 0);
  }

  const std::string& uri() const { return uri_; }

  // One request; the parsed answer, or nullopt when the server answered with `tolerated` (an error code such as
  // RESOURCE_DOES_NOT_EXIST). Any other error throws, naming the URL and the server's message: std::invalid_argument
  // for a value the server refuses (INVALID_PARAMETER_VALUE: a changed parameter) or an id it does not know
  // (RESOURCE_DOES_NOT_EXIST: MLFLOW_RUN_ID), else std::ios_base::failure.
  std::optional<json::Document> call(const std::string& method, const std::string& endpoint, const std::string& body,
                                     const char* tolerated = nullptr) {
    const std::string url = api_ + endpoint;
    const std::string what = "mlflow: " + method + " " + endpoint.substr(0, endpoint.find('?')) + " at";
    http::Response r;
    for (long attempt = 0;; ++attempt) {
      r = http::request(opts_, method, url, body, what);
      const bool transient = r.status == 429 || r.status == 500 || r.status == 502 || r.status == 503 ||
                             r.status == 504;
      if (!transient || attempt >= max_retries_) break;
      const long delay = std::min<long>(120, backoff_ * (1L << std::min<long>(attempt, 10)));
      std::this_thread::sleep_for(std::chrono::seconds(delay));
    }
    std::string code, message;
    if (r.status >= 200 && r.status < 300) {
      try {
        return json::Document(r.body.empty() ? std::string("{}") : r.body, "the answer of " + http::redacted(url),
                              json::kPythonLimits);
      } catch (const json::Error& e) {
        // The parser's words name the URL, then quote the answer (a key of any length): bounded past the URL.
        throw std::ios_base::failure(what + " " + http::redacted(url) + ": the answer is not MLflow's JSON (" +
                                     http::quoted(e.what(), limits::kQuotedTextBytes + url.size()) + "); is " +
                                     http::redacted(uri_) + " an MLflow tracking server?");
      }
    }
    try {  // MLflow's errors: {"error_code": "...", "message": "..."}
      json::Document d(r.body, "error", json::kPythonLimits);
      if (d.root().is_object()) {
        code = d.root().get_string_or("error_code", "");
        message = d.root().get_string_or("message", "");
      }
    } catch (const std::exception&) {
    }
    if (tolerated && code == tolerated) return std::nullopt;
    // The server's words are bounded and made printable: a body of any size or bytes reaches here.
    const std::string_view said = message.empty() ? std::string_view(r.body) : std::string_view(message);
    const std::string text = what + " " + http::redacted(url) + ": HTTP " + std::to_string(r.status) +
                             (code.empty() ? "" : " " + http::quoted(code)) +
                             (said.empty() ? "" : ": " + http::quoted(said));
    if (code == "INVALID_PARAMETER_VALUE" || code == "RESOURCE_DOES_NOT_EXIST") throw std::invalid_argument(text);
    throw std::ios_base::failure(text);
  }

 private:
  std::string uri_, api_;
  http::Options opts_;
  long max_retries_ = 7, backoff_ = 2;
};

class MlflowServerTracker final : public Tracker {
 public:
  MlflowServerTracker(const RunOptions& o, const std::string& uri) : server_(uri, o.env) {
    const Pairs tags = run_tags(o);
    Pairs run_tags_all;
    const std::string existing = run_id(o);
    if (!existing.empty()) {
      // MLflow's start_run(run_id): the run continues (status RUNNING, end time unset), its tags updated.
      auto got = server_.call("GET", "runs/get?run_id=" + http::escape(existing), "");
      const json::Value info = got->root().get("run").get("info");
      run_id_ = existing;
      experiment_id_ = info.get_string("experiment_id");
      json::Writer w;
      w.begin_object().key("run_id").value(run_id_).key("status").value("RUNNING").end_object();
      server_.call("POST", "runs/update", w.str());
      run_tags_all = tags;
    } else {
      experiment_id_ = experiment(o, tags);
      const int64_t now = wall_time_ms();
      std::string run_name = kwarg_string(o, "mlflow", "run_name").value_or("");
      if (run_name.empty()) run_name = default_run_name(o.project_name, now);
      const std::string user = user_name(o.env);
      Pairs all = {{"mlflow.user", user}, {"mlflow.source.name", program_path()}, {"mlflow.source.type", "LOCAL"}};
      for (const auto& t : tags) all.push_back(t);
      if (auto d = kwarg_string(o, "mlflow", "description")) all.emplace_back("mlflow.note.content", *d);
      json::Writer w;
      w.begin_object().key("experiment_id").value(experiment_id_).key("user_id").value(user);
      w.key("start_time").value(now).key("run_name").value(run_name);
      key_values(w, "tags", all, 0, all.size());
      w.end_object();
      auto got = server_.call("POST", "runs/create", w.str());
      run_id_ = got->root().get("run").get("info").get_string("run_id");
    }
    if (!existing.empty())
      if (auto d = kwarg_string(o, "mlflow", "description")) run_tags_all.emplace_back("mlflow.note.content", *d);
    for (size_t i = 0; i < run_tags_all.size(); i += kParamsTagsPerBatch) {
      json::Writer w;
      w.begin_object().key("run_id").value(run_id_);
      key_values(w, "tags", run_tags_all, i, std::min(run_tags_all.size(), i + kParamsTagsPerBatch));
      w.end_object();
      server_.call("POST", "runs/log-batch", w.str());
    }
    location_ = http::redacted(server_.uri()) + "/#/experiments/" + experiment_id_ + "/runs/" + run_id_;
  }

  ~MlflowServerTracker() override {
    try {
      end(std::uncaught_exceptions() > 0 ? "FAILED" : "FINISHED");
    } catch (const std::exception& e) {
      std::cerr << "acc: mlflow tracker: could not end run " << run_id_ << ": " << e.what() << "\n";
    }
  }

  const char* name() const override { return "mlflow"; }
  const std::string& location() const override { return location_; }

  void store_init_configuration(const Values& hparams) override {
    const Pairs params = loggable_params(hparams);
    for (const auto& [k, text] : params) check_name(k, "parameter");
    for (size_t i = 0; i < params.size(); i += kParamsTagsPerBatch) {  // as Accelerate's tracker splits log_params
      json::Writer w;
      w.begin_object().key("run_id").value(run_id_);
      key_values(w, "params", params, i, std::min(params.size(), i + kParamsTagsPerBatch));
      w.end_object();
      server_.call("POST", "runs/log-batch", w.str());
    }
  }

  void check(const Values& values) const override {
    for (const auto& [k, v] : values)
      if (v.scalar()) check_name(k, "metric");
  }

  void log(const Values& values, std::optional<int64_t> step) override {
    const int64_t ts = wall_time_ms();
    std::vector<std::pair<const std::string*, double>> metrics;
    for (const auto& [k, v] : values) {
      if (auto x = v.scalar()) {
        metrics.emplace_back(&k, *x);
      } else if (warned_.insert(k).second) {
        std::cerr << "acc: mlflow tracker: '" << k
                  << "' is not a number; MLflow's metrics are numbers, so it is not logged\n";
      }
    }
    for (size_t i = 0; i < metrics.size(); i += kMetricsPerBatch) {
      json::Writer w;
      w.begin_object().key("run_id").value(run_id_).key("metrics").begin_array();
      for (size_t j = i; j < std::min(metrics.size(), i + kMetricsPerBatch); ++j) {
        w.begin_object().key("key").value(*metrics[j].first).key("value");
        metric_value(w, metrics[j].second);
        w.key("timestamp").value(ts).key("step").value(step.value_or(0)).end_object();
      }
      w.end_array().end_object();
      server_.call("POST", "runs/log-batch", w.str());
    }
  }

  void finish() override { end("FINISHED"); }

 private:
  // The experiment's id: the active one of that name, else a new one (Accelerate's search_experiments, then
  // create_experiment with the tags and logging_dir as artifact location).
  std::string experiment(const RunOptions& o, const Pairs& tags) {
    const std::string name = experiment_name(o);
    for (int tries = 0; tries < 2; ++tries) {
      auto found = server_.call("GET", "experiments/get-by-name?experiment_name=" + http::escape(name), "",
                                "RESOURCE_DOES_NOT_EXIST");
      if (found) {
        const json::Value e = found->root().get("experiment");
        if (e.get_string_or("lifecycle_stage", "active") != "active")
          throw std::invalid_argument("mlflow: the experiment '" + name + "' on " + http::redacted(server_.uri()) +
                                      " is deleted; restore it (mlflow experiments restore) or name another one "
                                      "(MLFLOW_EXPERIMENT_NAME)");
        return e.get_string("experiment_id");
      }
      json::Writer w;
      w.begin_object().key("name").value(name);
      if (auto dir = kwarg_string(o, "mlflow", "logging_dir"); dir && !dir->empty())
        w.key("artifact_location").value(*dir);
      key_values(w, "tags", tags, 0, tags.size());
      w.end_object();
      // Another job may create it between the two requests: then it is looked up again.
      auto made = server_.call("POST", "experiments/create", w.str(), "RESOURCE_ALREADY_EXISTS");
      if (made) return made->root().get_string("experiment_id");
    }
    throw std::ios_base::failure("mlflow: the experiment '" + name + "' on " + http::redacted(server_.uri()) +
                                 " could neither be found nor created");
  }

  void end(const char* status) {
    if (finished_ || run_id_.empty()) return;
    finished_ = true;
    json::Writer w;
    w.begin_object().key("run_id").value(run_id_).key("status").value(status);
    w.key("end_time").value(wall_time_ms()).end_object();
    server_.call("POST", "runs/update", w.str());
  }

  Server server_;
  std::string experiment_id_, run_id_, location_;
  std::set<std::string> warned_;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<Tracker> make_server(const RunOptions& o, const std::string& uri) {
  return std::make_unique<MlflowServerTracker>(o, uri);
}

}  // namespace acc::tracking::mlflow
