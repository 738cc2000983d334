// The collators: transformers 5.23's DataCollatorWithPadding, DataCollatorForLanguageModeling (mlm=False) and
// default_data_collator (transformers/data/data_collator.py, tokenizer.pad in tokenization_utils_base.py), and TRL
// 1.16's DataCollatorForLanguageModeling (trl/trainer/sft_trainer.py).
#include <algorithm>
#include <stdexcept>

#include "data/prep/prep.hpp"
#include "data/prep/prep_internal.hpp"
#include "text/chat_template.hpp"

namespace acc::data {
namespace {

void check_rows(const Examples& ex, std::span<const size_t> rows, const char* who) {
  if (rows.empty()) throw std::invalid_argument(std::string(who) + ": an empty batch");
  for (size_t r : rows)
    if (r >= ex.rows())
      throw std::out_of_range(std::string(who) + ": row " + std::to_string(r) + " of " + std::to_string(ex.rows()));
}

size_t round_up(size_t n, std::optional<size_t> multiple) {
  if (!multiple || *multiple == 0 || n % *multiple == 0) return n;
  return (n / *multiple + 1) * *multiple;
}

// Rows as they are, of one length (torch.tensor of a list of lists); a ragged column is an error naming it.
Matrix stack(const SeqColumn& col, std::span<const size_t> rows, const std::string& name, const char* who) {
  Matrix m;
  const size_t len = col.length(rows[0]);
  for (size_t r : rows) {
    if (col.length(r) != len)
      throw std::invalid_argument(std::string(who) + ": column '" + name + "' has rows of " + std::to_string(len) +
                                  " and " + std::to_string(col.length(r)) +
                                  " values, which this collator does not pad");
    auto v = col.row(r);
    m.data.insert(m.data.end(), v.begin(), v.end());
  }
  m.shape = {static_cast<int64_t>(rows.size()), static_cast<int64_t>(len)};
  return m;
}

// A "label" column holds one value per row (a class): shape [batch].
Matrix scalars(const SeqColumn& col, std::span<const size_t> rows, const std::string& name) {
  Matrix m;
  for (size_t r : rows) {
    if (col.length(r) != 1)
      throw std::invalid_argument("column '" + name + "' must hold one value per row; row " + std::to_string(r) +
                                  " has " + std::to_string(col.length(r)));
    m.data.push_back(col.row(r)[0]);
  }
  m.shape = {static_cast<int64_t>(rows.size())};
  return m;
}

// Sequences padded to `length` with `value` on `side`.
Matrix padded(const std::vector<std::span<const int64_t>>& seqs, size_t length, int64_t value, PadSide side) {
  Matrix m;
  m.shape = {static_cast<int64_t>(seqs.size()), static_cast<int64_t>(length)};
  m.data.assign(seqs.size() * length, value);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const size_t start = side == PadSide::Right ? 0 : length - seqs[i].size();
    std::copy(seqs[i].begin(), seqs[i].end(), m.data.begin() + i * length + start);
  }
  return m;
}

std::vector<std::span<const int64_t>> spans(const SeqColumn& col, std::span<const size_t> rows) {
  std::vector<std::span<const int64_t>> out;
  for (size_t r : rows) out.push_back(col.row(r));
  return out;
}

// tokenizer.pad(features, padding=True or "max_length", ...).
Batch tokenizer_pad(const Examples& ex, std::span<const size_t> rows, const PadOptions& o, const char* who) {
  check_rows(ex, rows, who);
  if (!o.pad_token_id)
    throw std::invalid_argument(std::string(who) +
                                ": the tokenizer has no pad token (transformers: \"Asking to pad but"
                                " the tokenizer does not have a padding token\"); set one, e.g. the eos token");
  const auto& ids = ex.column("input_ids");
  size_t length = o.max_length.value_or(0);
  if (!o.max_length)
    for (size_t r : rows) length = std::max(length, ids.length(r));
  length = round_up(length, o.pad_to_multiple_of);
  std::vector<std::string> names = ex.names;
  if (!ex.find("attention_mask")) names.push_back("attention_mask");  // made all 1, then padded
  Batch b;
  for (const auto& name : names) {
    const SeqColumn* col = ex.find(name);
    std::optional<int64_t> pad_value;
    if (name == "input_ids") pad_value = *o.pad_token_id;
    else if (name == "attention_mask" || name == "token_type_ids") pad_value = 0;
    else if (name == "special_tokens_mask") pad_value = 1;
    if (!pad_value) {
      b.fields.emplace_back(name, name == "label" ? scalars(*col, rows, name) : stack(*col, rows, name, who));
      continue;
    }
    std::vector<std::vector<int64_t>> ones;
    std::vector<std::span<const int64_t>> seqs;
    if (col) {
      seqs = spans(*col, rows);
    } else {
      for (size_t r : rows) ones.emplace_back(ids.length(r), 1);
      for (const auto& v : ones) seqs.emplace_back(v);
    }
    for (size_t i = 0; i < seqs.size(); ++i)
      if (seqs[i].size() > length)  // transformers leaves it longer, and the batch cannot become a tensor
        throw std::invalid_argument(std::string(who) + ": row " + std::to_string(rows[i]) + " has " +
                                    std::to_string(seqs[i].size()) + " '" + name + "', more than max_length " +
                                    std::to_string(length) + " (truncate when tokenizing)");
    b.fields.emplace_back(name, padded(seqs, length, *pad_value, o.padding_side));
  }
  return b;
}

// DataCollatorWithPadding and default_data_collator name the label "labels".
void rename_labels(Batch& b) {
  for (const char* from : {"label", "label_ids"})
    for (size_t i = 0; i < b.fields.size(); ++i)
      if (b.fields[i].first == from) {
        auto m = std::move(b.fields[i].second);
        b.fields.erase(b.fields.begin() + static_cast<std::ptrdiff_t>(i));
        b.fields.emplace_back("labels", std::move(m));
        break;
      }
}

}  // namespace

PadOptions pad_options(const text::Tokenizer& tok) {
  PadOptions o;
  o.pad_token_id = tok.special_token_id("pad_token");
  o.padding_side = tok.padding_side() == text::Side::Left ? PadSide::Left : PadSide::Right;
  return o;
}

Batch collate_with_padding(const Examples& ex, std::span<const size_t> rows, const PadOptions& o) {
  Batch b = tokenizer_pad(ex, rows, o, "DataCollatorWithPadding");
  rename_labels(b);
  return b;
}

Batch collate_language_modeling(const Examples& ex, std::span<const size_t> rows, const PadOptions& o) {
  Batch b = tokenizer_pad(ex, rows, o, "DataCollatorForLanguageModeling");
  std::erase_if(b.fields, [](const auto& f) { return f.first == "special_tokens_mask" || f.first == "labels"; });
  Matrix labels = b.at("input_ids");
  for (auto& v : labels.data)
    if (v == *o.pad_token_id) v = -100;
  b.fields.emplace_back("labels", std::move(labels));
  return b;
}

Batch collate_default(const Examples& ex, std::span<const size_t> rows) {
  check_rows(ex, rows, "default_data_collator");
  Batch b;
  for (size_t c = 0; c < ex.names.size(); ++c) {
    const auto& name = ex.names[c];
    b.fields.emplace_back(name, name == "label" ? scalars(ex.columns[c], rows, name)
                                                : stack(ex.columns[c], rows, name, "default_data_collator"));
  }
  const bool renamed = ex.find("label") || ex.find("label_ids");
  rename_labels(b);
  // transformers puts a "label" / "label_ids" column first, as "labels" (it handles them before the other keys); a
  // column already named "labels" keeps its place (tests/data/prep/expected: input_ids, attention_mask, labels).
  if (renamed)
    std::stable_partition(b.fields.begin(), b.fields.end(), [](const auto& f) { return f.first == "labels"; });
  return b;
}

Batch collate_trl(const Examples& ex, std::span<const size_t> rows, const TrlCollatorOptions& o) {
  const char* who = "TRL DataCollatorForLanguageModeling";
  check_rows(ex, rows, who);
  const auto& ids_col = ex.column("input_ids");
  const SeqColumn& labels_col = ex.find("labels") ? ex.column("labels") : ids_col;
  const SeqColumn* seq_lengths = ex.find("seq_lengths");
  for (size_t r : rows)
    if (labels_col.length(r) != ids_col.length(r))
      throw std::invalid_argument(std::string(who) + ": row " + std::to_string(r) + " has " +
                                  std::to_string(ids_col.length(r)) + " input_ids but " +
                                  std::to_string(labels_col.length(r)) + " labels");
  std::vector<std::vector<int64_t>> ids, labels, positions;
  for (size_t r : rows) {
    auto a = ids_col.row(r), l = labels_col.row(r);
    ids.emplace_back(a.begin(), a.end());
    labels.emplace_back(l.begin(), l.end());
    std::vector<int64_t> pos;
    if (seq_lengths) {  // get_position_ids_from_packed_seq_lengths: 0, 1, ... from each sample's start
      size_t total = 0;
      for (int64_t n : seq_lengths->row(r)) {
        if (n < 0)
          throw std::invalid_argument(std::string(who) + ": a negative seq_length in row " + std::to_string(r));
        for (int64_t i = 0; i < n; ++i) pos.push_back(i);
        total += static_cast<size_t>(n);
      }
      if (total != a.size())
        throw std::invalid_argument(std::string(who) + ": row " + std::to_string(r) + "'s seq_lengths add up to " +
                                    std::to_string(total) + ", its input_ids are " + std::to_string(a.size()));
    } else {
      for (size_t i = 0; i < a.size(); ++i) pos.push_back(static_cast<int64_t>(i));
    }
    positions.push_back(std::move(pos));
  }
  if (o.padding_free) {  // the batch flattened into one row
    auto flatten = [](std::vector<std::vector<int64_t>>& v) {
      std::vector<int64_t> all;
      for (auto& x : v) all.insert(all.end(), x.begin(), x.end());
      v = {std::move(all)};
    };
    flatten(ids);
    flatten(labels);
    flatten(positions);
  }
  size_t length = 0;
  for (const auto& v : ids) length = std::max(length, v.size());
  length = round_up(length, o.pad_to_multiple_of);
  auto pad = [&](const std::vector<std::vector<int64_t>>& v, int64_t value) {
    std::vector<std::span<const int64_t>> s(v.begin(), v.end());
    return padded(s, length, value, o.padding_side);
  };
  Batch b;
  b.fields.emplace_back("input_ids", pad(ids, o.pad_token_id));
  Matrix lab = pad(labels, -100);
  if (o.padding_free) {
    Matrix pos = pad(positions, 0);
    // TRL sets -100 wherever position_ids is 0: each sample's first token, and every padding token.
    for (size_t i = 0; i < pos.data.size(); ++i)
      if (pos.data[i] == 0) lab.data[i] = -100;
    // cu_seq_lens: every position 0 starts a sequence (padding positions too, each a sequence of one), then the end.
    Matrix cu;
    for (size_t i = 0; i < length; ++i)
      if (pos.data[i] == 0) cu.data.push_back(static_cast<int64_t>(i));
    cu.data.push_back(static_cast<int64_t>(length));
    cu.shape = {static_cast<int64_t>(cu.data.size())};
    int64_t longest = 0;
    Matrix seq_idx;
    for (size_t s = 0; s + 1 < cu.data.size(); ++s) {
      longest = std::max(longest, cu.data[s + 1] - cu.data[s]);
      seq_idx.data.insert(seq_idx.data.end(), static_cast<size_t>(cu.data[s + 1] - cu.data[s]),
                          static_cast<int64_t>(s));
    }
    seq_idx.shape = {1, static_cast<int64_t>(seq_idx.data.size())};
    b.fields.emplace_back("labels", std::move(lab));
    b.fields.emplace_back("position_ids", std::move(pos));
    b.fields.emplace_back("cu_seq_lens_q", cu);
    b.fields.emplace_back("cu_seq_lens_k", std::move(cu));
    b.fields.emplace_back("max_length_q", Matrix{{}, {longest}});
    b.fields.emplace_back("max_length_k", Matrix{{}, {longest}});
    b.fields.emplace_back("seq_idx", std::move(seq_idx));
  } else {
    b.fields.emplace_back("labels", std::move(lab));
    if (o.return_position_ids) b.fields.emplace_back("position_ids", pad(positions, 0));
    std::vector<std::vector<int64_t>> ones;
    for (const auto& v : ids) ones.emplace_back(v.size(), 1);
    b.fields.emplace_back("attention_mask", pad(ones, 0));
  }
  return b;
}

TrlCollatorOptions trl_collator_options(const text::Tokenizer& tok, const SftOptions& o) {
  TrlCollatorOptions c;
  c.padding_free = o.padding_free || (o.packing && o.packing_strategy != PackingStrategy::Wrapped);
  c.pad_to_multiple_of = o.pad_to_multiple_of;
  auto pad = o.pad_token ? o.pad_token : tok.special_token("pad_token");
  if (!pad) pad = tok.special_token("eos_token");
  if (!pad) throw std::invalid_argument("SFT: the tokenizer has neither a pad_token nor an eos_token; set pad_token");
  auto id = tok.token_to_id(*pad);
  if (!id) throw std::invalid_argument("SFT: the pad_token '" + *pad + "' is not in the tokenizer's vocabulary");
  c.pad_token_id = *id;
  return c;
}

}  // namespace acc::data
