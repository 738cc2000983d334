#include "data/from_files/files_dataset.hpp"

#include <ATen/ATen.h>

#include <cstring>

namespace acc::core {

TensorDict batch_tensors(const data::Batch& batch) {
  TensorDict out;
  for (const auto& [name, m] : batch.fields) {
    at::Tensor t = at::empty(m.shape, at::kLong);
    if (static_cast<size_t>(t.numel()) != m.data.size())
      throw std::logic_error("collated '" + name + "' holds " + std::to_string(m.data.size()) +
                             " values for its shape of " + std::to_string(t.numel()));
    if (!m.data.empty()) std::memcpy(t.data_ptr<int64_t>(), m.data.data(), m.data.size() * sizeof(int64_t));
    out.set(name, std::move(t));
  }
  return out;
}

namespace {

class ExamplesDataset final : public Dataset {
 public:
  ExamplesDataset(std::shared_ptr<const data::Examples> ex, data::PipelineCollator collate)
      : ex_(std::move(ex)), collate_(std::move(collate)) {}
  int64_t size() const override { return static_cast<int64_t>(ex_->rows()); }
  Sample get(int64_t index) override { return get_batch({index}); }
  Sample get_batch(const std::vector<int64_t>& indices) override {
    std::vector<size_t> rows;
    rows.reserve(indices.size());
    for (int64_t i : indices) {
      if (i < 0 || i >= size())
        throw std::out_of_range("dataset index " + std::to_string(i) + " outside [0, " + std::to_string(size()) + ")");
      rows.push_back(static_cast<size_t>(i));
    }
    return batch_tensors(collate_(*ex_, rows));
  }
  const std::shared_ptr<const data::Examples>& examples() const { return ex_; }

 private:
  std::shared_ptr<const data::Examples> ex_;
  data::PipelineCollator collate_;
};

}  // namespace

std::shared_ptr<Dataset> make_examples_dataset(std::shared_ptr<const data::Examples> examples,
                                               data::PipelineCollator collate) {
  return std::make_shared<ExamplesDataset>(std::move(examples), std::move(collate));
}

std::shared_ptr<Dataset> make_files_dataset(const text::Tokenizer& tok, const data::PipelineOptions& options) {
  data::PipelineCollator collate(tok, options);  // its settings checked before the files are read
  auto ex = std::make_shared<const data::Examples>(data::build_examples(tok, options));
  if (ex->rows() == 0)
    throw std::invalid_argument("dataset from files: no rows left after preparation (" +
                                std::to_string(options.files.size()) + " path(s), first '" + options.files.front() +
                                "')");
  return make_examples_dataset(std::move(ex), std::move(collate));
}

std::shared_ptr<const data::Examples> examples_of(const Dataset& ds) {
  auto* e = dynamic_cast<const ExamplesDataset*>(&ds);
  return e ? e->examples() : nullptr;
}

}  // namespace acc::core
