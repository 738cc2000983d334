// libacc configuration: one schema for everything Accelerate configures, the sources a value can come
// from, their precedence, validation with readable errors, and provenance for every resolved value.
// Torch-free; shared by the `acc` launcher and libacc. See docs/configuration.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace acc::config {

// Every failure: the message names the key path, the accepted values and, for unknown keys, a did-you-mean.
// Errors that come from a file start with "path:line: ".
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Sources, lowest precedence first.
enum class Origin { Default, File, Flag, Env, Explicit };
std::string_view origin_name(Origin o);  // "default", "file", "flag", "env", "explicit"

struct Provenance {
  Origin origin;
  std::string where;  // "default", "path/to/file.yaml:12", "--num_processes", "ACCELERATE_MIXED_PRECISION",
                      // "acc_accelerator_create"
};

// The two schemas: what the Accelerator constructor takes (library side), and what Accelerate's
// `default_config.yaml` holds (launcher side).
enum class SchemaKind { Accelerator, Launch };

// One key of a schema, for help texts and documentation.
struct KeyInfo {
  std::string path;                  // "dataloader_config.even_batches"
  std::string type;                  // "bool", "int", "number", "string", "list[string]", "bool[3]", "any", joined
                                     // with " | " ("int | null")
  std::string default_json;          // "true", "null", "\"no\""
  std::vector<std::string> choices;  // accepted strings, if restricted
  std::string range;                 // ">= 1", "0..3", empty if none
  std::string env;                   // environment variable read by the library (Accelerator schema), or empty
  std::vector<std::string> aliases;  // legacy spellings accepted in files (Launch schema)
  std::string help;
};
std::vector<KeyInfo> schema_keys(SchemaKind kind);

// A resolved configuration: every key of its schema has a value (possibly null) and a provenance.
// Cheap to copy (shares immutable state).
class Config {
 public:
  Config();  // an empty Accelerator config holding the defaults

  SchemaKind kind() const;
  bool get_bool(std::string_view path) const;  // dotted path: "dataloader_config.even_batches"
  int64_t get_int(std::string_view path) const;
  double get_double(std::string_view path) const;  // accepts ints too
  std::string get_string(std::string_view path) const;
  std::vector<std::string> get_string_list(std::string_view path) const;  // list[string] and bool[3] ("true"/"false")
  std::string get_json(std::string_view path) const;  // any key or section, as compact JSON text
  // Leaf: false when the value is null (e.g. seed not given). Section: true when any key under it was given by a
  // source other than the defaults.
  bool is_set(std::string_view path) const;
  bool has_key(std::string_view path) const;  // the path names a key or a section of the schema
  Provenance provenance(std::string_view path) const;  // section: the highest-precedence source below it
  // Resolved config as JSON text (pretty-printed, schema order). with_provenance: {"config": {...}, "provenance":
  // {"path": {"origin": "env", "where": "ACCELERATE_MIXED_PRECISION"}, ...}}; the "config" part can be given back
  // as explicit JSON to reproduce the run.
  std::string to_json(bool with_provenance) const;
  std::vector<std::string> keys() const;  // every leaf path, schema order

  struct Impl;

 private:
  explicit Config(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
  friend struct Access;
};

// ---------------------------------------------------------------------------------------------------------------
// Library side: defaults < ACCELERATE_* environment (as set by `accelerate launch` / `acc launch`) < explicit JSON.
// explicit_json may be empty (no explicit values). `where` names the explicit source in provenance and errors.
Config resolve_accelerator(std::string_view explicit_json, const std::map<std::string, std::string>& env,
                           std::string_view where = "acc_accelerator_create");
std::map<std::string, std::string> current_environment();

// ---------------------------------------------------------------------------------------------------------------
// Launcher side: defaults < config file < launcher flags.
struct Flag {
  std::string path;  // launch-schema key, e.g. "num_processes"
  std::string value;  // text, parsed by the key's type ("4", "true", "bf16")
  std::string name;  // as given on the command line, for provenance and errors: "--num-processes"
  Origin origin = Origin::Flag;  // Env for values the launcher read from a job scheduler ("SLURM_NNODES")
};

// The config file `acc launch` uses when none is given (docs/configuration.md, "Which file"):
//   $ACC_CONFIG_FILE (must exist when set; "none": no file), then ${XDG_CACHE_HOME:-~/.cache}/acc/default_config.yaml, then
//   ${HF_HOME:-${XDG_CACHE_HOME:-~/.cache}/huggingface}/accelerate/default_config.yaml.
// Returns nullopt when none exists; `searched` receives the candidates in order.
std::optional<std::string> find_default_config_file(const std::map<std::string, std::string>& env,
                                                    std::vector<std::string>* searched = nullptr);

// Parses a launch config file (JSON by extension `.json`, YAML otherwise; Accelerate's legacy spellings are
// upgraded) and layers defaults < file < flags. config_file may be nullopt (no file).
// With check (the default), the result must describe a job that can start: check_launch() below. Without it
// (`acc config update`, `acc config explain` of a file alone) only keys, types and values are checked, and a file's
// `num_processes: -1` placeholder is kept as -1.
Config resolve_launch(const std::optional<std::string>& config_file, const std::vector<Flag>& flags, bool check = true);

// The settings of a launch config that contradict each other, caught before any process starts; throws Error
// naming both keys and where each value came from: num_processes -1 (not given), machine_rank >= num_machines,
// num_processes not a multiple of num_machines, several machines without main_process_ip or with port 0, use_cpu
// with gpu_ids, more processes per machine than gpu_ids names (GPU types), --multi_gpu with one process,
// parallelism_config without FSDP 2, fsdp_cpu_ram_efficient_loading without fsdp_sync_module_states (FSDP 1),
// fp8 with use_cpu.
void check_launch(const Config& launch);

// The settings of a launch config that acc launch accepts but that mean nothing for the job it starts (a TPU pod's or
// SageMaker's, as accelerate launch ignores them for a local job), each as a message naming the key, its value and
// where it came from. acc launch prints them as warnings.
std::vector<std::string> launch_warnings(const Config& launch);

// A launch config file's text, as `accelerate config` writes one (ClusterConfig.to_yaml_file / to_json_file):
// sorted keys; the keys Accelerate always writes, plus every key a source other than the defaults set (null values
// left out); a section only when something in it was set. YAML unless json.
std::string format_launch_file(const Config& launch, bool json);

// The ACCELERATE_* / FSDP_* / ... variables `accelerate launch` exports for a resolved launch config (everything but
// the per-rank torchrun variables, MASTER_*, and OMP_NUM_THREADS, which the launcher sets).
std::map<std::string, std::string> launch_environment(const Config& launch);

// ---------------------------------------------------------------------------------------------------------------
// JSON Schema (draft 2020-12) of the files of a schema (Launch: default_config.yaml / .json; Accelerator: the
// explicit JSON of acc_accelerator_create), for editors. Every key with its type, default, accepted values, range
// and help; unknown keys are refused (additionalProperties: false); legacy spellings are listed as deprecated.
std::string json_schema(SchemaKind kind);

// The first setting of a resolved Accelerator config that libacc accepts but cannot do yet (FSDP, DeepSpeed,
// Megatron-LM, N-d parallelism, torch.compile, DDP communication hooks, trackers, other c10d backends or init
// methods), as a message naming the key, its value, where it came from and that it is not supported yet;
// nullopt when everything is supported. acc_accelerator_create refuses such a config with ACC_ERR_UNSUPPORTED.
std::optional<std::string> unsupported_setting(const Config& accelerator);

// The settings of a resolved Accelerator config that Accelerate (or torch) accepts with only a warning because they
// do nothing (ddp_kwargs.check_reduction), each as a message naming the key, its value and where it came from.
// acc_accelerator_create prints them once, on the main process.
std::vector<std::string> setting_warnings(const Config& accelerator);

// Sharded data parallelism as an Accelerate configuration asks for it (fsdp_plugin or deepspeed_plugin), resolved to
// a ZeRO stage: FSDP FULL_SHARD -> 3, SHARD_GRAD_OP -> 3 without resharding after forward, NO_SHARD -> 0 (DDP);
// DeepSpeed zero_stage 0-3. unsupported_setting refuses what libacc cannot do of either first.
struct Sharding {
  int stage = 0;  // 0: none (DDP when distributed)
  bool reshard_after_forward = true;  // stage 3: FULL_SHARD (true) or SHARD_GRAD_OP (false)
  bool hybrid = false;  // HYBRID_SHARD(_ZERO2): shard inside a machine, replicate across machines
  // FSDP2's HSDP from parallelism_config: dp_replicate_size groups of dp_shard_size consecutive ranks (0: the hybrid
  // strategies' machines). The accelerator checks their product is the number of processes.
  int64_t dp_replicate_size = 0, dp_shard_size = 0;
  bool offload = false;  // fsdp cpu_offload, DeepSpeed offload_{optimizer,param}_device cpu
  std::string wrap_policy = "NO_WRAP";  // TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP
  std::vector<std::string> wrap_classes;
  bool wrap_classes_set = false;  // false: the model's own no-split classes (Accelerate's default)
  int64_t min_num_params = 0;
  double gradient_clipping = 0;  // DeepSpeed's gradient_clipping: every optimizer step clips to it
  // The MixedPrecision policy ("bfloat16", "float16", "float32"; "" for none): FSDP's mixed_precision_policy, or
  // as Accelerate derives it from mixed_precision (bf16, fp16; fp8 gathers bf16) for FSDP and DeepSpeed.
  std::string param_dtype, reduce_dtype;
  // Stage 3: the next unit's all-gather starts while this unit computes. FSDP1's forward_prefetch and
  // backward_prefetch ("BACKWARD_PRE": when the unit's backward starts, "BACKWARD_POST": when it ends; "": none, for
  // null or NO_PREFETCH); FSDP2 and DeepSpeed ZeRO-3 always prefetch one unit ahead, both ways.
  bool forward_prefetch = false;
  std::string backward_prefetch;
  std::string label;  // for messages: "FSDP FULL_SHARD", "DeepSpeed ZeRO stage 2"
};
Sharding sharding(const Config& accelerator);

// The process mesh a job of `world` processes (`local_world` per machine) runs on, in Accelerate's dimension order
// (src/runtime/mesh.hpp). With use_parallelism_config: its sizes, checked as Accelerate checks them (sizes that
// multiply to 1 replicate over every process, as _validate_accelerator does); throws Error naming each key, its value
// and its source. Without: what the data-parallel strategy implies (DDP: dp_replicate = world; FSDP / ZeRO: dp_shard
// = world; HYBRID_SHARD: dp_shard = the processes of a machine, dp_replicate = the machines).
struct ParallelDims {
  int64_t dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1, sp = 1;
  bool from_parallelism_config = false;
  int64_t pp = 1;  // pipeline parallelism (libacc's own pp_size; the pp dimension is outermost, as torchtitan's)
};
ParallelDims parallel_dims(const Config& accelerator, int64_t world, int64_t local_world);

// The run record libacc writes on the main process into the project directory of a run (acc_run_config.json): the
// resolved config with provenance, the build (acc_build_info JSON), the process and the distributed environment.
// Given back as explicit JSON (whole) it reproduces the config. Written atomically (temporary file + rename); the
// directory is created if needed. Returns the path written. Throws Error when it cannot be written.
inline constexpr const char* kRunRecordName = "acc_run_config.json";
std::string write_run_record(const Config& accelerator, const std::string& dir, std::string_view build_info_json,
                             const std::map<std::string, std::string>& env);

// ---------------------------------------------------------------------------------------------------------------
// Helpers shared with the launcher.
std::optional<bool> parse_bool(std::string_view text);  // Accelerate's str_to_bool: y/yes/t/true/on/1, n/no/f/...
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);  // "" if none close
std::string host_name();  // this machine's name (gethostname), "localhost" when it has none

}  // namespace acc::config
