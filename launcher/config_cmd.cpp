// `acc config`: the questionnaire of `accelerate config` (writes a launch config file), `acc config default`
// (non-interactive, from the devices found), `acc config update` (rewrite an old file with current keys),
// `acc config explain` (every resolved value and where it came from) and `acc config schema` (JSON Schema).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "acc/config.hpp"
#include "acc/files.hpp"
#include "cli.hpp"
#include "commands.hpp"
#include "devices.hpp"
#include "launch.hpp"

namespace acc::launcher {
namespace {

constexpr const char* kMe = "acc config";

struct Abort : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Writes a config file atomically, creating its directory. An I/O failure is reported like a config error.
void write_file(const std::string& path, const std::string& text) {
  try {
    size_t slash = path.rfind('/');
    if (slash != std::string::npos && slash > 0) config::make_directories(path.substr(0, slash));
    config::write_file_atomic(path, text);
  } catch (const std::ios_base::failure& e) {
    throw config::Error(e.what());
  }
}

bool exists(const std::string& p) {
  struct stat st{};
  return stat(p.c_str(), &st) == 0;
}

// Where `acc config` writes when no --config_file is given: where `acc launch` will look first.
std::string default_write_location(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* n) {
    auto it = env.find(n);
    return it == env.end() ? std::string() : it->second;
  };
  std::string explicit_file = get("ACC_CONFIG_FILE");
  if (!explicit_file.empty() && explicit_file != "none") return explicit_file;
  std::vector<std::string> searched;
  config::find_default_config_file(env, &searched);
  // searched: [libacc's default, Accelerate's default]; an existing libacc file would shadow Accelerate's.
  if (!searched.empty() && exists(searched.front())) return searched.front();
  if (searched.size() > 1) return searched[1];
  if (!searched.empty()) return searched.front();
  throw config::Error("cannot tell where to write the config file (HOME is not set); pass --config_file");
}

// ------------------------------------------------------------------------------------------------ questionnaire

class Asker {
 public:
  std::string line(const std::string& prompt) {
    std::cout << prompt << std::flush;
    std::string s;
    if (!std::getline(std::cin, s)) {
      std::cout << "\n";
      throw Abort("no answer to \"" + trim(prompt) + "\" (end of input)");
    }
    if (!s.empty() && s.back() == '\r') s.pop_back();
    if (!interactive_) std::cout << s << "\n";  // piped answers show in the transcript
    return trim(s);
  }

  // _ask_field: an empty answer takes the default (when there is one).
  std::string field(const std::string& prompt, const std::optional<std::string>& def = std::nullopt) {
    for (;;) {
      std::string a = line(prompt);
      if (a.empty() && def) return *def;
      if (!a.empty()) return a;
    }
  }
  bool yes_no(const std::string& prompt, bool def) {
    for (;;) {
      std::string a = line(prompt);
      if (a.empty()) return def;
      if (auto b = config::parse_bool(a)) return *b;
      std::cout << "Please enter yes or no.\n";
    }
  }
  long integer(const std::string& prompt, std::optional<long> def, long lo = 0) {
    for (;;) {
      std::string a = line(prompt);
      if (a.empty() && def) return *def;
      char* end = nullptr;
      long v = std::strtol(a.c_str(), &end, 10);
      if (!a.empty() && *end == '\0' && v >= lo) return v;
      std::cout << "Please enter an integer" << (lo > 0 ? " >= " + std::to_string(lo) : std::string()) << ".\n";
    }
  }
  double number(const std::string& prompt, double def) {
    for (;;) {
      std::string a = line(prompt);
      if (a.empty()) return def;
      char* end = nullptr;
      double v = std::strtod(a.c_str(), &end);
      if (*end == '\0') return v;
      std::cout << "Please enter a number.\n";
    }
  }
  // _ask_options (BulletMenu): the options are numbered; answer with the number or the option itself.
  size_t choice(const std::string& question, const std::vector<std::string>& options, size_t def = 0) {
    std::cout << question << "\n";
    for (size_t i = 0; i < options.size(); ++i)
      std::cout << "  [" << i << "] " << options[i] << (i == def ? "  (default)" : "") << "\n";
    for (;;) {
      std::string a = line("Please select a choice using the index [" + std::to_string(def) + "]: ");
      if (a.empty()) return def;
      char* end = nullptr;
      long v = std::strtol(a.c_str(), &end, 10);
      if (*end == '\0' && v >= 0 && static_cast<size_t>(v) < options.size()) return static_cast<size_t>(v);
      for (size_t i = 0; i < options.size(); ++i)
        if (config::parse_bool(a) == std::nullopt && lower(a) == lower(options[i])) return i;
      std::cout << "Please enter a number between 0 and " << options.size() - 1 << ", or one of the options.\n";
    }
  }

 private:
  static std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t");
    if (a == std::string::npos) return "";
    return s.substr(a, s.find_last_not_of(" \t") - a + 1);
  }
  static std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }
  bool interactive_ = isatty(0) != 0;
};

struct Answers {
  std::vector<config::Flag> flags;
  void set(const std::string& key, const std::string& value) { flags.push_back({key, value, "acc config: " + key}); }
  void set(const std::string& key, long v) { set(key, std::to_string(v)); }
  void set_bool(const std::string& key, bool v) { set(key, std::string(v ? "true" : "false")); }
};

// What the questionnaire has learnt so far: the answers, and the choices later questions depend on.
struct Setup {
  Answers a;
  std::string dt;  // the distributed type
  bool multi = false, use_cpu = false, gpu_multi = false, use_deepspeed_config = false;
  long num_machines = 1, fsdp_version = 1;
};

// The compute environment, the type of machine and the other machines.
void ask_machines(Asker& ask, Setup& s) {
  Answers& a = s.a;
  std::string& dt = s.dt;
  bool& multi = s.multi;
  long& num_machines = s.num_machines;
  size_t env = ask.choice("In which compute environment are you running?", {"This machine", "AWS (Amazon SageMaker)"});
  if (env == 1) throw Abort("Amazon SageMaker jobs are not supported by acc; answer 0 (This machine)");
  a.set("compute_environment", std::string("LOCAL_MACHINE"));

  const std::vector<std::string> machines = {"No distributed training",
                                             "multi-CPU",
                                             "multi-XPU",
                                             "multi-HPU",
                                             "multi-GPU",
                                             "multi-NPU",
                                             "multi-MLU",
                                             "multi-SDAA",
                                             "multi-MUSA",
                                             "multi-NEURON",
                                             "TPU"};
  const std::vector<std::string> types = {"NO",         "MULTI_CPU",    "MULTI_XPU", "MULTI_HPU",
                                          "MULTI_GPU",  "MULTI_NPU",    "MULTI_MLU", "MULTI_SDAA",
                                          "MULTI_MUSA", "MULTI_NEURON", "XLA"};
  dt = types[ask.choice("Which type of machine are you using?", machines)];
  multi = dt.rfind("MULTI_", 0) == 0;
  if (multi) {
    num_machines =
        ask.integer("How many different machines will you use (use more than 1 for multi-node training)? [1]: ", 1, 1);
    a.set("num_machines", num_machines);
    if (num_machines > 1) {
      std::vector<std::string> ranks;
      for (long r = 0; r < num_machines; ++r) ranks.push_back(std::to_string(r));
      a.set("machine_rank", static_cast<long>(ask.choice("What is the rank of this machine?", ranks)));
      a.set("main_process_ip", ask.field("What is the IP address of the machine that will host the main process? "));
      a.set("main_process_port",
            ask.integer("What is the port you will use to communicate with the main process? ", std::nullopt, 0));
      bool same = ask.yes_no("Are all the machines on the same local network? Answer `no` if nodes are on the cloud "
                             "and/or on different network hosts [YES/no]: ",
                             true);
      a.set_bool("same_network", same);
      if (!same)
        a.set("rdzv_backend",
              ask.field("What rendezvous backend will you use? ('static', 'c10d', ...): ", std::string("static")));
    } else {
      a.set_bool("same_network", true);
    }
    a.set_bool("debug", ask.yes_no("Should distributed operations be checked while running for errors? This can avoid "
                                   "timeout issues but will be slower. [yes/NO]: ",
                                   false));
  }
}

// CPU only, and mpirun.
void ask_cpu(Asker& ask, Setup& s) {
  Answers& a = s.a;
  std::string& dt = s.dt;
  bool& use_cpu = s.use_cpu;
  use_cpu = dt == "MULTI_CPU";
  if (dt == "NO")
    use_cpu = ask.yes_no("Do you want to run your training on CPU only (even if a GPU / Apple Silicon / Ascend NPU "
                         "device is available)? [yes/NO]:",
                         false);
  a.set_bool("use_cpu", use_cpu);
  if (use_cpu && dt == "MULTI_CPU") {
    if (ask.yes_no("Do you want accelerate to launch mpirun? [yes/NO]: ", false)) {
      std::string hostfile = ask.field("Please enter the path to the hostfile to use with mpirun [~/hostfile]: ",
                                       std::string("~/hostfile"));
      if (hostfile.rfind("~/", 0) == 0 && std::getenv("HOME"))
        hostfile = std::string(std::getenv("HOME")) + hostfile.substr(1);
      a.set("mpirun_config.mpirun_hostfile", hostfile);
    }
  }
}

// torch dynamo.
void ask_dynamo(Asker& ask, Setup& s) {
  Answers& a = s.a;
  const bool use_dynamo = ask.yes_no("Do you wish to optimize your script with torch dynamo?[yes/NO]:", false);
  if (use_dynamo) {
    const std::vector<std::string> backends = {
        "eager",  "aot_eager", "inductor", "aot_ts_nvfuser",          "nvprims_nvfuser",     "cudagraphs", "ofi",
        "fx2trt", "onnxrt",    "tensorrt", "aot_torchxla_trace_once", "torchxla_trace_once", "tvm"};
    a.set("dynamo_config.dynamo_backend",
          backends[ask.choice("Which dynamo backend would you like to use?", backends, 2)]);
    if (ask.yes_no("Do you want to customize the defaults sent to torch.compile? [yes/NO]: ", false)) {
      const std::vector<std::string> modes = {"default", "reduce-overhead", "max-autotune"};
      a.set("dynamo_config.dynamo_mode", modes[ask.choice("Which mode do you want to use?", modes, 0)]);
      a.set_bool("dynamo_config.dynamo_use_fullgraph",
                 ask.yes_no("Do you want the fullgraph mode or it is ok to break model into several subgraphs? "
                            "[yes/NO]: ",
                            false));
      a.set_bool("dynamo_config.dynamo_use_dynamic",
                 ask.yes_no("Do you want to enable dynamic shape tracing? [yes/NO]: ", false));
      a.set_bool("dynamo_config.dynamo_use_regional_compilation",
                 ask.yes_no("Do you want to enable regional compilation? [yes/NO]: ", false));
    }
  }
}

// DeepSpeed (multi-GPU or no distribution).
void ask_deepspeed(Asker& ask, Setup& s) {
  Answers& a = s.a;
  std::string& dt = s.dt;
  const bool gpu_multi = s.gpu_multi;
  bool& use_deepspeed_config = s.use_deepspeed_config;
  const long num_machines = s.num_machines;
  if (gpu_multi || dt == "NO") {
    if (ask.yes_no("Do you want to use DeepSpeed? [yes/NO]: ", false)) {
      if (dt == "MULTI_NEURON") throw Abort("DeepSpeed is not supported on Neuron devices.");
      dt = "DEEPSPEED";
    }
    if (dt == "DEEPSPEED") {
      use_deepspeed_config = ask.yes_no("Do you want to specify a json file to a DeepSpeed config? [yes/NO]: ", false);
      if (use_deepspeed_config) {
        a.set("deepspeed_config.deepspeed_config_file",
              ask.field("Please enter the path to the json DeepSpeed config file: ", std::string("none")));
      } else {
        long stage = static_cast<long>(ask.choice("What should be your DeepSpeed's ZeRO optimization stage?",
                                                  {"0", "1", "2", "3"}, 2));
        a.set("deepspeed_config.zero_stage", stage);
        const std::vector<std::string> devices = {"none", "cpu", "nvme"};
        if (stage >= 2) {
          std::string opt = devices[ask.choice("Where to offload optimizer states?", devices)];
          std::string par = devices[ask.choice("Where to offload parameters?", devices)];
          a.set("deepspeed_config.offload_optimizer_device", opt);
          a.set("deepspeed_config.offload_param_device", par);
          if (par == "nvme")
            a.set("deepspeed_config.offload_param_nvme_path",
                  ask.field("Nvme Path to offload parameters?", std::string("/nvme")));
          if (opt == "nvme")
            a.set("deepspeed_config.offload_optimizer_nvme_path",
                  ask.field("Nvme Path to offload optimizer states?", std::string("/nvme")));
        }
        a.set("deepspeed_config.gradient_accumulation_steps",
              ask.integer("How many gradient accumulation steps you're passing in your script? [1]: ", 1, 1));
        if (ask.yes_no("Do you want to use gradient clipping? [yes/NO]: ", false))
          a.set("deepspeed_config.gradient_clipping",
                std::to_string(ask.number("What is the gradient clipping value? [1.0]: ", 1.0)));
        if (stage == 3)
          a.set_bool("deepspeed_config.zero3_save_16bit_model",
                     ask.yes_no("Do you want to save 16-bit model weights when using ZeRO Stage-3? [yes/NO]: ", false));
      }
      a.set_bool("deepspeed_config.zero3_init_flag",
                 ask.yes_no("Do you want to enable `deepspeed.zero.Init` when using ZeRO Stage-3 for constructing "
                            "massive models? [yes/NO]: ",
                            false));
      if (ask.yes_no("Do you want to enable Mixture-of-Experts training (MoE)? [yes/NO]: ", false))
        a.set(
            "deepspeed_config.deepspeed_moe_layer_cls_names",
            ask.field("Specify the comma-separated list of transformers MoE layer class names (case-sensitive), "
                      "e.g : `MixtralSparseMoeBlock`, `Qwen2MoeSparseMoeBlock`, `JetMoEAttention,JetMoEBlock` ... : "));
      if (num_machines > 1) {
        const std::vector<std::string> launchers = {"pdsh",  "standard", "openmpi", "mvapich",
                                                    "mpich", "nossh",    "slurm"};
        std::string l = launchers[ask.choice("Which Type of launcher do you want to use?", launchers)];
        a.set("deepspeed_config.deepspeed_multinode_launcher", l);
        if (l != "standard") {
          a.set("deepspeed_config.deepspeed_hostfile",
                ask.field("DeepSpeed configures multi-node compute resources with hostfile. Each row is of the format "
                          "`hostname slots=[num_gpus]`, e.g., `localhost slots=2`. Please specify the location of "
                          "hostfile: "));
          if (ask.yes_no("Do you want to specify exclusion filter string? [yes/NO]: ", false))
            a.set("deepspeed_config.deepspeed_exclusion_filter", ask.field("DeepSpeed exclusion filter string: "));
          if (ask.yes_no("Do you want to specify inclusion filter string? [yes/NO]: ", false))
            a.set("deepspeed_config.deepspeed_inclusion_filter", ask.field("DeepSpeed inclusion filter string: "));
        }
      }
    }
  }
}

// FSDP (multi-GPU without DeepSpeed).
void ask_fsdp(Asker& ask, Setup& s) {
  Answers& a = s.a;
  std::string& dt = s.dt;
  const bool gpu_multi = s.gpu_multi;
  long& fsdp_version = s.fsdp_version;
  if (gpu_multi && dt != "DEEPSPEED") {
    if (ask.yes_no("Do you want to use FullyShardedDataParallel? [yes/NO]: ", false)) {
      if (dt == "MULTI_NEURON") throw Abort("FSDP is not currently supported on Neuron devices.");
      dt = "FSDP";
    }
    if (dt == "FSDP") {
      fsdp_version = static_cast<long>(ask.choice("What should be your FSDP version? [2]: ", {"1", "2"}, 1)) + 1;
      a.set("fsdp_config.fsdp_version", fsdp_version);
      const std::vector<std::string> strategies = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                                   "HYBRID_SHARD_ZERO2"};
      if (fsdp_version == 1)
        a.set("fsdp_config.fsdp_reshard_after_forward",
              strategies[ask.choice("What should be your sharding strategy?", strategies)]);
      else
        a.set_bool("fsdp_config.fsdp_reshard_after_forward",
                   ask.yes_no("Do you want to enable resharding after forward? [YES/no]: ", true));
      a.set_bool("fsdp_config.fsdp_offload_params",
                 ask.yes_no("Do you want to offload parameters and gradients to CPU? [yes/NO]: ", false));
      const std::vector<std::string> wraps = {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"};
      size_t wrap = ask.choice("What should be your auto wrap policy?", wraps);
      a.set("fsdp_config.fsdp_auto_wrap_policy", wraps[wrap]);
      if (wrap == 0) {
        if (!ask.yes_no("Do you want to use the model's `_no_split_modules` to wrap. Only applicable for Transformers "
                        "[yes/NO]: ",
                        false))
          a.set("fsdp_config.fsdp_transformer_layer_cls_to_wrap",
                ask.field(
                    "Specify the comma-separated list of transformer layer class names (case-sensitive) to wrap "
                    ",e.g, :`BertLayer`, `GPTJBlock`, `T5Block`, `BertLayer,BertEmbeddings,BertSelfOutput` ...? : "));
      } else if (wrap == 1) {
        a.set("fsdp_config.fsdp_min_num_params",
              ask.integer("What should be your FSDP's minimum number of parameters for Default Auto Wrapping Policy? "
                          "[1e8]: ",
                          100000000));
      }
      if (fsdp_version == 1) {
        const std::vector<std::string> prefetch = {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"};
        a.set("fsdp_config.fsdp_backward_prefetch",
              prefetch[ask.choice("What should be your FSDP's backward prefetch policy?", prefetch)]);
      }
      const std::vector<std::string> sd1 = {"FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"};
      const std::vector<std::string> sd2 = {"SHARDED_STATE_DICT", "FULL_STATE_DICT"};
      const auto& sd = fsdp_version == 1 ? sd1 : sd2;
      a.set("fsdp_config.fsdp_state_dict_type", sd[ask.choice("What should be your FSDP's state dict type?", sd, 0)]);
      if (fsdp_version == 1) {
        a.set_bool("fsdp_config.fsdp_forward_prefetch",
                   ask.yes_no("Do you want to enable FSDP's forward prefetch policy? [yes/NO]: ", false));
        a.set_bool("fsdp_config.fsdp_use_orig_params",
                   ask.yes_no("Do you want to enable FSDP's `use_orig_params` feature? [YES/no]: ", true));
      }
      bool ram = ask.yes_no("Do you want to enable CPU RAM efficient model loading? Only applicable for Transformers "
                            "models. [YES/no]: ",
                            true);
      a.set_bool("fsdp_config.fsdp_cpu_ram_efficient_loading", ram);
      if (fsdp_version == 1)
        a.set_bool("fsdp_config.fsdp_sync_module_states",
                   ram ? true
                       : ask.yes_no("Do you want each individually wrapped FSDP unit to broadcast module parameters "
                                    "from rank 0 at the start? [YES/no]: ",
                                    true));
      a.set_bool("fsdp_config.fsdp_activation_checkpointing",
                 ask.yes_no("Do you want to enable FSDP activation checkpointing? [yes/NO]: ", false));
    }
  }
}

// Accelerate's parallelism_config, for FSDP2.
void ask_parallelism(Asker& ask, Setup& s) {
  Answers& a = s.a;
  std::string& dt = s.dt;
  const long fsdp_version = s.fsdp_version;
  if (dt == "FSDP" && fsdp_version == 2) {
    if (ask.yes_no("Do you want to use the parallelism config? [yes/NO]: ", false)) {
      const std::string p = "parallelism_config.parallelism_config_";
      a.set(p + "dp_replicate_size", ask.integer("What is the data parallelism replicate size? [1]: ", 1, 1));
      a.set(p + "dp_shard_size", ask.integer("What is the FSDP shard size? [1]: ", 1, 1));
      a.set(p + "tp_size", ask.integer("What is the tensor parallelism size? [1]: ", 1, 1));
      long cp = ask.integer("What is the context parallelism size? [1]: ", 1, 1);
      a.set(p + "cp_size", cp);
      if (cp > 1)
        a.set(p + "cp_comm_strategy", std::string(ask.choice("What is the compute parallelism communication strategy?",
                                                             {"allgather", "alltoall"}, 0)
                                                      ? "alltoall"
                                                      : "allgather"));
    }
  }
}

// Megatron-LM (multi-GPU).
void ask_megatron(Asker& ask, Setup& s) {
  Answers& a = s.a;
  std::string& dt = s.dt;
  if (dt == "MULTI_GPU") {
    if (ask.yes_no("Do you want to use Megatron-LM ? [yes/NO]: ", false)) dt = "MEGATRON_LM";
    if (dt == "MEGATRON_LM") {
      const std::string p = "megatron_lm_config.megatron_lm_";
      long tp = ask.integer("What is the Tensor Parallelism degree/size? [1]:", 1, 1);
      a.set(p + "tp_degree", tp);
      if (tp > 1)
        a.set_bool(p + "sequence_parallelism",
                   ask.yes_no("Do you want to enable Sequence Parallelism? [YES/no]: ", true));
      long pp = ask.integer("What is the Pipeline Parallelism degree/size? [1]:", 1, 1);
      a.set(p + "pp_degree", pp);
      if (pp > 1) a.set(p + "num_micro_batches", ask.integer("What is the number of micro-batches? [1]:", 1, 1));
      a.set_bool(p + "recompute_activations",
                 ask.yes_no("Do you want to enable selective activation recomputation? [YES/no]: ", true));
      a.set_bool(p + "use_distributed_optimizer",
                 ask.yes_no("Do you want to use distributed optimizer which shards optimizer state and gradients "
                            "across data parallel ranks? [YES/no]: ",
                            true));
      a.set(p + "gradient_clipping",
            std::to_string(ask.number("What is the gradient clipping value based on global L2 Norm (0 to disable)? "
                                      "[1.0]: ",
                                      1.0)));
    }
  }
}

// The processes and devices; false when the questions end here (TPU).
bool ask_processes(Asker& ask, Setup& s) {
  Answers& a = s.a;
  std::string& dt = s.dt;
  const bool multi = s.multi;
  const bool gpu_multi = s.gpu_multi;
  bool& use_cpu = s.use_cpu;
  const long num_machines = s.num_machines;
  long num_processes = 1;
  if (multi || dt == "XLA") {
    std::string what = "GPU(s)";  // FSDP, DEEPSPEED, MEGATRON_LM
    if (dt == "MULTI_CPU") what = "processes";
    else if (dt == "XLA") what = "TPU cores";
    else if (dt == "MULTI_NEURON") what = "NEURON cores";
    else if (dt.rfind("MULTI_", 0) == 0) what = dt.substr(6) + "(s)";
    num_processes = ask.integer("How many " + what + " should be used for distributed training? [1]:", 1, 1);
  } else if (dt == "FSDP" || dt == "DEEPSPEED" || dt == "MEGATRON_LM") {
    num_processes = ask.integer("How many GPU(s) should be used for distributed training? [1]:", 1, 1);
  }
  a.set("num_processes", num_processes);
  if (dt == "MULTI_GPU" && num_machines == 1 && num_processes == 1)
    throw Abort("Specified distributed type MULTI_GPU but only using 1 GPU on a single machine. Please select "
                "`No distributed training` for the type of machine you are using.");
  const bool gpu_like = (gpu_multi && dt.rfind("MULTI_", 0) == 0) || dt == "NO" || dt == "FSDP" || dt == "DEEPSPEED" ||
                        dt == "MEGATRON_LM";
  if (gpu_like && !use_cpu)
    a.set("gpu_ids", ask.field("What GPU(s) (by id) should be used for training on this machine as a comma-separated "
                               "list? [all]:",
                               std::string("all")));
  if ((dt == "NO" || dt == "MULTI_GPU") && !use_cpu)
    a.set_bool("enable_cpu_affinity", ask.yes_no("Would you like to enable numa efficiency? (Currently only supported "
                                                 "on NVIDIA hardware). [yes/NO]: ",
                                                 false));
  if (dt == "XLA") {
    a.set("main_training_function",
          ask.field("What is the name of the function in your script that should be launched in all parallel scripts? "
                    "[main]: ",
                    std::string("main")));
    a.set("mixed_precision", std::string("no"));
    return false;
  }
  return true;
}

// Mixed precision and its FP8 settings.
void ask_mixed_precision(Asker& ask, Setup& s) {
  Answers& a = s.a;
  std::string& dt = s.dt;
  bool& use_deepspeed_config = s.use_deepspeed_config;
  if (!(dt == "DEEPSPEED" && use_deepspeed_config)) {
    const std::vector<std::string> modes = {"no", "fp16", "bf16", "fp8"};
    std::string mp = modes[ask.choice("Do you wish to use mixed precision?", modes)];
    a.set("mixed_precision", mp);
    if (mp == "fp8") {
      const std::vector<std::string> backends = {"ao", "te", "msamp"};
      size_t b = ask.choice("Which FP8 backend do you want to use?", backends);
      a.set("fp8_config.backend", std::string(b == 0 ? "AO" : b == 1 ? "TE" : "MSAMP"));
      if (b == 1) {
        a.set_bool("fp8_config.use_autocast_during_eval",
                   ask.yes_no("Do you want to use FP8 autocast during eval mode? Generally better metrics are found "
                              "when this is disabled [yes/NO]: ",
                              false));
        a.set("fp8_config.margin", ask.integer("What margin should be used for gradient scaling? [0]: ", 0));
        a.set("fp8_config.interval",
              ask.integer("What interval should be used for how often the scaling factor is recomputed? [1]: ", 1, 1));
        const std::vector<std::string> formats = {"HYBRID", "E4M3", "E5M2"};
        a.set("fp8_config.fp8_format", formats[ask.choice("Which weight format should be used?", formats, 0)]);
        a.set("fp8_config.amax_history_len",
              ask.integer("What length of history should be used for the amax scaling factor computation? [1024]: ",
                          1024, 1));
        a.set("fp8_config.amax_compute_algo",
              std::string(ask.choice("Which algorithm should be used for the amax scaling factor computation?",
                                     {"max", "most_recent"}, 0)
                              ? "most_recent"
                              : "max"));
        bool f = false, d = false, w = false;
        if (ask.yes_no("Do you want to execute `fprop`, `dgrad`, and `wgrad` GEMMS in higher precision? [yes/NO]: ",
                       false)) {
          f = ask.yes_no("Should `fprop` be executed in higher precision? [yes/NO]: ", false);
          d = ask.yes_no("Should `dgrad` be executed in higher precision? [yes/NO]: ", false);
          w = ask.yes_no("Should `wgrad` be executed in higher precision? [yes/NO]: ", false);
        }
        auto b2s = [](bool v) { return v ? "true" : "false"; };
        a.set("fp8_config.override_linear_precision", std::string(b2s(f)) + "," + b2s(d) + "," + b2s(w));
      } else if (b == 2) {
        a.set("fp8_config.opt_level",
              std::string(ask.choice("Which optimization level should be used?", {"O1", "O2"}, 1) ? "O2" : "O1"));
      } else {
        a.set_bool("fp8_config.enable_fsdp_float8_all_gather",
                   ask.yes_no("Do you want to enable FSDP2 float8 all gather? This is recommended for better "
                              "performance if using FSDP2. [YES/no]: ",
                              true));
        a.set_bool("fp8_config.pad_inner_dim",
                   ask.yes_no("Do you want to pad the inner dimension of weight matrices before float8 matmuls? "
                              "[YES/no]: ",
                              true));
      }
    }
  }
}

// The questions of `accelerate config` for "This machine" (commands/config/cluster.py), in its order and words.
Answers questionnaire(Asker& ask) {
  Setup s;
  ask_machines(ask, s);
  ask_cpu(ask, s);
  ask_dynamo(ask, s);
  s.gpu_multi = s.multi && s.dt != "MULTI_CPU";
  ask_deepspeed(ask, s);
  ask_fsdp(ask, s);
  ask_parallelism(ask, s);
  ask_megatron(ask, s);
  s.a.set("distributed_type", s.dt);
  if (ask_processes(ask, s)) ask_mixed_precision(ask, s);
  return std::move(s.a);
}

// ---------------------------------------------------------------------------------------------------- subcommands

const char* kDescription =
    "Configures `acc launch` (and `accelerate launch`: the files are Accelerate's).\n\n"
    "subcommands:\n"
    "  (none)     ask the questions of `accelerate config` and write the answers to a config file\n"
    "  default    write a config file for this machine without questions (detects GPUs)\n"
    "  update     rewrite an existing config file with the current keys and spellings\n"
    "  explain    print every resolved value and where it came from (takes acc launch's options)\n"
    "  schema     print the JSON Schema of config files (--library: of acc_accelerator_create's JSON)\n\n"
    "Without --config_file the file written is the one `acc launch` reads first: $ACC_CONFIG_FILE, an existing\n"
    "~/.cache/acc/default_config.yaml, else Accelerate's $HF_HOME/accelerate/default_config.yaml.";

cli::Option opt(std::string name, std::string metavar, std::string help, bool value = true,
                std::vector<std::string> shorts = {}) {
  cli::Option o;
  o.name = std::move(name);
  o.metavar = std::move(metavar);
  o.help = std::move(help);
  o.takes_value = value;
  o.group = "options";
  o.shorts = std::move(shorts);
  return o;
}

int usage_fail(const std::string& sub, const std::string& msg) {
  std::fprintf(stderr, "%s%s: error: %s\nRun 'acc config %s--help' for the options.\n", kMe,
               sub.empty() ? "" : (" " + sub).c_str(), msg.c_str(), sub.empty() ? "" : (sub + " ").c_str());
  return 2;
}

// Parses the options of a subcommand that takes no positional arguments, and prints its help. Returns
// the exit status when there is nothing more to do (help shown: 0; a usage error reported: 2).
std::optional<int> parse_options(const std::vector<cli::Option>& opts, const std::vector<std::string>& args,
                                 const std::string& sub, const std::string& positional_error,
                                 const std::string& positional_hint, const std::string& usage,
                                 const std::string& description, cli::Parsed& p) {
  try {
    p = cli::parse(opts, args, false);
    if (!p.positionals.empty())
      throw cli::UsageError(positional_error + "'" + p.positionals.front() + "'" + positional_hint);
  } catch (const cli::UsageError& e) {
    return usage_fail(sub, e.what());
  }
  if (p.options.count("--help")) {
    std::fputs(cli::help(usage, description, opts).c_str(), stdout);
    return 0;
  }
  return std::nullopt;
}

int questionnaire_main(const std::vector<std::string>& args) {
  std::vector<cli::Option> opts = {opt("--help", "", "show this help and exit", false, {"-h"}),
                                   opt("--config_file", "FILE", "where to write (.json: JSON, else YAML)")};
  cli::Parsed p;
  if (auto done =
          parse_options(opts, args, "", "unknown subcommand ", "",
                        "acc config [--config_file FILE] | acc config {default,update,explain,schema} [options]",
                        kDescription, p))
    return *done;
  try {
    auto env = config::current_environment();
    std::string path = p.options.count("--config_file") ? p.options["--config_file"].value
                                                        : default_write_location(env);
    Asker ask;
    Answers a = questionnaire(ask);
    config::Config cfg = config::resolve_launch(std::nullopt, a.flags, false);
    config::check_launch(cfg);
    write_file(path, config::format_launch_file(cfg, path.ends_with(".json")));
    std::printf("acc configuration saved at %s\n", path.c_str());
    return 0;
  } catch (const Abort& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 1;
  } catch (const config::Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 2;
  }
}

int default_main(const std::vector<std::string>& args) {
  std::vector<cli::Option> opts = {
      opt("--help", "", "show this help and exit", false, {"-h"}),
      opt("--config_file", "FILE", "where to write (default: where `acc launch` reads first)"),
      opt("--mixed_precision", "{no,fp16,bf16,fp8}", "mixed precision mode (default no)"),
      opt("--force", "", "overwrite an existing file (accelerate config default never does)", false)};
  cli::Parsed p;
  if (auto done =
          parse_options(opts, args, "default", "unexpected argument ", "",
                        "acc config default [--config_file FILE] [--mixed_precision MODE] [--force]",
                        "Writes a config file for this machine without questions, as `accelerate config default`:\n"
                        "with 2 or more GPUs, MULTI_GPU over all of them; with one, NO; without, the CPU.",
                        p))
    return *done;
  try {
    auto env = config::current_environment();
    std::string path = p.options.count("--config_file") ? p.options["--config_file"].value
                                                        : default_write_location(env);
    if (exists(path) && !p.options.count("--force")) {
      std::printf("Configuration already exists at %s, will not override. Run `acc config` manually, pass a different "
                  "--config_file, or --force.\n",
                  path.c_str());
      return 1;
    }
    std::string mp = p.options.count("--mixed_precision") ? p.options["--mixed_precision"].value : "no";
    Devices d = detect_devices(env);
    std::vector<config::Flag> f;
    auto set = [&](const char* k, const std::string& v) { f.push_back({k, v, "acc config default"}); };
    set("compute_environment", "LOCAL_MACHINE");
    set("mixed_precision", mp);
    if (d.cuda > 0) {
      set("num_processes", std::to_string(d.cuda));
      set("use_cpu", "false");
      set("distributed_type", d.cuda > 1 ? "MULTI_GPU" : "NO");
    } else {
      set("use_cpu", "true");
      set("num_processes", "1");
      set("distributed_type", "NO");
    }
    set("debug", "false");
    set("enable_cpu_affinity", "false");
    config::Config cfg = config::resolve_launch(std::nullopt, f, false);
    config::check_launch(cfg);
    write_file(path, config::format_launch_file(cfg, path.ends_with(".json")));
    std::printf("acc configuration saved at %s\n", path.c_str());
    return 0;
  } catch (const config::Error& e) {
    std::fprintf(stderr, "%s default: error: %s\n", kMe, e.what());
    return 2;
  }
}

int update_main(const std::vector<std::string>& args) {
  std::vector<cli::Option> opts = {opt("--help", "", "show this help and exit", false, {"-h"}),
                                   opt("--config_file", "FILE",
                                       "the file to update (default: the one acc launch reads)")};
  cli::Parsed p;
  if (auto done = parse_options(
          opts, args, "update", "unexpected argument ", "", "acc config update [--config_file FILE]",
          "Reads a config file (with Accelerate's old spellings: fp16: true, a top-level dynamo_backend,\n"
          "fsdp_config keys without their fsdp_ prefix, ...) and writes it back with the current keys.",
          p))
    return *done;
  try {
    auto env = config::current_environment();
    std::string path;
    if (p.options.count("--config_file")) {
      path = p.options["--config_file"].value;
      if (!exists(path)) throw config::Error("the config file '" + path + "' does not exist");
    } else {
      auto f = config::find_default_config_file(env);
      if (!f) throw config::Error("no config file to update (none at the default locations); pass --config_file");
      path = *f;
    }
    config::Config cfg = config::resolve_launch(path, {}, false);
    write_file(path, config::format_launch_file(cfg, path.ends_with(".json")));
    std::printf("Successfully updated the configuration file at %s.\n", path.c_str());
    return 0;
  } catch (const config::Error& e) {
    std::fprintf(stderr, "%s update: error: %s\n", kMe, e.what());
    return 2;
  }
}

int schema_main(const std::vector<std::string>& args) {
  std::vector<cli::Option> opts = {opt("--help", "", "show this help and exit", false, {"-h"}),
                                   opt("--library", "", "the schema of acc_accelerator_create's JSON instead", false)};
  cli::Parsed p;
  if (auto done =
          parse_options(opts, args, "schema", "unexpected argument ", "", "acc config schema [--library]",
                        "Prints the JSON Schema (draft 2020-12) of launch config files, for editors: e.g. the YAML\n"
                        "language server's `# yaml-language-server: $schema=acc-config.schema.json`.",
                        p))
    return *done;
  std::fputs(config::json_schema(p.options.count("--library") ? config::SchemaKind::Accelerator
                                                              : config::SchemaKind::Launch)
                 .c_str(),
             stdout);
  return 0;
}

// `acc config explain`: the launch config as `acc launch` would resolve it with the same options, and the library
// config its processes would resolve, each value with its source.
std::string describe(const config::Provenance& p) {
  return std::string(config::origin_name(p.origin)) + (p.origin == config::Origin::Default ? "" : "  " + p.where);
}

int explain_main(const std::vector<std::string>& args) {
  std::vector<cli::Option> opts = launch_options();
  opts.push_back(opt("--explicit", "JSON", "the JSON the program gives acc_accelerator_create (highest precedence)"));
  opts.push_back(opt("--json", "", "print JSON: {launch: {config, provenance}, library: {config, provenance}, ...}",
                     false));
  opts.push_back(opt("--changed", "", "only the values that do not come from the defaults", false));
  cli::Parsed p;
  if (auto done =
          parse_options(opts, args, "explain", "unexpected argument ", " (explain takes no PROGRAM)",
                        "acc config explain [acc launch options] [--explicit JSON] [--changed] [--json]",
                        "Resolves the config exactly as `acc launch` would with the same options, and prints every\n"
                        "value with its source: default, file:line, a flag, a scheduler's variable. Then the values\n"
                        "the library (acc_accelerator_create) would resolve in the launched processes, with the\n"
                        "environment variable each one was read from and what set that variable.",
                        p))
    return *done;
  const bool changed = p.options.count("--changed") > 0;
  try {
    auto env = config::current_environment();
    // Resolved without the job checks first, so that a config with a contradiction is still explained.
    Resolution r = resolve(p, opts, env, false);
    std::string invalid;
    try {
      resolve(p, opts, env, true);
    } catch (const config::Error& e) {
      invalid = e.what();
    }
    // The processes' environment: acc's, with what the launcher exports on top.
    auto child_env = env;
    auto exported = config::launch_environment(r.cfg);
    for (auto& [k, v] : exported) child_env[k] = v;
    std::string explicit_json = p.options.count("--explicit") ? p.options["--explicit"].value : "";
    config::Config lib = config::resolve_accelerator(explicit_json, child_env, "--explicit");
    // Which launch key (and its source) set an exported variable.
    std::map<std::string, std::string> var_source;
    for (const auto& k : config::schema_keys(config::SchemaKind::Launch)) {
      if (k.env.empty() || !exported.count(k.env)) continue;
      config::Provenance pv = r.cfg.provenance(k.path);
      var_source[k.env] = "set by acc launch from " + k.path + " (" + describe(pv) + ")";
    }
    if (p.options.count("--json")) {
      std::string out = "{\n  \"config_file\": ";
      out += r.file ? "\"" + *r.file + "\"" : "null";
      out += ",\n  \"launch\": " + r.cfg.to_json(true);
      out += ",\n  \"library\": " + lib.to_json(true) + "}\n";
      std::fputs(out.c_str(), stdout);
      if (!invalid.empty()) std::fprintf(stderr, "%s explain: error: %s\n", kMe, invalid.c_str());
      return invalid.empty() ? 0 : 2;
    }
    std::printf("Config file: %s\n", r.file ? (*r.file + "  (" + r.file_reason + ")").c_str() : "none");
    if (!r.file && !r.searched.empty()) {
      std::printf("  looked for:");
      for (const auto& s : r.searched) std::printf(" %s", s.c_str());
      std::printf("\n");
    }
    if (r.sched)
      std::printf("Scheduler: %s (task %d of %d, %s)\n", r.sched->name.c_str(), r.sched->rank, r.sched->size,
                  r.per_task ? "one process per task" : "one task per machine");
    std::printf("Precedence: defaults < config file < scheduler < flags < environment < explicit JSON\n");
    auto table = [&](const config::Config& c, const char* title) {
      std::printf("\n%s\n", title);
      size_t w = 0;
      std::vector<std::array<std::string, 3>> rows;
      for (const auto& k : c.keys()) {
        config::Provenance pv = c.provenance(k);
        if (changed && pv.origin == config::Origin::Default) continue;
        std::string src = describe(pv);
        if (pv.origin == config::Origin::Env) {
          auto it = var_source.find(pv.where);
          if (it != var_source.end()) src += "  <- " + it->second;
          else if (c.kind() == config::SchemaKind::Accelerator) src += "  <- from acc's own environment";
        }
        rows.push_back({k, c.get_json(k), src});
        w = std::max(w, k.size());
      }
      size_t vw = 0;
      for (auto& row : rows) vw = std::max(vw, std::min<size_t>(row[1].size(), 28));
      for (auto& row : rows)
        std::printf("  %-*s  %-*s  %s\n", static_cast<int>(w), row[0].c_str(), static_cast<int>(vw), row[1].c_str(),
                    row[2].c_str());
      if (rows.empty()) std::printf("  (everything at its default)\n");
    };
    table(r.cfg, "Launch config (acc launch):");
    table(lib, "Library config (acc_accelerator_create in every process):");
    if (auto why = config::unsupported_setting(lib))
      std::printf("\nNote: libacc programs would refuse this config: %s\n", why->c_str());
    if (!invalid.empty()) {
      std::fflush(stdout);
      std::fprintf(stderr, "%s explain: error: acc launch would refuse this config: %s\n", kMe, invalid.c_str());
      return 2;
    }
    return 0;
  } catch (const config::Error& e) {
    std::fprintf(stderr, "%s explain: error: %s\n", kMe, e.what());
    return 2;
  } catch (const cli::UsageError& e) {
    return usage_fail("explain", e.what());
  }
}

}  // namespace

int config_main(const std::vector<std::string>& args) {
  if (!args.empty()) {
    const std::string& sub = args.front();
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (sub == "default") return default_main(rest);
    if (sub == "update") return update_main(rest);
    if (sub == "explain") return explain_main(rest);
    if (sub == "schema") return schema_main(rest);
  }
  return questionnaire_main(args);
}

}  // namespace acc::launcher
