// Fuzzes the safetensors reader (load_safetensors, which from_pretrained and load_state use) for SECONDS:
// valid files of random tensors, then mutated (bytes of the header flipped or replaced, JSON fragments spliced
// in, the header length changed, the file cut short or grown), each written and loaded. A load either fails with
// an exception naming the file, or returns tensors whose bytes all lie inside the file (every one is summed).
// Off by default (suite 'fuzz'): meson test -C build --suite fuzz, or fuzz_safetensors 600.
#include <ATen/ATen.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <ios>
#include <random>
#include <string>

#include "formats/safetensors.hpp"

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 10;
  const auto dir = std::filesystem::temp_directory_path() / ("acc_fuzz_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string valid_path = (dir / "valid.safetensors").string(), path = (dir / "fuzz.safetensors").string();
  std::mt19937_64 rng(20261123);
  const char* fragments[] = {"{",
                             "}",
                             "[",
                             "]",
                             ",",
                             ":",
                             "\"",
                             "-1",
                             "1e308",
                             "null",
                             "\"F32\"",
                             "\"BF16\"",
                             "\"I64\"",
                             "\"dtype\"",
                             "\"shape\"",
                             "\"data_offsets\"",
                             "\"__metadata__\"",
                             "18446744073709551615",
                             "9007199254740993",
                             "0.5",
                             "\\u0000",
                             "[0,0]",
                             "[4294967296]"};
  long runs = 0, loaded = 0, refused = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    // A valid file: 1 to 4 tensors of random dtypes and shapes.
    acc::core::NamedTensors tensors;
    const at::ScalarType types[] = {at::kFloat, at::kBFloat16, at::kLong, at::kByte, at::kBool};
    for (int i = 0, n = 1 + static_cast<int>(rng() % 4); i < n; ++i) {
      std::vector<int64_t> shape;
      for (int d = 0, nd = static_cast<int>(rng() % 3); d < nd; ++d) shape.push_back(static_cast<int64_t>(rng() % 5));
      tensors.emplace_back("t" + std::to_string(i), at::ones(shape, types[rng() % 5]));
    }
    acc::core::save_safetensors(tensors, valid_path);
    std::ifstream in(valid_path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    for (int m = 0, n = 1 + static_cast<int>(rng() % 4); m < n; ++m) {
      // Where the header is now (the mutations before may have moved or cut it).
      uint64_t len = 0;
      for (int b = 0; b < 8 && b < static_cast<int>(bytes.size()); ++b)
        len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[b])) << (8 * b);
      const size_t header_end = std::min<uint64_t>(8 + std::min<uint64_t>(len, bytes.size()), bytes.size());
      if (header_end <= 8) {
        bytes.append(rng() % 64, static_cast<char>(rng()));
        continue;
      }
      switch (rng() % 6) {
        case 0:  // flip a byte of the header
          bytes[8 + rng() % (header_end - 8)] ^= static_cast<char>(1 + rng() % 255);
          break;
        case 1:  // splice a JSON fragment into the header
          bytes.insert(8 + rng() % (header_end - 8), fragments[rng() % std::size(fragments)]);
          break;
        case 2:  // another header length
          for (int b = 0; b < 8; ++b)
            bytes[b] = b < 2 || rng() % 8 == 0 ? static_cast<char>(rng()) : bytes[b];  // size > 8 here
          break;
        case 3:  // cut short
          bytes.resize(rng() % (bytes.size() + 1));
          break;
        case 4:  // grow
          bytes.append(rng() % 64, static_cast<char>(rng()));
          break;
        default:  // a random byte anywhere
          if (!bytes.empty()) bytes[rng() % bytes.size()] = static_cast<char>(rng());
      }
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    ++runs;
    try {
      double sum = 0;
      for (auto& [name, t] : acc::core::load_safetensors(path)) sum += t.to(at::kDouble).sum().item<double>();
      (void)sum;
      ++loaded;
    } catch (const std::ios_base::failure& e) {
      ++refused;
      if (std::string(e.what()).find(path) == std::string::npos) {
        std::fprintf(stderr, "an error that does not name the file: %s\n", e.what());
        return 1;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "an unexpected exception type: %s\n", e.what());
      return 1;
    }
  }
  std::filesystem::remove_all(dir);
  std::printf("%ld mutated files in %.0f s: %ld loaded, %ld refused with an error naming the file; no crash\n", runs,
              seconds, loaded, refused);
  std::printf("1 passed, 0 failed\n");
  return 0;
}
