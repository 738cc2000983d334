// The forward seams of a model parallelized over the process mesh (models/parallel_forward.hpp): tensor parallelism's
// regions, logits and loss, and context or Ulysses sequence parallelism's sequence split, composed (the heads split by
// tp, the tokens by cp or sp). tp::parallelize, cp::parallelize and ulysses::parallelize each add their part.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "models/parallel_forward.hpp"
#include "models/placement.hpp"
#include "parallel/context_parallel.hpp"
#include "parallel/ulysses.hpp"

namespace acc::core {

class NnModel;

// The model a mechanism (`what`: "tensor parallelism") changes, as a module tree and a family. Refused before anything
// changes: a TorchScript module (UnsupportedError: "the model is a TorchScript module, " + `torchscript`), a module
// tree that is no family ("<its class> " + `not_family`), a model the mechanism split already (StateError).
std::pair<NnModel*, Parallelizable*> family_to_split(Model& model, const std::string& what,
                                                     const std::string& torchscript, const std::string& not_family,
                                                     bool split_already);

class MeshForward;

// A sequence split (`what`: "context parallelism", "sequence parallelism") about to be installed on `model` over
// `group`: the model's class, its family and the family's mesh forward so far. Refused as family_to_split refuses
// (`missing`: how a family without the split's attention is named), and a `group` this rank is not a rank of or that
// lacks the collective the split needs (`has_exchange`).
struct SequenceSplitTarget {
  std::string cls;
  Parallelizable* family = nullptr;
  std::shared_ptr<MeshForward> forward;
};
SequenceSplitTarget sequence_split_target(Model& model, const std::string& what, const std::string& missing,
                                          bool split_already, const Collectives& group, bool has_exchange);

class MeshForward final : public ForwardSplit {
 public:
  struct TensorPart {
    std::shared_ptr<const Collectives> group;
    bool sequence_parallel = false;
  };
  struct ContextPart {
    std::shared_ptr<const Collectives> group;
    cp::Exchange exchange = cp::Exchange::AllGather;
  };
  struct UlyssesPart {
    std::shared_ptr<const Collectives> group;
    ulysses::Options options;
  };
  std::optional<TensorPart> tensor;
  std::optional<ContextPart> context;
  std::optional<UlyssesPart> ulysses;  // (exclusive with context)

  // A copy of the parts `family` has (none for a model not parallelized yet).
  static MeshForward of(const Parallelizable& family);
  // The mesh forward installed on `model` (nullptr: none, or the model is no family).
  static const MeshForward* installed_on(const Model& model);

  int64_t parts() const override { return tensor ? tensor->group->size : 1; }
  at::Tensor enter_region(const at::Tensor& x) const override;
  at::Tensor leave_region(const at::Tensor& x) const override;
  at::Tensor local_positions(const at::Tensor& positions) const override;
  void check_length(int64_t length, bool cache, const std::string& model) const override;
  std::shared_ptr<SequenceSplit> split_sequence(int64_t length, bool cache, const std::string& model) const override;
  at::Tensor whole_logits(const at::Tensor& local) const override;
  at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                           const SequenceSplit* sequence) const override;
};

}  // namespace acc::core
