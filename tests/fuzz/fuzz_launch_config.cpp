// libFuzzer target: a launch config file (Accelerate's default_config.yaml, or .json), read by
// acc::config::resolve_launch from a scratch file. Built twice: fuzz_launch_yaml (FUZZ_EXT ".yaml", yaml-cpp) and
// fuzz_launch_json (FUZZ_EXT ".json", the library's own JSON reader).
//
// Per input: resolve without the job checks (what `acc config update` does); when accepted, write the file back
// (format_launch_file, YAML and JSON) and read the YAML again, which must be accepted and written back the same
// (format_launch_file is a fixed point after one round: the first write may normalize, e.g. tpu_env null -> [];
// ACC_FUZZ_ROUNDTRIP=0 in the environment turns this oracle off); then
// resolve with the checks (what `acc launch` does) and, when accepted, build the launch environment.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "acc/config.hpp"
#include "fuzz_common.hpp"

#ifndef FUZZ_EXT
#error "FUZZ_EXT (\".yaml\" or \".json\") must be defined"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static acc_fuzz::ScratchCleanup cleanup_in{acc_fuzz::scratch_path(FUZZ_EXT)};
  static const std::string back_path = acc_fuzz::scratch_path(FUZZ_EXT) + ".back.yaml";
  static acc_fuzz::ScratchCleanup cleanup_back{back_path};
  const std::string& path = cleanup_in.path;
  if (!acc_fuzz::write_scratch(path, data, size)) {
    std::perror(path.c_str());
    std::abort();
  }
  acc_fuzz::guarded([&] {
    const acc::config::Config cfg = acc::config::resolve_launch(path, {}, /*check=*/false);
    const std::string yaml = acc::config::format_launch_file(cfg, false);
    (void)acc::config::format_launch_file(cfg, true);
    (void)cfg.to_json(true);
    static const bool roundtrip = [] {
      const char* v = std::getenv("ACC_FUZZ_ROUNDTRIP");
      return !(v && std::string(v) == "0");
    }();
    if (!roundtrip) return;
    const auto* bytes = reinterpret_cast<const uint8_t*>(yaml.data());
    if (!acc_fuzz::write_scratch(back_path, bytes, yaml.size())) std::abort();
    acc::config::Config again;
    try {
      again = acc::config::resolve_launch(back_path, {}, false);
    } catch (const acc::config::Error& e) {
      std::fprintf(stderr, "==fuzz== format_launch_file of an accepted config is refused: %s\n--- file:\n%s\n",
                   e.what(), yaml.c_str());
      std::abort();
    }
    const std::string yaml_again = acc::config::format_launch_file(again, false);
    if (yaml_again != yaml) {
      std::fprintf(stderr,
                   "==fuzz== format_launch_file is not stable over a round trip\n--- first:\n%s\n--- again:\n%s\n",
                   yaml.c_str(), yaml_again.c_str());
      std::abort();
    }
  });
  acc_fuzz::guarded([&] {
    const acc::config::Config cfg = acc::config::resolve_launch(path, {}, /*check=*/true);
    (void)acc::config::launch_environment(cfg);
  });
  return 0;
}
