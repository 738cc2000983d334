// `acc merge-weights`: Accelerate's `accelerate merge-weights` for the checkpoints libacc writes: a sharded
// safetensors checkpoint (model.safetensors.index.json and its shards, as acc_save_model / save_pretrained write
// them) merged into one model.safetensors. Torch-free: the headers are read with the config library, the tensor
// bytes are copied from the mapped shards, and the file is written atomically (a temporary, fsync, rename).
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "acc/config.hpp"
#include "acc/files.hpp"
#include "acc/hf_shapes.hpp"
#include "acc/safetensors_header.hpp"
#include "cli.hpp"
#include "commands.hpp"

namespace fs = std::filesystem;

namespace acc::launcher {
namespace {

constexpr const char* kMe = "acc merge-weights";
constexpr const char* kIndex = config::kHfIndexName;

// A shard's bytes, mapped read-only (the merge holds no copy of the tensors).
struct Mapped {
  void* data = MAP_FAILED;
  size_t size = 0;
  ~Mapped() {
    if (data != MAP_FAILED && size) munmap(data, size);
  }
};

std::unique_ptr<Mapped> map_file(const std::string& path) {
  // Non-blocking and regular only: a FIFO put in the shard's place after its header was read must not block.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw config::Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw config::Error(path + ": not a safetensors file (not a regular file)");
  }
  auto m = std::make_unique<Mapped>();
  m->size = static_cast<size_t>(st.st_size);
  if (m->size) m->data = mmap(nullptr, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (m->size && m->data == MAP_FAILED) throw config::Error(path + ": cannot map: " + std::strerror(err));
  return m;
}

struct Merged {
  size_t tensors = 0, shards = 0;
  uint64_t bytes = 0;
  std::vector<std::string> files;  // the checkpoint's own: its index and the shards it names, each read as safetensors
};

Merged merge(const std::string& checkpoint_dir, const std::string& output_dir) {
  struct stat st{};
  if (stat(checkpoint_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw config::Error("'" + checkpoint_dir + "' is not a directory");
  const std::string index_path = (fs::path(checkpoint_dir) / kIndex).string();
  if (stat(index_path.c_str(), &st) != 0) {
    const bool single = stat((fs::path(checkpoint_dir) / "model.safetensors").c_str(), &st) == 0;
    throw config::Error(index_path + ": not found: '" + checkpoint_dir + "' is not a sharded safetensors checkpoint" +
                        (single ? " (its model.safetensors is already one file)" : ""));
  }
  // A regular file within limits::kHfIndexBytes, strict JSON, each shard a plain name in the checkpoint directory.
  const config::HfIndex index = config::read_hf_index(checkpoint_dir);
  const std::map<std::string, std::string> weight_map(index.weight_map.begin(), index.weight_map.end());
  std::vector<std::string> shard_order;  // shard files in name order (model-00001-of-N first)
  for (const std::string& path : index.shards) shard_order.push_back(fs::path(path).filename().string());

  // Every shard's header; each tensor once, in the shard it is mapped to.
  struct Piece {
    config::SafetensorsEntry entry;
    size_t shard;
  };
  std::vector<Piece> pieces;
  std::vector<std::unique_ptr<Mapped>> maps;
  std::vector<config::SafetensorsHeader> headers;
  std::map<std::string, std::string> found;  // tensor -> shard holding it
  for (size_t s = 0; s < shard_order.size(); ++s) {
    const std::string& path = index.shards[s];
    if (stat(path.c_str(), &st) != 0)
      throw config::Error(path + ": missing shard (named in " + std::string(kIndex) + ")");
    headers.push_back(config::read_safetensors_header(path));  // throws naming the file
    maps.push_back(map_file(path));
    for (const auto& e : headers.back().tensors) {
      if (auto it = found.find(e.name); it != found.end())
        throw config::Error("tensor '" + e.name + "' is in two shards: " + it->second + " and " + shard_order[s]);
      found[e.name] = shard_order[s];
      auto w = weight_map.find(e.name);
      if (w == weight_map.end())
        throw config::Error(path + ": tensor '" + e.name + "' is not in the weight_map of " + index_path);
      if (w->second != path)
        throw config::Error(path + ": holds tensor '" + e.name + "', which " + std::string(kIndex) + " maps to " +
                            fs::path(w->second).filename().string());
      if (headers.back().data_start + e.end > maps.back()->size)
        throw config::Error(path + ": tensor '" + e.name + "' is truncated");
      pieces.push_back({e, s});
    }
  }
  for (const auto& [name, file] : weight_map)
    if (!found.count(name)) throw config::Error(file + ": has no tensor '" + name + "' (the index maps it there)");

  // The merged header: {"__metadata__": {"format": "pt"}, name: {dtype, shape, data_offsets}} in shard order.
  std::vector<config::SafetensorsEntry> entries;
  uint64_t offset = 0;
  std::vector<std::string_view> data;
  for (const auto& p : pieces) {
    const uint64_t n = p.entry.end - p.entry.begin;
    entries.push_back({p.entry.name, p.entry.dtype, p.entry.shape, offset, offset + n});
    offset += n;
    const char* base = static_cast<const char*>(maps[p.shard]->data) + headers[p.shard].data_start;
    data.emplace_back(base + p.entry.begin, n);
  }
  const std::string header = config::format_safetensors_header(entries, {{"format", "pt"}});
  std::vector<std::string_view> out = {header};
  out.insert(out.end(), data.begin(), data.end());
  try {
    config::make_directories(output_dir);
    config::write_file_atomic((fs::path(output_dir) / "model.safetensors").string(), out);
  } catch (const std::ios_base::failure& e) {
    throw config::Error(e.what());
  }
  std::vector<std::string> own = {index_path};
  for (const auto& f : shard_order) own.push_back((fs::path(checkpoint_dir) / f).string());
  return {pieces.size(), shard_order.size(), offset, own};
}

// `path` made absolute, its links resolved as far as it exists, without a trailing "/" (so "ck/", "ck/." and "ck"
// are one folder); empty when that fails.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return {};
  while (!p.has_filename() && p.has_relative_path()) p = p.parent_path();
  return p;
}

// Whether `inner` is `outer` or lies inside it, part by part ("ck2" is not inside "ck").
bool within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i)
    if (i == inner.end() || *i != *o) return false;
  return true;
}

// --remove_checkpoint_dir removes the checkpoint's own files, as the merge recognised them (the index and the shards
// it names), then the folder when nothing else is left in it. Other files there (a config.json, the user's notes)
// are not the checkpoint's: they stay, with the folder, and are named. Accelerate's merge_fsdp_weights removes the
// folder whole (shutil.rmtree).
int remove_checkpoint(const std::string& dir, const std::vector<std::string>& files) {
  for (const auto& f : files)
    if (::unlink(f.c_str()) != 0 && errno != ENOENT) {
      std::fprintf(stderr, "%s: error: cannot remove '%s': %s\n", kMe, f.c_str(), std::strerror(errno));
      return 1;
    }
  if (::rmdir(dir.c_str()) == 0) {
    std::printf("Removed the checkpoint directory %s\n", dir.c_str());
    return 0;
  }
  if (errno != ENOTEMPTY && errno != EEXIST && errno != ENOTDIR) {  // ENOTDIR: a link to the folder, kept
    std::fprintf(stderr, "%s: error: cannot remove '%s': %s\n", kMe, dir.c_str(), std::strerror(errno));
    return 1;
  }
  std::vector<std::string> kept;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    kept.push_back(it->path().filename().string());
  std::sort(kept.begin(), kept.end());
  std::string names;
  for (size_t i = 0; i < kept.size() && i < 10; ++i) names += (i ? ", " : "") + kept[i];
  if (kept.size() > 10) names += ", ...";
  std::printf("Removed the checkpoint's %zu files from %s; kept the directory and what is not the checkpoint's: %s\n",
              files.size(), dir.c_str(), names.c_str());
  return 0;
}

}  // namespace

int merge_main(const std::vector<std::string>& args) {
  std::vector<cli::Option> opts;
  auto opt = [&](const char* name, const char* help, std::vector<std::string> s = {}) {
    cli::Option o;
    o.name = name;
    o.help = help;
    o.group = "options";
    o.shorts = std::move(s);
    opts.push_back(o);
  };
  opt("--help", "show this help and exit", {"-h"});
  // Accelerate declares it store_false and passes `not args.unsafe_serialization`: the flag there gives safetensors
  // (its absence pickles). acc always writes safetensors, so the flag is accepted and changes nothing.
  opt("--unsafe_serialization", "accepted for compatibility (acc writes safetensors only)");
  opt("--remove_checkpoint_dir", "remove the checkpoint directory after merging");
  cli::Parsed p;
  if (auto done = cli::parse_or_help(
          opts, args, kMe, "acc merge-weights CHECKPOINT_DIRECTORY OUTPUT_PATH [--remove_checkpoint_dir]",
          "Merges a sharded safetensors checkpoint (model.safetensors.index.json and its shards\n"
          "model-00001-of-0000N.safetensors, as acc_save_model and save_pretrained write them) into\n"
          "one OUTPUT_PATH/model.safetensors with {\"format\": \"pt\"} metadata, as `accelerate\n"
          "merge-weights` does. The tensor bytes are copied unchanged; the file is written\n"
          "atomically. A missing shard, a bad index or a tensor in two shards is refused naming the\n"
          "file.",
          p))
    return *done;
  if (p.positionals.size() != 2) {
    std::fprintf(stderr, "%s: error: give CHECKPOINT_DIRECTORY and OUTPUT_PATH\n", kMe);
    return 2;
  }
  const std::string& in = p.positionals[0];
  const std::string& out = p.positionals[1];
  const bool remove = p.options.count("--remove_checkpoint_dir") > 0;
  // Refused before anything is written: an output that is the checkpoint folder or lies inside it would go with it
  // (compared with links resolved, whether OUTPUT_PATH exists yet or not). One that contains it is fine: the merged
  // file is not the checkpoint's, and `accelerate merge-weights out/pytorch_model_fsdp_0 out` is the usual form.
  if (remove) {
    const fs::path rin = resolved(in), rout = resolved(out);
    if (rin.empty() || rout.empty()) {
      std::fprintf(stderr, "%s: error: --remove_checkpoint_dir: cannot resolve '%s' or '%s'\n", kMe, in.c_str(),
                   out.c_str());
      return 2;
    }
    if (within(rout, rin)) {
      std::fprintf(
          stderr,
          "%s: error: --remove_checkpoint_dir: OUTPUT_PATH '%s' is inside the checkpoint directory '%s', which "
          "would be removed; write the merged file elsewhere\n",
          kMe, out.c_str(), in.c_str());
      return 2;
    }
  }
  Merged m;
  try {
    std::printf("Merging weights from %s\n", in.c_str());
    m = merge(in, out);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory\n", kMe);
    return 1;
  } catch (const std::exception& e) {  // config::Error, and FileError naming the file (a FIFO, a name outside)
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 1;
  }
  std::printf("Saved %zu tensors (%llu bytes) from %zu shards to %s\n", m.tensors,
              static_cast<unsigned long long>(m.bytes), m.shards,
              (fs::path(out) / "model.safetensors").string().c_str());
  if (remove) return remove_checkpoint(in, m.files);
  return 0;
}

}  // namespace acc::launcher
