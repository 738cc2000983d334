// The two schemas. Accelerator: the keys of the JSON given to acc_accelerator_create (Accelerate's constructor
// arguments, its dataclasses and kwargs handlers, utils/dataclasses.py), each with the environment variable the
// library reads. Launch: the keys of Accelerate's default_config.yaml (commands/config/config_args.py).
#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "internal.hpp"

namespace acc::config::detail {
namespace {

constexpr unsigned B = tBool, I = tInt, N = tNum, S = tStr, L = tList, T = tTriple, A = tAny, Z = tNull;

struct K {
  KeySpec k;
  K(std::string path, unsigned types, std::string_view def_json, std::string help) {
    k.path = std::move(path);
    k.types = types;
    k.def = parse_json(def_json);
    k.help = std::move(help);
  }
  K&& one_of(std::initializer_list<const char*> c, bool ci = false) && {
    for (const char* s : c) k.choices.emplace_back(s);
    k.ci = ci;
    return std::move(*this);
  }
  K&& min(double v) && {
    k.min = v;
    return std::move(*this);
  }
  K&& range(double lo, double hi) && {
    k.min = lo;
    k.max = hi;
    return std::move(*this);
  }
  K&& env(const char* e) && {
    k.env = e;
    return std::move(*this);
  }
  K&& alias(const char* a) && {
    k.aliases.emplace_back(a);
    return std::move(*this);
  }
  K&& fix(FixFn f) && {
    k.fix = f;
    return std::move(*this);
  }
};

// Legacy integer spellings of torch enums (FSDP sharding strategy 1..5, backward prefetch, state dict type): the
// integer is the 1-based position in the key's choices, as Accelerate maps them.
std::optional<std::string> enum_index(const KeySpec& k, Node& n) {
  if (n.kind == Kind::Int) n = Node::string(k.choices.at(static_cast<size_t>(n.i - 1)));
  return std::nullopt;
}

// A host name or IP address: what getaddrinfo can take, so a mistake is named here rather than by the launch.
std::optional<std::string> host_address(const KeySpec& k, Node& n) {
  if (n.kind != Kind::String) return std::nullopt;
  if (n.s.empty() || n.s.size() > limits::kHostBytes)
    return "'" + k.path + "' must be a host name or IP address of 1 to " + std::to_string(limits::kHostBytes) +
           " bytes; got " + std::to_string(n.s.size()) + " bytes";
  for (char c : n.s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && std::string_view(".-_:%[]").find(c) == std::string_view::npos)
      return "'" + k.path + "' must be a host name or IP address; got " + brief_value(n);
  return std::nullopt;
}

// A list of class names is written comma-separated, as `accelerate config` writes it.
std::optional<std::string> join_list(const KeySpec&, Node& n) {
  if (n.kind == Kind::List) {
    std::vector<std::string> parts;
    for (const Node& e : n.list) parts.push_back(e.s);
    n = Node::string(join(parts, ","));
  }
  return std::nullopt;
}

const std::initializer_list<const char*> kPrecision = {"no", "fp16", "bf16", "fp8"};
const std::initializer_list<const char*> kDynamoBackends = {
    "NO",          "EAGER",  "AOT_EAGER", "INDUCTOR", "AOT_TS_NVFUSER",          "NVPRIMS_NVFUSER",     "CUDAGRAPHS",
    "OFI",         "FX2TRT", "ONNXRT",    "TENSORRT", "AOT_TORCHXLA_TRACE_ONCE", "TORCHXLA_TRACE_ONCE", "TVM",
    "HPU_BACKEND", "NEURON"};
const std::initializer_list<const char*> kDynamoModes = {"default", "reduce-overhead", "max-autotune"};
const std::initializer_list<const char*> kSharding = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                                      "HYBRID_SHARD_ZERO2"};
const std::initializer_list<const char*> kReshard = {"FULL_SHARD",   "SHARD_GRAD_OP",      "NO_SHARD",
                                                     "HYBRID_SHARD", "HYBRID_SHARD_ZERO2", "NO_RESHARD"};
const std::initializer_list<const char*> kPrefetch = {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"};
const std::initializer_list<const char*> kStateDict = {"FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"};
const std::initializer_list<const char*> kWrap = {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"};
const std::initializer_list<const char*> kOffload = {"none", "cpu", "nvme"};
const std::initializer_list<const char*> kFp8Backend = {"AO", "TE", "MSAMP"};
const std::initializer_list<const char*> kFp8Format = {"HYBRID", "E4M3", "E5M2"};
const std::initializer_list<const char*> kAmaxAlgo = {"max", "most_recent"};
const std::initializer_list<const char*> kOptLevel = {"O1", "O2"};

Schema build(SchemaKind kind, std::vector<K> table) {
  Schema s;
  s.kind = kind;
  for (K& e : table) {
    KeySpec k = std::move(e.k);
    size_t dot = k.path.rfind('.');
    k.name = dot == std::string::npos ? k.path : k.path.substr(dot + 1);
    k.parent = dot == std::string::npos ? "" : k.path.substr(0, dot);
    // Register the sections on the way down.
    std::string parent;
    size_t start = 0;
    for (;;) {
      size_t d = k.path.find('.', start);
      if (d == std::string::npos) break;
      std::string sec = k.path.substr(0, d);
      std::string name = k.path.substr(start, d - start);
      auto& kids = s.children[parent];
      if (std::find(kids.begin(), kids.end(), name) == kids.end()) {
        kids.push_back(name);
        s.sections.push_back(sec);
      }
      parent = sec;
      start = d + 1;
    }
    s.children[parent].push_back(k.name);
    // A default the key itself would refuse is a bug in this table.
    Node out;
    if (auto err = coerce(k, k.def, out)) throw std::logic_error("schema default: " + *err);
    k.def = out;
    s.index[k.path] = s.keys.size();
    s.keys.push_back(std::move(k));
  }
  return s;
}

Schema make_accelerator() {
  std::vector<K> t;
  auto add = [&](K&& k) { t.push_back(std::move(k)); };
  // --- Accelerator(...) arguments
  add(K("device_placement", B, "true", "move models and batches to the accelerator's device"));
  add(K("cpu", B, "false", "force the CPU even when an accelerator is present").env("ACCELERATE_USE_CPU"));
  add(K("mixed_precision", S, "\"no\"", "mixed precision mode")
          .one_of(kPrecision, true)
          .env("ACCELERATE_MIXED_PRECISION"));
  add(K("gradient_accumulation_steps", I, "1", "steps to accumulate gradients over before an optimizer step")
          .min(1)
          .env("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"));
  add(K("seed", I | Z, "null", "seed for every RNG (set_seed) at creation; null: leave the RNGs alone"));
  add(K("project_dir", S | Z, "null", "directory for checkpoints and logs (same as project_config.project_dir)"));
  add(K("resume_from_checkpoint", S | Z, "null",
        "what acc_resume_from_checkpoint loads: \"latest\" (the newest complete checkpoint under "
        "project_dir/checkpoints; none yet: a fresh start) or a checkpoint directory"));
  add(K("step_scheduler_with_optimizer", B, "true", "step the LR scheduler only when the optimizer stepped"));
  add(K("rng_types", L | Z, "[\"generator\"]", "RNGs synchronized across processes at the start of every epoch")
          .one_of({"torch", "cuda", "xla", "generator", "mlu", "sdaa", "musa", "npu", "xpu", "hpu", "neuron"}));
  add(K("log_with", L | Z, "null", "experiment trackers to log to")
          .one_of({"all", "jsonl", "csv", "tensorboard", "wandb", "trackio", "aim", "comet_ml", "mlflow", "clearml",
                   "dvclive", "swanlab"}));
  add(K("debug", B, "false", "check that collectives get matching shapes on every rank").env("ACCELERATE_DEBUG_MODE"));
  add(K("enable_cpu_affinity", B, "false", "pin each process to the CPU cores near its GPU")
          .env("ACCELERATE_CPU_AFFINITY"));
  add(K("downcast_bf16", B, "false", "XLA: with bf16, also downcast float64 tensors").env("ACCELERATE_DOWNCAST_BF16"));
  // --- DataLoaderConfiguration
  add(K("dataloader_config.split_batches", B, "false",
        "split each batch across processes instead of drawing one batch per process"));
  add(K("dataloader_config.dispatch_batches", B | Z, "null",
        "rank 0 reads the data and sends each rank its slice; null: true for iterable datasets"));
  add(K("dataloader_config.even_batches", B, "true", "repeat samples from the start so every rank gets full batches"));
  add(K("dataloader_config.use_seedable_sampler", B, "false", "shuffle with a sampler seeded by data_seed + epoch"));
  add(K("dataloader_config.data_seed", I | Z, "null", "seed of the seedable sampler; null: the initial torch seed"));
  add(K("dataloader_config.non_blocking", B, "false", "copy batches to the device asynchronously"));
  add(K("dataloader_config.use_stateful_dataloader", B, "false", "save and restore the data loader position"));
  // --- data: a files dataset's pipeline (acc_dataset_from_config; the options of acc_dataset_from_files)
  add(K("data.files", S | L | Z, "null",
        "dataset files or folders (JSONL, CSV, Parquet, Arrow, save_to_disk), read in order"));
  add(K("data.format", S, "\"auto\"", "file format; auto: by extension or content")
          .one_of({"auto", "jsonl", "json", "csv", "parquet", "arrow", "arrow_file"}));
  add(K("data.columns", L | Z, "null", "read only these columns; null: all"));
  add(K("data.mode", S, "\"sft\"", "what rows become: TRL's SFT preparation, tokenized text, or run_clm's blocks")
          .one_of({"sft", "tokenize", "group_texts"}));
  add(K("data.text_column", S, "\"text\"", "the text column (SFTConfig.dataset_text_field)"));
  add(K("data.add_special_tokens", B, "true", "tokenize: add the tokenizer's special tokens"));
  add(K("data.truncation", B, "false", "tokenize: truncate to max_length"));
  add(K("data.max_length", I | Z, "null", "longest row; null: the mode's default (sft 1024, tokenize none)").min(1));
  add(K("data.truncation_mode", S, "\"keep_start\"", "sft: keep the start or the end of a long row")
          .one_of({"keep_start", "keep_end"}));
  add(K("data.block_size", I, "1024", "group_texts: tokens per block").min(1));
  add(K("data.map_batch_size", I, "1000", "rows per datasets.map batch (group_texts and packing work within one)")
          .min(1));
  add(K("data.packing", B, "false", "sft: pack several rows into one of max_length tokens"));
  add(K("data.packing_strategy", S, "\"bfd\"", "sft packing: best fit decreasing, with long rows split, or wrapped")
          .one_of({"bfd", "bfd_split", "wrapped"}));
  add(K("data.completion_only_loss", B | Z, "null",
        "sft: loss on the completion only; null: on for prompt/completion rows"));
  add(K("data.assistant_only_loss", B, "false", "sft: loss on the assistant's tokens only ({% generation %} blocks)"));
  add(K("data.chat_template", S | Z, "null", "sft: a chat template or its name; null: the tokenizer's"));
  add(K("data.padding_free", B, "false", "sft: batches as one row with position_ids per sample"));
  add(K("data.collator", S | Z, "null",
        "collator; null: trl for sft, default for group_texts, language_modeling for tokenize")
          .one_of({"trl", "default", "language_modeling", "with_padding"}));
  add(K("data.padding_side", S | Z, "null", "pad on the left or right; null: the tokenizer's (TRL's collator: right)")
          .one_of({"left", "right"}));
  add(K("data.pad_to_multiple_of", I | Z, "null", "pad batch lengths to a multiple of this").min(1));
  add(K("data.threads", I, "1", "preprocessing threads (the result does not depend on them)").range(1, 256));
  add(K("data.cache_dir", S | Z, "null", "keep processed rows here, keyed by the files, tokenizer and settings"));
  // --- ProjectConfiguration
  add(K("project_config.project_dir", S | Z, "null", "directory for checkpoints and logs"));
  add(K("project_config.logging_dir", S | Z, "null", "directory for tracker logs; null: project_dir"));
  add(K("project_config.automatic_checkpoint_naming", B, "false", "name checkpoints checkpoints/checkpoint_<i>"));
  add(K("project_config.total_limit", I | Z, "null", "keep at most this many automatic checkpoints").min(0));
  add(K("project_config.iteration", I, "0", "number of the next automatic checkpoint").min(0));
  add(K("project_config.save_on_each_node", B, "false", "multi-node: save on the main process of every node"));
  // --- GradientAccumulationPlugin
  add(K("gradient_accumulation_plugin.num_steps", I | Z, "null",
        "steps to accumulate over; exclusive with gradient_accumulation_steps")
          .min(1));
  add(K("gradient_accumulation_plugin.adjust_scheduler", B, "true", "step the scheduler once per accumulated step"));
  add(K("gradient_accumulation_plugin.sync_with_dataloader", B, "true", "force a sync at the end of the data loader"));
  add(K("gradient_accumulation_plugin.sync_each_batch", B, "false", "synchronize gradients on every batch"));
  // --- DistributedDataParallelKwargs
  add(K("ddp_kwargs.dim", I, "0", "batch dimension DDP scatters on"));
  add(K("ddp_kwargs.broadcast_buffers", B, "true", "broadcast module buffers from rank 0 at every forward"));
  add(K("ddp_kwargs.bucket_cap_mb", N, "25", "gradient bucket size in MiB").min(0));
  add(K("ddp_kwargs.find_unused_parameters", B, "false", "tolerate parameters that get no gradient"));
  add(K("ddp_kwargs.check_reduction", B, "false", "deprecated DDP option, kept for compatibility"));
  add(K("ddp_kwargs.gradient_as_bucket_view", B, "false", "let gradients alias the communication buckets"));
  add(K("ddp_kwargs.static_graph", B, "false", "the set of used parameters never changes between iterations"));
  add(K("ddp_kwargs.comm_hook", S, "\"no\"", "gradient communication hook")
          .one_of({"no", "fp16", "bf16", "power_sgd", "batched_power_sgd"}, true));
  add(K("ddp_kwargs.comm_wrapper", S, "\"no\"", "compression wrapped around comm_hook")
          .one_of({"no", "fp16", "bf16"}, true));
  add(K("ddp_kwargs.comm_state_option", A, "{}", "options of the PowerSGD state"));
  // --- GradScalerKwargs
  add(K("grad_scaler_kwargs.init_scale", N, "65536.0", "initial loss scale (fp16)").min(0));
  add(K("grad_scaler_kwargs.growth_factor", N, "2.0", "scale multiplier after growth_interval clean steps").min(1));
  add(K("grad_scaler_kwargs.backoff_factor", N, "0.5", "scale multiplier after an overflow").range(0, 1));
  add(K("grad_scaler_kwargs.growth_interval", I, "2000", "clean steps between scale increases").min(1));
  add(K("grad_scaler_kwargs.enabled", B, "true", "use loss scaling with fp16"));
  // --- AutocastKwargs
  add(K("autocast_kwargs.enabled", B, "true", "autocast forward passes under mixed precision"));
  add(K("autocast_kwargs.cache_enabled", B | Z, "true",
        "cache casted weights inside autocast (Accelerate's null means the torch default, true)"));
  // --- InitProcessGroupKwargs
  add(K("init_process_group_kwargs.backend", S | Z, "null", "c10d backend; null: nccl for CUDA devices, gloo for CPU"));
  add(K("init_process_group_kwargs.init_method", S | Z, "null", "rendezvous URL; null: env:// (MASTER_ADDR/PORT)"));
  add(K("init_process_group_kwargs.timeout", N | Z, "null",
        "collective timeout in seconds; null: 600 for nccl, 1800 otherwise")
          .range(limits::kTimeoutMinSeconds, limits::kTimeoutMaxSeconds));
  // --- ProfileKwargs
  add(K("profile_kwargs.activities", L | Z, "null", "devices to profile")
          .one_of({"cpu", "cuda", "xpu", "mtia", "hpu"}));
  add(K("profile_kwargs.schedule_option", A, "null", "wait/warmup/active/repeat/skip_first of the profiler schedule"));
  add(K("profile_kwargs.record_shapes", B, "false", "record input shapes"));
  add(K("profile_kwargs.profile_memory", B, "false", "track tensor memory"));
  add(K("profile_kwargs.with_stack", B, "false", "record source locations"));
  add(K("profile_kwargs.with_flops", B, "false", "estimate FLOPs"));
  add(K("profile_kwargs.with_modules", B, "false", "record the module hierarchy"));
  add(K("profile_kwargs.output_trace_dir", S | Z, "null", "write Chrome traces here"));
  // --- TorchDynamoPlugin
  add(K("dynamo_plugin.backend", S, "\"NO\"", "torch.compile backend; NO disables compilation")
          .one_of(kDynamoBackends, true)
          .env("ACCELERATE_DYNAMO_BACKEND"));
  add(K("dynamo_plugin.mode", S, "\"default\"", "torch.compile mode")
          .one_of(kDynamoModes)
          .env("ACCELERATE_DYNAMO_MODE"));
  add(K("dynamo_plugin.fullgraph", B, "false", "compile the whole model as one graph")
          .env("ACCELERATE_DYNAMO_USE_FULLGRAPH"));
  add(K("dynamo_plugin.dynamic", B | Z, "null", "trace with dynamic shapes; null: automatic")
          .env("ACCELERATE_DYNAMO_USE_DYNAMIC"));
  add(K("dynamo_plugin.options", A, "null", "backend options"));
  add(K("dynamo_plugin.disable", B, "false", "make compilation a no-op"));
  add(K("dynamo_plugin.use_regional_compilation", B, "false", "compile repeated blocks once")
          .env("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"));
  // --- FullyShardedDataParallelPlugin
  add(K("use_fsdp", B, "false", "shard parameters, gradients and optimizer state (FSDP); implied by fsdp_plugin")
          .env("ACCELERATE_USE_FSDP"));
  add(K("fsdp_plugin.fsdp_version", I, "1", "FSDP version").range(1, 2).env("FSDP_VERSION"));
  add(K("fsdp_plugin.sharding_strategy", S | I | Z, "null",
        "FSDP1 sharding strategy (deprecated for reshard_after_forward)")
          .one_of(kSharding, true)
          .range(1, 5)
          .fix(enum_index)
          .env("FSDP_SHARDING_STRATEGY"));
  add(K("fsdp_plugin.reshard_after_forward", B | S | Z, "null",
        "free gathered parameters after forward; FSDP1 takes a sharding strategy; null: true / FULL_SHARD")
          .one_of(kReshard, true)
          .env("FSDP_RESHARD_AFTER_FORWARD"));
  add(K("fsdp_plugin.backward_prefetch", S | I | Z, "null", "FSDP1 backward prefetch policy")
          .one_of(kPrefetch, true)
          .range(1, 3)
          .fix(enum_index)
          .env("FSDP_BACKWARD_PREFETCH"));
  add(K("fsdp_plugin.mixed_precision_policy", S | A, "null",
        "fp8/fp16/bf16/fp32, or {param_dtype, reduce_dtype, buffer_dtype}"));
  add(K("fsdp_plugin.auto_wrap_policy", S, "\"NO_WRAP\"", "how modules are wrapped into FSDP units")
          .one_of(kWrap, true)
          .env("FSDP_AUTO_WRAP_POLICY"));
  add(K("fsdp_plugin.cpu_offload", B, "false", "keep parameters and gradients on the CPU").env("FSDP_OFFLOAD_PARAMS"));
  add(K("fsdp_plugin.ignored_modules", S | Z, "null", "regex of module names FSDP leaves alone")
          .env("FSDP_IGNORED_MODULES"));
  add(K("fsdp_plugin.state_dict_type", S | I | Z, "null",
        "checkpoint layout; null: FULL_STATE_DICT (FSDP1), SHARDED_STATE_DICT (FSDP2)")
          .one_of(kStateDict, true)
          .range(1, 3)
          .fix(enum_index)
          .env("FSDP_STATE_DICT_TYPE"));
  add(K("fsdp_plugin.limit_all_gathers", B, "true", "limit in-flight all-gathers (FSDP1)"));
  add(K("fsdp_plugin.use_orig_params", B | Z, "null", "FSDP1: keep the original parameters visible")
          .env("FSDP_USE_ORIG_PARAMS"));
  add(K("fsdp_plugin.sync_module_states", B | Z, "null", "FSDP1: broadcast module states from rank 0")
          .env("FSDP_SYNC_MODULE_STATES"));
  add(K("fsdp_plugin.forward_prefetch", B | Z, "null", "FSDP1: prefetch the next all-gather in forward")
          .env("FSDP_FORWARD_PREFETCH"));
  add(K("fsdp_plugin.activation_checkpointing", B, "false", "recompute activations in backward")
          .env("FSDP_ACTIVATION_CHECKPOINTING"));
  add(K("fsdp_plugin.activation_checkpointing_offload", B, "false",
        "FSDP2: keep each checkpointed block's input in CPU memory until backward")
          .env("FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD"));
  add(K("fsdp_plugin.cpu_ram_efficient_loading", B | Z, "null", "only rank 0 loads the checkpoint into CPU memory")
          .env("FSDP_CPU_RAM_EFFICIENT_LOADING"));
  add(K("fsdp_plugin.transformer_cls_names_to_wrap", L | Z, "null", "module class names wrapped as units")
          .env("FSDP_TRANSFORMER_CLS_TO_WRAP"));
  add(K("fsdp_plugin.min_num_params", I | Z, "null", "SIZE_BASED_WRAP: minimum parameters of a unit")
          .min(0)
          .env("FSDP_MIN_NUM_PARAMS"));
  // --- DeepSpeedPlugin (ZeRO)
  add(K("use_deepspeed", B, "false", "ZeRO sharding as DeepSpeed configures it; implied by deepspeed_plugin")
          .env("ACCELERATE_USE_DEEPSPEED"));
  add(K("deepspeed_plugin.hf_ds_config", S | A, "null", "DeepSpeed config file path or object")
          .env("ACCELERATE_DEEPSPEED_CONFIG_FILE"));
  add(K("deepspeed_plugin.zero_stage", I, "2", "ZeRO stage").range(0, 3).env("ACCELERATE_DEEPSPEED_ZERO_STAGE"));
  add(K("deepspeed_plugin.gradient_clipping", N | Z, "null", "clip gradients to this norm")
          .min(0)
          .env("ACCELERATE_GRADIENT_CLIPPING"));
  add(K("deepspeed_plugin.offload_optimizer_device", S, "\"none\"", "where optimizer state lives")
          .one_of(kOffload, true)
          .env("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"));
  add(K("deepspeed_plugin.offload_param_device", S, "\"none\"", "where parameters live (stage 3)")
          .one_of(kOffload, true)
          .env("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE"));
  add(K("deepspeed_plugin.offload_optimizer_nvme_path", S | Z, "null", "NVMe path for optimizer state")
          .env("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH"));
  add(K("deepspeed_plugin.offload_param_nvme_path", S | Z, "null", "NVMe path for parameters")
          .env("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH"));
  add(K("deepspeed_plugin.zero3_init_flag", B | Z, "null", "stage 3: create models already sharded")
          .env("ACCELERATE_DEEPSPEED_ZERO3_INIT"));
  add(K("deepspeed_plugin.zero3_save_16bit_model", B, "false", "stage 3: save a consolidated 16-bit model")
          .env("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"));
  add(K("deepspeed_plugin.transformer_moe_cls_names", S | Z, "null", "comma-separated MoE layer class names")
          .env("ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES"));
  // --- Megatron-LM (set by accelerate launch --use_megatron_lm; libacc refuses it)
  add(K("use_megatron_lm", B, "false", "tensor/pipeline parallelism through Megatron-LM")
          .env("ACCELERATE_USE_MEGATRON_LM"));
  // --- FP8 recipes (TERecipeKwargs, AORecipeKwargs, MSAMPRecipeKwargs)
  add(K("fp8_recipe_kwargs.backend", S | Z, "null", "FP8 implementation; null: the first one available")
          .one_of(kFp8Backend, true)
          .env("ACCELERATE_FP8_BACKEND"));
  add(K("fp8_recipe_kwargs.fp8_format", S, "\"HYBRID\"", "E4M3 forward and E5M2 backward (HYBRID), or one format")
          .one_of(kFp8Format, true)
          .env("ACCELERATE_FP8_FORMAT"));
  add(K("fp8_recipe_kwargs.margin", I, "0", "scaling factor margin").env("ACCELERATE_FP8_MARGIN"));
  add(K("fp8_recipe_kwargs.interval", I, "1", "steps between scaling factor updates")
          .min(1)
          .env("ACCELERATE_FP8_INTERVAL"));
  add(K("fp8_recipe_kwargs.amax_history_len", I, "1024", "amax history length")
          .min(1)
          .env("ACCELERATE_FP8_AMAX_HISTORY_LEN"));
  add(K("fp8_recipe_kwargs.amax_compute_algo", S, "\"most_recent\"", "amax from the history")
          .one_of(kAmaxAlgo)
          .env("ACCELERATE_FP8_AMAX_COMPUTE_ALGO"));
  add(K("fp8_recipe_kwargs.override_linear_precision", T, "[false, false, false]",
        "run the fprop, dgrad, wgrad GEMMs in higher precision (env: ACCELERATE_FP8_OVERRIDE_{FPROP,DGRAD,WGRAD})"));
  add(K("fp8_recipe_kwargs.use_autocast_during_eval", B, "false", "FP8 autocast in evaluation too")
          .env("ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL"));
  add(K("fp8_recipe_kwargs.use_mxfp8_block_scaling", B, "false", "MXFP8 block scaling (TE)")
          .env("ACCELERATE_FP8_USE_MXFP8_BLOCK_SCALING"));
  add(K("fp8_recipe_kwargs.opt_level", S, "\"O2\"", "MS-AMP optimization level")
          .one_of(kOptLevel, true)
          .env("ACCELERATE_FP8_OPT_LEVEL"));
  add(K("fp8_recipe_kwargs.pad_inner_dim", B, "true", "pad inner GEMM dimensions to multiples of 16 (AO)")
          .env("ACCELERATE_FP8_PAD_INNER_DIM"));
  add(K("fp8_recipe_kwargs.enable_fsdp_float8_all_gather", B, "true", "all-gather FSDP2 parameters in FP8 (AO)")
          .env("ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER"));
  // --- ParallelismConfig
  add(K("use_parallelism_config", B, "false", "N-d parallelism from parallelism_config; implied by it")
          .env("ACCELERATE_USE_PARALLELISM_CONFIG"));
  add(K("parallelism_config.dp_replicate_size", I, "1", "replicated data-parallel degree")
          .min(1)
          .env("PARALLELISM_CONFIG_DP_REPLICATE_SIZE"));
  add(K("parallelism_config.dp_shard_size", I, "1", "sharded data-parallel (FSDP) degree")
          .min(1)
          .env("PARALLELISM_CONFIG_DP_SHARD_SIZE"));
  add(K("parallelism_config.tp_size", I, "1", "tensor-parallel degree").min(1).env("PARALLELISM_CONFIG_TP_SIZE"));
  add(K("parallelism_config.cp_size", I, "1", "context-parallel degree").min(1).env("PARALLELISM_CONFIG_CP_SIZE"));
  add(K("parallelism_config.cp_backend", S, "\"torch\"", "context-parallel implementation")
          .one_of({"torch"})
          .env("PARALLELISM_CONFIG_CP_BACKEND"));
  add(K("parallelism_config.cp_comm_strategy", S, "\"allgather\"", "context-parallel communication")
          .one_of({"allgather", "alltoall"})
          .env("PARALLELISM_CONFIG_CP_COMM_STRATEGY"));
  add(K("parallelism_config.sp_size", I, "1", "sequence-parallel degree").min(1).env("PARALLELISM_CONFIG_SP_SIZE"));
  add(K("parallelism_config.sp_backend", S, "\"deepspeed\"", "sequence-parallel implementation")
          .one_of({"deepspeed"})
          .env("PARALLELISM_CONFIG_SP_BACKEND"));
  add(K("parallelism_config.sp_seq_length", I | Z, "null", "fixed sequence length for sequence parallelism")
          .min(1)
          .env("PARALLELISM_CONFIG_SP_SEQ_LENGTH"));
  add(K("parallelism_config.sp_seq_length_is_variable", B, "true", "sequence length may change between batches")
          .env("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE"));
  add(K("parallelism_config.sp_attn_implementation", S, "\"sdpa\"", "attention kernel for sequence parallelism")
          .env("PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION"));
  // Pipeline parallelism: libacc's own keys (Accelerate has no pp; torchtitan's [parallelism] pipeline_parallel_*).
  add(K("parallelism_config.pp_size", I, "1", "pipeline-parallel degree (libacc's own)")
          .min(1)
          .env("PARALLELISM_CONFIG_PP_SIZE"));
  add(K("parallelism_config.pp_microbatches", I, "1",
        "micro-batches a pipeline step splits the batch into (libacc's own)")
          .min(1)
          .env("PARALLELISM_CONFIG_PP_MICROBATCHES"));
  add(K("parallelism_config.pp_schedule", S, "\"1F1B\"", "pipeline schedule (libacc's own)")
          .one_of({"GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble"})
          .env("PARALLELISM_CONFIG_PP_SCHEDULE"));
  add(K("parallelism_config.pp_stages_per_rank", I, "1", "pipeline stages per rank (libacc's own)")
          .min(1)
          .env("PARALLELISM_CONFIG_PP_STAGES_PER_RANK"));
  add(K("parallelism_config.pp_split_points", L, "[]",
        "where stages 1, 2, ... begin: block indices or blocks' names (libacc's own)")
          .env("PARALLELISM_CONFIG_PP_SPLIT_POINTS"));
  return build(SchemaKind::Accelerator, std::move(t));
}

Schema make_launch() {
  std::vector<K> t;
  auto add = [&](K&& k) { t.push_back(std::move(k)); };
  add(K("compute_environment", S, "\"LOCAL_MACHINE\"", "where the job runs (acc runs LOCAL_MACHINE only)")
          .one_of({"LOCAL_MACHINE", "AMAZON_SAGEMAKER"}, true));
  add(K("distributed_type", S, "\"NO\"", "parallelism paradigm (required in config files)")
          .one_of({"NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU",
                   "MULTI_HPU", "MULTI_NEURON", "DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM", "DATA_PARALLEL",
                   "MODEL_PARALLEL"},
                  true));
  add(K("mixed_precision", S, "\"no\"", "mixed precision mode")
          .one_of(kPrecision, true)
          .env("ACCELERATE_MIXED_PRECISION"));
  add(K("use_cpu", B, "false", "train on the CPU even when an accelerator is present").env("ACCELERATE_USE_CPU"));
  add(K("debug", B, "false", "check collective shapes across ranks").env("ACCELERATE_DEBUG_MODE"));
  add(K("enable_cpu_affinity", B, "false", "pin processes to the CPU cores near their GPU")
          .env("ACCELERATE_CPU_AFFINITY"));
  add(K("num_processes", I, "1", "total processes over all machines (-1 in a file: must be given by a flag)")
          .range(1, limits::kProcesses));
  add(K("num_machines", I, "1", "number of machines").range(1, limits::kMachines));
  add(K("machine_rank", I, "0", "rank of this machine").range(0, limits::kMachines - 1));
  add(K("main_process_ip", S | Z, "null", "address of machine 0 (MASTER_ADDR); null: 127.0.0.1").fix(host_address));
  add(K("main_process_port", I | Z, "null", "port of the rendezvous store (MASTER_PORT); null: 29500; 0: a free port")
          .range(0, 65535));
  add(K("gpu_ids", S | Z, "null", "comma-separated device ids for this machine, or \"all\"")
          .env("CUDA_VISIBLE_DEVICES"));
  add(K("rdzv_backend", S, "\"static\"", "rendezvous method").one_of({"static", "c10d", "etcd", "etcd-v2"}));
  add(K("same_network", B, "false", "all machines are on one local network"));
  add(K("main_training_function", S, "\"main\"", "TPU: function to run"));
  add(K("downcast_bf16", B, "false", "TPU: with bf16, also downcast float64 tensors").env("ACCELERATE_DOWNCAST_BF16"));
  add(K("tpu_name", S | Z, "null", "TPU pod name"));
  add(K("tpu_zone", S | Z, "null", "TPU pod zone"));
  add(K("tpu_use_cluster", B, "false", "run on a TPU pod"));
  add(K("tpu_use_sudo", B, "false", "use sudo on the TPU pod"));
  add(K("command_file", S | Z, "null", "tpu-config: file of commands to run on the pod"));
  add(K("commands", L | Z, "null", "tpu-config: commands to run on the pod"));
  add(K("tpu_vm", L | Z, "null", "TPU VM names"));
  add(K("tpu_env", L | Z, "null", "environment variables for the TPU VMs"));
  // --- fp8_config (accelerate config writes the short names; `fp8_`-prefixed names are accepted too)
  add(K("fp8_config.backend", S | Z, "null", "FP8 implementation")
          .one_of(kFp8Backend, true)
          .env("ACCELERATE_FP8_BACKEND"));
  add(K("fp8_config.fp8_format", S, "\"HYBRID\"", "FP8 format").one_of(kFp8Format, true).env("ACCELERATE_FP8_FORMAT"));
  add(K("fp8_config.margin", I, "0", "scaling factor margin").env("ACCELERATE_FP8_MARGIN"));
  add(K("fp8_config.interval", I, "1", "steps between scaling factor updates").min(1).env("ACCELERATE_FP8_INTERVAL"));
  add(K("fp8_config.amax_history_len", I, "1024", "amax history length")
          .min(1)
          .alias("amax_history_length")
          .env("ACCELERATE_FP8_AMAX_HISTORY_LEN"));
  add(K("fp8_config.amax_compute_algo", S, "\"most_recent\"", "amax from the history")
          .one_of(kAmaxAlgo)
          .alias("amax_compute_algorithm")
          .env("ACCELERATE_FP8_AMAX_COMPUTE_ALGO"));
  add(K("fp8_config.override_linear_precision", T, "[false, false, false]",
        "fprop, dgrad, wgrad GEMMs in higher precision")
          .env("ACCELERATE_FP8_OVERRIDE_{FPROP,DGRAD,WGRAD}"));
  add(K("fp8_config.use_autocast_during_eval", B, "false", "FP8 autocast in evaluation too")
          .env("ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL"));
  add(K("fp8_config.use_mxfp8_block_scaling", B, "false", "MXFP8 block scaling (TE)")
          .env("ACCELERATE_FP8_USE_MXFP8_BLOCK_SCALING"));
  add(K("fp8_config.opt_level", S, "\"O2\"", "MS-AMP optimization level")
          .one_of(kOptLevel, true)
          .alias("optimization_level")
          .env("ACCELERATE_FP8_OPT_LEVEL"));
  add(K("fp8_config.enable_fsdp_float8_all_gather", B, "true", "all-gather FSDP2 parameters in FP8 (AO)")
          .env("ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER"));
  add(K("fp8_config.pad_inner_dim", B, "true", "pad inner GEMM dimensions (AO)").env("ACCELERATE_FP8_PAD_INNER_DIM"));
  // --- deepspeed_config
  add(K("deepspeed_config.deepspeed_config_file", S | Z, "null", "DeepSpeed JSON config")
          .env("ACCELERATE_DEEPSPEED_CONFIG_FILE"));
  add(K("deepspeed_config.zero_stage", I | Z, "null", "ZeRO stage; null: 2")
          .range(0, 3)
          .env("ACCELERATE_DEEPSPEED_ZERO_STAGE"));
  add(K("deepspeed_config.offload_optimizer_device", S | Z, "null", "where optimizer state lives")
          .one_of(kOffload, true)
          .env("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"));
  add(K("deepspeed_config.offload_param_device", S | Z, "null", "where parameters live")
          .one_of(kOffload, true)
          .env("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE"));
  add(K("deepspeed_config.offload_optimizer_nvme_path", S | Z, "null", "NVMe path for optimizer state")
          .env("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH"));
  add(K("deepspeed_config.offload_param_nvme_path", S | Z, "null", "NVMe path for parameters")
          .env("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH"));
  add(K("deepspeed_config.gradient_accumulation_steps", I | Z, "null", "gradient accumulation steps")
          .min(1)
          .env("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"));
  add(K("deepspeed_config.gradient_clipping", N | Z, "null", "gradient clipping norm")
          .min(0)
          .env("ACCELERATE_GRADIENT_CLIPPING"));
  add(K("deepspeed_config.zero3_init_flag", B | Z, "null", "stage 3: create models already sharded")
          .env("ACCELERATE_DEEPSPEED_ZERO3_INIT"));
  add(K("deepspeed_config.zero3_save_16bit_model", B | Z, "null", "stage 3: save a consolidated 16-bit model")
          .env("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"));
  add(K("deepspeed_config.deepspeed_hostfile", S | Z, "null", "DeepSpeed hostfile (multi-node)"));
  add(K("deepspeed_config.deepspeed_exclusion_filter", S | Z, "null", "DeepSpeed exclusion filter (multi-node)"));
  add(K("deepspeed_config.deepspeed_inclusion_filter", S | Z, "null", "DeepSpeed inclusion filter (multi-node)"));
  add(K("deepspeed_config.deepspeed_multinode_launcher", S | Z, "null", "DeepSpeed multi-node launcher")
          .one_of({"pdsh", "standard", "openmpi", "mvapich", "mpich", "nossh", "slurm"}));
  add(K("deepspeed_config.deepspeed_moe_layer_cls_names", S | Z, "null", "comma-separated MoE layer class names")
          .env("ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES"));
  // --- fsdp_config (names without the `fsdp_` prefix are accepted, as accelerate launch does)
  add(K("fsdp_config.fsdp_version", I, "1", "FSDP version").range(1, 2).env("FSDP_VERSION"));
  add(K("fsdp_config.fsdp_auto_wrap_policy", S | Z, "null", "how modules are wrapped into FSDP units")
          .one_of(kWrap, true)
          .env("FSDP_AUTO_WRAP_POLICY"));
  add(K("fsdp_config.fsdp_transformer_layer_cls_to_wrap", S | L | Z, "null", "comma-separated class names to wrap")
          .fix(join_list)
          .env("FSDP_TRANSFORMER_CLS_TO_WRAP"));
  add(K("fsdp_config.fsdp_min_num_params", I, "100000000", "SIZE_BASED_WRAP: minimum parameters of a unit")
          .min(0)
          .env("FSDP_MIN_NUM_PARAMS"));
  add(K("fsdp_config.fsdp_sharding_strategy", S | I, "\"FULL_SHARD\"", "FSDP1 sharding strategy (legacy: 1..5)")
          .one_of(kSharding, true)
          .range(1, 5)
          .fix(enum_index)
          .env("FSDP_SHARDING_STRATEGY"));
  add(K("fsdp_config.fsdp_reshard_after_forward", B | S, "true", "FSDP2: bool; FSDP1: a sharding strategy")
          .one_of(kReshard, true)
          .env("FSDP_RESHARD_AFTER_FORWARD"));
  add(K("fsdp_config.fsdp_offload_params", B, "false", "keep parameters and gradients on the CPU")
          .env("FSDP_OFFLOAD_PARAMS"));
  add(K("fsdp_config.fsdp_backward_prefetch", S | I | Z, "null", "FSDP1 backward prefetch policy")
          .one_of(kPrefetch, true)
          .range(1, 3)
          .fix(enum_index)
          .alias("fsdp_backward_prefetch_policy")
          .env("FSDP_BACKWARD_PREFETCH"));
  add(K("fsdp_config.fsdp_state_dict_type", S | I | Z, "null", "checkpoint layout")
          .one_of(kStateDict, true)
          .range(1, 3)
          .fix(enum_index)
          .env("FSDP_STATE_DICT_TYPE"));
  add(K("fsdp_config.fsdp_forward_prefetch", B, "false", "FSDP1: prefetch the next all-gather in forward")
          .env("FSDP_FORWARD_PREFETCH"));
  add(K("fsdp_config.fsdp_use_orig_params", B, "true", "FSDP1: keep the original parameters visible")
          .env("FSDP_USE_ORIG_PARAMS"));
  add(K("fsdp_config.fsdp_cpu_ram_efficient_loading", B, "true", "only rank 0 loads the checkpoint into CPU memory")
          .env("FSDP_CPU_RAM_EFFICIENT_LOADING"));
  add(K("fsdp_config.fsdp_sync_module_states", B, "true", "FSDP1: broadcast module states from rank 0")
          .env("FSDP_SYNC_MODULE_STATES"));
  add(K("fsdp_config.fsdp_activation_checkpointing", B, "false", "recompute activations in backward")
          .env("FSDP_ACTIVATION_CHECKPOINTING"));
  add(K("fsdp_config.fsdp_activation_checkpointing_offload", B, "false",
        "FSDP2: keep each checkpointed block's input in CPU memory until backward")
          .env("FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD"));
  add(K("fsdp_config.fsdp_ignored_modules", S | Z, "null", "regex of module names FSDP leaves alone")
          .env("FSDP_IGNORED_MODULES"));
  // --- megatron_lm_config
  add(K("megatron_lm_config.megatron_lm_tp_degree", I, "1", "tensor-parallel degree")
          .min(1)
          .env("MEGATRON_LM_TP_DEGREE"));
  add(K("megatron_lm_config.megatron_lm_pp_degree", I, "1", "pipeline-parallel degree")
          .min(1)
          .env("MEGATRON_LM_PP_DEGREE"));
  add(K("megatron_lm_config.megatron_lm_num_micro_batches", I | Z, "null", "micro-batches per pipeline step")
          .min(1)
          .env("MEGATRON_LM_NUM_MICRO_BATCHES"));
  add(K("megatron_lm_config.megatron_lm_sequence_parallelism", B | Z, "null", "sequence parallelism")
          .env("MEGATRON_LM_SEQUENCE_PARALLELISM"));
  add(K("megatron_lm_config.megatron_lm_recompute_activations", B | Z, "null", "selective activation recomputation")
          .env("MEGATRON_LM_RECOMPUTE_ACTIVATIONS"));
  add(K("megatron_lm_config.megatron_lm_use_distributed_optimizer", B | Z, "null", "shard the optimizer state")
          .env("MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER"));
  add(K("megatron_lm_config.megatron_lm_gradient_clipping", N, "1.0", "gradient clipping norm")
          .min(0)
          .env("MEGATRON_LM_GRADIENT_CLIPPING"));
  add(K("megatron_lm_config.megatron_lm_recompute_granularity", S | Z, "null", "full or selective")
          .env("MEGATRON_LM_RECOMPUTE_GRANULARITY"));
  add(K("megatron_lm_config.megatron_lm_recompute_method", S | Z, "null", "uniform or block")
          .env("MEGATRON_LM_RECOMPUTE_METHOD"));
  add(K("megatron_lm_config.megatron_lm_recompute_num_layers", I | Z, "null", "layers to recompute")
          .env("MEGATRON_LM_RECOMPUTE_NUM_LAYERS"));
  add(K("megatron_lm_config.megatron_lm_attention_backend", S | B | Z, "null", "attention backend")
          .env("MEGATRON_LM_ATTENTION_BACKEND"));
  add(K("megatron_lm_config.megatron_lm_expert_model_parallel_size", I | Z, "null", "expert-parallel degree")
          .env("MEGATRON_LM_EXPERT_MODEL_PARALLEL_SIZE"));
  add(K("megatron_lm_config.megatron_lm_context_parallel_size", I | Z, "null", "context-parallel degree")
          .env("MEGATRON_LM_CONTEXT_PARALLEL_SIZE"));
  add(K("megatron_lm_config.megatron_lm_attention_dropout", N | Z, "null", "attention dropout")
          .env("MEGATRON_LM_ATTENTION_DROPOUT"));
  add(K("megatron_lm_config.megatron_lm_hidden_dropout", N | Z, "null", "hidden dropout")
          .env("MEGATRON_LM_HIDDEN_DROPOUT"));
  add(K("megatron_lm_config.megatron_lm_attention_softmax_in_fp32", B | Z, "null", "softmax in fp32")
          .env("MEGATRON_LM_ATTENTION_SOFTMAX_IN_FP32"));
  add(K("megatron_lm_config.megatron_lm_expert_tensor_parallel_size", I | Z, "null", "expert tensor-parallel degree")
          .env("MEGATRON_LM_EXPERT_TENSOR_PARALLEL_SIZE"));
  add(K("megatron_lm_config.megatron_lm_calculate_per_token_loss", B | Z, "null", "per-token loss")
          .env("MEGATRON_LM_CALCULATE_PER_TOKEN_LOSS"));
  add(K("megatron_lm_config.megatron_lm_use_rotary_position_embeddings", B | Z, "null", "rotary position embeddings")
          .env("MEGATRON_LM_USE_ROTARY_POSITION_EMBEDDINGS"));
  add(K("megatron_lm_config.megatron_lm_use_custom_fsdp", B, "false", "Megatron's own FSDP")
          .env("MEGATRON_LM_USE_CUSTOM_FSDP"));
  add(K("megatron_lm_config.megatron_lm_no_load_optim", B | Z, "null", "do not load optimizer state")
          .env("MEGATRON_LM_NO_LOAD_OPTIM"));
  add(K("megatron_lm_config.megatron_lm_no_save_optim", B | Z, "null", "do not save optimizer state")
          .env("MEGATRON_LM_NO_SAVE_OPTIM"));
  add(K("megatron_lm_config.megatron_lm_eod_mask_loss", B | Z, "null", "mask the loss at end-of-document tokens")
          .env("MEGATRON_LM_EOD_MASK_LOSS"));
  add(K("megatron_lm_config.megatron_lm_optimizer_cpu_offload", B | Z, "null", "offload the optimizer to the CPU")
          .env("MEGATRON_LM_OPTIMIZER_CPU_OFFLOAD"));
  add(K("megatron_lm_config.megatron_lm_use_precision_aware_optimizer", B | Z, "null", "precision-aware optimizer")
          .env("MEGATRON_LM_USE_PRECISION_AWARE_OPTIMIZER"));
  add(K("megatron_lm_config.megatron_lm_overlap_cpu_optimizer_d2h_h2d", B | Z, "null", "overlap CPU optimizer copies")
          .env("MEGATRON_LM_OVERLAP_CPU_OPTIMIZER_D2H_H2D"));
  add(K("megatron_lm_config.megatron_lm_decoder_last_pipeline_num_layers", I | Z, "null",
        "layers of the last pipeline stage")
          .env("MEGATRON_LM_DECODER_LAST_PIPELINE_NUM_LAYERS"));
  // --- parallelism_config
  add(K("parallelism_config.parallelism_config_dp_replicate_size", I, "1", "replicated data-parallel degree")
          .min(1)
          .env("PARALLELISM_CONFIG_DP_REPLICATE_SIZE"));
  add(K("parallelism_config.parallelism_config_dp_shard_size", I, "1", "sharded data-parallel degree")
          .min(1)
          .env("PARALLELISM_CONFIG_DP_SHARD_SIZE"));
  add(K("parallelism_config.parallelism_config_tp_size", I, "1", "tensor-parallel degree")
          .min(1)
          .env("PARALLELISM_CONFIG_TP_SIZE"));
  add(K("parallelism_config.parallelism_config_cp_size", I, "1", "context-parallel degree")
          .min(1)
          .env("PARALLELISM_CONFIG_CP_SIZE"));
  add(K("parallelism_config.parallelism_config_cp_backend", S, "\"torch\"", "context-parallel implementation")
          .one_of({"torch"})
          .env("PARALLELISM_CONFIG_CP_BACKEND"));
  add(K("parallelism_config.parallelism_config_cp_comm_strategy", S, "\"allgather\"", "context-parallel communication")
          .one_of({"allgather", "alltoall"})
          .env("PARALLELISM_CONFIG_CP_COMM_STRATEGY"));
  add(K("parallelism_config.parallelism_config_sp_size", I, "1", "sequence-parallel degree")
          .min(1)
          .env("PARALLELISM_CONFIG_SP_SIZE"));
  add(K("parallelism_config.parallelism_config_sp_backend", S, "\"deepspeed\"", "sequence-parallel implementation")
          .one_of({"deepspeed"})
          .env("PARALLELISM_CONFIG_SP_BACKEND"));
  add(K("parallelism_config.parallelism_config_sp_seq_length", I | Z, "null", "fixed sequence length")
          .min(1)
          .env("PARALLELISM_CONFIG_SP_SEQ_LENGTH"));
  add(K("parallelism_config.parallelism_config_sp_seq_length_is_variable", B, "true", "sequence length may vary")
          .env("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE"));
  add(K("parallelism_config.parallelism_config_sp_attn_implementation", S, "\"sdpa\"", "attention kernel")
          .env("PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION"));
  add(K("parallelism_config.parallelism_config_pp_size", I, "1", "pipeline-parallel degree (libacc's own)")
          .min(1)
          .env("PARALLELISM_CONFIG_PP_SIZE"));
  add(K("parallelism_config.parallelism_config_pp_microbatches", I, "1", "pipeline micro-batches (libacc's own)")
          .min(1)
          .env("PARALLELISM_CONFIG_PP_MICROBATCHES"));
  add(K("parallelism_config.parallelism_config_pp_schedule", S, "\"1F1B\"", "pipeline schedule (libacc's own)")
          .one_of({"GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble"})
          .env("PARALLELISM_CONFIG_PP_SCHEDULE"));
  add(K("parallelism_config.parallelism_config_pp_stages_per_rank", I, "1", "pipeline stages per rank (libacc's own)")
          .min(1)
          .env("PARALLELISM_CONFIG_PP_STAGES_PER_RANK"));
  add(K("parallelism_config.parallelism_config_pp_split_points", L, "[]", "pipeline split points (libacc's own)")
          .env("PARALLELISM_CONFIG_PP_SPLIT_POINTS"));
  // --- dynamo_config (names without the `dynamo_` prefix are accepted)
  add(K("dynamo_config.dynamo_backend", S, "\"NO\"", "torch.compile backend")
          .one_of(kDynamoBackends, true)
          .env("ACCELERATE_DYNAMO_BACKEND"));
  add(K("dynamo_config.dynamo_mode", S, "\"default\"", "torch.compile mode")
          .one_of(kDynamoModes)
          .env("ACCELERATE_DYNAMO_MODE"));
  add(K("dynamo_config.dynamo_use_fullgraph", B, "false", "compile the whole model as one graph")
          .env("ACCELERATE_DYNAMO_USE_FULLGRAPH"));
  add(K("dynamo_config.dynamo_use_dynamic", B, "false", "trace with dynamic shapes")
          .env("ACCELERATE_DYNAMO_USE_DYNAMIC"));
  add(K("dynamo_config.dynamo_use_regional_compilation", B, "false", "compile repeated blocks once")
          .env("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"));
  // --- mpirun_config
  add(K("mpirun_config.mpirun_hostfile", S | Z, "null", "MPI hostfile for multi-CPU jobs"));
  // --- Amazon SageMaker (compute_environment: AMAZON_SAGEMAKER; not run by acc)
  add(K("ec2_instance_type", S | Z, "null", "SageMaker instance type"));
  add(K("iam_role_name", S | Z, "null", "SageMaker IAM role"));
  add(K("image_uri", S | Z, "null", "SageMaker container image"));
  add(K("profile", S | Z, "null", "AWS profile"));
  add(K("region", S, "\"us-east-1\"", "AWS region"));
  add(K("base_job_name", S | Z, "null", "SageMaker job name prefix"));
  add(K("pytorch_version", S | Z, "null", "SageMaker PyTorch version"));
  add(K("transformers_version", S | Z, "null", "SageMaker Transformers version"));
  add(K("py_version", S | Z, "null", "SageMaker Python version"));
  add(K("sagemaker_inputs_file", S | Z, "null", "SageMaker inputs file"));
  add(K("sagemaker_metrics_file", S | Z, "null", "SageMaker metrics file"));
  add(K("additional_args", A, "null", "extra SageMaker estimator arguments"));
  return build(SchemaKind::Launch, std::move(t));
}

}  // namespace

unsigned stored_types(const KeySpec& k) {
  unsigned t = k.types;
  if (k.fix == enum_index) t &= ~tInt;
  if (k.fix == join_list) t &= ~tList;
  return t;
}

const KeySpec* Schema::key(std::string_view path) const {
  auto it = index.find(std::string(path));
  return it == index.end() ? nullptr : &keys[it->second];
}

bool Schema::is_section(std::string_view path) const {
  return std::find(sections.begin(), sections.end(), path) != sections.end();
}

const Schema& accelerator_schema() {
  static const Schema s = make_accelerator();
  return s;
}

const Schema& launch_schema() {
  static const Schema s = make_launch();
  return s;
}

const Schema& schema(SchemaKind kind) {
  return kind == SchemaKind::Accelerator ? accelerator_schema() : launch_schema();
}

}  // namespace acc::config::detail

namespace acc::config {

std::vector<KeyInfo> schema_keys(SchemaKind kind) {
  std::vector<KeyInfo> out;
  for (const auto& k : detail::schema(kind).keys) {
    KeyInfo i;
    i.path = k.path;
    i.type = detail::type_name(k);
    detail::write_json(i.default_json, k.def, -1);
    i.choices = k.choices;
    i.range = detail::range_text(k);
    i.env = k.env;
    i.aliases = k.aliases;
    i.help = k.help;
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace acc::config
