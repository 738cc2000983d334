// libFuzzer target: a checkpoint folder as load_state first reads it (src/checkpoint/manifest.cpp), manifest.json
// and the files it lists together. The input is a folder: a byte N (up to 8 files), then N times a name (a byte of
// length, then the name) and its content (two bytes of length, little-endian, then the bytes); the rest is
// manifest.json. check_complete and checkpoint_files must refuse every bad folder with an error (never crash, never
// read outside it: a manifest naming "../x" or "/etc/passwd" is refused before a stat); a complete one's JSON files
// go through the JSON reader and its .safetensors headers through the header parser, as load_state reads them.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "acc/files.hpp"
#include "acc/safetensors_header.hpp"
#include "checkpoint/manifest.hpp"
#include "fuzz_common.hpp"
#include <acc/json.hpp>

namespace {

struct Reader {
  const uint8_t* p;
  size_t left;
  bool take(size_t n, std::string* out) {
    if (n > left) return false;
    out->assign(reinterpret_cast<const char*>(p), n);
    p += n, left -= n;
    return true;
  }
  size_t byte() { return left ? (--left, *p++) : 0; }
};

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const std::string dir = "/tmp/acc-fuzz-checkpoint-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directory(dir, ec);
  Reader in{data, size};
  const size_t n = in.byte() % 9;
  for (size_t i = 0; i < n; ++i) {
    std::string name, content;
    const size_t name_size = in.byte();
    if (!in.take(name_size, &name)) break;
    const size_t content_size = in.byte() | in.byte() << 8;
    if (!in.take(content_size, &content)) break;
    try {  // only names inside the folder are written (the harness must not write outside either)
      const std::string path = acc::config::child_path(dir, name, "a fuzzed file");
      if (name != acc::core::kManifest) write(path, content);
    } catch (const acc::config::FileError&) {
    }
  }
  std::string manifest;
  in.take(in.left, &manifest);
  write(dir + "/" + acc::core::kManifest, manifest);

  (void)acc::core::checkpoint_files(dir);  // never throws
  acc_fuzz::guarded<std::invalid_argument>([&] {
    acc::core::check_complete(dir);
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string file = e.path().string();
      if (e.path().extension() == ".json") {
        try {
          const acc::json::Document doc =
              acc::json::Document::object(acc::config::read_file(file, size_t{1} << 20), file);
        } catch (const std::invalid_argument&) {
        }
      } else if (e.path().extension() == ".safetensors") {
        (void)acc::config::read_safetensors_header(file);
      }
    }
  });
  return 0;
}
