// A DeepSpeed JSON config (DeepSpeedPlugin(hf_ds_config=...), `deepspeed_config_file`, ACCELERATE_DEEPSPEED_CONFIG_FILE)
// read as Accelerate reads it (utils/dataclasses.py, DeepSpeedPlugin.__post_init__ and set_mixed_precision): a value
// in the file wins over the plugin's setting, "auto" keeps the plugin's. The keys that mean something to libacc
// become accelerator settings; every other key is refused, naming it.
#include <cmath>
#include <cstdint>
#include <tuple>

#include "internal.hpp"

namespace acc::config::detail {
namespace {

bool is_auto(const Node& n) { return n.kind == Kind::String && n.s == "auto"; }

struct Reader {
  const std::string& file;
  std::vector<DsSetting> out;

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw Error(file + ": '" + key + "' " + why);
  }
  void set(const std::string& ds_key, const char* key, Node v) {
    out.push_back({key, std::move(v), file + ": " + ds_key});
  }

  const Node& section(const std::string& key, const Node& v) const {
    if (v.kind != Kind::Map) fail(key, "must be an object; got " + brief_value(v));
    return v;
  }
  int64_t integer(const std::string& key, const Node& v, int64_t lo, int64_t hi) const {
    if (v.kind != Kind::Int || v.i < lo || v.i > hi)
      fail(key, "must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi) +
                    " or \"auto\"; got " + brief_value(v));
    return v.i;
  }
  std::optional<bool> flag(const std::string& key, const Node& v) const {  // nullopt: "auto"
    if (is_auto(v)) return std::nullopt;
    if (v.kind == Kind::Bool) return v.b;
    if (v.kind == Kind::String && (v.s == "true" || v.s == "false")) return v.s == "true";
    fail(key, "must be true, false or \"auto\"; got " + brief_value(v));
  }
  std::string device(const std::string& key, const Node& v) const {
    if (v.kind == Kind::String && (v.s == "none" || v.s == "cpu" || v.s == "nvme")) return v.s;
    fail(key, "must be \"none\", \"cpu\" or \"nvme\"; got " + brief_value(v));
  }

  void offload(const std::string& name, const Node& v, const char* device_key, const char* nvme_key) {
    const std::string at = "zero_optimization." + name;
    for (const auto& [k, x] : section(at, v).map) {
      if (k == "device") set(at + ".device", device_key, Node::string(device(at + ".device", x)));
      else if (k == "nvme_path") {
        if (x.kind != Kind::Null)
          set(at + ".nvme_path", nvme_key, x.kind == Kind::String ? x : Node::string(brief_value(x)));
      } else if (k == "pin_memory") flag(at + ".pin_memory", x);  // page-locked copies on GPU machines: taken as is
      else fail(at + "." + k, "has no meaning in libacc; remove it (read: device, nvme_path, pin_memory)");
    }
  }

  void zero(const Node& z) {
    for (const auto& [k, v] : section("zero_optimization", z).map) {
      const std::string at = "zero_optimization." + k;
      if (k == "stage") set(at, "deepspeed_plugin.zero_stage", Node::integer(integer(at, v, 0, 3)));
      else if (k == "offload_optimizer")
        offload(k, v, "deepspeed_plugin.offload_optimizer_device", "deepspeed_plugin.offload_optimizer_nvme_path");
      else if (k == "offload_param")
        offload(k, v, "deepspeed_plugin.offload_param_device", "deepspeed_plugin.offload_param_nvme_path");
      else if (k == "stage3_gather_16bit_weights_on_model_save") {
        if (auto b = flag(at, v)) set(at, "deepspeed_plugin.zero3_save_16bit_model", Node::boolean(*b));
      } else if (k == "overlap_comm" || k == "contiguous_gradients") {
        // What libacc always does: one reduce-scatter in flight while autograd goes on; gradients in flat buffers.
        if (flag(at, v) == false)
          fail(at, "false is not available: libacc always overlaps communication and keeps "
                   "gradients contiguous; remove it or set true");
      } else if (k == "reduce_bucket_size") {
        // Elements per gradient bucket of stages 1-2 (fp32 gradients: 4 bytes each) = ddp_kwargs.bucket_cap_mb.
        if (is_auto(v)) continue;
        if ((v.kind != Kind::Int && v.kind != Kind::Double) || (v.kind == Kind::Int ? v.i : v.d) < 1)
          fail(at, "must be a number of elements >= 1 or \"auto\"; got " + brief_value(v));
        const double elements = v.kind == Kind::Int ? static_cast<double>(v.i) : v.d;
        set(at, "ddp_kwargs.bucket_cap_mb", Node::number(elements * 4 / 1048576.0));
      } else {
        fail(at, "has no meaning in libacc; remove it (read: stage, offload_optimizer, offload_param, "
                 "stage3_gather_16bit_weights_on_model_save, overlap_comm, contiguous_gradients, reduce_bucket_size)");
      }
    }
  }

  // fp16 / bf16: whether enabled (nullopt: "auto" or absent); fp16's loss scaler where it is torch's GradScaler.
  std::optional<bool> precision(const std::string& name, const Node& v) {
    std::optional<bool> enabled;
    for (const auto& [k, x] : section(name, v).map) {
      const std::string at = name + "." + k;
      if (k == "enabled") enabled = flag(at, x);
      else if (name == "fp16" && k == "loss_scale") {
        if (!((x.kind == Kind::Int && x.i == 0) || (x.kind == Kind::Double && x.d == 0)))
          fail(at, "must be 0 (a dynamic scale, torch's GradScaler); libacc has no fixed loss scale");
      } else if (name == "fp16" && k == "initial_scale_power") {
        set(at, "grad_scaler_kwargs.init_scale",
            Node::number(std::ldexp(1.0, static_cast<int>(integer(at, x, 0, 64)))));
      } else if (name == "fp16" && k == "loss_scale_window") {
        set(at, "grad_scaler_kwargs.growth_interval", Node::integer(integer(at, x, 1, INT32_MAX)));
      } else {
        fail(at, "has no meaning in libacc; remove it (read: enabled" +
                     std::string(name == "fp16" ? ", loss_scale 0, initial_scale_power, loss_scale_window" : "") +
                     "; the loss scaler is torch's GradScaler, grad_scaler_kwargs)");
      }
    }
    return enabled;
  }
};

}  // namespace

std::vector<DsSetting> deepspeed_settings(const Node& root, const std::string& file,
                                          const std::string& mixed_precision) {
  Reader r{file, {}};
  if (root.kind != Kind::Map)
    throw Error(file + ": a DeepSpeed config must be a JSON object; got " + brief_value(root));
  if (!root.find("zero_optimization"))
    throw Error(file + ": no 'zero_optimization' section; Accelerate needs the ZeRO optimization config in the file");
  std::optional<bool> fp16, bf16;
  for (const auto& [k, v] : root.map) {
    if (k == "zero_optimization") r.zero(v);
    else if (k == "gradient_accumulation_steps") {
      if (!is_auto(v)) r.set(k, "gradient_accumulation_steps", Node::integer(r.integer(k, v, 1, INT32_MAX)));
    } else if (k == "gradient_clipping") {
      if (is_auto(v)) continue;
      if ((v.kind != Kind::Int && v.kind != Kind::Double) || (v.kind == Kind::Int ? v.i : v.d) < 0)
        r.fail(k, "must be a number >= 0 or \"auto\"; got " + brief_value(v));
      r.set(k, "deepspeed_plugin.gradient_clipping",
            Node::number(v.kind == Kind::Int ? static_cast<double>(v.i) : v.d));
    } else if (k == "train_batch_size" || k == "train_micro_batch_size_per_gpu") {
      if (!is_auto(v)) r.fail(k, "must be \"auto\": libacc takes the batch size from the data loader");
    } else if (k == "steps_per_print" || k == "wall_clock_breakdown") {
      // DeepSpeed's own progress printing: libacc prints nothing of the kind.
    } else if (k == "fp16") fp16 = r.precision(k, v);
    else if (k == "bf16") bf16 = r.precision(k, v);
    else
      r.fail(k, "has no meaning in libacc; remove it (read: zero_optimization, gradient_accumulation_steps, "
                "gradient_clipping, fp16, bf16, train_batch_size and train_micro_batch_size_per_gpu \"auto\", "
                "steps_per_print, wall_clock_breakdown)");
  }
  // set_mixed_precision: the other 16-bit type enabled in the file is an error; otherwise what the file enables or
  // disables wins, and "auto" (or nothing) follows mixed_precision.
  for (auto [mine, other, other_on] : {std::tuple{"fp16", "bf16", bf16}, std::tuple{"bf16", "fp16", fp16}})
    if (mixed_precision == mine && other_on == true)
      throw Error(file + ": 'mixed_precision' cannot be \"" + mine + "\" when " + other +
                  " is enabled in the "
                  "DeepSpeed config file");
  const bool fp16_on = fp16.value_or(mixed_precision == "fp16"), bf16_on = bf16.value_or(mixed_precision == "bf16");
  if (fp16_on && bf16_on) throw Error(file + ": fp16 and bf16 are both enabled; enable one");
  const std::string effective = fp16_on ? "fp16" : bf16_on ? "bf16" : mixed_precision == "fp8" ? "fp8" : "no";
  if (effective != mixed_precision)
    r.out.push_back({"mixed_precision", Node::string(effective),
                     file + ": " +
                         (effective == "fp16" || mixed_precision == "fp16" ? "fp16.enabled" : "bf16.enabled")});
  return r.out;
}

}  // namespace acc::config::detail
