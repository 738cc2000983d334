#include "data/files/table.hpp"

#include <cstdlib>
#include <stdexcept>

#include "acc/json.hpp"
#include "data/files/data_ffi.h"

namespace acc::data {

namespace {

// The message of a failed accdata_ call, freed.
[[noreturn]] void fail(char* err, const std::string& context = {}) {
  std::string msg = err ? err : "unknown error";
  accdata_string_free(err);
  throw std::runtime_error(context.empty() ? msg : context + ": " + msg);
}

std::shared_ptr<accdata_batch> own(accdata_batch* b) { return {b, accdata_batch_free}; }

// accdata_reader_info's JSON, read by the project's one JSON reader.
struct Info {
  std::string format;
  std::optional<uint64_t> num_rows;
  size_t num_batches = 0;
  Schema fields;
};

Info parse_info(const std::string& s) {
  const json::Document doc = json::Document::object(s, "the dataset file reader's info");
  const json::Value root = doc.root();
  Info info;
  info.format = root.get_string("format");
  if (root.has_value("num_rows")) info.num_rows = static_cast<uint64_t>(root.get_int("num_rows"));
  if (root.has_value("num_batches")) info.num_batches = static_cast<size_t>(root.get_int("num_batches"));
  for (const json::Value& f : root.get("fields").elements())
    info.fields.push_back(Field{f.get_string("name"), f.get_string("type"), f.get_bool("nullable")});
  return info;
}

Format format_of(const std::string& name) {
  if (name == "jsonl") return Format::Jsonl;
  if (name == "csv") return Format::Csv;
  if (name == "parquet") return Format::Parquet;
  if (name == "arrow_stream") return Format::ArrowStream;
  if (name == "arrow_file") return Format::ArrowFile;
  return Format::Auto;
}

}  // namespace

// ---- Column

#define ACC_CELL_CALL(call)                                                                  \
  do {                                                                                       \
    char* err = nullptr;                                                                     \
    if (call) fail(err, "column '" + name_ + "' (" + type_ + "), row " + std::to_string(i)); \
  } while (0)

bool Column::is_null(size_t i) const {
  if (i >= rows_)
    throw std::runtime_error("column '" + name_ + "': row " + std::to_string(i) + " is past the batch's " +
                             std::to_string(rows_) + " rows");
  return accdata_cell_is_null(batch_.get(), index_, i) == 1;
}

std::string_view Column::str(size_t i) const {
  const char* p = nullptr;
  size_t n = 0;
  ACC_CELL_CALL(accdata_cell_str(batch_.get(), index_, i, &p, &n, &err));
  return {p, n};
}

int64_t Column::i64(size_t i) const {
  int64_t v = 0;
  ACC_CELL_CALL(accdata_cell_i64(batch_.get(), index_, i, &v, &err));
  return v;
}

double Column::f64(size_t i) const {
  double v = 0;
  ACC_CELL_CALL(accdata_cell_f64(batch_.get(), index_, i, &v, &err));
  return v;
}

bool Column::boolean(size_t i) const {
  uint8_t v = 0;
  ACC_CELL_CALL(accdata_cell_bool(batch_.get(), index_, i, &v, &err));
  return v != 0;
}

std::vector<int64_t> Column::int_list(size_t i) const {
  int64_t* p = nullptr;
  size_t n = 0;
  ACC_CELL_CALL(accdata_cell_int_list(batch_.get(), index_, i, &p, &n, &err));
  std::vector<int64_t> out(p, p + n);
  accdata_string_free(reinterpret_cast<char*>(p));
  return out;
}

std::string Column::json(size_t i) const {
  char* p = nullptr;
  size_t n = 0;
  ACC_CELL_CALL(accdata_cell_json(batch_.get(), index_, i, &p, &n, &err));
  std::string out(p, n);
  accdata_string_free(p);
  return out;
}

#undef ACC_CELL_CALL

// ---- RecordBatch

RecordBatch::RecordBatch(accdata_batch* b) {
  if (!b) return;  // an empty placeholder (ShardedStream's state before its first read)
  auto shared = own(b);
  handle_ = shared;
  rows = accdata_batch_rows(b);
  first_row = accdata_batch_first_row(b);
  const size_t n = accdata_batch_columns(b);
  columns_.resize(n);
  for (size_t c = 0; c < n; ++c) {
    const char *name = nullptr, *type = nullptr;
    size_t name_len = 0, type_len = 0;
    accdata_batch_column_info(b, c, &name, &name_len, &type, &type_len);
    Column& col = columns_[c];
    col.batch_ = shared;
    col.index_ = c;
    col.rows_ = rows;
    col.name_.assign(name, name_len);
    col.type_.assign(type, type_len);
  }
}

const Column& RecordBatch::column(std::string_view name) const {
  for (const Column& c : columns_)
    if (c.name() == name) return c;
  std::string there;
  for (const Column& c : columns_) there += (there.empty() ? "" : ", ") + c.name();
  throw std::runtime_error("no column '" + std::string(name) + "' in the batch; its columns are: " + there);
}

// ---- Reader

Reader Reader::open(const std::string& path, const OpenOptions& options) {
  return open(std::vector<std::string>{path}, options);
}

Reader Reader::open(const std::vector<std::string>& paths, const OpenOptions& options) {
  std::vector<const char*> ps, cs;
  for (const auto& p : paths) ps.push_back(p.c_str());
  for (const auto& c : options.columns) cs.push_back(c.c_str());
  Reader r;
  char* err = nullptr;
  if (accdata_open(ps.data(), ps.size(), static_cast<int>(options.format), cs.data(), cs.size(),
                   static_cast<uint8_t>(options.csv_delimiter), options.csv_header ? 1 : 0, &r.r_, &err))
    fail(err);
  char* info = nullptr;
  if (accdata_reader_info(r.r_, &info, &err)) fail(err);
  Info parsed;
  try {
    parsed = parse_info(info);
  } catch (const std::exception& e) {  // what the files hold made it unreadable: the reader's error, naming them
    accdata_string_free(info);
    throw std::runtime_error(paths.front() + ": " + e.what());
  }
  accdata_string_free(info);
  r.schema_ = std::move(parsed.fields);
  r.format_ = format_of(parsed.format);
  r.num_rows_ = parsed.num_rows;
  r.num_batches_ = parsed.num_batches;
  return r;
}

Reader::Reader(Reader&& o) noexcept
    : r_(o.r_),
      schema_(std::move(o.schema_)),
      format_(o.format_),
      num_rows_(o.num_rows_),
      num_batches_(o.num_batches_) {
  o.r_ = nullptr;
}

Reader& Reader::operator=(Reader&& o) noexcept {
  if (this != &o) {
    accdata_reader_free(r_);
    r_ = o.r_;
    o.r_ = nullptr;
    schema_ = std::move(o.schema_);
    format_ = o.format_;
    num_rows_ = o.num_rows_;
    num_batches_ = o.num_batches_;
  }
  return *this;
}

Reader::~Reader() { accdata_reader_free(r_); }

std::optional<RecordBatch> Reader::next_batch(size_t max_rows) {
  accdata_batch* b = nullptr;
  char* err = nullptr;
  if (accdata_reader_next(r_, max_rows, &b, &err)) fail(err);
  if (!b) return std::nullopt;
  return RecordBatch(b);
}

void Reader::rewind() {
  char* err = nullptr;
  if (accdata_reader_rewind(r_, &err)) fail(err);
}

size_t Reader::num_batches() const {
  if (!num_rows_) throw std::runtime_error("num_batches: this reader reads in order only (JSON lines, CSV)");
  return num_batches_;
}

RecordBatch Reader::batch(size_t i) {
  accdata_batch* b = nullptr;
  char* err = nullptr;
  if (accdata_reader_batch(r_, i, &b, &err)) fail(err);
  return RecordBatch(b);
}

RecordBatch Reader::rows(uint64_t first, size_t count) {
  accdata_batch* b = nullptr;
  char* err = nullptr;
  if (accdata_reader_rows(r_, first, count, &b, &err)) fail(err);
  return RecordBatch(b);
}

RecordBatch Reader::take(const std::vector<int64_t>& rows) {
  accdata_batch* b = nullptr;
  char* err = nullptr;
  if (accdata_reader_take(r_, rows.data(), rows.size(), &b, &err)) fail(err);
  return RecordBatch(b);
}

// ---- Sharding

std::vector<core::Batch> shard_rows(const std::vector<int64_t>& order, const core::ShardSpec& spec) {
  core::check_shard_spec(spec);
  return core::shard_batches(core::make_batches(order, spec.batch_size, spec.drop_last), spec);
}

// Every process reads the whole table in reads of one global batch (next_batch gives exactly that many rows until the
// end), so each global batch IterableShard completes is the read just made; the padding of the last one comes from
// the first read (the first global batch).
struct ShardedStream::State {
  Reader* reader;
  core::IterableShard shard;
  RecordBatch first, last;  // the first read and the latest
  int64_t last_start = 0;   // the ordinal of last's first row
  int64_t seen = 0;
  bool started = false, ended = false;
  State(Reader& r, const core::ShardSpec& spec) : reader(&r), shard(spec), first(nullptr), last(nullptr) {}
};

ShardedStream::ShardedStream(Reader& reader, const core::ShardSpec& spec) : s_(std::make_shared<State>(reader, spec)) {}

std::optional<RecordBatch> ShardedStream::next() {
  State& s = *s_;
  while (!s.ended) {
    std::optional<core::Batch> mine;
    auto b = s.reader->next_batch(static_cast<size_t>(s.shard.global_batch_size()));
    if (!b) {
      s.ended = true;
      mine = s.shard.finish();
    } else {
      s.last = std::move(*b);
      s.last_start = s.seen;
      if (!s.started) s.first = s.last, s.started = true;
      for (size_t r = 0; r < s.last.rows; ++r) {
        auto done = s.shard.push(s.seen++);
        if (done && r + 1 != s.last.rows) throw std::logic_error("ShardedStream: a read past one global batch");
        if (done) mine = std::move(done);
      }
    }
    if (!mine) continue;
    // Ordinals in the latest read are its rows; earlier ones (the padding) are rows of the first read.
    const accdata_batch* handles[2] = {s.last.handle_.get(), s.first.handle_.get()};
    std::vector<size_t> picks;
    for (int64_t o : *mine) {
      const bool in_last = o >= s.last_start;
      picks.push_back(in_last ? 0 : 1);
      picks.push_back(static_cast<size_t>(in_last ? o - s.last_start : o));
    }
    accdata_batch* out = nullptr;
    char* err = nullptr;
    if (accdata_batch_interleave(handles, 2, picks.data(), picks.size() / 2, &out, &err)) fail(err);
    return RecordBatch(out);
  }
  return std::nullopt;
}

int64_t ShardedStream::padded_real() const { return s_->shard.padded_real(); }

}  // namespace acc::data
