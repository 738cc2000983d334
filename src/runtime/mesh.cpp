#include "runtime/mesh.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace acc::core {

namespace {

const std::vector<std::string> kNames = {"pp", "dp_replicate", "dp_shard",    "cp",   "sp",
                                         "tp", "dp",           "dp_shard_cp", "dp_cp"};
const std::vector<std::vector<int>> kDims = {{0}, {1}, {2}, {3}, {4}, {5}, {1, 2}, {2, 3, 4}, {1, 2, 3, 4}};

size_t index_of(const std::string& group) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == group) return i;
  std::string known;
  for (const auto& n : kNames) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("the process mesh has no group '" + group + "'; its groups are " + known);
}

}  // namespace

std::string MeshSizes::text() const {
  return (pp != 1 ? "pp " + std::to_string(pp) + " x " : "") + "dp_replicate " + std::to_string(dp_replicate) +
         " x dp_shard " + std::to_string(dp_shard) + " x cp " + std::to_string(cp) +
         (sp != 1 ? " x sp " + std::to_string(sp) : "") + " x tp " + std::to_string(tp);
}

MeshLayout::MeshLayout(MeshSizes sizes, int rank) : sizes_(sizes), rank_(rank) {
  extent_ = {sizes.pp, sizes.dp_replicate, sizes.dp_shard, sizes.cp, sizes.sp, sizes.tp};
  const char* what[] = {"pp", "dp_replicate", "dp_shard", "cp", "sp", "tp"};
  for (int d = 0; d < kMeshDims; ++d)
    if (extent_[d] < 1)
      throw std::invalid_argument(std::string("process mesh: ") + what[d] + " size " + std::to_string(extent_[d]) +
                                  " must be at least 1");
  // The product in int is taken everywhere below: sizes whose product would wrap are refused here, once.
  int64_t total = 1;
  for (int d = 0; d < kMeshDims; ++d) {
    if (extent_[d] > std::numeric_limits<int>::max() / total)
      throw std::invalid_argument("process mesh: " + sizes.text() + " is more than " +
                                  std::to_string(std::numeric_limits<int>::max()) + " processes");
    total *= extent_[d];
  }
  if (rank < 0 || rank >= sizes.total())
    throw std::invalid_argument("process mesh: rank " + std::to_string(rank) + " outside a mesh of " +
                                std::to_string(sizes.total()) + " processes");
  for (int d = kMeshDims - 1, r = rank; d >= 0; --d) {  // row-major: the last dimension varies fastest
    coord_[d] = r % extent_[d];
    r /= extent_[d];
  }
}

const std::vector<std::string>& MeshLayout::group_names() { return kNames; }

const std::vector<int>& MeshLayout::dims(const std::string& group) const { return kDims[index_of(group)]; }

int MeshLayout::size(const std::string& group) const {
  int n = 1;
  for (int d : dims(group)) n *= extent_[d];
  return n;
}

int MeshLayout::rank(const std::string& group) const {
  int r = 0;
  for (int d : dims(group)) r = r * extent_[d] + coord_[d];
  return r;
}

int MeshLayout::group_index(const std::string& group) const {
  const auto& in = dims(group);
  int r = 0;
  for (int d = 0; d < kMeshDims; ++d)
    if (std::find(in.begin(), in.end(), d) == in.end()) r = r * extent_[d] + coord_[d];
  return r;
}

std::vector<int> MeshLayout::members(const std::string& group) const {
  const auto& in = dims(group);
  const int n = size(group);
  std::vector<int> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    // The i-th member (row-major over the group's dimensions), the other coordinates this rank's.
    std::array<int, kMeshDims> c = coord_;
    for (int k = static_cast<int>(in.size()) - 1, j = i; k >= 0; --k) {
      c[in[static_cast<size_t>(k)]] = j % extent_[in[static_cast<size_t>(k)]];
      j /= extent_[in[static_cast<size_t>(k)]];
    }
    int g = 0;
    for (int d = 0; d < kMeshDims; ++d) g = g * extent_[d] + c[d];
    out.push_back(g);
  }
  return out;
}

ProcessMesh::ProcessMesh(std::shared_ptr<Comm> world, MeshSizes sizes)
    : world_(std::move(world)), layout_(sizes, world_ ? world_->rank() : 0), groups_(kNames.size()) {
  if (!world_) throw std::invalid_argument("process mesh: no process group");
  if (sizes.total() != world_->size())
    throw std::invalid_argument("process mesh: " + sizes.text() + " is " + std::to_string(sizes.total()) +
                                " processes; the job has " + std::to_string(world_->size()));
  // Every rank makes its meshes in the same order, so the count names them alike everywhere.
  static std::atomic<int> made{0};
  generation_ = made++;
  for (size_t i = 0; i < kNames.size(); ++i) {
    const int n = layout_.size(kNames[i]);
    if (n == world_->size()) {
      groups_[i] = world_;
    } else if (n > 1) {
      // A flattened group over one enabled dimension is that dimension's group (dp_shard_cp without cp, ...).
      for (size_t j = 0; j < i && !groups_[i]; ++j)
        if (groups_[j] && layout_.members(kNames[j]) == layout_.members(kNames[i])) groups_[i] = groups_[j];
      if (groups_[i]) continue;
      groups_[i] =
          world_->subgroup(layout_.members(kNames[i]), "mesh" + std::to_string(generation_) + "/" + kNames[i] + "/" +
                                                           std::to_string(layout_.group_index(kNames[i])));
    }
  }
}

std::shared_ptr<Comm> ProcessMesh::group(const std::string& name) const {
  const size_t i = index_of(name);
  std::lock_guard<std::mutex> lock(mu_);
  if (!groups_[i])  // one rank: no peer to wait for, so made when first needed
    groups_[i] = world_->subgroup({world_->rank()}, "mesh" + std::to_string(generation_) + "/" + name + "/rank" +
                                                        std::to_string(world_->rank()));
  return groups_[i];
}

}  // namespace acc::core
