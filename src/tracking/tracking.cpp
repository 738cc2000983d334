// Values, hyperparameters, the tracker names and the set of trackers of a run.
#include "tracking/tracking.hpp"

#include <acc/config.hpp>
#include <cjson/cJSON.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ios>
#include <stdexcept>

namespace acc::tracking {

namespace {

// NaN, Infinity and -Infinity, as Python's json module writes them (a diverged loss), are not JSON: outside
// strings they become marker strings that number_of() turns back into numbers (or, with markers false, 0: the
// text config::check_json checks).
constexpr std::string_view kMarker = "\\u0001acc-number:";

std::string with_special_numbers(std::string_view text, bool markers = true) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool matched = false;
    for (std::string_view tok : {"NaN", "Infinity", "-Infinity"}) {
      if (text.substr(i, tok.size()) == tok) {
        out += markers ? "\"" + std::string(kMarker) + std::string(tok) + "\"" : std::string("0");
        i += tok.size() - 1;
        matched = true;
        break;
      }
    }
    if (!matched) out += c;
  }
  return out;
}

struct JsonDoc {
  cJSON* root = nullptr;
  explicit JsonDoc(std::string_view raw, const char* what) {
    // As every JSON libacc reads: one document, no duplicate key, UTF-8 (cJSON alone takes the first of two keys).
    try {
      config::check_json(with_special_numbers(raw, false), what);
    } catch (const config::Error& e) {
      throw std::invalid_argument(e.what());
    }
    std::string text = with_special_numbers(raw);
    root = cJSON_ParseWithLength(text.data(), text.size());
    if (!root) {
      const char* at = cJSON_GetErrorPtr();
      std::string near = at ? std::string(at).substr(0, 20) : std::string();
      throw std::invalid_argument(std::string(what) + " is not valid JSON" + (near.empty() ? "" : " near '" + near + "'"));
    }
  }
  ~JsonDoc() { cJSON_Delete(root); }
  JsonDoc(const JsonDoc&) = delete;
  JsonDoc& operator=(const JsonDoc&) = delete;
};

// A number, including the marked NaN / Infinity / -Infinity; nullopt for anything else.
std::optional<double> number_of(const cJSON* n) {
  if (cJSON_IsNumber(n)) return n->valuedouble;
  if (cJSON_IsString(n)) {
    std::string_view v = n->valuestring;
    const std::string marker = "\x01" "acc-number:";
    if (v.substr(0, marker.size()) == marker) {
      v.remove_prefix(marker.size());
      if (v == "NaN") return std::nan("");
      return v == "Infinity" ? HUGE_VAL : -HUGE_VAL;
    }
  }
  return std::nullopt;
}

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

std::string json_text(const cJSON* node) {
  char* p = cJSON_PrintUnformatted(node);
  if (!p) throw std::bad_alloc();
  std::string s(p);
  cJSON_free(p);
  return s;
}

void flatten(const cJSON* obj, const std::string& prefix, Values& out) {
  for (const cJSON* it = obj->child; it; it = it->next) {
    std::string key = prefix + (it->string ? it->string : "");
    Value v;
    if (cJSON_IsObject(it)) {
      flatten(it, key + ".", out);
      continue;
    } else if (cJSON_IsBool(it)) {
      v = Value::of_bool(cJSON_IsTrue(it));
    } else if (auto x = number_of(it)) {
      v = Value::of(*x);
    } else if (cJSON_IsString(it)) {
      v = Value::of(std::string(it->valuestring));
    } else if (cJSON_IsArray(it)) {
      v = Value::of(json_text(it));
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
  JsonDoc doc(json, what);
  if (!cJSON_IsObject(doc.root))
    throw std::invalid_argument(std::string(what) + " must be a JSON object of name: value");
  Values out;
  for (const cJSON* it = doc.root->child; it; it = it->next) {
    const std::string key = it->string ? it->string : "";
    if (key.empty()) throw std::invalid_argument(std::string(what) + ": an empty name");
    Value v;
    if (cJSON_IsBool(it)) {
      v = Value::of_bool(cJSON_IsTrue(it));
    } else if (auto x = number_of(it)) {
      v = Value::of(*x);
    } else if (cJSON_IsString(it)) {
      v = Value::of(std::string(it->valuestring));
    } else if (cJSON_IsObject(it)) {
      v.kind = Value::Kind::Dict;
      for (const cJSON* sub = it->child; sub; sub = sub->next) {
        auto y = number_of(sub);
        if (!y)
          throw std::invalid_argument(std::string(what) + ": '" + key + "." + (sub->string ? sub->string : "") +
                                      "' must be a number (an object groups scalars under one name)");
        v.dict.emplace_back(sub->string ? sub->string : "", *y);
      }
    } else if (cJSON_IsArray(it)) {
      throw std::invalid_argument(std::string(what) + ": '" + key +
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
  JsonDoc doc(json, "config");
  if (cJSON_IsNull(doc.root)) return out;
  if (!cJSON_IsObject(doc.root)) throw std::invalid_argument("config must be a JSON object of hyperparameters");
  flatten(doc.root, "", out);
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
  JsonDoc doc(it->second, "init_kwargs");
  if (cJSON_IsNull(doc.root)) return std::nullopt;
  if (!cJSON_IsString(doc.root))
    throw std::invalid_argument("init_kwargs." + std::string(tracker) + "." + key + " must be a string");
  return std::string(doc.root->valuestring);
}

std::vector<std::pair<std::string, std::string>> parse_string_map(std::string_view json, const std::string& what) {
  std::vector<std::pair<std::string, std::string>> out;
  JsonDoc doc(json, what.c_str());
  if (cJSON_IsNull(doc.root)) return out;
  if (!cJSON_IsObject(doc.root)) throw std::invalid_argument(what + " must be a JSON object of strings");
  for (const cJSON* it = doc.root->child; it; it = it->next) {
    std::string v;
    if (cJSON_IsString(it)) v = it->valuestring;
    else if (cJSON_IsNumber(it)) v = format_number(it->valuedouble);
    else if (cJSON_IsBool(it)) v = cJSON_IsTrue(it) ? "True" : "False";
    else throw std::invalid_argument(what + "." + (it->string ? it->string : "") + " must be a string");
    out.emplace_back(it->string ? it->string : "", v);
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
  static const std::vector<std::string> names = {"tensorboard", "jsonl", "csv", "mlflow"};
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
      throw std::invalid_argument("log_with: unsupported tracker \"" + n + "\"; libacc has all, tensorboard, jsonl, csv, mlflow");
    if (std::find(want.begin(), want.end(), n) == want.end()) want.push_back(n);
  }
  for (const auto& n : want)
    if (n != "mlflow" && logging_dir.empty())
      throw std::invalid_argument("log_with: logging with `" + n +
                                  "` requires a logging directory: set project_dir or project_config.logging_dir");
  return want;
}

std::unique_ptr<Tracker> make_tracker(const std::string& name, const RunOptions& o) {
  if (name == "tensorboard") return make_tensorboard(o);
  if (name == "jsonl") return make_jsonl(o);
  if (name == "csv") return make_csv(o);
  if (name == "mlflow") return make_mlflow(o);
  throw std::invalid_argument("unknown tracker \"" + name + "\"");
}

TrackerSet::TrackerSet(const std::vector<std::string>& names, const std::string& project_name,
                       const std::string& logging_dir, std::string_view init_kwargs_json,
                       const std::map<std::string, std::string>& env) {
  check_project_name(project_name);
  std::map<std::string, std::map<std::string, std::string>> kwargs;
  if (!blank(init_kwargs_json)) {
    JsonDoc doc(init_kwargs_json, "init_kwargs");
    if (!cJSON_IsNull(doc.root)) {
      if (!cJSON_IsObject(doc.root))
        throw std::invalid_argument("init_kwargs must be a JSON object {\"<tracker>\": {...}}");
      for (const cJSON* t = doc.root->child; t; t = t->next) {
        const std::string tn = t->string ? t->string : "";
        const auto& known = tracker_names();
        if (std::find(known.begin(), known.end(), tn) == known.end())
          throw std::invalid_argument("init_kwargs: unknown tracker \"" + tn + "\"; libacc has tensorboard, jsonl, csv, mlflow");
        if (!cJSON_IsObject(t)) throw std::invalid_argument("init_kwargs." + tn + " must be an object");
        for (const cJSON* kv = t->child; kv; kv = kv->next) kwargs[tn][kv->string ? kv->string : ""] = json_text(kv);
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

void TrackerSet::store_init_configuration(const Values& hparams) {
  for (auto& t : trackers_) t->store_init_configuration(hparams);
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
