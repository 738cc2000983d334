// Preprocessing as the scripts people run (issue 39 item 2; docs/data.md "Preprocessing"): a text column tokenized
// as `dataset.map(lambda b: tok(b["text"], ...), batched=True)`, group_texts as transformers'
// run_clm_no_trainer.py, TRL's SFTTrainer dataset preparation (text, messages, prompt/completion; completion-only and
// assistant-only loss; truncation; packing "bfd", "bfd_split", "wrapped"), and the collators of transformers
// (DataCollatorWithPadding, DataCollatorForLanguageModeling with mlm=False, default_data_collator) and of TRL
// (DataCollatorForLanguageModeling, padding-free). Element for element what transformers 5.23 and TRL 1.16 make
// (tests/data/test_prep.cpp against tests/data/make_prep_fixtures.py). Torch-free: batches are named int64 matrices.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/tokenizer.hpp"

namespace acc::data {

// Input rows, column by column, each cell as JSON text (what files/table.hpp's Column::json gives, json.dumps of
// what `datasets` gives): a string cell is a JSON string, a `messages` cell an array of objects.
struct Table {
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> cells;  // cells[column][row]
  size_t rows() const { return cells.empty() ? 0 : cells[0].size(); }
  bool has(std::string_view name) const;
  // The cells of a column; an error lists the columns there are.
  const std::vector<std::string>& column(std::string_view name) const;
  // Appends a column (every column must have as many rows as the first).
  void add(std::string name, std::vector<std::string> cells);
};

// One int64 sequence per row (input_ids, labels, seq_lengths, ...).
struct SeqColumn {
  std::vector<int64_t> values;
  std::vector<size_t> offsets{0};
  size_t rows() const { return offsets.size() - 1; }
  std::span<const int64_t> row(size_t i) const { return {values.data() + offsets[i], offsets[i + 1] - offsets[i]}; }
  size_t length(size_t i) const { return offsets[i + 1] - offsets[i]; }
  void push(std::span<const int64_t> r) {
    values.insert(values.end(), r.begin(), r.end());
    offsets.push_back(values.size());
  }
  void append(const SeqColumn& other);  // other's rows after this one's
  bool operator==(const SeqColumn&) const = default;
};

// A processed dataset: named columns with the same number of rows, as datasets.map's output holds them.
struct Examples {
  std::vector<std::string> names;
  std::deque<SeqColumn> columns;  // a deque: add() keeps references to the columns made before valid
  size_t rows() const { return columns.empty() ? 0 : columns[0].rows(); }
  const SeqColumn* find(std::string_view name) const;
  // An error lists the columns there are.
  const SeqColumn& column(std::string_view name) const;
  SeqColumn& add(std::string name);  // a new empty column (an existing one of that name is an error)
  void append(const Examples& other);  // other's rows after these (the same columns in the same order)
  bool operator==(const Examples&) const = default;
};

// Work split over threads: rows are cut into contiguous slices, each processed alone, and joined in order, so the
// result never depends on `threads` (nor does which row's error is reported: the first in row order).
struct RunOptions {
  size_t threads = 1;
};

// ---- Tokenizing a text column: tok(batch[column], truncation=..., max_length=..., add_special_tokens=...)
struct TokenizeOptions {
  std::string column = "text";
  bool add_special_tokens = true;
  bool truncation = false;
  std::optional<size_t> max_length;  // unset with truncation: the tokenizer's model_max_length
  // transformers 5's tokenizers return only input_ids and attention_mask (their model_input_names), BERT's
  // token_type_ids too: set this for those.
  bool return_token_type_ids = false;
};
// Columns input_ids, attention_mask (token_type_ids). A null or non-string cell is an error naming its row.
Examples tokenize(const text::Tokenizer& tok, const Table& rows, const TokenizeOptions& options,
                  const RunOptions& run = {});

// ---- group_texts (run_clm_no_trainer.py): every column concatenated within each map batch of `map_batch_size`
// rows (datasets.map's batch_size, 1000), cut into block_size chunks, the batch's remainder dropped; labels a copy
// of input_ids.
struct GroupOptions {
  size_t block_size = 1024;
  size_t map_batch_size = 1000;
};
Examples group_texts(const Examples& tokenized, const GroupOptions& options);

// ---- TRL's SFTTrainer._prepare_dataset (TRL 1.16) and pack_dataset.
enum class PackingStrategy { Bfd, BfdSplit, Wrapped };
enum class TruncationMode { KeepStart, KeepEnd };

struct SftOptions {
  // The dataset's form is TRL's, read from the columns and the first row: a "prompt" column (with "completion")
  // is prompt/completion, conversational when the first prompt is a list of messages; else a "messages" column
  // whose first cell is a list of messages is conversational language modeling; else `text_field` is text.
  std::string text_field = "text";  // SFTConfig.dataset_text_field
  std::optional<size_t> max_length = 1024;
  TruncationMode truncation_mode = TruncationMode::KeepStart;
  bool packing = false;
  PackingStrategy packing_strategy = PackingStrategy::Bfd;
  // Unset: on for prompt/completion data (TRL's default), off otherwise.
  std::optional<bool> completion_only_loss;
  // Labels -100 outside the template's {% generation %} blocks (conversational data only). TRL swaps a training
  // template in for models it knows whose own template lacks the blocks; libacc does not ship those: pass one.
  bool assistant_only_loss = false;
  // A template's text or name; unset: the tokenizer's (TRL's chat_template=None).
  std::optional<std::string> chat_template;
  // What the template's strftime_now reads (seconds since the epoch); < 0: the time of preparation, as in TRL.
  // Set it to make the rows of a template that prints today's date the same on every day.
  int64_t now_unix = -1;
  // SFTConfig.eos_token: appended to text and standard completions; unset: the tokenizer's eos_token.
  std::optional<std::string> eos_token;
  size_t map_batch_size = 1000;  // datasets.map's batch_size, which packing works within
  // The collator's settings (trl_collator_options): SFTConfig.padding_free (refused without packing while
  // max_length is set, as TRL refuses it), pad_token (unset: the tokenizer's, else its eos token), pad_to_multiple_of.
  bool padding_free = false;
  std::optional<std::string> pad_token;
  std::optional<size_t> pad_to_multiple_of;
};
// Columns input_ids, labels, and seq_lengths after "bfd"/"bfd_split" packing. Errors name the row and column.
Examples sft_prepare(const text::Tokenizer& tok, const Table& rows, const SftOptions& options,
                     const RunOptions& run = {});

// TRL's pack_dataset over every column (all lists of equal length per row), within map batches of map_batch_size
// rows: "bfd" (best fit decreasing; sequences cut to seq_length, empty ones dropped) and "bfd_split" (long ones
// split into seq_length pieces) add seq_lengths; "wrapped" concatenates and cuts.
Examples pack(const Examples& examples, size_t seq_length, PackingStrategy strategy, size_t map_batch_size = 1000);

// ---- Batches: named int64 matrices (row-major), as the collators return them. A Python int (TRL's
// max_length_q) has shape {}; TRL's int32 tensors (cu_seq_lens_*, seq_idx) are int64 here.
struct Matrix {
  std::vector<int64_t> shape;
  std::vector<int64_t> data;
  bool operator==(const Matrix&) const = default;
};
struct Batch {
  std::vector<std::pair<std::string, Matrix>> fields;
  const Matrix* find(std::string_view name) const;
  const Matrix& at(std::string_view name) const;  // an error lists the names there are
};

enum class PadSide { Right, Left };

// transformers' tokenizer.pad as its collators call it: input_ids padded with pad_token_id, attention_mask (made
// all 1 when missing) with 0, token_type_ids with 0, special_tokens_mask with 1; every other column must already
// have one length across the batch (as torch.tensor needs), else an error naming it.
struct PadOptions {
  std::optional<int64_t> pad_token_id;  // the tokenizer's; padding without one is an error, as in transformers
  PadSide padding_side = PadSide::Right;
  std::optional<size_t> pad_to_multiple_of;
  std::optional<size_t> max_length;  // padding="max_length" to this; unset: the longest in the batch
};
// PadOptions from a tokenizer: its pad token and padding side.
PadOptions pad_options(const text::Tokenizer& tok);

// DataCollatorWithPadding: tokenizer.pad; a "label" / "label_ids" column becomes "labels".
Batch collate_with_padding(const Examples& ex, std::span<const size_t> rows, const PadOptions& options);
// DataCollatorForLanguageModeling(mlm=False): tokenizer.pad, then labels = input_ids with -100 wherever the id is
// the pad token's, real tokens included (transformers compares ids, not the mask: with pad = eos, every eos is
// left out of the loss).
Batch collate_language_modeling(const Examples& ex, std::span<const size_t> rows, const PadOptions& options);
// default_data_collator: columns stacked as they are (equal lengths); "label" / "label_ids" become "labels".
Batch collate_default(const Examples& ex, std::span<const size_t> rows);

// TRL's DataCollatorForLanguageModeling: input_ids padded with pad_token_id, labels (input_ids where there is no
// labels column) with -100; padding_free: the rows as one, position_ids restarting per sample (from seq_lengths when
// packed), labels -100 at every position 0, cu_seq_lens_q/k, max_length_q/k, seq_idx; else attention_mask (and
// position_ids with return_position_ids).
struct TrlCollatorOptions {
  int64_t pad_token_id = 0;
  bool padding_free = false;
  bool return_position_ids = false;
  std::optional<size_t> pad_to_multiple_of;
  PadSide padding_side = PadSide::Right;  // TRL's collator pads on the right; its pad() helper does both
};
Batch collate_trl(const Examples& ex, std::span<const size_t> rows, const TrlCollatorOptions& options);
// The collator SFTTrainer makes for these settings: padding-free with padding_free or "bfd"/"bfd_split" packing, the
// pad token's id (one not in the vocabulary is an error naming it).
TrlCollatorOptions trl_collator_options(const text::Tokenizer& tok, const SftOptions& options);

// ---- On-disk caching of a processed dataset, as datasets.map caches: a file named by a hash of `key` (the input's
// fingerprint and every setting) in `dir`, written atomically (temporary file and rename). A cache file of ours
// that is damaged (truncated, checksum mismatch) is reported on stderr and rebuilt over; a file at that name that
// is not one of ours (no libacc header) is refused with an error naming it, never overwritten.
Examples cached(const std::string& dir, const std::string& key, const std::function<Examples()>& build);
std::string cache_path(const std::string& dir, const std::string& key);
// A fingerprint of input files: path, size and modification time (or, with content_hash, the bytes' hash).
std::string fingerprint_files(const std::vector<std::string>& paths, bool content_hash = false);
// A fingerprint of a tokenizer: what it was loaded from (its files' fingerprints when a folder), its special
// tokens, sizes and chat templates.
std::string fingerprint_tokenizer(const text::Tokenizer& tok);
// The settings as text, for cache keys.
std::string settings_key(const TokenizeOptions& o);
std::string settings_key(const GroupOptions& o);
std::string settings_key(const SftOptions& o);

// A 64-bit FNV-1a hash, as 16 hex digits.
std::string hash_hex(std::string_view bytes);

}  // namespace acc::data
