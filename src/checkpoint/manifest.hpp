// A checkpoint's manifest.json (docs/checkpoints.md): what makes a folder a complete libacc checkpoint, and the
// list of files libacc may replace or remove in it. Torch-free (the checkpoint-folder fuzz target builds it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace acc::core {

inline constexpr const char* kManifest = "manifest.json";
inline constexpr const char* kCheckpointFormat = "libacc-checkpoint";
inline constexpr int64_t kCheckpointVersion = 1;

// The manifest's text for files (name, size in bytes) saved by num_processes processes.
std::string manifest_json(const std::vector<std::pair<std::string, int64_t>>& files, int64_t num_processes);

// The files of a checkpoint libacc wrote in `dir`, manifest.json first, each a plain name; nullopt when `dir` is
// not one (no manifest, unreadable, or not libacc's): what libacc may replace or remove of a folder.
std::optional<std::vector<std::string>> checkpoint_files(const std::string& dir);

// Checks that `dir` is a complete checkpoint: a folder with a manifest of this format and version, naming only
// files inside it (never an absolute or "../" path), each there as a regular file of the size it lists (a
// truncated or missing file is caught). std::ios_base::failure or std::invalid_argument naming the folder or file.
void check_complete(const std::string& dir);

}  // namespace acc::core
