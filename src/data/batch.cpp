#include "data/batch.hpp"

#include <ATen/ATen.h>

#include <stdexcept>

#include "data/sharding.hpp"

namespace acc::core {

TensorDict::TensorDict(std::initializer_list<std::pair<std::string, at::Tensor>> items) {
  for (const auto& [name, t] : items) set(name, t);
}

void TensorDict::set(const std::string& name, at::Tensor t) {
  for (auto& [n, v] : items_)
    if (n == name) {
      v = std::move(t);
      return;
    }
  items_.emplace_back(name, std::move(t));
}

bool TensorDict::contains(const std::string& name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return true;
  return false;
}

const at::Tensor& TensorDict::at(const std::string& name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return v;
  throw std::invalid_argument("the batch has no tensor '" + name +
                              "' (it has: " + (items_.empty() ? std::string("nothing") : keys()) + ")");
}

at::Tensor TensorDict::get(const std::string& name) const {
  for (const auto& [n, v] : items_)
    if (n == name) return v;
  return {};
}

std::string TensorDict::keys() const {
  std::string s;
  for (const auto& [n, v] : items_) s += (s.empty() ? "" : ", ") + n;
  return s;
}

at::Tensor context_parallel_shard(const at::Tensor& t, int64_t seq_dim, int cp_size, int cp_rank) {
  if (seq_dim < 0 || seq_dim >= t.dim())
    throw std::invalid_argument("context parallel: sequence dimension " + std::to_string(seq_dim) +
                                " outside a tensor of " + std::to_string(t.dim()) + " dimensions");
  const auto positions = context_parallel_positions(t.size(seq_dim), cp_size, cp_rank);
  at::Tensor index = at::tensor(positions, at::TensorOptions().dtype(at::kLong)).to(t.device());
  return t.index_select(seq_dim, index);
}

TensorDict context_parallel_shard(const TensorDict& batch, int64_t seq_dim, int cp_size, int cp_rank) {
  TensorDict out;
  for (const auto& [name, t] : batch.items())
    out.set(name, t.defined() && t.dim() > seq_dim ? context_parallel_shard(t, seq_dim, cp_size, cp_rank) : t);
  return out;
}

}  // namespace acc::core
