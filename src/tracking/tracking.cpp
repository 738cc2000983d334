// Values, hyperparameters, the tracker names and the set of trackers of a run.
#include "tracking/tracking.hpp"

#include <acc/config.hpp>
#include <acc/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ios>
#include <stdexcept>

namespace acc::tracking {

namespace {

// A JSON text given to the trackers. NaN, Infinity and -Infinity are read as numbers, as Python's json module
// writes them (a diverged loss).
json::Document parse(std::string_view text, const char* what) {
  return json::Document(text, what, json::kPythonLimits);
}

std::optional<double> number_of(const json::Value& n) {
  if (n.is_number()) return n.as_double();
  return std::nullopt;
}

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

void flatten(const json::Value& obj, const std::string& prefix, Values& out) {
  for (const auto& [name, it] : obj.items()) {
    std::string key = prefix + name;
    Value v;
    if (it.is_object()) {
      flatten(it, key + ".", out);
      continue;
    } else if (it.is_bool()) {
      v = Value::of_bool(it.as_bool());
    } else if (auto x = number_of(it)) {
      v = Value::of(*x);
    } else if (it.is_string()) {
      v = Value::of(it.as_string());
    } else if (it.is_array()) {
      v = Value::of(it.text());
    }  // null stays Null
    out.emplace_back(std::move(key), std::move(v));
  }
}

}  // namespace

std::optional<double> Value::scalar() const {
  if (kind == Kind::Number) return number;
  if (kind == Kind::Bool) return flag ? 1.0 : 0.0;
  return std::nullopt;
}

Values parse_values(std::string_view json, const char* what) {
  const json::Document doc = parse(json, what);
  if (!doc.root().is_object()) throw std::invalid_argument(std::string(what) + " must be a JSON object of name: value");
  Values out;
  for (const auto& [key, it] : doc.root().items()) {
    if (key.empty()) throw std::invalid_argument(std::string(what) + ": an empty name");
    Value v;
    if (it.is_bool()) {
      v = Value::of_bool(it.as_bool());
    } else if (auto x = number_of(it)) {
      v = Value::of(*x);
    } else if (it.is_string()) {
      v = Value::of(it.as_string());
    } else if (it.is_object()) {
      v.kind = Value::Kind::Dict;
      for (const auto& [sub_name, sub] : it.items()) {
        auto y = number_of(sub);
        if (!y)
          throw std::invalid_argument(std::string(what) + ": '" + key + "." + sub_name +
                                      "' must be a number (an object groups scalars under one name)");
        v.dict.emplace_back(sub_name, *y);
      }
    } else if (it.is_array()) {
      throw std::invalid_argument(
          std::string(what) + ": '" + key +
          "' is a list; a value is a number, a boolean, a string, null or an object of numbers");
    }
    if (std::any_of(out.begin(), out.end(), [&](const auto& p) { return p.first == key; }))
      throw std::invalid_argument(std::string(what) + ": '" + key + "' appears twice");
    out.emplace_back(key, std::move(v));
  }
  return out;
}

Values parse_hparams(std::string_view json) {
  Values out;
  if (blank(json)) return out;
  const json::Document doc = parse(json, "config");
  if (doc.root().is_null()) return out;
  if (!doc.root().is_object()) throw std::invalid_argument("config must be a JSON object of hyperparameters");
  flatten(doc.root(), "", out);
  return out;
}

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string python_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Number: return format_number(v.number);
    case Value::Kind::Bool: return v.flag ? "True" : "False";
    case Value::Kind::String: return v.text;
    case Value::Kind::Null: return "None";
    case Value::Kind::Dict: {
      std::string s = "{";
      for (size_t i = 0; i < v.dict.size(); ++i)
        s += (i ? ", '" : "'") + v.dict[i].first + "': " + format_number(v.dict[i].second);
      return s + "}";
    }
  }
  return "";
}

void check_kwargs(const RunOptions& o, const char* tracker, const std::vector<std::string>& allowed) {
  for (const auto& [k, v] : o.kwargs) {
    (void)v;
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw std::invalid_argument("init_kwargs." + std::string(tracker) + ": unknown key \"" + k + "\"; " +
                                  (list.empty() ? std::string("it takes none") : "it takes " + list));
    }
  }
}

std::optional<std::string> kwarg_string(const RunOptions& o, const char* tracker, const std::string& key) {
  auto it = o.kwargs.find(key);
  if (it == o.kwargs.end()) return std::nullopt;
  const json::Document doc = parse(it->second, "init_kwargs");
  if (doc.root().is_null()) return std::nullopt;
  if (!doc.root().is_string())
    throw std::invalid_argument("init_kwargs." + std::string(tracker) + "." + key + " must be a string");
  return doc.root().as_string();
}

std::vector<std::pair<std::string, std::string>> parse_string_map(std::string_view json, const std::string& what) {
  std::vector<std::pair<std::string, std::string>> out;
  const json::Document doc = parse(json, what.c_str());
  if (doc.root().is_null()) return out;
  if (!doc.root().is_object()) throw std::invalid_argument(what + " must be a JSON object of strings");
  for (const auto& [name, it] : doc.root().items()) {
    std::string v;
    if (it.is_string()) v = it.as_string();
    else if (it.is_number()) v = format_number(it.as_double());
    else if (it.is_bool()) v = it.as_bool() ? "True" : "False";
    else throw std::invalid_argument(what + "." + name + " must be a string");
    out.emplace_back(name, v);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> kwarg_string_map(const RunOptions& o, const char* tracker,
                                                                  const std::string& key) {
  auto it = o.kwargs.find(key);
  if (it == o.kwargs.end()) return {};
  return parse_string_map(it->second, "init_kwargs." + std::string(tracker) + "." + key);
}

const std::vector<std::string>& tracker_names() {
  static const std::vector<std::string> names = {"tensorboard", "jsonl", "csv", "mlflow", "wandb"};
  return names;
}

std::vector<std::string> resolve_log_with(const std::vector<std::string>& names, const std::string& logging_dir) {
  const auto& known = tracker_names();
  std::vector<std::string> want;
  for (const auto& n : names) {
    if (n == "all") {
      want = known;
      break;
    }
    if (std::find(known.begin(), known.end(), n) == known.end())
      throw std::invalid_argument("log_with: unsupported tracker \"" + n +
                                  "\"; libacc has all, tensorboard, jsonl, csv, mlflow, wandb");
    if (std::find(want.begin(), want.end(), n) == want.end()) want.push_back(n);
  }
  for (const auto& n : want)
    if (n != "mlflow" && n != "wandb" && logging_dir.empty())  // both have a default folder, as in Accelerate
      throw std::invalid_argument("log_with: logging with `" + n +
                                  "` requires a logging directory: set project_dir or project_config.logging_dir");
  return want;
}

std::unique_ptr<Tracker> make_tracker(const std::string& name, const RunOptions& o) {
  if (name == "tensorboard") return make_tensorboard(o);
  if (name == "jsonl") return make_jsonl(o);
  if (name == "csv") return make_csv(o);
  if (name == "mlflow") return make_mlflow(o);
  if (name == "wandb") return make_wandb(o);
  throw std::invalid_argument("unknown tracker \"" + name + "\"");
}

TrackerSet::TrackerSet(const std::vector<std::string>& names, const std::string& project_name,
                       const std::string& logging_dir, std::string_view init_kwargs_json,
                       const std::map<std::string, std::string>& env) {
  check_project_name(project_name);
  std::map<std::string, std::map<std::string, std::string>> kwargs;
  if (!blank(init_kwargs_json)) {
    const json::Document doc = parse(init_kwargs_json, "init_kwargs");
    if (!doc.root().is_null()) {
      if (!doc.root().is_object())
        throw std::invalid_argument("init_kwargs must be a JSON object {\"<tracker>\": {...}}");
      for (const auto& [tn, t] : doc.root().items()) {
        const auto& known = tracker_names();
        if (std::find(known.begin(), known.end(), tn) == known.end())
          throw std::invalid_argument("init_kwargs: unknown tracker \"" + tn +
                                      "\"; libacc has tensorboard, jsonl, csv, mlflow, wandb");
        if (!t.is_object()) throw std::invalid_argument("init_kwargs." + tn + " must be an object");
        for (const auto& [k, kv] : t.items()) kwargs[tn][k] = kv.text();
      }
    }
  }
  for (const auto& n : names) {
    RunOptions o;
    o.project_name = project_name;
    o.logging_dir = logging_dir;
    o.env = env;
    if (auto it = kwargs.find(n); it != kwargs.end()) o.kwargs = it->second;
    trackers_.push_back(make_tracker(n, o));
  }
}

void TrackerSet::store_init_configuration(const Values& hparams, std::string_view config_json) {
  for (auto& t : trackers_) t->store_config(hparams, config_json);
}

void TrackerSet::log(const Values& values, std::optional<int64_t> step) {
  for (const auto& t : trackers_) t->check(values);
  for (auto& t : trackers_) t->log(values, step);
}

void TrackerSet::finish() {
  if (finished_) return;
  finished_ = true;
  std::string first_error;
  for (auto& t : trackers_) {
    try {
      t->finish();
    } catch (const std::exception& e) {
      if (first_error.empty()) first_error = e.what();
    }
  }
  if (!first_error.empty()) throw std::ios_base::failure(first_error);
}

}  // namespace acc::tracking
