// Experiment trackers (Accelerate's `log_with`, `init_trackers`, `log`, `end_training`): TensorBoard event
// files, JSON lines, CSV and MLflow's file store. Torch-free: a small library of its own (no LibTorch, no
// precompiled header), used by the Accelerator, which creates the trackers on the main process only.
//
// Every tracker writes under its run directory by appending whole records with one write(2) each on an
// O_APPEND descriptor (no user-space buffer to lose), so a crash can at most cut the last record short;
// files rewritten as a whole (meta.yaml, hparams.json, a widened CSV) are replaced atomically.
//
// Names become paths only through name_path (inside the folder given), and a tracker writes only files it made:
// a new file never takes an existing name, a file is continued or replaced only when it is recognised as the
// tracker's own, and links, FIFOs and other non-regular files are never opened for writing.
//
// Errors: std::invalid_argument for bad values or names, std::ios_base::failure (naming the file) for I/O.
#pragma once
#include <acc/files.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace acc::tracking {

// One value of log() or of the hyperparameters: the types Accelerate's trackers take.
struct Value {
  enum class Kind { Number, Bool, String, Null, Dict };
  Kind kind = Kind::Null;
  double number = 0;   // Number
  bool flag = false;   // Bool
  std::string text;    // String
  std::vector<std::pair<std::string, double>> dict;  // Dict: several scalars under one name (add_scalars)

  static Value of(double v) {
    Value x;
    x.kind = Kind::Number;
    x.number = v;
    return x;
  }
  static Value of(std::string s) {
    Value x;
    x.kind = Kind::String;
    x.text = std::move(s);
    return x;
  }
  static Value of_bool(bool b) {
    Value x;
    x.kind = Kind::Bool;
    x.flag = b;
    return x;
  }
  // A number, or a bool as 1/0; nullopt for the others.
  std::optional<double> scalar() const;
};
using Values = std::vector<std::pair<std::string, Value>>;  // in the caller's order

// log()'s JSON object: numbers, booleans, strings, null, and objects of numbers (several scalars under one
// name). Arrays and deeper objects are errors naming the key. `what` names the argument in messages.
Values parse_values(std::string_view json, const char* what = "values");
// init_trackers' config: a JSON object flattened into hyperparameters ("optimizer.lr" for
// {"optimizer": {"lr": ...}}); lists become their JSON text. Empty text or "null": none.
Values parse_hparams(std::string_view json);

// Numbers as the shortest text that reads back to the same double ("0.001", "3", "1e-05", "nan", "inf").
std::string format_number(double v);
// A value as Python's str() would print it (MLflow parameters): "True", "0.001", "None", the text itself.
std::string python_str(const Value& v);

// One tracker: Accelerate's GeneralTracker (start is the constructor).
class Tracker {
 public:
  virtual ~Tracker() = default;
  virtual const char* name() const = 0;
  // Where it writes: a directory (tensorboard, jsonl, csv), the MLflow run directory or the W&B run folder.
  virtual const std::string& location() const = 0;
  virtual void store_init_configuration(const Values& hparams) = 0;
  // init_trackers' config as the caller gave it (a JSON object; "" for none) beside its flattened form: a tracker
  // that keeps nesting and lists (wandb's config) overrides this; the others take the flattened hyperparameters.
  virtual void store_config(const Values& hparams, std::string_view config_json) {
    (void)config_json;
    store_init_configuration(hparams);
  }
  // Throws for what this tracker would refuse in `values`, before any tracker writes anything.
  virtual void check(const Values& values) const { (void)values; }
  virtual void log(const Values& values, std::optional<int64_t> step) = 0;
  virtual void finish() = 0;  // idempotent
};

// What every tracker is made from.
struct RunOptions {
  std::string project_name;                     // the run directory's name under logging_dir
  std::string logging_dir;                      // "" when none was configured
  std::map<std::string, std::string> env;       // MLFLOW_* and WANDB_* variables
  std::map<std::string, std::string> kwargs;    // init_kwargs[tracker] as JSON text per key
};

// init_kwargs[tracker]: an error for a key not in `allowed`; a string value by key (nullopt when absent,
// an error when not a string); a JSON object of strings by key (MLflow tags).
void check_kwargs(const RunOptions& o, const char* tracker, const std::vector<std::string>& allowed);
std::optional<std::string> kwarg_string(const RunOptions& o, const char* tracker, const std::string& key);
std::vector<std::pair<std::string, std::string>> kwarg_string_map(const RunOptions& o, const char* tracker,
                                                                  const std::string& key);
std::vector<std::pair<std::string, std::string>> parse_string_map(std::string_view json, const std::string& what);

// The one check of every name a tracker turns into a file or folder name (the project name, an add_scalars
// member, an MLflow metric, parameter or tag): `relative` must stay inside `dir`, as one plain name
// (config::child_path) or, with `nested`, plain names joined by '/' (config::inside_path). Returns dir/relative, or
// throws std::invalid_argument naming `what` (the metric) and the name.
std::string name_path(const std::string& dir, std::string_view relative, const std::string& what, bool nested);
// The project name (each tracker's run folder under logging_dir, MLflow's experiment): one plain name.
void check_project_name(const std::string& project_name);

// The trackers libacc has, in the order "all" expands to.
const std::vector<std::string>& tracker_names();
// Accelerate's filter_trackers: "all" expands to every tracker, repeats are dropped, an unknown name is an
// error, and a tracker that needs a logging directory (all but mlflow and wandb) without one is an error.
std::vector<std::string> resolve_log_with(const std::vector<std::string>& names, const std::string& logging_dir);
// Creates (starts) one tracker by name.
std::unique_ptr<Tracker> make_tracker(const std::string& name, const RunOptions& options);

std::unique_ptr<Tracker> make_tensorboard(const RunOptions& options);
std::unique_ptr<Tracker> make_jsonl(const RunOptions& options);
std::unique_ptr<Tracker> make_csv(const RunOptions& options);
std::unique_ptr<Tracker> make_mlflow(const RunOptions& options);
std::unique_ptr<Tracker> make_wandb(const RunOptions& options);

// The trackers of one run (Accelerator.trackers).
class TrackerSet {
 public:
  // init_kwargs_json: {"<tracker>": {...}} (Accelerate's init_kwargs); "" for none.
  TrackerSet(const std::vector<std::string>& names, const std::string& project_name, const std::string& logging_dir,
             std::string_view init_kwargs_json, const std::map<std::string, std::string>& env);
  void store_init_configuration(const Values& hparams, std::string_view config_json = {});
  void log(const Values& values, std::optional<int64_t> step);
  void finish();
  const std::vector<std::unique_ptr<Tracker>>& trackers() const { return trackers_; }
  bool finished() const { return finished_; }

 private:
  std::vector<std::unique_ptr<Tracker>> trackers_;
  bool finished_ = false;
};

// TensorBoard's record framing (tensorboard.cpp): CRC-32C, its masked form, and one framed record.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);
std::string tfrecord(std::string_view data);

// W&B's .wandb framing (wandb.cpp): one record as the chunks the file holds from byte `offset` on (zeros to the end
// of a 32 KiB block too short for a chunk header, then FULL, or FIRST, MIDDLE..., LAST chunks of
// CRC-32 | length | type | data).
std::string wandb_log_chunks(uint64_t offset, std::string_view data);

// A JSON number (NaN, Infinity, -Infinity for the non-finite, as Python's json module writes them).
std::string json_number(double v);

// --- file helpers shared by the trackers (files.cpp) ---

double wall_time();       // seconds since the epoch
int64_t wall_time_ms();   // milliseconds since the epoch

// A file of records opened for appending. Opening refuses a symbolic link and anything but a regular file (a FIFO
// would block), so nothing outside the folder is written through a link.
class AppendFile {
 public:
  // Tells the tracker's own file from someone else's by its first line (at most 4 KiB of it, newline excluded).
  using Recognise = bool (*)(std::string_view first_line);

  AppendFile() = default;
  // A new file: refused (EEXIST) when `path` exists, so no existing file is ever written.
  static AppendFile create(const std::string& path);
  // A file of lines, created or continued (a resumed run). An existing file that is not empty must be recognised by
  // `ours` (else std::invalid_argument naming it: a file of the user's is never appended to or cut); then a last line
  // a crash cut short (the bytes after the final newline) is dropped.
  static AppendFile lines(const std::string& path, Recognise ours, const char* kind);
  ~AppendFile();
  AppendFile(AppendFile&& o) noexcept;
  AppendFile& operator=(AppendFile&& o) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  void append(std::string_view record);  // one write(2)
  void sync();
  void close();
  const std::string& path() const { return path_; }
  bool is_open() const { return fd_ >= 0; }

 private:
  AppendFile(const std::string& path, int flags);
  std::string path_;
  int fd_ = -1;
};

// Throws std::invalid_argument when `path` exists as anything but a regular file (a symbolic link, a FIFO, a
// folder): what a tracker replaces (write_file_atomic) or reads must be a plain file of its own.
void refuse_unless_regular(const std::string& path);

[[noreturn]] void io_error(const std::string& what, const std::string& path, int err);
using config::read_file;  // a regular file's bytes (never a FIFO or device), at most max_bytes
bool exists(const std::string& path);
std::string absolute_path(const std::string& path);

}  // namespace acc::tracking
