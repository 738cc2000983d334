// A files dataset's whole preprocessing, as one set of options (issue 39 items 4-5; docs/data.md "Datasets from
// files"): which files (format, columns), what is made of their rows (tokenize, group_texts or TRL's SFT preparation,
// with their settings), and which collator makes the batches. The options come as JSON (acc_dataset_from_files,
// acc::Dataset::from_files) or from the accelerator's resolved `data` settings (acc_dataset_from_config); both are
// read by the one parser here, whose errors name the key (and, from the config, its value and source). Torch-free:
// the LibTorch side (src/data/from_files/files_dataset.cpp) only turns Batch into tensors.
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "acc/config.hpp"
#include "acc/json.hpp"
#include "data/files/table.hpp"
#include "data/prep/prep.hpp"

namespace acc::data {

enum class PrepMode { Tokenize, GroupTexts, Sft };
enum class CollatorKind { WithPadding, LanguageModeling, Default, Trl };

struct PipelineOptions {
  std::vector<std::string> files;  // files or folders, read as one table in order
  OpenOptions open;                // format, columns
  PrepMode mode = PrepMode::Sft;
  TokenizeOptions tokenize;        // tokenize and group_texts (the text column, truncation, max_length)
  GroupOptions group;              // group_texts
  SftOptions sft;                  // sft (text_field is the text column; max_length 1024 unless given)
  std::optional<CollatorKind> collator;  // unset: trl for sft, default for group_texts, language_modeling for tokenize
  std::optional<PadSide> padding_side;  // unset: the tokenizer's (transformers' collators), right (TRL's)
  std::optional<size_t> pad_to_multiple_of;
  RunOptions run;
  std::string cache_dir;  // empty: no cache
  CollatorKind collator_kind() const;
};

// Reads an options object (root may be null: the defaults). `what` names the source in errors ("dataset options");
// an unknown key or a bad value is a config::Error naming the key and what it accepts.
PipelineOptions parse_pipeline_options(const json::Value* root, const char* what = "dataset options");
// The resolved `data` section of an accelerator config (data.files, data.mode, ...), read by the same parser; an
// error names the key, its value and its source ("'data.block_size' = 0 (from explicit acc_accelerator_create): ...").
PipelineOptions pipeline_options_from_config(const config::Config& c);

// The processed rows: files read (only the columns the mode needs, when `columns` is not given, is left to the
// preparation, which names a missing column listing those there are), prepared, cached in cache_dir when set.
Examples build_examples(const text::Tokenizer& tok, const PipelineOptions& o);

// The collator the options choose, over rows of `ex` (the tokenizer gives the pad token and padding side).
class PipelineCollator {
 public:
  PipelineCollator(const text::Tokenizer& tok, const PipelineOptions& o);
  Batch operator()(const Examples& ex, std::span<const size_t> rows) const;
  CollatorKind kind() const { return kind_; }

 private:
  CollatorKind kind_;
  PadOptions pad_;
  TrlCollatorOptions trl_;
};

}  // namespace acc::data
