#include "formats/hf_weights.hpp"

#include <acc/json.hpp>

#include <ATen/ATen.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "acc/config.hpp"
#include "acc/files.hpp"
#include "acc/json.hpp"
#include "formats/safetensors.hpp"
#include "util/pattern.hpp"

namespace fs = std::filesystem;

namespace acc::core {
namespace {

const char* const kWeights = "model.safetensors";
const char* const kIndex = "model.safetensors.index.json";

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i, n);
  return buf;
}

// Python's float() of the part before the unit: surrounding spaces allowed, the rest must be a finite number.
bool parse_number(std::string s, double* out) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  s = s.substr(b);
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}

}  // namespace

int64_t parse_shard_size(const std::string& size) {
  const std::string err = "max_shard_size '" + size +
                          "' is not a valid size: use a number of bytes or a number with a unit, as \"10GB\" "
                          "(10^10 bytes), \"10GiB\" (10 * 2^30 bytes), \"500MB\", \"2KB\"";
  std::string upper;
  for (char c : size) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto ends = [&](const char* unit) { return upper.ends_with(unit); };
  double value = 0, mult = 0;
  bool bits = false;
  if (ends("GIB") || ends("MIB") || ends("KIB")) {
    mult = ends("GIB") ? 1073741824.0 : ends("MIB") ? 1048576.0 : 1024.0;
    if (!parse_number(size.substr(0, size.size() - 3), &value)) throw std::invalid_argument(err);
  } else if (ends("TB") || ends("GB") || ends("MB") || ends("KB")) {
    mult = ends("TB") ? 1e12 : ends("GB") ? 1e9 : ends("MB") ? 1e6 : 1e3;
    bits = size.back() == 'b';  // "5Gb": gigabits, as Accelerate
    if (!parse_number(size.substr(0, size.size() - 2), &value)) throw std::invalid_argument(err);
  } else {
    // A plain number of bytes (Accelerate takes an int).
    std::string s = size;
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    size_t b = 0;
    while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    s = s.substr(b);
    if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument(err);
    return std::stoll(s);
  }
  const double bytes = std::trunc(value * mult);  // Python's int(float(...) * unit)
  if (bytes < 0 || bytes > 9.0e18) throw std::invalid_argument(err);
  const auto n = static_cast<int64_t>(bytes);
  return bits ? n / 8 : n;
}

ShardPlan plan_shards(const NamedTensors& state, int64_t max_shard_size) {
  // huggingface_hub's split_state_dict_into_shards_factory, in its order.
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  int64_t current_size = 0;
  ShardPlan plan;
  std::set<std::pair<const void*, int64_t>> storages;  // tied weights: the same bytes under a second name
  for (size_t i = 0; i < state.size(); ++i) {
    const at::Tensor& t = state[i].second;
    const auto size = static_cast<int64_t>(t.nbytes());
    if (t.numel() > 0 && !storages.insert({t.data_ptr(), size}).second) continue;
    if (size > max_shard_size) {
      plan.total_size += size;
      shards.push_back({i});
      continue;
    }
    if (current_size + size > max_shard_size) {
      shards.push_back(std::move(current));
      current.clear();
      current_size = 0;
    }
    current.push_back(i);
    current_size += size;
    plan.total_size += size;
  }
  if (!current.empty()) shards.push_back(std::move(current));
  if (shards.size() <= 1) {
    // One file (also for a model without tensors: an empty model.safetensors).
    ShardPlan::File f{kWeights, shards.empty() ? std::vector<size_t>{} : shards.front()};
    plan.files.push_back(std::move(f));
    return plan;
  }
  for (size_t i = 0; i < shards.size(); ++i) plan.files.push_back({shard_name(i + 1, shards.size()), shards[i]});
  return plan;
}

void write_model_files(const NamedTensors& state, const std::string& dir, int64_t max_shard_size) {
  if (dir.empty()) throw std::invalid_argument("save_model needs a directory");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw std::invalid_argument("save_model: provided path ('" + dir + "') should be a directory, not a file");
  config::make_directories(dir);
  const ShardPlan plan = plan_shards(state, max_shard_size);
  std::set<std::string> written;
  for (const auto& f : plan.files) {
    NamedTensors part;
    part.reserve(f.tensors.size());
    for (size_t i : f.tensors) part.push_back(state[i]);
    save_safetensors(part, (fs::path(dir) / f.name).string(), {{"format", "pt"}});
    written.insert(f.name);
  }
  if (plan.sharded()) {
    // json.dumps(index, indent=2, sort_keys=True) + "\n", as Accelerate writes it.
    std::map<std::string, std::string> weight_map;
    for (const auto& f : plan.files)
      for (size_t i : f.tensors) weight_map[state[i].first] = f.name;
    json::Writer j(json::Writer::Layout::Indented, 2);
    j.begin_object().key("metadata").begin_object().key("total_size").value(plan.total_size).end_object();
    j.key("weight_map").begin_object();
    for (const auto& [name, file] : weight_map) j.key(name).value(file);
    j.end_object().end_object();
    config::write_file_atomic((fs::path(dir) / kIndex).string(), j.str() + "\n");
    written.insert(kIndex);
  }
  // What an earlier save left (save_pretrained's cleanup: shards of another count; and the other layout's file,
  // so that a loader never sees a stale index beside a fresh model.safetensors or the other way round).
  static const Pattern shard_re(R"(model-\d{5}-of-\d{5}\.safetensors)", "shard name");
  std::vector<std::string> stale;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (written.count(name) || !e.is_regular_file(ec)) continue;
    if (shard_re.full_match(name) || name == kIndex || name == kWeights) stale.push_back(name);
  }
  config::remove_files(dir, stale, "save_model's stale weight files");
}

}  // namespace acc::core
