#include "models/placement.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include "models/model.hpp"

namespace acc::core {

const Placement* Placements::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

const Placement::Split* Placements::split_of(const std::string& name) const {
  const Placement* p = find(name);
  return p && p->split ? &*p->split : nullptr;
}

void Placements::set_split(const std::string& name, Placement::Split split, std::vector<int64_t> whole_shape) {
  Placement& p = by_name_[name];
  if (!p.split) ++splits_;
  p.split = std::move(split);
  p.whole_shape = std::move(whole_shape);
}

void Placements::add_flat(const std::string& name, const std::string& over, int64_t offset, int64_t numel) {
  Placement& p = by_name_[name];
  if (!p.flat) p.flat = Placement::Flat{over, {}};
  p.flat->ranges.emplace_back(offset, numel);
}

at::Tensor part_of(const at::Tensor& whole, int64_t dim, int64_t packed, int rank, int size) {
  const int64_t block = whole.size(dim) / packed, part = block / size;
  std::vector<at::Tensor> pieces;
  for (int64_t b = 0; b < packed; ++b) pieces.push_back(whole.narrow(dim, b * block + rank * part, part));
  return packed == 1 ? pieces.front() : at::cat(pieces, dim);
}

at::Tensor join_parts(const std::vector<at::Tensor>& parts, int64_t dim, int64_t packed) {
  const int64_t part = parts.front().size(dim) / packed;
  std::vector<at::Tensor> pieces;
  for (int64_t b = 0; b < packed; ++b)
    for (const at::Tensor& p : parts) pieces.push_back(p.narrow(dim, b * part, part));
  return at::cat(pieces, dim);
}

at::Tensor whole_tensor(const Placements& p, const std::string& name, const at::Tensor& local) {
  const Placement::Split* s = p.split_of(name);
  if (!s) return local;
  const Collectives& g = *s->over;
  c10::NoGradGuard no_grad;
  at::Tensor all = g.all_gather(local.detach().movedim(s->dim, 0).contiguous());  // the ranks' parts, along dim 0
  return join_parts(all.chunk(g.size, 0), 0, s->packed).movedim(0, s->dim).contiguous();
}

NamedTensors whole_state(const Placements& p, const NamedTensors& local) {
  NamedTensors out;
  for (const auto& [name, t] : local) out.emplace_back(name, whole_tensor(p, name, t));
  return out;
}

at::Tensor local_tensor(const Placements& p, const std::string& name, const at::Tensor& whole) {
  const Placement::Split* s = p.split_of(name);
  if (!s) return whole;
  const std::vector<int64_t>& shape = p.find(name)->whole_shape;
  if (whole.sizes().vec() != shape)
    throw std::invalid_argument("tensor parallelism: '" + name + "' has shape " + c10::str(whole.sizes()) +
                                "; the whole parameter's is " + c10::str(at::IntArrayRef(shape)));
  return part_of(whole, s->dim, s->packed, s->over->rank, s->over->size);
}

NamedTensors local_state(const Placements& p, const NamedTensors& whole) {
  NamedTensors out;
  for (const auto& [name, t] : whole) out.emplace_back(name, local_tensor(p, name, t));
  return out;
}

at::Tensor grad_norm(const Model& model, double norm_type, const std::set<std::string>& left_out) {
  const Placements& placements = model.placements();
  if (!placements.any_split()) {
    std::vector<at::Tensor> norms;
    for (auto& [name, p] : model.named_parameters())
      if (p.grad().defined() && !left_out.count(name))
        norms.push_back(at::linalg_vector_norm(p.grad().detach().to(at::kFloat), norm_type));
    if (norms.empty()) return at::zeros({}, at::kFloat);
    return at::linalg_vector_norm(at::stack(norms), norm_type);
  }
  // Split parameters' slices differ across their group (summed over it), the others are the same (counted once).
  const bool inf = std::isinf(norm_type);
  at::Tensor split = at::zeros({}, at::kFloat), replicated = at::zeros({}, at::kFloat);
  const Collectives* group = nullptr;
  std::set<const void*> seen;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.grad().defined() || left_out.count(name) || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    at::Tensor g = p.grad().detach().to(at::kFloat).cpu();
    const Placement::Split* s = placements.split_of(name);
    if (s) group = s->over.get();
    at::Tensor& acc = s ? split : replicated;
    acc = inf ? at::maximum(acc, g.abs().max()) : acc + g.abs().pow(norm_type).sum();
  }
  if (!group)  // every rank holds split parameters, so every rank finds the group (or none has gradients)
    for (const auto& [name, p] : placements.all())
      if (p.split) group = p.split->over.get();
  if (inf) {
    group->all_reduce_max(split);
    return at::maximum(split, replicated);
  }
  group->all_reduce_sum(split);
  return (split + replicated).pow(1.0 / norm_type);
}

}  // namespace acc::core
