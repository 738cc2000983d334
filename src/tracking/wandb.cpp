// The wandb tracker: a Weights & Biases offline run, as `wandb.init(mode="offline")` leaves it for `wandb sync`:
//
//   <root>/wandb/offline-run-<YYYYMMDD_HHMMSS>-<run_id>/run-<run_id>.wandb   the run's records
//   <root>/wandb/offline-run-<YYYYMMDD_HHMMSS>-<run_id>/files/               (empty: files wandb would upload)
//
// <root>: init_kwargs.wandb.dir, else WANDB_DIR, else logging_dir, else the working directory (wandb.init's `dir`).
//
// The .wandb file is wandb's transaction log (wandb/sdk/internal/datastore.py, after LevelDB's log format): a
// 7-byte header ":W&B", 0xBEE1 (little endian), version 0; then 32 KiB blocks of chunks, each
//   uint32 CRC-32 (zlib's, of the type byte then the data) | uint16 length | uint8 type | data
// where a record that fits the rest of its block is one FULL chunk (1) and a longer one is cut into FIRST (2),
// MIDDLE (3)... and LAST (4) chunks; a block's last 1..6 bytes, too short for a chunk header, are zeros. Each record
// is a serialized wandb_internal.Record (wandb.proto): a HeaderRecord, the RunRecord (id, project, name, entity,
// tags, notes, group, job type, host, start time, init's config), a ConfigRecord for init_trackers' config, a
// HistoryRecord and a SummaryRecord per history row (its values, _step, _runtime, _timestamp), and the
// RunExitRecord (exit code 0) at end_training. A run that never reaches end_training has no exit record, which
// `wandb sync` uploads as failed, as it does for a crashed wandb run.
//
// Steps follow wandb's run.log: values logged at one step gather in one row, written when a later step (or a log
// without a step, which also advances the step) closes it; a step below the current one is dropped with a warning.
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <acc/config.hpp>
#include <acc/files.hpp>
#include <acc/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <ios>
#include <random>
#include <stdexcept>

#include "tracking/tracking.hpp"
#include "wandb.pb.h"

namespace acc::tracking {

namespace {

namespace wb = ::wandb_internal;

constexpr size_t kBlock = 32768;  // LEVELDBLOG_BLOCK_LEN
constexpr size_t kChunkHeader = 7;  // checksum, length, type
enum ChunkType : unsigned char { kFull = 1, kFirst = 2, kMiddle = 3, kLast = 4 };

// zlib's CRC-32 (IEEE 802.3: reflected polynomial 0xEDB88320, initial value and final xor 0xFFFFFFFF).
uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const unsigned char*>(data);
  crc ^= 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

std::string wandb_log_chunks(uint64_t offset, std::string_view data) {
  std::string out;
  uint64_t at = offset;
  size_t used = 0;
  bool first = true;
  do {
    size_t left = kBlock - at % kBlock;
    if (left < kChunkHeader) {  // too short for a chunk header: zeros to the block's end
      out.append(left, '\0');
      at += left;
      left = kBlock;
    }
    const size_t n = std::min(left - kChunkHeader, data.size() - used);
    const bool last = used + n == data.size();
    const unsigned char type = first && last ? kFull : first ? kFirst : last ? kLast : kMiddle;
    uint32_t crc = crc32_update(0, &type, 1);
    crc = crc32_update(crc, data.data() + used, n);
    put_le(out, crc, 4);
    put_le(out, n, 2);
    out.push_back(static_cast<char>(type));
    out.append(data.substr(used, n));
    at += kChunkHeader + n;
    used += n;
    first = false;
  } while (used < data.size());
  return out;
}

namespace {

// The run's .wandb file: records appended whole (one write each), in 32 KiB blocks.
class TransactionLog {
 public:
  TransactionLog() = default;
  explicit TransactionLog(const std::string& path) : file_(AppendFile::create(path)) {
    std::string header = ":W&B";
    put_le(header, 0xBEE1, 2);  // LEVELDBLOG_HEADER_MAGIC
    header.push_back(0);        // LEVELDBLOG_HEADER_VERSION
    file_.append(header);
    offset_ = header.size();
  }
  // Records numbered in order and appended with one write, so that a crash cuts at most the last of them.
  void write(std::vector<wb::Record>& records) {
    std::string out;
    for (auto& r : records) {
      r.set_num(++num_);
      std::string data;
      if (!r.SerializeToString(&data)) throw std::runtime_error("cannot serialize a W&B record");
      out += wandb_log_chunks(offset_ + out.size(), data);
    }
    file_.append(out);
    offset_ += out.size();
  }
  void close() {
    file_.sync();
    file_.close();
  }
  bool is_open() const { return file_.is_open(); }

 private:
  AppendFile file_;
  uint64_t offset_ = 0;
  int64_t num_ = 0;
};

std::string env_of(const RunOptions& o, const char* key) {
  auto it = o.env.find(key);
  return it == o.env.end() ? std::string() : it->second;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// A setting from init_kwargs.wandb.<key>, else the environment variable wandb reads for it; "" when neither.
std::string setting(const RunOptions& o, const char* key, const char* env) {
  if (auto v = kwarg_string(o, "wandb", key)) return *v;
  std::string v = env ? env_of(o, env) : std::string();
  if (!valid_utf8(v)) throw std::invalid_argument(std::string("wandb: ") + env + " is not UTF-8 text");
  return v;
}

// A JSON value as wandb's value_json: compact, NaN and +-Infinity as Python's json writes them.
void write_json(json::Writer& w, const json::Value& v) {
  switch (v.kind()) {
    case json::Kind::Object:
      w.begin_object();
      for (const auto& [k, x] : v.items()) {
        w.key(k);
        write_json(w, x);
      }
      w.end_object();
      break;
    case json::Kind::Array:
      w.begin_array();
      for (const auto& x : v.elements()) write_json(w, x);
      w.end_array();
      break;
    case json::Kind::Double: w.raw(json_number(v.as_double())); break;
    default: w.value(v); break;
  }
}

std::string value_json(const json::Value& v) {
  json::Writer w(json::Writer::Layout::Tight);
  write_json(w, v);
  return w.str();
}

std::string value_json(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Number: return json_number(v.number);
    case Value::Kind::Bool: return v.flag ? "true" : "false";
    case Value::Kind::String: return json::quote(v.text);
    case Value::Kind::Null: return "null";
    case Value::Kind::Dict: {
      json::Writer w(json::Writer::Layout::Tight);
      w.begin_object();
      for (const auto& [k, x] : v.dict) w.key(k).raw(json_number(x));
      w.end_object();
      return w.str();
    }
  }
  return "null";
}

// Items of a history row or a summary: a group of scalars as one nested key per member, as wandb flattens them.
template <class Item>
void add_items(const Values& row, const std::function<Item*()>& add) {
  for (const auto& [k, v] : row) {
    if (v.kind == Value::Kind::Dict) {
      for (const auto& [member, x] : v.dict) {
        Item* it = add();
        it->add_nested_key(k);
        it->add_nested_key(member);
        it->set_value_json(json_number(x));
      }
    } else {
      Item* it = add();
      it->set_key(k);
      it->set_value_json(value_json(v));
    }
  }
}

std::string random_run_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<uint64_t>(wall_time_ms())};
  static const char* digits = "0123456789abcdefghijklmnopqrstuvwxyz";  // wandb's generate_id: 8 base-36 digits
  std::string s;
  for (int i = 0; i < 8; ++i) s += digits[rng() % 36];
  return s;
}

// wandb's own rules (wandb_settings.validate_run_id, validate_project), so that `wandb sync` takes the run.
void check_run_id(const std::string& id) {
  auto bad = [&](const std::string& why) { throw std::invalid_argument("wandb: run id \"" + id + "\" " + why); };
  if (id.empty()) bad("is empty");
  if (id.front() == ' ' || id.back() == ' ' || id.front() == '\t' || id.back() == '\t')
    bad("starts or ends with whitespace");
  if (id.find_first_of(":;,#?/'\\") != std::string::npos) bad("contains one of : ; , # ? / ' \\");
  if (id.size() > 64) bad("is longer than 64 characters");
}

void check_project(const std::string& project) {
  if (project.size() > 128)
    throw std::invalid_argument("wandb: project name \"" + project + "\" is longer than 128 characters");
  if (project.find_first_of("/\\#?%:") != std::string::npos)
    throw std::invalid_argument("wandb: project name \"" + project +
                                "\" contains one of / \\ # ? % : (W&B refuses them)");
}

// The local time as wandb names run folders (%Y%m%d_%H%M%S).
std::string folder_time(double t) {
  const time_t secs = static_cast<time_t>(t);
  struct tm tm{};
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d_%H%M%S", &tm);
  return buf;
}

class WandbTracker final : public Tracker {
 public:
  explicit WandbTracker(const RunOptions& o) {
    if (o.kwargs.count("project"))
      throw std::invalid_argument(
          "init_kwargs.wandb.project: the W&B project is init_trackers' project_name (Accelerate passes it as "
          "wandb.init(project=...))");
    check_kwargs(o, "wandb", {"name", "entity", "tags", "notes", "group", "job_type", "id", "dir", "mode", "config"});
    // Mode: this build writes offline runs; "disabled" writes nothing, as wandb's disabled mode.
    const bool from_kwargs = kwarg_string(o, "wandb", "mode").has_value();
    const std::string mode = setting(o, "mode", "WANDB_MODE");
    const std::string source = from_kwargs ? "init_kwargs.wandb.mode" : "WANDB_MODE";
    if (mode == "online" || mode == "run" || mode == "shared")
      throw std::invalid_argument("wandb: mode \"" + mode + "\" (from " + source +
                                  ") is not supported: libacc writes offline runs only, which `wandb sync "
                                  "<run folder>` uploads; set it to \"offline\" (or leave it unset)");
    if (!mode.empty() && mode != "offline" && mode != "dryrun" && mode != "disabled")
      throw std::invalid_argument("wandb: unknown mode \"" + mode + "\" (from " + source +
                                  "); libacc takes offline, dryrun (offline) and disabled");
    if (!env_of(o, "WANDB_RESUME").empty())
      throw std::invalid_argument("wandb: WANDB_RESUME is set: resuming a W&B run is not supported by libacc (each "
                                  "init_trackers starts a new offline run); unset it");
    if (mode == "disabled") return;  // nothing is written, as wandb.init(mode="disabled")

    project_ = o.project_name;
    check_project(project_);
    std::string id = setting(o, "id", "WANDB_RUN_ID");
    const bool chosen_id = !id.empty();
    if (chosen_id) check_run_id(id);

    wb::RunRecord run;
    run.set_project(project_);
    run.set_entity(setting(o, "entity", "WANDB_ENTITY"));
    run.set_display_name(setting(o, "name", "WANDB_NAME"));
    run.set_notes(setting(o, "notes", "WANDB_NOTES"));
    run.set_run_group(setting(o, "group", "WANDB_RUN_GROUP"));
    run.set_job_type(setting(o, "job_type", "WANDB_JOB_TYPE"));
    for (const auto& tag : tags(o)) run.add_tags(tag);
    run.set_host(config::host_name());
    if (auto it = o.kwargs.find("config"); it != o.kwargs.end()) {  // wandb.init(config=...)
      const json::Document doc(it->second, "init_kwargs.wandb.config", json::kPythonLimits);
      if (!doc.root().is_null()) {
        if (!doc.root().is_object()) throw std::invalid_argument("init_kwargs.wandb.config must be a JSON object");
        for (const auto& [k, v] : doc.root().items()) {
          auto* item = run.mutable_config()->add_update();
          item->set_key(k);
          item->set_value_json(value_json(v));
        }
      }
    }

    // <root>/wandb/offline-run-<time>-<id>: a new folder (a random id is drawn again if one is taken).
    std::string root = setting(o, "dir", "WANDB_DIR");
    if (root.empty()) root = o.logging_dir.empty() ? "." : o.logging_dir;
    const std::string wandb_dir = name_path(root, "wandb", "the wandb folder", /*nested=*/false);
    config::make_directories(wandb_dir);
    start_ = wall_time();
    for (int attempt = 0;; ++attempt) {
      if (!chosen_id) id = random_run_id();
      dir_ = name_path(wandb_dir, "offline-run-" + folder_time(start_) + "-" + id, "the W&B run folder",
                       /*nested=*/false);
      if (::mkdir(dir_.c_str(), 0755) == 0) break;
      if (errno != EEXIST || chosen_id || attempt >= 100) {
        if (errno == EEXIST)
          throw std::invalid_argument("wandb: the run folder '" + dir_ + "' exists (run id \"" + id +
                                      "\" was started in this second); choose another id");
        io_error("cannot create", dir_, errno);
      }
    }
    if (::mkdir((dir_ + "/files").c_str(), 0755) != 0) io_error("cannot create", dir_ + "/files", errno);
    run_id_ = id;
    log_ = TransactionLog(dir_ + "/run-" + id + ".wandb");

    run.set_run_id(id);
    auto* ts = run.mutable_start_time();
    ts->set_seconds(static_cast<int64_t>(std::floor(start_)));
    ts->set_nanos(static_cast<int32_t>((start_ - std::floor(start_)) * 1e9));
    std::vector<wb::Record> records(2);
    records[0].mutable_header()->mutable_version_info()->set_producer("libacc");
    *records[1].mutable_run() = std::move(run);
    write(records);
  }
  ~WandbTracker() override {
    try {
      finish();
    } catch (...) {
    }
  }
  const char* name() const override { return "wandb"; }
  const std::string& location() const override { return dir_; }

  // wandb.config.update(config): one item per top-level key, nested objects and lists kept.
  void store_config(const Values& hparams, std::string_view config_json) override {
    if (!log_.is_open()) return;
    if (config_json.find_first_not_of(" \t\r\n") == std::string_view::npos) {  // no JSON text given
      store_init_configuration(hparams);
      return;
    }
    const json::Document doc(config_json, "config", json::kPythonLimits);
    if (!doc.root().is_object()) throw std::invalid_argument("config must be a JSON object of hyperparameters");
    std::vector<wb::Record> records(1);
    auto* cfg = records[0].mutable_config();
    for (const auto& [k, v] : doc.root().items()) {
      auto* item = cfg->add_update();
      item->set_key(k);
      item->set_value_json(value_json(v));
    }
    write(records);
  }

  void store_init_configuration(const Values& hparams) override {
    if (!log_.is_open()) return;
    std::vector<wb::Record> records(1);
    auto* cfg = records[0].mutable_config();
    for (const auto& [k, v] : hparams) {
      auto* item = cfg->add_update();
      item->set_key(k);
      item->set_value_json(value_json(v));
    }
    write(records);
  }

  // W&B's own history keys are not the caller's.
  void check(const Values& values) const override {
    if (!log_.is_open()) return;
    for (const auto& [k, v] : values) {
      (void)v;
      if (k == "_step" || k == "_runtime" || k == "_timestamp")
        throw std::invalid_argument("wandb: '" + k + "' is a key W&B sets itself in every history row");
    }
  }

  void log(const Values& values, std::optional<int64_t> step) override {
    if (!log_.is_open()) return;
    if (step) {
      if (*step < step_) {
        std::cerr << "acc: wandb tracker: step " << *step << " is below the current step " << step_
                  << "; W&B's steps only increase, so these values are not written to the W&B run\n";
        return;
      }
      if (*step > step_) {
        write_row();
        step_ = *step;
      }
      merge(values);
    } else {
      merge(values);
      write_row();
      ++step_;
    }
  }

  void finish() override {
    if (!log_.is_open()) return;
    write_row();
    std::vector<wb::Record> records(1);
    auto* exit = records[0].mutable_exit();
    exit->set_exit_code(0);
    exit->set_runtime(static_cast<int32_t>(wall_time() - start_));
    write(records);
    log_.close();
  }

 private:
  static std::vector<std::string> tags(const RunOptions& o) {
    std::vector<std::string> out;
    if (auto it = o.kwargs.find("tags"); it != o.kwargs.end()) {
      const json::Document doc(it->second, "init_kwargs.wandb.tags");
      if (doc.root().is_null()) return out;
      if (!doc.root().is_array()) throw std::invalid_argument("init_kwargs.wandb.tags must be a list of strings");
      for (const auto& t : doc.root().elements()) {
        if (!t.is_string()) throw std::invalid_argument("init_kwargs.wandb.tags must be a list of strings");
        out.push_back(t.as_string());
      }
    } else {
      const std::string env = setting(o, "tags", "WANDB_TAGS");  // comma-separated, as wandb reads it
      for (size_t start = 0; start < env.size();) {
        const size_t end = std::min(env.find(',', start), env.size());
        if (end > start) out.push_back(env.substr(start, end - start));
        start = end + 1;
      }
    }
    for (const auto& t : out)
      if (t.empty() || t.size() > 64)
        throw std::invalid_argument("wandb: tag \"" + t + "\" must have 1 to 64 characters, as W&B requires");
    return out;
  }

  // A later value of a key replaces the row's earlier one, as wandb's row.update.
  void merge(const Values& values) {
    for (const auto& kv : values) {
      auto it = std::find_if(row_.begin(), row_.end(), [&](const auto& p) { return p.first == kv.first; });
      if (it == row_.end()) row_.push_back(kv);
      else it->second = kv.second;
    }
  }

  // The open row as a HistoryRecord at the current step, and its values as the summary's latest.
  void write_row() {
    if (row_.empty()) return;
    const double now = wall_time();
    Values row = row_;
    row.emplace_back("_step", Value::of(static_cast<double>(step_)));
    row.emplace_back("_runtime", Value::of(now - start_));
    row.emplace_back("_timestamp", Value::of(now));
    std::vector<wb::Record> records(2);
    auto* history = records[0].mutable_history();
    add_items<wb::HistoryItem>(row, [&] { return history->add_item(); });
    history->mutable_step()->set_num(step_);
    auto* summary = records[1].mutable_summary();
    add_items<wb::SummaryItem>(row, [&] { return summary->add_update(); });
    write(records);
    row_.clear();
  }

  void write(std::vector<wb::Record>& records) {
    for (auto& r : records) r.mutable__info()->set_stream_id(run_id_);
    log_.write(records);
  }

  std::string dir_, project_, run_id_;
  TransactionLog log_;
  double start_ = 0;
  int64_t step_ = 0;  // wandb's current step (starting_step 0)
  Values row_;        // the row being gathered at step_
};

}  // namespace

std::unique_ptr<Tracker> make_wandb(const RunOptions& o) { return std::make_unique<WandbTracker>(o); }

}  // namespace acc::tracking
