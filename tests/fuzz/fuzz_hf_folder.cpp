// libFuzzer target: a Hugging Face model folder as from_pretrained, `acc estimate-memory` and `acc merge-weights`
// read it before any tensor: config.json and model.safetensors.index.json together (base/src/hf_shapes.cpp). The
// input is config.json, then a NUL byte and the index (no NUL: a folder without an index). The torch-free part: the
// config's values checked as transformers checks them and turned into parameter names and shapes
// (hf_parameter_shapes, which from_pretrained's check_hf_config shares), the index's weight map read (read_hf_index).
// Refusals are config::Error or a FileError naming the file; anything else is a finding, and so are shapes with a
// size below 1 or a shard outside the folder.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "acc/files.hpp"
#include "acc/hf_shapes.hpp"
#include "acc/limits.hpp"
#include "fuzz_common.hpp"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "==fuzz== %s\n", what.c_str());
  std::abort();
}

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const std::string dir = acc_fuzz::scratch_path("-hf");
  static struct Cleanup {  // the folder goes when the process exits normally (libFuzzer exits through exit())
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup;
  std::error_code ec;
  fs::create_directory(dir, ec);
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  write(dir + "/config.json", input.substr(0, nul));
  const std::string index_path = dir + "/" + acc::config::kHfIndexName;
  if (nul != std::string::npos) write(index_path, input.substr(nul + 1));
  else ::unlink(index_path.c_str());

  std::set<std::string> names;
  acc_fuzz::guarded([&] {
    const std::string path = dir + "/config.json";
    for (const auto& [name, shape] :
         acc::config::hf_parameter_shapes(acc::config::read_file(path, acc::limits::kHfConfigBytes), path)) {
      for (int64_t d : shape)
        if (d < 1 || d > (int64_t{1} << 34)) finding("parameter " + name + " has a size " + std::to_string(d));
      if (!names.insert(name).second) finding("parameter " + name + " is listed twice");
    }
  });
  if (nul == std::string::npos) return 0;
  acc_fuzz::guarded([&] {
    const acc::config::HfIndex index = acc::config::read_hf_index(dir);
    const std::set<std::string> shards(index.shards.begin(), index.shards.end());
    for (const std::string& shard : index.shards)
      if (shard.rfind(dir + "/", 0) != 0 || shard.find('/', dir.size() + 1) != std::string::npos ||
          shard.size() == dir.size() + 1)
        finding("shard " + shard + " is not a file in " + dir);
    for (const auto& [tensor, shard] : index.weight_map)
      if (!shards.count(shard)) finding("tensor " + tensor + "'s shard " + shard + " is not among the shards");
  });
  return 0;
}
