// Accelerate's ParallelismConfig rules (parallelism_config.py __post_init__ and _validate_accelerator, state.py's
// context-parallel checks), over either schema's keys, and the process-mesh sizes a job runs with.
#include "internal.hpp"

namespace acc::config {

namespace detail {

namespace {

// Accelerate's DeepSpeedSequenceParallelConfig rules, over either schema's keys (`prefix` + sp_*).
void check_sequence_parallel(const Config& c, const std::string& prefix) {
  const std::string variable = prefix + "sp_seq_length_is_variable", length = prefix + "sp_seq_length",
                    attention = prefix + "sp_attn_implementation";
  if (!c.get_bool(variable) && c.get_json(length) == "null")
    throw Error("contradictory settings: " + shown_setting(c, variable) + " needs " + shown_setting(c, length) +
                " to be the fixed sequence length");
  // libacc's Ulysses attention is torch's scaled_dot_product_attention (flash kernels where the device has them).
  const std::string a = c.get_string(attention);
  if (a == "eager" || a == "flex_attention")
    throw Error(shown_setting(c, attention) + ": 'eager' and 'flex_attention' are not supported with sequence "
                                              "parallelism (as in Accelerate)");
  if (a != "sdpa" && a != "flash_attention_2" && a != "flash_attention_3")
    throw Error(shown_setting(c, attention) +
                ": libacc's sequence parallelism attends with torch's scaled_dot_product_attention: use sdpa, "
                "flash_attention_2 or flash_attention_3");
}

// libacc's pipeline keys (Accelerate has none): torch's rules on a schedule's stages per rank, and split points (block
// indices or names), one fewer than the stages.
void check_pipeline(const Config& c, const std::string& prefix) {
  const std::string size = prefix + "pp_size", schedule = prefix + "pp_schedule",
                    per_rank = prefix + "pp_stages_per_rank", splits = prefix + "pp_split_points";
  const int64_t v = c.get_int(per_rank);
  const bool multi_stage = c.get_string(schedule) == "Interleaved1F1B" ||
                           c.get_string(schedule) == "InterleavedZeroBubble";
  if (multi_stage && v < 2)
    throw Error("contradictory settings: " + shown_setting(c, schedule) + " with " + shown_setting(c, per_rank) +
                ": a multi-stage schedule needs at least 2 stages per rank");
  if (!multi_stage && v != 1)
    throw Error("contradictory settings: " + shown_setting(c, schedule) + " with " + shown_setting(c, per_rank) +
                ": a single-stage schedule runs exactly 1 stage per rank");
  const std::vector<std::string> points = split_points(c, splits);
  const int64_t stages = c.get_int(size) * v;
  if (!points.empty() && static_cast<int64_t>(points.size()) != stages - 1)
    throw Error("contradictory settings: " + shown_setting(c, splits) + " makes " + std::to_string(points.size() + 1) +
                " stages; " + shown_setting(c, size) + " x " + shown_setting(c, per_rank) + " is " +
                std::to_string(stages));
}

}  // namespace

std::vector<std::string> split_points(const Config& c, const std::string& key) {
  const std::vector<std::string> points = c.get_string_list(key);
  int64_t previous = -1;
  for (const std::string& s : points) {
    if (s.empty() || s.find_first_of(" \t\n") != std::string::npos)
      throw Error(shown_setting(c, key) + ": '" + s + "' is neither a block index nor a module's dotted name");
    if (s.find_first_not_of("0123456789") != std::string::npos) continue;  // a module's name
    size_t used = 0;
    int64_t p = -1;
    try {
      p = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || p <= previous)
      throw Error(shown_setting(c, key) + ": '" + s +
                  "' is not a block index above the previous one (split points are increasing integers >= 0)");
    previous = p;
  }
  return points;
}

void check_parallelism_sizes(const Config& c, const std::string& prefix, int64_t processes,
                             const std::string& processes_shown, bool fsdp2) {
  const std::string rep = prefix + "dp_replicate_size", shard = prefix + "dp_shard_size", tp = prefix + "tp_size",
                    cp = prefix + "cp_size", sp = prefix + "sp_size", pp = prefix + "pp_size";
  const int64_t r = c.get_int(rep), s = c.get_int(shard), t = c.get_int(tp), k = c.get_int(cp), q = c.get_int(sp),
                p = c.get_int(pp);
  if (k > 1 && q > 1)
    throw Error("contradictory settings: " + shown_setting(c, cp) + " and " + shown_setting(c, sp) +
                ": context parallelism and sequence parallelism are mutually exclusive; set one of them to 1");
  // A pipeline stage passes whole sequences between ranks; it takes no sequence split.
  if (p > 1 && (k > 1 || q > 1))
    throw Error("contradictory settings: " + shown_setting(c, pp) + " with " + shown_setting(c, k > 1 ? cp : sp) +
                ": libacc's pipeline parallelism does not compose with context or sequence parallelism; set one to 1");
  check_pipeline(c, prefix);
  // Accelerate refuses TP and CP with replication alone (its TP composes with FSDP2 only). libacc's DDP synchronises a
  // split model's slices over dp_replicate, so it allows dp_replicate x tp; CP still needs FSDP2, as below.
  if (k > 1 && r > 1 && s == 1)
    throw Error("contradictory settings: " + shown_setting(c, cp) + " with " + shown_setting(c, rep) + " and " +
                shown_setting(c, shard) +
                ": context parallelism cannot be used with pure data parallelism "
                "(replication without sharding); set dp_shard_size > 1 (FSDP2 + CP, or HSDP + CP)");
  if (k > 1 && !fsdp2)
    throw Error(shown_setting(c, cp) + ": context parallelism needs FSDP2 (distributed_type FSDP with fsdp_version 2): "
                                       "the model is sharded over dp_shard x cp");
  if (fsdp2 && s == 1 && k == 1 && q == 1)
    throw Error("contradictory settings: " + shown_setting(c, shard) +
                " leaves FSDP no dimension to shard across "
                "(it shards over dp_shard_size x cp_size x sp_size); set dp_shard_size > 1 (or cp_size or sp_size)");
  if (q > 1) check_sequence_parallel(c, prefix);
  std::string which;  // the sizes above 1, with their sources
  for (const std::string& key : {pp, rep, shard, tp, cp, sp})
    if (c.get_int(key) > 1) which += (which.empty() ? "" : ", ") + shown_setting(c, key);
  // Multiplied against the most processes a job may have, before any product is taken: 64-bit sizes wrap (2^63-1
  // squared is 1), and the mesh multiplies them again in int.
  int64_t total = 1;
  for (const int64_t size : {p, r, s, t, k, q}) {
    if (size > limits::kProcesses / total)
      throw Error("the parallelism_config sizes multiply to more than " + std::to_string(limits::kProcesses) +
                  " processes, the most a job may have (" + which +
                  "); adjust dp_replicate_size / dp_shard_size / "
                  "tp_size / cp_size / sp_size");
    total *= size;
  }
  // (DeepSpeed's sequence parallelism makes its own groups, and Accelerate checks no product then; libacc's sp is a
  // dimension of its mesh, so the product is checked with it, as Accelerate's docs ask: dp x sp = processes.)
  if (total == 1) return;  // Accelerate's _validate_accelerator: replicate over every process (DDP)
  if (total != processes) {
    throw Error("contradictory settings: the parallelism_config sizes multiply to " + std::to_string(total) +
                " processes (" + which + "), but " + processes_shown +
                "; adjust pp_size / dp_replicate_size / dp_shard_size / tp_size / cp_size / sp_size");
  }
}

}  // namespace detail

ParallelDims parallel_dims(const Config& c, int64_t world, int64_t local_world) {
  if (c.kind() != SchemaKind::Accelerator) throw Error("parallel_dims needs an accelerator config");
  ParallelDims d;
  const Sharding sh = sharding(c);
  const std::string processes =
      "the job has " + std::to_string(world) + " process" + (world == 1 ? "" : "es") + " (WORLD_SIZE)";
  if (c.get_bool("use_parallelism_config")) {
    const bool fsdp2 = c.get_bool("use_fsdp") && c.get_int("fsdp_plugin.fsdp_version") == 2;
    detail::check_parallelism_sizes(c, "parallelism_config.", world, processes, fsdp2);
    const char* const kShard = "parallelism_config.dp_shard_size";
    if (!fsdp2 && c.get_int(kShard) > 1)
      throw Error(detail::shown_setting(c, kShard) + ": dp_shard_size > 1 shards with FSDP2 (distributed_type FSDP, "
                                                     "fsdp_version 2)");
    d.dp_replicate = c.get_int("parallelism_config.dp_replicate_size");
    d.dp_shard = c.get_int(kShard);
    d.tp = c.get_int("parallelism_config.tp_size");
    d.cp = c.get_int("parallelism_config.cp_size");
    d.sp = c.get_int("parallelism_config.sp_size");
    d.pp = c.get_int("parallelism_config.pp_size");
    d.from_parallelism_config = true;
    if (d.pp * d.dp_replicate * d.dp_shard * d.tp * d.cp * d.sp == 1) d.dp_replicate = world;
    return d;
  }
  // Without a parallelism_config the data-parallel strategy alone makes the mesh.
  if (sh.stage == 0) {
    d.dp_replicate = world;
  } else if (sh.hybrid && local_world < world) {  // HYBRID_SHARD: shard inside a machine, replicate across machines
    if (local_world < 1 || world % local_world != 0)
      throw Error(sh.label + " needs the same number of processes on every machine: " + std::to_string(world) +
                  " processes do not split into machines of " + std::to_string(local_world) + " (LOCAL_WORLD_SIZE)");
    d.dp_shard = local_world;
    d.dp_replicate = world / local_world;
  } else {
    d.dp_shard = world;
  }
  return d;
}

}  // namespace acc::config
