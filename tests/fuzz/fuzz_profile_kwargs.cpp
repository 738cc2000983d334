// libFuzzer target: profile_kwargs, the profiler's options (Accelerate's ProfileKwargs), as acc_profile_begin reads
// its argument: the text must be one JSON object, is nested as {"profile_kwargs": TEXT} and read by the accelerator's
// schema (resolve_accelerator: keys, types, accepted activities), then the settings (accelerator_settings) and
// schedule_option's torch.profiler.schedule arguments (wait, warmup, active, repeat, skip_first, skip_first_wait) read
// by the options reader, as profile_options does. The same keys reach an accelerator's config directly; that route is
// fuzz_accelerator_json's.
//
// The torch-free part: profile_config, profile_options and the schedule are in src/train/profiler.cpp, which needs
// LibTorch (Kineto), and the fuzz build has none (-Dcore=false). This target runs the code they run on the text: the
// JSON reader, the schema (base/), and the options reader (src/util/options.cpp, compiled here), with
// profile_config's and read_schedule's steps as they are written there; nothing is profiled.
//
// Oracle: besides crashes, hangs, leaks and sanitizer reports, the nesting cannot reach outside profile_kwargs (every
// other key of the resolved config keeps its default: a text that closed the object early and set "seed" would be
// an injection), and an accepted schedule keeps torch's bounds (wait, warmup, repeat, skip_first >= 0, active >= 1,
// each at most INT32_MAX, as read_schedule caps them) with its cycle wait + warmup + active free of overflow.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "acc/config.hpp"
#include "acc/config_views.hpp"
#include "fuzz_common.hpp"
#include "util/options.hpp"
#include <acc/json.hpp>

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "==fuzz== %s\n", what.c_str());
  std::abort();
}

using Kwargs = acc::config::AcceleratorSettings::ProfileKwargs;

// read_schedule: torch.profiler.schedule's keyword arguments; wait, warmup and active are required, as there.
void read_schedule(const std::string& json) {
  const std::string what = Kwargs::Key::schedule_option;
  acc::core::Options o(json.c_str(), what, {"wait", "warmup", "active", "repeat", "skip_first", "skip_first_wait"});
  constexpr int64_t kMax = INT32_MAX;
  auto get = [&](const char* key, std::optional<int64_t> fallback, int64_t min) {
    const int64_t v = o.get_int(key, fallback, min);
    if (v < min) finding(std::string(key) + " = " + std::to_string(v) + " was read below its minimum");
    if (v > kMax) throw acc::core::OptionsError(what + ": '" + key + "' must be at most " + std::to_string(kMax));
    return v;
  };
  const int64_t wait = get("wait", std::nullopt, 0), warmup = get("warmup", std::nullopt, 0),
                active = get("active", std::nullopt, 1);
  (void)get("repeat", 0, 0), (void)get("skip_first", 0, 0), (void)get("skip_first_wait", 0, 0);
  int64_t cycle = 0;
  if (__builtin_add_overflow(wait, warmup, &cycle) || __builtin_add_overflow(cycle, active, &cycle) || cycle < 1)
    finding("a schedule's cycle wait + warmup + active overflows or is empty");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  acc_fuzz::guarded<acc::core::OptionsError>([&] {
    // profile_config
    const char* where = "acc_profile_begin";
    try {
      acc::json::Document::object(text, std::string(where) + "'s profile_kwargs", acc::json::kConfigLimits);
    } catch (const acc::json::Error& e) {
      throw acc::config::Error(e.what());
    }
    const std::string nested = "{\"profile_kwargs\": " + std::string(text) + "}";
    const acc::config::Config c = acc::config::resolve_accelerator(nested, {}, where);
    for (const std::string& key : c.keys())
      if (key.rfind("profile_kwargs.", 0) != 0 && c.provenance(key).origin != acc::config::Origin::Default)
        finding("profile_kwargs reached '" + key + "' (" + c.provenance(key).where + ")");
    // profile_options
    const Kwargs kw = acc::config::accelerator_settings(c).profile_kwargs;
    if (kw.activities)
      for (const std::string& a : *kw.activities)
        if (a != "cpu" && a != "cuda" && a != "xpu" && a != "mtia" && a != "hpu")
          finding("activity '" + a + "' was accepted");
    if (!kw.schedule_option.is_null()) read_schedule(kw.schedule_option.json);
  });
  return 0;
}
