// The environment `accelerate launch` exports for a launch config (utils/launch.py: prepare_simple_launcher_cmd_env,
// prepare_multi_gpu_env, prepare_deepspeed_cmd_env, setup_fp8_env, prepare_extend_env_parallelism_config), with the
// same spellings: Python's str() of a bool is "True"/"False"; FSDP and DeepSpeed booleans are lower case.
#include <algorithm>
#include <cstdlib>

#include "internal.hpp"

namespace acc::config {
using namespace detail;

namespace {

std::string py(const Node& v) {  // Python str(value)
  switch (v.kind) {
    case Kind::Null: return "None";
    case Kind::Bool: return v.b ? "True" : "False";
    case Kind::String: return v.s;
    default: {
      std::string out;
      write_json(out, v, -1);
      return out;
    }
  }
}

std::string low(const Node& v) { return lower(py(v)); }  // str(value).lower()

// The environment being built from one resolved launch config, a part of `accelerate launch` a method.
class LaunchEnv {
 public:
  explicit LaunchEnv(const Config::Impl& im) : im_(im) {}

  std::map<std::string, std::string> build() {
    const std::string dt = v("distributed_type").s;
    common();
    dynamo();
    if (v("mixed_precision").s == "fp8") fp8();
    if (dt == "FSDP") fsdp();
    if (dt == "DEEPSPEED") deepspeed();
    if (dt == "MEGATRON_LM") megatron();
    parallelism();
    return std::move(env_);
  }

 private:
  const Config::Impl& im_;
  std::map<std::string, std::string> env_;

  const Node& v(const char* path) const { return im_.values[im_.schema->index.at(path)]; }
  Origin origin(const std::string& path) const { return im_.prov[im_.schema->index.at(path)].origin; }

  void common() {
    env_["ACCELERATE_MIXED_PRECISION"] = v("mixed_precision").s;
    env_["ACCELERATE_USE_CPU"] = py(v("use_cpu"));
    if (v("debug").b) env_["ACCELERATE_DEBUG_MODE"] = "true";
    if (v("enable_cpu_affinity").b) env_["ACCELERATE_CPU_AFFINITY"] = "1";
    if (v("downcast_bf16").b) env_["ACCELERATE_DOWNCAST_BF16"] = "true";
    if (v("use_cpu").b) {
      env_["KMP_AFFINITY"] = "granularity=fine,compact,1,0";
      env_["KMP_BLOCKTIME"] = "1";
    }
    if (v("gpu_ids").kind == Kind::String && v("gpu_ids").s != "all") env_["CUDA_VISIBLE_DEVICES"] = v("gpu_ids").s;
  }

  void dynamo() {
    env_["ACCELERATE_DYNAMO_BACKEND"] = v("dynamo_config.dynamo_backend").s;
    env_["ACCELERATE_DYNAMO_MODE"] = v("dynamo_config.dynamo_mode").s;
    env_["ACCELERATE_DYNAMO_USE_FULLGRAPH"] = py(v("dynamo_config.dynamo_use_fullgraph"));
    env_["ACCELERATE_DYNAMO_USE_DYNAMIC"] = py(v("dynamo_config.dynamo_use_dynamic"));
    env_["ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"] = py(v("dynamo_config.dynamo_use_regional_compilation"));
  }

  void fp8() {
    if (v("fp8_config.backend").kind == Kind::String) env_["ACCELERATE_FP8_BACKEND"] = v("fp8_config.backend").s;
    env_["ACCELERATE_FP8_FORMAT"] = v("fp8_config.fp8_format").s;
    env_["ACCELERATE_FP8_MARGIN"] = py(v("fp8_config.margin"));
    env_["ACCELERATE_FP8_INTERVAL"] = py(v("fp8_config.interval"));
    env_["ACCELERATE_FP8_AMAX_HISTORY_LEN"] = py(v("fp8_config.amax_history_len"));
    env_["ACCELERATE_FP8_AMAX_COMPUTE_ALGO"] = v("fp8_config.amax_compute_algo").s;
    const Node& olp = v("fp8_config.override_linear_precision");
    env_["ACCELERATE_FP8_OVERRIDE_FPROP"] = py(olp.list.at(0));
    env_["ACCELERATE_FP8_OVERRIDE_DGRAD"] = py(olp.list.at(1));
    env_["ACCELERATE_FP8_OVERRIDE_WGRAD"] = py(olp.list.at(2));
    env_["ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL"] = py(v("fp8_config.use_autocast_during_eval"));
    env_["ACCELERATE_FP8_USE_MXFP8_BLOCK_SCALING"] = py(v("fp8_config.use_mxfp8_block_scaling"));
    env_["ACCELERATE_FP8_OPT_LEVEL"] = v("fp8_config.opt_level").s;
    env_["ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER"] = py(v("fp8_config.enable_fsdp_float8_all_gather"));
    env_["ACCELERATE_FP8_PAD_INNER_DIM"] = py(v("fp8_config.pad_inner_dim"));
  }

  void fsdp() {
    env_["ACCELERATE_USE_FSDP"] = "true";
    env_["FSDP_VERSION"] = py(v("fsdp_config.fsdp_version"));
    env_["FSDP_SHARDING_STRATEGY"] = py(v("fsdp_config.fsdp_sharding_strategy"));
    env_["FSDP_RESHARD_AFTER_FORWARD"] = low(v("fsdp_config.fsdp_reshard_after_forward"));
    env_["FSDP_OFFLOAD_PARAMS"] = low(v("fsdp_config.fsdp_offload_params"));
    env_["FSDP_MIN_NUM_PARAMS"] = py(v("fsdp_config.fsdp_min_num_params"));
    const std::pair<const char*, const char*> optional[] = {
        {"fsdp_config.fsdp_auto_wrap_policy", "FSDP_AUTO_WRAP_POLICY"},
        {"fsdp_config.fsdp_transformer_layer_cls_to_wrap", "FSDP_TRANSFORMER_CLS_TO_WRAP"},
        {"fsdp_config.fsdp_backward_prefetch", "FSDP_BACKWARD_PREFETCH"},
        {"fsdp_config.fsdp_state_dict_type", "FSDP_STATE_DICT_TYPE"},
        {"fsdp_config.fsdp_ignored_modules", "FSDP_IGNORED_MODULES"}};
    for (auto [path, name] : optional)
      if (v(path).kind != Kind::Null) env_[name] = py(v(path));
    env_["FSDP_FORWARD_PREFETCH"] = low(v("fsdp_config.fsdp_forward_prefetch"));
    env_["FSDP_USE_ORIG_PARAMS"] = low(v("fsdp_config.fsdp_use_orig_params"));
    env_["FSDP_CPU_RAM_EFFICIENT_LOADING"] = low(v("fsdp_config.fsdp_cpu_ram_efficient_loading"));
    env_["FSDP_SYNC_MODULE_STATES"] = low(v("fsdp_config.fsdp_sync_module_states"));
    env_["FSDP_ACTIVATION_CHECKPOINTING"] = low(v("fsdp_config.fsdp_activation_checkpointing"));
    env_["FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD"] = low(v("fsdp_config.fsdp_activation_checkpointing_offload"));
  }

  // The deepspeed_config keys the config file gave, in the file's order (Accelerate lists its dict's keys), then
  // mixed_precision.
  std::string deepspeed_fields_from_file() const {
    std::vector<std::pair<long, std::string>> given;
    for (const auto& name : im_.schema->children.at("deepspeed_config")) {
      const Provenance& p = im_.prov[im_.schema->index.at("deepspeed_config." + name)];
      if (p.origin == Origin::File)
        given.emplace_back(std::strtol(p.where.c_str() + p.where.rfind(':') + 1, nullptr, 10), name);
    }
    std::stable_sort(given.begin(), given.end());
    std::vector<std::string> from_file;
    for (auto& [line, name] : given) from_file.push_back(std::move(name));
    if (origin("mixed_precision") == Origin::File) from_file.push_back("mixed_precision");
    return join(from_file, ",");
  }

  void deepspeed() {
    env_["ACCELERATE_USE_DEEPSPEED"] = "true";
    env_["ACCELERATE_CONFIG_DS_FIELDS"] = deepspeed_fields_from_file();
    const struct {
      const char* path;
      const char* name;
      bool keep_case;  // paths and class names keep their case; the rest is str(value).lower()
    } optional[] = {
        {"deepspeed_config.zero_stage", "ACCELERATE_DEEPSPEED_ZERO_STAGE", false},
        {"deepspeed_config.gradient_accumulation_steps", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", false},
        {"deepspeed_config.gradient_clipping", "ACCELERATE_GRADIENT_CLIPPING", false},
        {"deepspeed_config.offload_optimizer_device", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", false},
        {"deepspeed_config.offload_param_device", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", false},
        {"deepspeed_config.offload_optimizer_nvme_path", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH", true},
        {"deepspeed_config.offload_param_nvme_path", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH", true},
        {"deepspeed_config.zero3_init_flag", "ACCELERATE_DEEPSPEED_ZERO3_INIT", false},
        {"deepspeed_config.zero3_save_16bit_model", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", false},
        {"deepspeed_config.deepspeed_config_file", "ACCELERATE_DEEPSPEED_CONFIG_FILE", true},
        {"deepspeed_config.deepspeed_moe_layer_cls_names", "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES", true}};
    for (const auto& o : optional) {
      const Node& n = v(o.path);
      if (n.kind != Kind::Null) env_[o.name] = o.keep_case ? py(n) : low(n);
    }
  }

  void megatron() {
    env_["ACCELERATE_USE_MEGATRON_LM"] = "true";
    for (const auto& name : im_.schema->children.at("megatron_lm_config")) {
      const Node& n = v(("megatron_lm_config." + name).c_str());
      if (n.kind == Kind::Null) continue;
      env_["MEGATRON_LM_" + upper(name.substr(std::string("megatron_lm_").size()))] = py(n);
    }
  }

  // Only when the config sets some parallelism_config key.
  void parallelism() {
    bool parallelism = false;
    for (const auto& name : im_.schema->children.at("parallelism_config"))
      if (origin("parallelism_config." + name) != Origin::Default) parallelism = true;
    if (!parallelism) return;
    env_["ACCELERATE_USE_PARALLELISM_CONFIG"] = "true";
    const std::string p = "parallelism_config.parallelism_config_";
    auto pv = [&](const char* name) -> const Node& { return v((p + name).c_str()); };
    env_["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] = py(pv("dp_replicate_size"));
    env_["PARALLELISM_CONFIG_DP_SHARD_SIZE"] = py(pv("dp_shard_size"));
    env_["PARALLELISM_CONFIG_TP_SIZE"] = py(pv("tp_size"));
    env_["PARALLELISM_CONFIG_CP_SIZE"] = py(pv("cp_size"));
    env_["PARALLELISM_CONFIG_CP_BACKEND"] = py(pv("cp_backend"));
    env_["PARALLELISM_CONFIG_SP_SIZE"] = py(pv("sp_size"));
    env_["PARALLELISM_CONFIG_SP_BACKEND"] = py(pv("sp_backend"));
    // libacc's own pipeline keys.
    env_["PARALLELISM_CONFIG_PP_SIZE"] = py(pv("pp_size"));
    env_["PARALLELISM_CONFIG_PP_MICROBATCHES"] = py(pv("pp_microbatches"));
    env_["PARALLELISM_CONFIG_PP_SCHEDULE"] = py(pv("pp_schedule"));
    env_["PARALLELISM_CONFIG_PP_STAGES_PER_RANK"] = py(pv("pp_stages_per_rank"));
    std::string points;  // the list as the variable's comma-separated text
    for (const Node& n : pv("pp_split_points").list) points += (points.empty() ? "" : ",") + n.s;
    if (!points.empty()) env_["PARALLELISM_CONFIG_PP_SPLIT_POINTS"] = points;
    if (pv("cp_size").i > 1) env_["PARALLELISM_CONFIG_CP_COMM_STRATEGY"] = py(pv("cp_comm_strategy"));
    if (pv("sp_size").i > 1) {
      if (pv("sp_seq_length").kind != Kind::Null) env_["PARALLELISM_CONFIG_SP_SEQ_LENGTH"] = py(pv("sp_seq_length"));
      env_["PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE"] = py(pv("sp_seq_length_is_variable"));
      env_["PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION"] = py(pv("sp_attn_implementation"));
    }
  }
};

}  // namespace

std::map<std::string, std::string> launch_environment(const Config& cfg) {
  const Config::Impl& im = Access::impl(cfg);
  if (im.schema->kind != SchemaKind::Launch) throw Error("launch_environment needs a launch config");
  return LaunchEnv(im).build();
}

}  // namespace acc::config
