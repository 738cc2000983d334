// libFuzzer target: safetensors headers (acc/safetensors_header.hpp), as `acc estimate-memory`, `acc merge-weights`
// and libacc read them. The input is a whole safetensors file: 8 bytes of little-endian header length, the header
// JSON, the data part.
//
// Per input: parse_safetensors_header in memory on the header the length prefix names (with the size of the data
// part, as read_safetensors_header passes it), and on the whole input as JSON without a data size; then
// read_safetensors_header on the input written to a scratch file. Accepted headers are checked against what the
// parser promises: offsets within the data, end - begin == numel * dtype size.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "acc/safetensors_header.hpp"
#include "fuzz_common.hpp"

namespace {

void check(const acc::config::SafetensorsHeader& h, std::optional<uint64_t> data_size) {
  for (const auto& t : h.tensors) {
    const auto elem = acc::config::safetensors_dtype_size(t.dtype);
    const int64_t n = t.numel();
    bool ok = elem.has_value() && n >= 0 && t.begin <= t.end &&
              t.end - t.begin == static_cast<uint64_t>(n) * static_cast<uint64_t>(*elem) &&
              (!data_size || t.end <= *data_size);
    for (int64_t d : t.shape) ok = ok && d >= 0;
    if (!ok) {
      std::fprintf(stderr,
                   "==fuzz== accepted entry '%s' breaks the header's promises (dtype %s, numel %lld, [%llu, %llu))\n",
                   t.name.c_str(), t.dtype.c_str(), static_cast<long long>(n), static_cast<unsigned long long>(t.begin),
                   static_cast<unsigned long long>(t.end));
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (size >= 8) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
    if (n <= size - 8) {
      const std::optional<uint64_t> data_size = size - 8 - n;
      acc_fuzz::guarded([&] {
        check(acc::config::parse_safetensors_header(bytes.substr(8, n), "fuzz.safetensors", data_size), data_size);
      });
    }
  }
  acc_fuzz::guarded([&] { check(acc::config::parse_safetensors_header(bytes, "fuzz.json"), std::nullopt); });

  static acc_fuzz::ScratchCleanup cleanup{acc_fuzz::scratch_path(".safetensors")};
  if (!acc_fuzz::write_scratch(cleanup.path, data, size)) {
    std::perror(cleanup.path.c_str());
    std::abort();
  }
  acc_fuzz::guarded([&] { check(acc::config::read_safetensors_header(cleanup.path), std::nullopt); });
  return 0;
}
