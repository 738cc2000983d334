// libFuzzer target: parallelism_config's sizes (dp_replicate_size, dp_shard_size, tp_size, cp_size, sp_size) on both
// sides: the accelerator's (explicit JSON or the PARALLELISM_CONFIG_* variables `accelerate launch` sets, read by
// resolve_accelerator, then unsupported_setting and parallel_dims for a job of N processes: the mesh libacc builds),
// and the launcher's (a default_config.json's parallelism_config_* keys or `acc launch` flags, read by resolve_launch
// with the job checks, then launch_environment). ACC_FUZZ_VERBOSE=1 prints each side's answer. The sizes are what a JSON fuzzer rarely writes: 2^63-1, 2^62, 65536, 0, -1, numbers past
// int64, texts with spaces or signs; 2^63-1 x 2^63-1 wrapped to 1 and was accepted (issue 36).
//
// The input is read as decisions, not as text: a byte of flags (FSDP 2, where each size comes from), then each size
// (a tag byte: absent, 1, 2, small, a value near a limit or a power of two, 8 raw bytes, a non-integer), the number
// of processes (often the product of the sizes, to reach the accepting paths), of machines, and the local world size
// (WORLD_SIZE and LOCAL_WORLD_SIZE as ProcessState reads them: 1 to 2^24).
//
// Oracle: besides crashes, sanitizer reports (a signed overflow is one: UBSan) and unexpected exceptions, what is
// accepted keeps the rules (base/src/parallelism.cpp): every size at least 1 and read back as given, their product
// (taken in 128 bits) at most limits::kProcesses and, without sequence parallelism, 1 or the number of processes;
// parallel_dims' mesh has exactly the job's processes. A launch config accepted with the job checks gives processes
// whose environment the accelerator accepts with the same mesh (what `acc launch` starts must not fail on it).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "acc/config.hpp"
#include "acc/limits.hpp"
#include "fuzz_common.hpp"
#include <acc/json.hpp>

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "==fuzz== %s\n", what.c_str());
  std::abort();
}

struct Reader {
  const uint8_t* p;
  size_t left;
  uint8_t byte() { return left ? (--left, *p++) : 0; }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{byte()} << (8 * i);
    return v;
  }
};

// One size as a source gives it: its text (a JSON value, an environment variable's or a flag's text), and its value
// when the text is a plain decimal integer (else the config must refuse it or read it as documented).
struct Size {
  std::optional<std::string> text;  // nullopt: not given
  std::optional<__int128> value;  // the integer the text spells, when it is plain decimal digits
};

std::string decimal(__int128 v) {
  if (v == 0) return "0";
  const bool neg = v < 0;
  unsigned __int128 u = neg ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  std::string s;
  for (; u; u /= 10) s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
  return neg ? "-" + s : s;
}

Size integer(__int128 v) { return {decimal(v), v}; }

Size read_size(Reader& in) {
  static const __int128 kNear[] = {0,
                                   -1,
                                   3,
                                   65535,
                                   65536,
                                   65537,
                                   32768,
                                   1024,
                                   256,
                                   INT32_MAX,
                                   __int128{INT32_MAX} + 1,
                                   __int128{1} << 32,
                                   (__int128{1} << 32) + 1,
                                   3037000499,  // floor(sqrt(2^63))
                                   3037000500,
                                   6148914691236517205,  // (2^64 - 1) / 3: 3 x it is -1 in 64 bits
                                   __int128{1} << 62,
                                   INT64_MAX,
                                   INT64_MIN,
                                   __int128{INT64_MAX} + 1,
                                   __int128{INT64_MIN} - 1,
                                   __int128{UINT64_MAX},
                                   __int128{UINT64_MAX} + 1};
  static const char* const kOdd[] = {"2.0", "2.5", "1e3", "-0", "0.0", "1e400", "\"2\"", "true", "null", "[2]",
                                     "{}",  "2x",  " 2",  "2 ", "+2",  "02",    "0x10",  "",     "１",   "4e0"};
  const uint8_t tag = in.byte();
  switch (tag % 10) {
    case 0: return {};
    case 1: return integer(1);
    case 2: return integer(2);
    case 3: return integer(in.byte() % 70);
    case 4: return integer(kNear[in.byte() % (sizeof kNear / sizeof kNear[0])]);
    case 5: return integer(static_cast<int64_t>(in.u64()));
    case 6: {  // a power of two, or one off it
      const uint8_t b = in.byte();
      const __int128 p = __int128{1} << (b % 66);
      return integer(p + (b >> 7 ? (b & 64 ? 1 : -1) : 0));
    }
    case 7: {
      const char* s = kOdd[in.byte() % (sizeof kOdd / sizeof kOdd[0])];
      return {std::string(s), std::nullopt};
    }
    default: return integer(1 + in.byte() % 8);
  }
}

const char* const kNames[] = {"dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size"};
const char* const kEnv[] = {"PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "PARALLELISM_CONFIG_DP_SHARD_SIZE",
                            "PARALLELISM_CONFIG_TP_SIZE", "PARALLELISM_CONFIG_CP_SIZE", "PARALLELISM_CONFIG_SP_SIZE"};

// An accepted config's sizes: each at least 1, each the value given (a plain integer read back as itself), their
// product at most kProcesses.
std::vector<int64_t> check_sizes(const acc::config::Config& c, const std::string& prefix, const Size (&given)[5]) {
  std::vector<int64_t> v;
  __int128 product = 1;
  for (int i = 0; i < 5; ++i) {
    const std::string key = prefix + kNames[i];
    const int64_t s = c.get_int(key);
    if (s < 1) finding(key + " = " + std::to_string(s) + " was accepted");
    if (given[i].text && given[i].value && *given[i].value != s)
      finding(key + " was given as " + *given[i].text + " and read as " + std::to_string(s));
    if (i < 4) product *= s;
    if (product > acc::limits::kProcesses)
      finding("sizes multiplying to more than " + std::to_string(acc::limits::kProcesses) + " were accepted (" + key +
              ")");
    v.push_back(s);
  }
  return v;
}

// ACC_FUZZ_VERBOSE=1: each side's answer on stderr (what was accepted, or the refusal), to read a seed's path.
void tell(const char* side, const std::string& what) {
  static const bool verbose = [] {
    const char* v = std::getenv("ACC_FUZZ_VERBOSE");
    return v && std::string(v) == "1";
  }();
  if (verbose) std::fprintf(stderr, "%s: %s\n", side, what.c_str());
}

// Runs one side; a config::Error is told (verbose) and passed on to guarded, which takes it as the refusal.
template <class Fn>
void side(const char* name, Fn&& fn) {
  acc_fuzz::guarded([&] {
    try {
      fn();
      tell(name, "accepted");
    } catch (const acc::config::Error& e) {
      tell(name, e.what());
      throw;
    }
  });
}

int64_t product4(const std::vector<int64_t>& s) { return s[0] * s[1] * s[2] * s[3]; }

void check_dims(const acc::config::ParallelDims& d, int64_t world, const std::string& what) {
  for (const int64_t x : {d.dp_replicate, d.dp_shard, d.tp, d.cp})
    if (x < 1) finding(what + ": a mesh dimension of " + std::to_string(x));
  const __int128 mesh = __int128{d.dp_replicate} * d.dp_shard * d.tp * d.cp;
  if (mesh != world)
    finding(what + ": a mesh of " + decimal(mesh) + " processes for a job of " + std::to_string(world));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  const uint8_t flags = in.byte();
  const uint8_t where = in.byte();  // bit i: size i from the environment / a flag instead of the file
  Size sizes[5];
  for (Size& s : sizes) s = read_size(in);
  __int128 all = 1;
  for (int i = 0; i < 4; ++i)
    all *= sizes[i].value && *sizes[i].value > 0 && *sizes[i].value < (1 << 20) ? *sizes[i].value : 1;
  const uint8_t w = in.byte();
  const int64_t world = w % 4 == 0   ? static_cast<int64_t>(all)  // the product: the accepting path
                        : w % 4 == 1 ? 1 + in.byte()
                        : w % 4 == 2 ? 1 + static_cast<int64_t>(in.u64() % 70000)
                                     : static_cast<int64_t>(in.u64());  // anything, for the launch file
  const int64_t machines = 1 + in.byte() % 4;
  const bool fsdp2 = !(flags & 1), fsdp = !(flags & 2);

  // ---- the accelerator: explicit JSON and the environment
  std::string json = "{";
  if (flags & 4) json += "\"use_parallelism_config\": true, ";
  if (fsdp)
    json += std::string("\"use_fsdp\": true, \"fsdp_plugin\": {\"fsdp_version\": ") + (fsdp2 ? "2" : "1") + "}, ";
  json += "\"parallelism_config\": {";
  std::map<std::string, std::string> env;
  if (flags & 8) env["ACCELERATE_USE_PARALLELISM_CONFIG"] = "true";
  bool first = true;
  for (int i = 0; i < 5; ++i) {
    if (!sizes[i].text) continue;
    if (where >> i & 1) {
      env[kEnv[i]] = *sizes[i].text;
    } else {
      json += std::string(first ? "" : ", ") + "\"" + kNames[i] + "\": " + *sizes[i].text;
      first = false;
    }
  }
  json += "}}";
  // WORLD_SIZE as ProcessState reads it: 1 to 2^24.
  constexpr int64_t kWorldMax = int64_t{1} << 24;
  const int64_t accel_world =
      world >= 1 && world <= kWorldMax ? world : 1 + static_cast<int64_t>(static_cast<uint64_t>(world) % kWorldMax);
  const int64_t local = 1 + (accel_world > 1 ? static_cast<int64_t>(in.byte()) % accel_world : 0);
  side("accelerator", [&] {
    const acc::config::Config c = acc::config::resolve_accelerator(json, env, "fuzz");
    (void)acc::config::unsupported_setting(c);  // sequence parallelism is refused there
    const acc::config::ParallelDims d = acc::config::parallel_dims(c, accel_world, local);
    if (!d.from_parallelism_config) {
      check_dims(d, accel_world, "without parallelism_config");
      return;
    }
    const std::vector<int64_t> s = check_sizes(c, "parallelism_config.", sizes);
    if (s[4] == 1 && product4(s) != 1 && product4(s) != accel_world)
      finding("sizes multiplying to " + std::to_string(product4(s)) + " accepted for " + std::to_string(accel_world) +
              " processes");
    if (s[4] == 1) check_dims(d, accel_world, "parallel_dims");
  });

  // ---- the launcher: default_config.json and flags, with the job checks
  static acc_fuzz::ScratchCleanup cleanup{acc_fuzz::scratch_path("-parallelism.json")};
  std::string file =
      "{\"distributed_type\": \"" + std::string(fsdp ? "FSDP" : "MULTI_GPU") +
      "\", \"num_processes\": " + std::to_string(world) + ", \"num_machines\": " + std::to_string(machines) +
      ", \"machine_rank\": 0, \"main_process_ip\": \"10.0.0.1\", " + "\"main_process_port\": 29500, \"use_cpu\": true";
  if (fsdp) file += std::string(", \"fsdp_config\": {\"fsdp_version\": ") + (fsdp2 ? "2" : "1") + "}";
  file += ", \"parallelism_config\": {";
  std::vector<acc::config::Flag> launch_flags;
  first = true;
  for (int i = 0; i < 5; ++i) {
    if (!sizes[i].text) continue;
    const std::string key = std::string("parallelism_config_") + kNames[i];
    if (where >> i & 1) {
      launch_flags.push_back({"parallelism_config." + key, *sizes[i].text, "--" + key});
    } else {
      file += std::string(first ? "" : ", ") + "\"" + key + "\": " + *sizes[i].text;
      first = false;
    }
  }
  file += "}}";
  if (!acc_fuzz::write_scratch(cleanup.path, reinterpret_cast<const uint8_t*>(file.data()), file.size())) std::abort();
  side("launch", [&] {
    const acc::config::Config c = acc::config::resolve_launch(cleanup.path, launch_flags, /*check=*/true);
    const std::map<std::string, std::string> job_env = acc::config::launch_environment(c);
    if (!c.is_set("parallelism_config")) return;
    const std::vector<int64_t> s = check_sizes(c, "parallelism_config.parallelism_config_", sizes);
    const int64_t np = c.get_int("num_processes"), nm = c.get_int("num_machines");
    if (s[4] == 1 && product4(s) != 1 && product4(s) != np)
      finding("launch: sizes multiplying to " + std::to_string(product4(s)) + " accepted for " + std::to_string(np) +
              " processes");
    // What the launcher starts: each process reads the sizes from its environment.
    acc::config::ParallelDims d;
    try {
      d = acc::config::parallel_dims(acc::config::resolve_accelerator("", job_env, "fuzz"), np, np / nm);
    } catch (const acc::config::Error& e) {
      finding(std::string("acc launch accepts sizes its processes refuse: ") + e.what() + "\n--- file:\n" + file);
    }
    const int64_t want[4] = {s[0], s[1], s[2], s[3]};
    const int64_t got[4] = {d.dp_replicate, d.dp_shard, d.tp, d.cp};
    if (s[4] == 1 && product4(s) != 1)
      for (int i = 0; i < 4; ++i)
        if (want[i] != got[i])
          finding(std::string("the processes' mesh differs from the launch config's ") + kNames[i]);
  });
  return 0;
}
