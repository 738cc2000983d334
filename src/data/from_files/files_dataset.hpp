// Datasets from files (issue 39 item 4; docs/data.md "Datasets from files"): rows read from JSONL, CSV, Parquet or
// Arrow files, prepared as datasets.map / TRL prepare them (data/prep/pipeline.hpp, torch-free), and batched by the
// chosen collator. A map-style dataset of processed rows whose get_batch(indices) is the collator's padded batch of
// those rows, so the loaders batch, shuffle and shard it as any other (BatchSamplerShard): tensors int64, named as
// the collator names them (input_ids, attention_mask, labels, position_ids, ...), their lengths varying from batch
// to batch as the collator pads each to its own longest row.
#pragma once
#include <memory>

#include "data/dataset.hpp"
#include "data/prep/pipeline.hpp"

namespace acc::core {

// A collated batch as tensors (int64; a Python int, TRL's max_length_q, has shape {}).
TensorDict batch_tensors(const data::Batch& batch);

// Processed rows batched by `collate`. Sample i is the collator's batch of row i alone.
std::shared_ptr<Dataset> make_examples_dataset(std::shared_ptr<const data::Examples> examples,
                                               data::PipelineCollator collate);
// Files read and prepared with `options` (build_examples), batched by their collator.
std::shared_ptr<Dataset> make_files_dataset(const text::Tokenizer& tok, const data::PipelineOptions& options);
// The processed rows of a files dataset (null for other datasets): for previews and row counts.
std::shared_ptr<const data::Examples> examples_of(const Dataset& ds);

}  // namespace acc::core
