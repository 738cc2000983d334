// The jsonl and csv trackers: one line per log call in <logging_dir>/<project_name>/metrics.jsonl or
// metrics.csv, and the hyperparameters in hparams.json beside them. Lines are appended with one write(2)
// each; reopening a file (a resumed run) continues it, dropping a last line a crash cut short.
#include <acc/files.hpp>
#include <acc/limits.hpp>
#include <acc/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ios>
#include <stdexcept>

#include <acc/config.hpp>

#include "tracking/tracking.hpp"

namespace acc::tracking {

std::string json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return format_number(v);
}

namespace {

void write_value(json::Writer& w, const Value& v) {
  switch (v.kind) {
    case Value::Kind::Number: w.raw(json_number(v.number)); break;
    case Value::Kind::Bool: w.value(v.flag); break;
    case Value::Kind::String: w.value(v.text); break;
    case Value::Kind::Null: w.null(); break;
    case Value::Kind::Dict:
      w.begin_object();
      for (const auto& [name, x] : v.dict) w.key(name).raw(json_number(x));
      w.end_object();
      break;
  }
}

void write_object(json::Writer& w, const Values& values) {
  w.begin_object();
  for (const auto& [name, v] : values) {
    w.key(name);
    write_value(w, v);
  }
  w.end_object();
}

std::string json_object(const Values& values) {
  json::Writer w;
  write_object(w, values);
  return w.str();
}

std::string time_text(double t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", t);
  return buf;
}

// hparams.json is replaced by each run's configuration only when it is the trackers' own: a JSON object of
// scalars (the flattened hyperparameters), a regular file. A user's file of that name is refused, not replaced.
void check_hparams_json(const std::string& dir) {
  const std::string path = dir + "/hparams.json";
  refuse_unless_regular(path);
  if (!exists(path)) return;
  const std::string text = read_file(path, limits::kConfigBytes);
  bool ours = false;
  try {
    const json::Document doc(text, path, json::kPythonLimits);  // json_number writes NaN as Python does
    if (doc.root().is_object()) {
      const auto items = doc.root().items();
      ours = std::none_of(items.begin(), items.end(),
                          [](const auto& e) { return e.second.is_object() || e.second.is_array(); });
    }
  } catch (const json::Error&) {
  }
  if (!ours)
    throw std::invalid_argument("'" + path +
                                "' exists and is not a libacc hparams file (a JSON object of flattened "
                                "hyperparameters); trackers do not replace a file they did not make");
}

void write_hparams_json(const std::string& dir, const Values& hparams) {
  check_hparams_json(dir);
  config::write_file_atomic(dir + "/hparams.json", json_object(hparams) + "\n");
}

// The first lines libacc writes: {"step": ...} and the CSV header "step,time,...".
bool jsonl_line(std::string_view line) { return line.rfind("{\"step\": ", 0) == 0; }
bool csv_header(std::string_view line) { return line == "step,time" || line.rfind("step,time,", 0) == 0; }

class JsonlTracker final : public Tracker {
 public:
  explicit JsonlTracker(const RunOptions& o) {
    check_kwargs(o, "jsonl", {});
    dir_ = name_path(o.logging_dir, o.project_name, "project_name", /*nested=*/false);
    config::make_directories(dir_);
    check_hparams_json(dir_);
    file_ = AppendFile::lines(dir_ + "/metrics.jsonl", jsonl_line, "metrics");
  }
  ~JsonlTracker() override { file_.close(); }
  const char* name() const override { return "jsonl"; }
  const std::string& location() const override { return dir_; }
  void store_init_configuration(const Values& hparams) override { write_hparams_json(dir_, hparams); }
  void log(const Values& values, std::optional<int64_t> step) override {
    json::Writer w;
    w.begin_object().key("step");
    step ? w.value(*step) : w.null();
    w.key("time").raw(time_text(wall_time())).key("values");
    write_object(w, values);
    w.end_object();
    file_.append(w.str() + "\n");
  }
  void finish() override {
    if (!file_.is_open()) return;
    file_.sync();
    file_.close();
  }

 private:
  std::string dir_;
  AppendFile file_;
};

// --- csv ---

std::string csv_cell(const std::string& s) {
  bool quote = s.find_first_of(",\"\r\n") != std::string::npos || (!s.empty() && (s.front() == ' ' || s.back() == ' '));
  if (!quote) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// The records of a CSV text (a newline inside quotes belongs to its record), without their line ends.
std::vector<std::string> csv_records(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (char c : text) {
    if (c == '"') quoted = !quoted;
    if (c == '\n' && !quoted) {
      if (!cur.empty() && cur.back() == '\r') cur.pop_back();
      out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::vector<std::string> csv_split(const std::string& record) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < record.size(); ++i) {
    char c = record[i];
    if (quoted) {
      if (c == '"' && i + 1 < record.size() && record[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

class CsvTracker final : public Tracker {
 public:
  explicit CsvTracker(const RunOptions& o) {
    check_kwargs(o, "csv", {});
    dir_ = name_path(o.logging_dir, o.project_name, "project_name", /*nested=*/false);
    config::make_directories(dir_);
    check_hparams_json(dir_);
    path_ = dir_ + "/metrics.csv";
    file_ = AppendFile::lines(path_, csv_header, "metrics");  // drops a row a crash cut short
    std::string text = read_file(path_);
    auto records = csv_records(text);
    if (!records.empty()) {
      auto header = csv_split(records.front());
      columns_.assign(header.begin() + 2, header.end());
      has_header_ = true;
    }
  }
  ~CsvTracker() override { file_.close(); }
  const char* name() const override { return "csv"; }
  const std::string& location() const override { return dir_; }
  void store_init_configuration(const Values& hparams) override { write_hparams_json(dir_, hparams); }

  void log(const Values& values, std::optional<int64_t> step) override {
    // Columns: an object of numbers gives one column per member, "<name>/<member>".
    std::vector<std::pair<std::string, std::string>> cells;
    for (const auto& [k, v] : values) {
      if (v.kind == Value::Kind::Dict) {
        for (const auto& [m, x] : v.dict) cells.emplace_back(k + "/" + m, format_number(x));
      } else if (v.kind == Value::Kind::Null) {
        cells.emplace_back(k, "");
      } else {
        cells.emplace_back(k, python_str(v));
      }
    }
    std::vector<std::string> fresh;
    for (const auto& c : cells)
      if (std::find(columns_.begin(), columns_.end(), c.first) == columns_.end() &&
          std::find(fresh.begin(), fresh.end(), c.first) == fresh.end())
        fresh.push_back(c.first);
    if (!has_header_) {
      columns_ = fresh;
      std::string header = "step,time";
      for (const auto& c : columns_) {
        header += ',';
        header += csv_cell(c);
      }
      file_.append(header + "\n");
      has_header_ = true;
    } else if (!fresh.empty()) {
      widen(fresh);
    }
    std::string row = (step ? std::to_string(*step) : std::string()) + "," + time_text(wall_time());
    for (const auto& col : columns_) {
      row += ",";
      for (const auto& c : cells)
        if (c.first == col) {
          row += csv_cell(c.second);
          break;
        }
    }
    file_.append(row + "\n");
  }

  void finish() override {
    if (!file_.is_open()) return;
    file_.sync();
    file_.close();
  }

 private:
  // New names after the first call: the file is rewritten whole, atomically, with the new columns appended
  // to the header and empty cells in the earlier rows.
  void widen(const std::vector<std::string>& fresh) {
    file_.close();
    auto records = csv_records(read_file(path_));
    std::string extra(fresh.size(), ',');
    std::string out;
    for (size_t i = 0; i < records.size(); ++i) {
      out += records[i];
      if (i == 0) {
        for (const auto& c : fresh) {
          out += ',';
          out += csv_cell(c);
        }
      } else {
        out += extra;
      }
      out += "\n";
    }
    refuse_unless_regular(path_);
    config::write_file_atomic(path_, out);
    columns_.insert(columns_.end(), fresh.begin(), fresh.end());
    file_ = AppendFile::lines(path_, csv_header, "metrics");
  }

  std::string dir_, path_;
  AppendFile file_;
  std::vector<std::string> columns_;
  bool has_header_ = false;
};

}  // namespace

std::unique_ptr<Tracker> make_jsonl(const RunOptions& o) { return std::make_unique<JsonlTracker>(o); }
std::unique_ptr<Tracker> make_csv(const RunOptions& o) { return std::make_unique<CsvTracker>(o); }

}  // namespace acc::tracking
