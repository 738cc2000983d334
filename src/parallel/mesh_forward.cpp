#include "parallel/mesh_forward.hpp"

#include <ATen/ATen.h>

#include <stdexcept>

#include <torch/nn/module.h>

#include "models/model.hpp"
#include "parallel/tensor_parallel.hpp"
#include "util/errors.hpp"

namespace acc::core {

std::pair<NnModel*, Parallelizable*> family_to_split(Model& model, const std::string& what,
                                                     const std::string& torchscript, const std::string& not_family,
                                                     bool split_already) {
  auto* nn = dynamic_cast<NnModel*>(&model);
  if (!nn) throw UnsupportedError(what + ": the model is a TorchScript module, " + torchscript);
  const std::string cls = nn->module()->name();
  auto* family = dynamic_cast<Parallelizable*>(&model);
  if (!family) throw UnsupportedError(what + ": " + cls + " " + not_family);
  if (split_already) throw StateError(what + ": " + cls + " is split already");
  return {nn, family};
}

MeshForward MeshForward::of(const Parallelizable& family) {
  const auto* installed = dynamic_cast<const MeshForward*>(family.installed_split().get());
  return installed ? *installed : MeshForward();
}

const MeshForward* MeshForward::installed_on(const Model& model) {
  const auto* family = dynamic_cast<const Parallelizable*>(&model);
  return family ? dynamic_cast<const MeshForward*>(family->installed_split().get()) : nullptr;
}

SequenceSplitTarget sequence_split_target(Model& model, const std::string& what, const std::string& missing,
                                          bool split_already, const Collectives& group, bool has_exchange) {
  const std::string families = "(" + what + ": Llama, Mistral, Qwen2, Mixtral, GPT-2 and the built-in GPT)";
  const auto [nn, family] = family_to_split(model, what, "whose attention libacc cannot split " + families,
                                            missing + " " + families, split_already);
  if (group.size < 1 || group.rank < 0 || group.rank >= group.size || !has_exchange)
    throw std::invalid_argument(what + ": rank " + std::to_string(group.rank) + " of " + std::to_string(group.size) +
                                " is not a rank of the group");
  return {nn->module()->name(), family, std::make_shared<MeshForward>(MeshForward::of(*family))};
}

at::Tensor MeshForward::enter_region(const at::Tensor& x) const {
  if (!tensor) return x;
  return tensor->sequence_parallel ? tp::gather_sequence(x, *tensor->group) : tp::enter(x, *tensor->group);
}

at::Tensor MeshForward::leave_region(const at::Tensor& x) const {
  if (!tensor) return x;
  return tensor->sequence_parallel ? tp::scatter_sequence(x, *tensor->group) : tp::reduce(x, *tensor->group);
}

at::Tensor MeshForward::local_positions(const at::Tensor& positions) const {
  if (!tensor || !tensor->sequence_parallel) return positions;
  const Collectives& g = *tensor->group;
  const int64_t part = positions.size(1) / g.size;
  return positions.narrow(1, g.rank * part, part);
}

void MeshForward::check_length(int64_t length, bool cache, const std::string& model) const {
  if (!tensor || !tensor->sequence_parallel) return;
  if (cache)
    throw std::invalid_argument(model + ": sequence parallelism runs without a key/value cache (generate on a model "
                                        "split without sequence parallelism)");
  if (length % tensor->group->size != 0)
    throw std::invalid_argument(model + ": sequence parallelism needs the sequence length (" + std::to_string(length) +
                                ") to be a multiple of tp_size (" + std::to_string(tensor->group->size) + ")");
}

std::shared_ptr<SequenceSplit> MeshForward::split_sequence(int64_t length, bool cache, const std::string& model) const {
  const bool tp_sequence = tensor && tensor->sequence_parallel;
  if (ulysses)
    return std::make_shared<ulysses::Sequence>(ulysses->group, ulysses->options, length, cache, model, tp_sequence);
  if (!context) return nullptr;
  return std::make_shared<cp::Sequence>(context->group, context->exchange, length, cache, model, tp_sequence);
}

at::Tensor MeshForward::whole_logits(const at::Tensor& local) const {
  return tensor ? tp::gather_last(local, *tensor->group) : local;
}

at::Tensor MeshForward::cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                                      const SequenceSplit* sequence) const {
  if (!tensor) return ForwardSplit::cross_entropy(logits, targets, ignore_index, sequence);
  at::Tensor l = logits.reshape({-1, logits.size(-1)}).to(at::kFloat);
  at::Tensor t = targets.reshape({-1}).to(logits.device(), at::kLong);
  if (!sequence) return tp::vocab_parallel_cross_entropy(l, t, ignore_index, *tensor->group);
  at::Tensor sum = tp::vocab_parallel_cross_entropy(l, t, ignore_index, *tensor->group, /*sum=*/true);
  return sequence->mean(sum, t.ne(ignore_index).sum());
}

}  // namespace acc::core
