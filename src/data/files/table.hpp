// Dataset files as tables (issue 39 item 1; docs/data.md): JSONL, CSV, Parquet, Arrow IPC (stream and file format)
// and `datasets`' save_to_disk folders, read by arrow-rs (the Rust library rust/, behind data_ffi.h) in batches of a
// bounded number of rows, so that memory follows the batch, not the file. Torch-free (acc_data_files).
//
//   auto r = acc::data::Reader::open("train.jsonl");
//   while (auto b = r.next_batch(1024))
//     for (size_t i = 0; i < b->rows; ++i) use(b->column("text").str(i));
//
// Map-style readers (Parquet, Arrow IPC files, save_to_disk folders: the row count is in the metadata) also read any
// rows by number; JSONL, CSV and Arrow IPC streams are read in order only (num_rows() is empty). Every error is a
// std::runtime_error naming the file (and, for JSONL, the line); a column that is not there is an error listing the
// columns there are.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/sharding.hpp"

struct accdata_reader;
struct accdata_batch;

namespace acc::data {

enum class Format {
  Auto,         // by extension (.jsonl .json .csv .tsv .parquet .arrow .feather .ipc), else by the magic bytes; a
                // folder: a save_to_disk folder (state.json), else its Parquet, Arrow, JSONL or CSV files, by name
  Jsonl,        // one JSON object per line (JSON lines); blank lines skipped
  Csv,          // comma-separated with a header row (.tsv: tab), types inferred from the first rows
  Parquet,
  ArrowStream,  // Arrow IPC stream format (a save_to_disk shard's data-*.arrow)
  ArrowFile,    // Arrow IPC file format (Feather v2)
};

struct OpenOptions {
  Format format = Format::Auto;
  // Only these columns, in this order (empty: all). One the files do not have is an error listing those they have.
  std::vector<std::string> columns;
  // CSV: the delimiter (0: ',' or, for .tsv, '\t') and whether the first row names the columns.
  char csv_delimiter = 0;
  bool csv_header = true;
};

// A column's name and type, the type written as pyarrow writes it (str(pa.DataType)): "string", "large_string",
// "int64", "double", "bool", "list<item: int64>", "struct<role: string, content: string>", ...
struct Field {
  std::string name;
  std::string type;
  bool nullable = true;
};
using Schema = std::vector<Field>;

// One column of a RecordBatch; valid while its batch lives. Accessors take a row in [0, size()) and throw
// std::runtime_error naming the column and row for a row out of range, a null cell (ask is_null first) or a type
// the accessor does not read.
class Column {
 public:
  const std::string& name() const { return name_; }
  const std::string& type() const { return type_; }
  size_t size() const { return rows_; }
  bool is_null(size_t i) const;
  // string and large_string (and dictionary-encoded strings): the cell's UTF-8 bytes, borrowed from the batch.
  std::string_view str(size_t i) const;
  // Any integer type (a uint64 above INT64_MAX throws) and bool.
  int64_t i64(size_t i) const;
  // Floating-point and integer types.
  double f64(size_t i) const;
  bool boolean(size_t i) const;
  // A list (list, large_list, fixed_size_list) of integers, such as input_ids; null items throw.
  std::vector<int64_t> int_list(size_t i) const;
  // Any cell as the JSON text Python's json.dumps(value, ensure_ascii=False) gives for the value `datasets` gives:
  // structs as objects with their fields in schema order, lists as arrays, null as null, floats as Python's repr
  // (NaN, Infinity). Types json.dumps cannot write (binary, dates, times, decimals) throw.
  std::string json(size_t i) const;

 private:
  friend class RecordBatch;
  std::shared_ptr<accdata_batch> batch_;
  size_t index_ = 0, rows_ = 0;
  std::string name_, type_;
};

// Rows of the table: `rows` rows of every column the reader was opened with.
class RecordBatch {
 public:
  size_t rows = 0;
  // Throws std::runtime_error listing the batch's columns when `name` is not one of them.
  const Column& column(std::string_view name) const;
  const std::vector<Column>& columns() const { return columns_; }
  // The batch's first row's number in the table (map-style readers and next_batch; 0 for take()).
  uint64_t first_row = 0;

 private:
  friend class Reader;
  friend class ShardedStream;
  explicit RecordBatch(accdata_batch* b);  // takes ownership
  std::shared_ptr<accdata_batch> handle_;
  std::vector<Column> columns_;
};

class Reader {
 public:
  // A file, a folder (see Format::Auto) or a list of files of one format and schema, read as one table in order.
  static Reader open(const std::string& path, const OpenOptions& options = {});
  static Reader open(const std::vector<std::string>& paths, const OpenOptions& options = {});
  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;
  ~Reader();

  const Schema& schema() const { return schema_; }
  Format format() const { return format_; }
  // The row count, for map-style readers (Parquet, Arrow IPC files, save_to_disk folders); empty for the rest.
  std::optional<uint64_t> num_rows() const { return num_rows_; }
  bool map_style() const { return num_rows_.has_value(); }

  // In table order: the next at most max_rows rows (fewer only at the end of the table), or nothing at its end.
  std::optional<RecordBatch> next_batch(size_t max_rows);
  // Back to the first row (a new pass, an epoch).
  void rewind();

  // Map-style readers only (others throw). The files' own batches (Parquet row groups, IPC record batches) in order:
  // how many, and the i-th.
  size_t num_batches() const;
  RecordBatch batch(size_t i);
  // Rows [first, first + count), clipped at the end of the table.
  RecordBatch rows(uint64_t first, size_t count);
  // The given rows in the given order (repeats allowed) as one batch: a sampler's batch.
  RecordBatch take(const std::vector<int64_t>& rows);

 private:
  Reader() = default;
  accdata_reader* r_ = nullptr;
  Schema schema_;
  Format format_ = Format::Auto;
  std::optional<uint64_t> num_rows_;
  size_t num_batches_ = 0;
};

// Sharding across processes, as the loaders of src/data/dataset.cpp shard (Accelerate's BatchSamplerShard): the row
// numbers of the batches process spec.process_index reads, for a sampler's order of the rows (0..n-1 in order, or
// shuffled) cut into batches of spec.batch_size (spec.drop_last). Read each with Reader::take.
std::vector<core::Batch> shard_rows(const std::vector<int64_t>& order, const core::ShardSpec& spec);

// An iterable reader sharded as Accelerate's IterableDatasetShard: every process reads the whole table, and each
// global batch of spec.batch_size x num_processes rows (spec.batch_size with split_batches) gives this process its
// slice; without drop_last the last global batch is completed from the first one.
class ShardedStream {
 public:
  ShardedStream(Reader& reader, const core::ShardSpec& spec);
  // This process's next batch, or nothing at the end of the table.
  std::optional<RecordBatch> next();
  // After the end: how many rows of the last global batch were real (0 when none was padded).
  int64_t padded_real() const;

 private:
  struct State;
  std::shared_ptr<State> s_;
};

}  // namespace acc::data
