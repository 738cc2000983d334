#include "models/parallel_forward.hpp"

#include <ATen/ATen.h>

#include <stdexcept>

namespace acc::core {

const char* layer_style_name(LayerStyle s) {
  switch (s) {
    case LayerStyle::Colwise: return "colwise";
    case LayerStyle::Rowwise: return "rowwise";
    case LayerStyle::RowwisePartial: return "rowwise (reduced by its parent)";
    case LayerStyle::VocabEmbedding: return "vocabulary-parallel embedding";
  }
  return "?";
}

at::Tensor SplittableLayer::rowwise_output(const at::Tensor& partial, const at::Tensor& bias) const {
  if (split_) return split_->rowwise_output(partial, bias);
  return bias.defined() ? partial + bias : partial;
}

at::Tensor SplittableLayer::embed(const at::Tensor& weight, const at::Tensor& ids, int64_t padding_idx) const {
  if (split_) return split_->embed(weight, ids, padding_idx);
  return at::embedding(weight, ids, padding_idx);
}

int64_t SplittableLayer::local_row(int64_t id, int64_t rows) const { return split_ ? split_->local_row(id, rows) : id; }

at::Tensor ForwardSplit::cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                                       const SequenceSplit* sequence) const {
  at::Tensor l = logits.reshape({-1, logits.size(-1)});
  at::Tensor t = targets.reshape({-1}).to(logits.device(), at::kLong);
  if (!sequence) return at::cross_entropy_loss(l, t, {}, at::Reduction::Mean, ignore_index);
  l = l.to(at::kFloat);
  return sequence->mean(at::cross_entropy_loss(l, t, {}, at::Reduction::Sum, ignore_index), t.ne(ignore_index).sum());
}

void check_divides(int parts, const std::string& model, std::initializer_list<std::pair<const char*, int64_t>> fields) {
  for (const auto& [field, n] : fields)
    if (n % parts != 0)
      throw std::invalid_argument("tensor parallelism: tp_size " + std::to_string(parts) + " does not divide " + model +
                                  "'s " + field + " (" + std::to_string(n) + ")");
}

const ForwardSplit& Parallelizable::forward_split() const {
  static const ForwardSplit whole;
  return split_ ? *split_ : whole;
}

}  // namespace acc::core
