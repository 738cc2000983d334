#include "checkpoint/manifest.hpp"

#include <sys/stat.h>

#include <ios>
#include <stdexcept>

#include "acc/files.hpp"
#include "acc/limits.hpp"
#include <acc/json.hpp>

namespace acc::core {

std::string manifest_json(const std::vector<std::pair<std::string, int64_t>>& files, int64_t num_processes) {
  json::Writer j;
  j.begin_object().key("format").value(kCheckpointFormat).key("version").value(kCheckpointVersion);
  j.key("num_processes").value(num_processes).key("files").begin_object();
  for (const auto& [name, size] : files) j.key(name).value(size);
  return j.end_object().end_object().str();
}

std::optional<std::vector<std::string>> checkpoint_files(const std::string& dir) {
  const std::string path = dir + "/" + kManifest;
  try {
    const json::Document manifest = json::Document::object(config::read_file(path, limits::kCheckpointJsonBytes), path);
    if (manifest.root().get_string("format") != kCheckpointFormat) return std::nullopt;
    std::vector<std::string> files{kManifest};
    for (const std::string& name : manifest.root().get("files").keys()) {
      config::child_path(dir, name, "a file named by " + path);
      if (name != kManifest) files.push_back(name);
    }
    return files;
  } catch (const std::exception&) {
    return std::nullopt;  // missing, unreadable or foreign: not libacc's to touch
  }
}

void check_complete(const std::string& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::ios_base::failure("load_state: '" + dir + "' is not a directory");
  const std::string path = dir + "/" + kManifest;
  if (::lstat(path.c_str(), &st) != 0)
    throw std::ios_base::failure("load_state: '" + dir + "' is not a complete checkpoint: it has no " + kManifest +
                                 " (an interrupted save, or not a libacc checkpoint)");
  const json::Document manifest = json::Document::object(config::read_file(path, limits::kCheckpointJsonBytes), path);
  if (manifest.root().get_string("format") != kCheckpointFormat ||
      manifest.root().get_int("version") != kCheckpointVersion)
    throw std::invalid_argument(path + ": not a libacc checkpoint of format version " +
                                std::to_string(kCheckpointVersion));
  const json::Value files = manifest.root().get("files");
  for (const std::string& name : files.keys()) {
    const std::string file = config::child_path(dir, name, "a file named by " + path);  // never look outside
    if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      throw std::ios_base::failure("load_state: '" + file + "' is missing (or not a regular file)");
    if (static_cast<int64_t>(st.st_size) != files.get_int(name))
      throw std::ios_base::failure("load_state: '" + file + "' has " + std::to_string(st.st_size) +
                                   " bytes; the manifest says " + std::to_string(files.get_int(name)) +
                                   " (truncated?)");
  }
}

}  // namespace acc::core
