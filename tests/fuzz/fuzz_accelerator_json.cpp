// libFuzzer target: the explicit JSON of acc_accelerator_create, read by the configuration library's own JSON reader
// (acc::config::resolve_accelerator), then everything libacc derives from a resolved config.
//
// Oracle: besides crashes and sanitizer reports, an accepted config's to_json(true), given back as explicit JSON,
// must be accepted and reproduce the same config (docs/configuration.md: "Given back as the explicit JSON (whole, or
// its "config" part) it reproduces every value"); so must the "config" part alone, to_json(false).
// ACC_FUZZ_ROUNDTRIP=0 in the environment turns this oracle off (crashes, hangs and sanitizer reports only).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "acc/config.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  acc_fuzz::guarded([&] {
    const acc::config::Config cfg = acc::config::resolve_accelerator(text, {}, "fuzz");
    const std::string plain = cfg.to_json(false);
    const std::string whole = cfg.to_json(true);
    (void)acc::config::unsupported_setting(cfg);
    (void)acc::config::sharding(cfg);
    for (const auto& k : cfg.keys()) {
      (void)cfg.is_set(k);
      (void)cfg.provenance(k);
      (void)cfg.get_json(k);
    }
    static const bool roundtrip = [] {
      const char* v = std::getenv("ACC_FUZZ_ROUNDTRIP");
      return !(v && std::string(v) == "0");
    }();
    for (const std::string* given : {&whole, &plain}) {
      if (!roundtrip) break;
      acc::config::Config again;
      try {
        again = acc::config::resolve_accelerator(*given, {}, "fuzz-roundtrip");
      } catch (const acc::config::Error& e) {
        std::fprintf(stderr, "==fuzz== to_json(%s) of an accepted config is refused: %s\n--- given back:\n%s\n",
                     given == &whole ? "true" : "false", e.what(), given->c_str());
        std::abort();
      }
      if (again.to_json(false) != plain) {
        std::fprintf(stderr,
                     "==fuzz== round trip through to_json(%s) changed the config\n--- first:\n%s\n--- again:\n%s\n",
                     given == &whole ? "true" : "false", plain.c_str(), again.to_json(false).c_str());
        std::abort();
      }
    }
  });
  return 0;
}
