// group_texts (transformers' run_clm_no_trainer.py) and TRL 1.16's pack_dataset (trl/data_utils.py: _pack_bfd,
// _pack_wrapped), each applied as datasets.map(batched=True) applies it: to batches of map_batch_size rows alone.
#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <stdexcept>

#include "data/prep/prep.hpp"
#include "data/prep/prep_internal.hpp"

namespace acc::data {
namespace {

// Every column's rows must have the same lengths as the first column's (TRL's _check_if_columns_can_be_packed).
void check_packable(const Examples& ex) {
  if (ex.columns.empty()) throw std::invalid_argument("packing needs at least one column");
  const auto& first = ex.columns[0];
  for (size_t c = 1; c < ex.columns.size(); ++c)
    for (size_t r = 0; r < first.rows(); ++r)
      if (ex.columns[c].length(r) != first.length(r))
        throw std::invalid_argument("packing: row " + std::to_string(r) + " has " + std::to_string(first.length(r)) +
                                    " '" + ex.names[0] + "' but " + std::to_string(ex.columns[c].length(r)) + " '" +
                                    ex.names[c] + "': every column must have values of the same length");
}

Examples empty_like(const Examples& ex) {
  Examples out;
  for (const auto& n : ex.names) out.add(n);
  return out;
}

// One piece of a row: [begin, begin + length) of row `row`.
struct Piece {
  size_t row, begin, length;
};

// Best Fit Decreasing over rows [first, last): pieces sorted by length, longest first (a stable sort, as Arrow's),
// each into the bin whose free space is the smallest that fits it (the oldest such bin first), else a new bin.
void pack_bfd(const Examples& ex, size_t first, size_t last, size_t seq_length, bool split, Examples& out) {
  const auto& lead = ex.columns[0];
  std::vector<Piece> pieces;
  for (size_t r = first; r < last; ++r) {
    const size_t n = lead.length(r);
    if (n == 0) continue;  // empty sequences are dropped
    if (!split) {
      pieces.push_back({r, 0, std::min(n, seq_length)});
    } else {
      for (size_t b = 0; b < n; b += seq_length) pieces.push_back({r, b, std::min(seq_length, n - b)});
    }
  }
  std::vector<size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pieces[a].length > pieces[b].length; });

  std::vector<std::vector<size_t>> bins;              // piece indices per bin, in the order placed
  std::map<size_t, std::deque<size_t>> bins_by_space;  // free space -> bins with exactly that much, oldest first
  for (size_t p : order) {
    const size_t length = pieces[p].length;
    size_t bin, space;
    auto fit = bins_by_space.lower_bound(length);
    if (fit != bins_by_space.end()) {
      space = fit->first;
      bin = fit->second.front();
      fit->second.pop_front();
      if (fit->second.empty()) bins_by_space.erase(fit);
    } else {
      space = seq_length;
      bin = bins.size();
      bins.emplace_back();
    }
    bins[bin].push_back(p);
    space -= length;
    if (space > 0) bins_by_space[space].push_back(bin);
  }

  SeqColumn* lengths = &out.add("seq_lengths");
  for (const auto& b : bins) {
    std::vector<int64_t> row_lengths;
    for (size_t c = 0; c < ex.columns.size(); ++c) {
      std::vector<int64_t> row;
      for (size_t p : b) {
        auto src = ex.columns[c].row(pieces[p].row).subspan(pieces[p].begin, pieces[p].length);
        row.insert(row.end(), src.begin(), src.end());
      }
      out.columns[c].push(row);
    }
    for (size_t p : b) row_lengths.push_back(static_cast<int64_t>(pieces[p].length));
    lengths->push(row_lengths);
  }
}

// Python's t[b : b + n] of a list.
std::span<const int64_t> slice(std::span<const int64_t> t, size_t b, size_t n) {
  b = std::min(b, t.size());
  return t.subspan(b, std::min(n, t.size() - b));
}

// Rows [first, last) concatenated and cut every seq_length values; the last piece may be shorter.
void pack_wrapped(const Examples& ex, size_t first, size_t last, size_t seq_length, Examples& out) {
  for (size_t c = 0; c < ex.columns.size(); ++c) {
    const auto& col = ex.columns[c];
    std::span<const int64_t> all(col.values.data() + col.offsets[first], col.offsets[last] - col.offsets[first]);
    for (size_t b = 0; b < all.size(); b += seq_length) out.columns[c].push(slice(all, b, seq_length));
  }
}

}  // namespace

Examples group_texts(const Examples& ex, const GroupOptions& o) {
  if (o.block_size == 0) throw std::invalid_argument("group_texts: block_size must be at least 1");
  if (o.map_batch_size == 0) throw std::invalid_argument("group_texts: map_batch_size must be at least 1");
  if (!ex.find("input_ids"))
    throw std::invalid_argument("group_texts needs an 'input_ids' column (columns: " + join_names(ex.names) + ")");
  Examples out = empty_like(ex);
  const size_t rows = ex.rows();
  for (size_t first = 0; first < rows; first += o.map_batch_size) {
    const size_t last = std::min(rows, first + o.map_batch_size);
    // The first column's total decides how many blocks every column gives (run_clm's total_length).
    const auto& lead = ex.columns[0];
    const size_t total = (lead.offsets[last] - lead.offsets[first]) / o.block_size * o.block_size;
    for (size_t c = 0; c < ex.columns.size(); ++c) {
      const auto& col = ex.columns[c];
      std::span<const int64_t> all(col.values.data() + col.offsets[first], col.offsets[last] - col.offsets[first]);
      // Python's t[i : i + block_size] clips at the column's end.
      for (size_t b = 0; b < total; b += o.block_size) out.columns[c].push(slice(all, b, o.block_size));
    }
  }
  // result["labels"] = result["input_ids"].copy(): replaces a labels column in its place, else is added last.
  const SeqColumn ids = out.column("input_ids");
  for (size_t c = 0; c < out.names.size(); ++c)
    if (out.names[c] == "labels") {
      out.columns[c] = ids;
      return out;
    }
  out.add("labels") = ids;
  return out;
}

Examples pack(const Examples& ex, size_t seq_length, PackingStrategy strategy, size_t map_batch_size) {
  if (seq_length == 0) throw std::invalid_argument("packing: max_length (the packed length) must be at least 1");
  if (map_batch_size == 0) throw std::invalid_argument("packing: map_batch_size must be at least 1");
  check_packable(ex);
  if (ex.find("seq_lengths"))
    throw std::invalid_argument("packing: the examples are packed already (a 'seq_lengths' column)");
  Examples out = empty_like(ex);
  if (strategy != PackingStrategy::Wrapped) out.add("seq_lengths");
  const size_t rows = ex.rows();
  for (size_t first = 0; first < rows; first += map_batch_size) {
    const size_t last = std::min(rows, first + map_batch_size);
    if (strategy == PackingStrategy::Wrapped) {
      pack_wrapped(ex, first, last, seq_length, out);
    } else {
      Examples part = empty_like(ex);
      pack_bfd(ex, first, last, seq_length, strategy == PackingStrategy::BfdSplit, part);
      out.append(part);
    }
  }
  return out;
}

}  // namespace acc::data
