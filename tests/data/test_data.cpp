// Dataset files (src/data/files: table.hpp over the Rust library): every cell of the committed fixtures against what
// `datasets` gives for it (fixtures/expected.json, made by make_fixtures.py), random access, sharding as the loaders
// shard, and bad input (issue 39 item 7): truncated and corrupt files, lines that are not JSON or UTF-8, a missing
// column, a 1 GiB line, a FIFO: each a clear error, in bounded memory and time, never a crash or a hang.
// usage: test_data SOURCE_ROOT
#include <acc/json.hpp>
#include <acc/limits.hpp>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "data/files/table.hpp"

namespace fs = std::filesystem;
using acc::data::Reader;

namespace {

std::string g_root;

std::string fixtures() { return g_root + "/tests/data/fixtures"; }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

const acc::json::Document& expected() {
  static acc::json::Document doc(read_file(fixtures() + "/expected.json"), "expected.json");
  return doc;
}

// A fresh temporary folder per test.
class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "acc_data_XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// The message of what `f` throws ("" when it does not).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// Every row of the reader in order, through next_batch in pieces of `step` rows, as (column -> json per row).
std::map<std::string, std::vector<std::string>> read_all_json(Reader& r, size_t step) {
  std::map<std::string, std::vector<std::string>> out;
  while (auto b = r.next_batch(step)) {
    EXPECT_LE(b->rows, step);
    for (const auto& c : b->columns())
      for (size_t i = 0; i < b->rows; ++i) out[c.name()].push_back(c.json(i));
  }
  return out;
}

// Checks one batch's cells against the expected cells of the rows `rows` (by the typed accessors too).
void check_batch(const acc::data::RecordBatch& b, const acc::json::Value& cells, const std::vector<int64_t>& rows,
                 const std::string& what) {
  ASSERT_EQ(b.rows, rows.size()) << what;
  for (const auto& [name, col_cells] : cells.items()) {
    const auto& col = b.column(name);
    for (size_t i = 0; i < b.rows; ++i) {
      const std::string want = col_cells.at(static_cast<size_t>(rows[i])).as_string();
      const std::string where = what + " column " + name + " row " + std::to_string(rows[i]);
      ASSERT_EQ(col.json(i), want) << where;
      acc::json::Document v(want, where, acc::json::kPythonLimits);
      ASSERT_EQ(col.is_null(i), v.root().is_null()) << where;
      if (v.root().is_null()) {
        EXPECT_NE(error_of([&] { (void)col.str(i); }).find("null"), std::string::npos) << where;
        continue;
      }
      if (v.root().is_string()) {
        ASSERT_EQ(std::string(col.str(i)), v.root().as_string()) << where;
      } else if (v.root().kind() == acc::json::Kind::Int) {
        ASSERT_EQ(col.i64(i), v.root().as_int()) << where;
        ASSERT_EQ(col.f64(i), static_cast<double>(v.root().as_int())) << where;
      } else if (v.root().kind() == acc::json::Kind::Double) {
        ASSERT_EQ(col.f64(i), v.root().as_double()) << where;
        EXPECT_NE(error_of([&] { (void)col.str(i); }).find("not a string"), std::string::npos) << where;
      } else if (v.root().is_bool()) {
        ASSERT_EQ(col.boolean(i), v.root().as_bool()) << where;
      } else if (name == "input_ids") {
        std::vector<int64_t> ids;
        for (const auto& e : v.root().elements()) ids.push_back(e.as_int());
        ASSERT_EQ(col.int_list(i), ids) << where;
      }
    }
  }
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> out;
  for (const auto& k : expected().root().keys()) out.push_back(k);
  return out;
}

}  // namespace

// ---- Every cell of every fixture, as datasets gives it.

class Fixture : public ::testing::TestWithParam<std::string> {};

TEST_P(Fixture, CellsEqualDatasets) {
  const auto e = expected().root().get(GetParam());
  const std::string path = fixtures() + "/" + e.get_string("path");
  Reader r = Reader::open(path);
  const size_t n = static_cast<size_t>(e.get_int("num_rows"));
  // Schema: names and pyarrow's types. CSV: datasets reads it with pandas (large_string); arrow-csv gives string.
  const auto fields = e.get("fields").elements();
  ASSERT_EQ(r.schema().size(), fields.size());
  for (size_t k = 0; k < fields.size(); ++k) {
    EXPECT_EQ(r.schema()[k].name, fields[k].at(0).as_string());
    std::string want = fields[k].at(1).as_string();
    if (r.format() == acc::data::Format::Csv && want == "large_string") want = "string";
    EXPECT_EQ(r.schema()[k].type, want) << r.schema()[k].name;
  }
  const bool map_style = r.format() != acc::data::Format::Jsonl && r.format() != acc::data::Format::Csv;
  ASSERT_EQ(r.map_style(), map_style);
  if (map_style) {
    ASSERT_EQ(*r.num_rows(), n);
  }
  // In order, in pieces of several sizes (across row groups, IPC batches, shards), twice (rewind).
  for (size_t step : {1, 3, 4, 7, 100}) {
    std::vector<int64_t> rows;
    size_t first = 0;
    while (auto b = r.next_batch(step)) {
      std::vector<int64_t> these(b->rows);
      for (size_t i = 0; i < b->rows; ++i) these[i] = static_cast<int64_t>(first + i);
      EXPECT_EQ(b->first_row, first);
      check_batch(*b, e.get("cells"), these, GetParam() + " step " + std::to_string(step));
      ASSERT_EQ(b->rows, std::min(step, n - first));
      first += b->rows;
    }
    EXPECT_EQ(first, n);
    r.rewind();
  }
  if (!map_style) {
    EXPECT_NE(error_of([&] { r.take({0}); }).find("in order only"), std::string::npos);
    return;
  }
  // The files' own batches cover the table in order.
  size_t total = 0;
  for (size_t i = 0; i < r.num_batches(); ++i) {
    auto b = r.batch(i);
    std::vector<int64_t> these(b.rows);
    for (size_t k = 0; k < b.rows; ++k) these[k] = static_cast<int64_t>(total + k);
    check_batch(b, e.get("cells"), these, GetParam() + " batch " + std::to_string(i));
    total += b.rows;
  }
  EXPECT_EQ(total, n);
  EXPECT_GT(r.num_batches(), 1u);
  // Row ranges and a sampler's batches (shuffled, with repeats).
  std::mt19937 rng(7);
  for (int t = 0; t < 20; ++t) {
    const uint64_t a = rng() % n;
    const size_t c = rng() % 9;
    auto b = r.rows(a, c);
    std::vector<int64_t> these;
    for (uint64_t k = a; k < std::min<uint64_t>(n, a + c); ++k) these.push_back(static_cast<int64_t>(k));
    check_batch(b, e.get("cells"), these, GetParam() + " rows");
    std::vector<int64_t> pick(1 + rng() % 12);
    for (auto& p : pick) p = static_cast<int64_t>(rng() % n);
    check_batch(r.take(pick), e.get("cells"), pick, GetParam() + " take");
  }
  EXPECT_NE(error_of([&] { r.take({static_cast<int64_t>(n)}); }).find("outside"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Data, Fixture, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) { return info.param; });

// ---- Columns, files, folders.

TEST(Data, ColumnsInTheOrderAskedAndAMissingOneListsThoseThereAre) {
  acc::data::OpenOptions o;
  o.columns = {"messages", "id"};
  for (const char* f : {"rows.snappy.parquet", "rows.stream.arrow", "rows.file.arrow", "rows.jsonl", "saved"}) {
    Reader r = Reader::open(fixtures() + "/" + f, o);
    ASSERT_EQ(r.schema().size(), 2u) << f;
    EXPECT_EQ(r.schema()[0].name, "messages");
    EXPECT_EQ(r.schema()[1].name, "id");
    auto b = r.next_batch(5);
    ASSERT_TRUE(b);
    EXPECT_EQ(b->columns().size(), 2u);
    EXPECT_EQ(b->column("id").i64(3), 3);
    const std::string err = error_of([&] { (void)b->column("text"); });
    EXPECT_NE(err.find("no column 'text'"), std::string::npos) << err;
    EXPECT_NE(err.find("messages, id"), std::string::npos) << err;
  }
  o.columns = {"id", "prompt"};
  for (const char* f : {"rows.zstd.parquet", "rows.stream.arrow", "rows.jsonl", "rows.csv", "saved"}) {
    const std::string err = error_of([&] { Reader::open(fixtures() + "/" + f, o); });
    EXPECT_NE(err.find("no column 'prompt'"), std::string::npos) << f << ": " << err;
    EXPECT_NE(err.find("id, text, score, flag"), std::string::npos) << f << ": " << err;
  }
}

TEST(Data, ListsOfFilesAndFoldersReadAsOneTable) {
  Reader r = Reader::open({fixtures() + "/rows.snappy.parquet", fixtures() + "/rows.gzip.parquet"});
  ASSERT_EQ(*r.num_rows(), 46u);
  auto b = r.rows(20, 6);  // across the two files
  ASSERT_EQ(b.rows, 6u);
  EXPECT_EQ(b.column("id").i64(2), 22);
  EXPECT_EQ(b.column("id").i64(3), 0);
  TempDir d;
  fs::copy_file(fixtures() + "/rows.jsonl", d.path + "/a.jsonl");
  fs::copy_file(fixtures() + "/rows.jsonl", d.path + "/b.jsonl");
  Reader j = Reader::open(d.path);
  EXPECT_EQ(read_all_json(j, 10)["id"].size(), 46u);
  fs::copy_file(fixtures() + "/rows.csv", d.path + "/c.csv");
  const std::string err = error_of([&] { Reader::open(d.path); });
  EXPECT_NE(err.find("one format"), std::string::npos) << err;
  const std::string none = error_of([&] { Reader::open(d.path + "/missing.parquet"); });
  EXPECT_NE(none.find("missing.parquet"), std::string::npos) << none;
}

// ---- Sharding, as the loaders shard.

TEST(Data, ShardRowsIsTheLoadersBatchSamplerShard) {
  std::vector<int64_t> order(23);
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>((i * 7) % 23);
  for (bool even : {true, false})
    for (bool drop : {true, false})
      for (int n : {1, 2, 3}) {
        for (int rank = 0; rank < n; ++rank) {
          acc::core::ShardSpec s;
          s.num_processes = n;
          s.process_index = rank;
          s.batch_size = 4;
          s.even_batches = even;
          s.drop_last = drop;
          EXPECT_EQ(acc::data::shard_rows(order, s),
                    acc::core::shard_batches(acc::core::make_batches(order, 4, drop), s));
        }
      }
  // Read through take: the rows of rank 1 of 2.
  Reader r = Reader::open(fixtures() + "/saved");
  acc::core::ShardSpec s;
  s.num_processes = 2;
  s.process_index = 1;
  s.batch_size = 3;
  const auto batches = acc::data::shard_rows(order, s);
  ASSERT_FALSE(batches.empty());
  auto b = r.take(batches[0]);
  for (size_t i = 0; i < b.rows; ++i) EXPECT_EQ(b.column("id").i64(i), batches[0][i]);
}

TEST(Data, ShardedStreamIsIterableDatasetShard) {
  for (bool drop : {false, true})
    for (bool split : {false, true})
      for (int n : {1, 2, 3}) {
        for (int rank = 0; rank < n; ++rank) {
          acc::core::ShardSpec s;
          s.num_processes = n;
          s.process_index = rank;
          s.batch_size = split ? 2 * n : 4;
          s.split_batches = split;
          s.drop_last = drop;
          // Expected: IterableShard over the ordinals (the ids of the fixture are its row numbers).
          acc::core::IterableShard want(s);
          std::vector<acc::core::Batch> expect;
          for (int64_t e = 0; e < 23; ++e)
            if (auto b = want.push(e)) expect.push_back(*b);
          if (auto b = want.finish()) expect.push_back(*b);
          Reader r = Reader::open(fixtures() + "/rows.jsonl");
          acc::data::ShardedStream stream(r, s);
          std::vector<acc::core::Batch> got;
          while (auto b = stream.next()) {
            acc::core::Batch ids;
            for (size_t i = 0; i < b->rows; ++i) ids.push_back(b->column("id").i64(i));
            got.push_back(ids);
          }
          EXPECT_EQ(got, expect) << "n " << n << " rank " << rank << " drop " << drop << " split " << split;
          EXPECT_EQ(stream.padded_real(), want.padded_real());
        }
      }
}

// ---- Bad input: a clear error, bounded memory and time, never a crash or a hang.

// Every prefix of a file (in steps) and a byte flipped at many places: opening and reading it all either works or
// throws a runtime_error (never crashes, never hangs); prefixes that cut the metadata are errors.
static void hammer(const std::string& name, bool prefix_must_fail) {
  const std::string bytes = read_file(fixtures() + "/" + name);
  TempDir d;
  const std::string ext = name.substr(name.find('.'));
  const std::string path = d.path + "/x" + ext;
  auto read_all = [&] {
    Reader r = Reader::open(path);
    size_t n = 0;
    while (auto b = r.next_batch(5))
      for (const auto& c : b->columns())
        for (size_t i = 0; i < b->rows; ++i) n += c.json(i).size();
    if (r.map_style())
      for (size_t i = 0; i < r.num_batches(); ++i) (void)r.batch(i);
    return n;
  };
  const auto start = std::chrono::steady_clock::now();
  for (size_t cut = 0; cut < bytes.size(); cut += 1 + cut / 16) {
    write_file(path, bytes.substr(0, cut));
    const std::string err = error_of(read_all);
    if (prefix_must_fail) {
      EXPECT_FALSE(err.empty()) << name << " cut at " << cut;
    }
    if (!err.empty()) {
      EXPECT_NE(err.find(path), std::string::npos) << err;
    }
  }
  std::mt19937 rng(11);
  for (int t = 0; t < 300; ++t) {
    std::string m = bytes;
    for (int k = 0; k < 1 + t % 3; ++k) m[rng() % m.size()] ^= static_cast<char>(1 + rng() % 255);
    write_file(path, m);
    (void)error_of(read_all);  // either reads or says why
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60)) << name;
}

TEST(DataBadInput, TruncatedAndCorruptParquet) {
  hammer("rows.snappy.parquet", true);
  hammer("rows.zstd.parquet", true);
  hammer("rows.gzip.parquet", true);
}

TEST(DataBadInput, TruncatedAndCorruptArrowIpc) {
  hammer("rows.file.arrow", true);
  // A stream cut at a message boundary is a shorter stream (its end marker is optional): no "must fail".
  hammer("rows.stream.arrow", false);
}

TEST(DataBadInput, ParquetFooterLyingAboutItsSize) {
  std::string bytes = read_file(fixtures() + "/rows.snappy.parquet");
  TempDir d;
  const std::string path = d.path + "/lie.parquet";
  const long before = peak_rss_kib();
  for (uint32_t len : {0x7fffffffu, static_cast<uint32_t>(bytes.size()), 12u}) {
    std::string m = bytes;
    std::memcpy(&m[m.size() - 8], &len, 4);
    write_file(path, m);
    const std::string err = error_of([&] { Reader::open(path); });
    EXPECT_NE(err.find(path), std::string::npos) << err;
  }
  // A bad page header: the bytes after the leading magic (the first page's header) overwritten.
  std::string m = bytes;
  for (size_t i = 4; i < 24; ++i) m[i] = static_cast<char>(0xff);
  write_file(path, m);
  const std::string err = error_of([&] {
    Reader r = Reader::open(path);
    while (r.next_batch(100)) {
    }
  });
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_LT(peak_rss_kib() - before, 256 * 1024);
}

// Found by fuzz_parquet_footer (tests/data/bad/): a page header that says its page is larger than 2 GiB. arrow-rs would
// allocate and zero-fill that size before finding the page corrupt; the reader checks page headers at open.
TEST(DataBadInput, ParquetPageHeaderLyingAboutItsSize) {
  const std::string path = g_root + "/tests/data/bad/page_size_lie.parquet";
  const long before = peak_rss_kib();
  const std::string err = error_of([&] {
    Reader r = Reader::open(path);
    while (r.next_batch(100)) {
    }
  });
  EXPECT_NE(err.find(path + ": corrupt Parquet file: column chunk 0 of row group 4: the page at byte 3488"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("pages of more than " + std::to_string(acc::limits::kDataPageBytes)), std::string::npos) << err;
  EXPECT_LT(peak_rss_kib() - before, 64 * 1024);
}

// Found by fuzz_parquet_footer (tests/data/bad/): a corrupt page whose strings arrow-rs decoded into an array with
// bytes that are not UTF-8 and offsets past its buffer (reading a cell read past the end): batches from Parquet are
// validated whole, by the typed readers and by take().
TEST(DataBadInput, ParquetPageDecodingToAnInvalidArray) {
  const std::string path = g_root + "/tests/data/bad/string_offsets.parquet";
  std::string err = error_of([&] {
    Reader r = Reader::open(path);
    while (auto b = r.next_batch(64))
      for (size_t i = 0; i < b->rows; ++i) (void)b->column("text").json(i);
  });
  EXPECT_NE(err.find(path + ": corrupt file: column 'text'"), std::string::npos) << err;
  err = error_of([&] {
    Reader r = Reader::open(path);
    for (int64_t i = 0; i < static_cast<int64_t>(*r.num_rows()); ++i) (void)r.take({i}).column("text").json(0);
  });
  EXPECT_EQ(err.find(path + ": "), 0u) << err;  // row by row, arrow-rs finds another inconsistency first
}

// Found by fuzz_parquet_footer (tests/data/bad/): page headers that made the check of page headers itself slow (a list
// of booleans, each a byte of its own in thrift's compact lists, counted as none; column chunks overlapping).
TEST(DataBadInput, ParquetPageHeadersThatDoNotParse) {
  const std::string path = g_root + "/tests/data/bad/page_header_list.parquet";
  const auto start = std::chrono::steady_clock::now();
  const std::string err = error_of([&] { Reader::open(path); });
  EXPECT_NE(err.find(path + ": corrupt Parquet file: column chunk 4 of row group 2: a bad page header"),
            std::string::npos)
      << err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// LZ4 and brotli are not built in (pyarrow, datasets and transformers write snappy, zstd or gzip): such pages are
// refused naming the file and the codec (bad/rows.{lz4,brotli}.parquet, tests/data/make_fixtures.py refused()).
TEST(DataBadInput, ParquetCodecsNotBuiltInAreRefusedByName) {
  for (const std::string codec : {"LZ4", "BROTLI"}) {
    std::string lower = codec;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string path = g_root + "/tests/data/bad/rows." + lower + ".parquet";
    const std::string err = error_of([&] {
      Reader r = Reader::open(path);
      while (r.next_batch(100)) {
      }
    });
    EXPECT_NE(err.find(path), std::string::npos) << err;
    EXPECT_NE(err.find(codec), std::string::npos) << err;
  }
}

TEST(DataBadInput, ArrowIpcLyingAboutLengths) {
  const std::string bytes = read_file(fixtures() + "/rows.stream.arrow");
  TempDir d;
  const std::string path = d.path + "/lie.arrow";
  const long before = peak_rss_kib();
  // The schema message's metadata length (after the continuation marker): huge, negative.
  for (int32_t len : {0x7fffffff, -5, 1 << 30}) {
    std::string m = bytes;
    std::memcpy(&m[4], &len, 4);
    write_file(path, m);
    const std::string err = error_of([&] { Reader::open(path); });
    EXPECT_NE(err.find(path), std::string::npos) << err;
  }
  // The footer of the file format: its length.
  const std::string file = read_file(fixtures() + "/rows.file.arrow");
  for (int32_t len : {0x7fffffff, -1, 3}) {
    std::string m = file;
    std::memcpy(&m[m.size() - 10], &len, 4);
    write_file(path, m);
    const std::string err = error_of([&] { Reader::open(path); });
    EXPECT_NE(err.find(path), std::string::npos) << err;
  }
  EXPECT_LT(peak_rss_kib() - before, 256 * 1024);
}

TEST(DataBadInput, JsonlLinesThatAreNotJsonOrNotUtf8NameFileAndLine) {
  TempDir d;
  const std::string path = d.path + "/bad.jsonl";
  write_file(path, "{\"a\": 1}\n{\"a\": 2}\n{\"a\": 3,}\n");
  std::string err = error_of([&] {
    Reader r = Reader::open(path);
    while (r.next_batch(10)) {
    }
  });
  EXPECT_NE(err.find(path + ": line 3 is not JSON"), std::string::npos) << err;
  write_file(path, "{\"a\": \"x\"}\n{\"a\": \"\xff\xfe\"}\n");
  err = error_of([&] { Reader::open(path); });
  EXPECT_NE(err.find(path + ": line 2 is not UTF-8"), std::string::npos) << err;
  write_file(path, "{\"a\": 1}\n[1, 2]\n");
  err = error_of([&] { Reader::open(path); });
  EXPECT_NE(err.find("line 2 is not a JSON object"), std::string::npos) << err;
  write_file(path, "[\n  {\"a\": 1}\n]\n");
  err = error_of([&] { Reader::open(path); });
  EXPECT_NE(err.find("line 1 is not JSON"), std::string::npos) << err;
  EXPECT_NE(err.find("a JSON array: this reader reads JSON lines"), std::string::npos) << err;
  // A line past the lines the columns were inferred from that does not fit them.
  std::string text;
  for (size_t i = 0; i < acc::limits::kDataInferLines + 5; ++i) text += "{\"a\": " + std::to_string(i) + "}\n";
  text += "{\"a\": \"seven\"}\n";
  write_file(path, text);
  err = error_of([&] {
    Reader r = Reader::open(path);
    while (r.next_batch(1000)) {
    }
  });
  EXPECT_NE(err.find("line " + std::to_string(acc::limits::kDataInferLines + 6)), std::string::npos) << err;
  EXPECT_NE(err.find("a: int64"), std::string::npos) << err;
}

// A line of 1 GiB (a sparse file: no disk, and the reader must not hold it): refused past the limit of one record,
// with memory and time bounded.
TEST(DataBadInput, AGigabyteLineIsRefusedInBoundedMemory) {
  TempDir d;
  for (const char* name : {"/long.jsonl", "/long.csv"}) {
    const std::string path = d.path + name;
    {
      std::ofstream f(path, std::ios::binary);
      f << (std::string(name) == "/long.csv" ? "text\n\"" : "{\"text\": \"");
    }
    ASSERT_EQ(truncate(path.c_str(), off_t{1} << 30), 0);
    {
      std::ofstream f(path, std::ios::binary | std::ios::app);
      f << "\"}\n";
    }
    const long before = peak_rss_kib();
    const auto start = std::chrono::steady_clock::now();
    const std::string err = error_of([&] {
      Reader r = Reader::open(path);
      while (r.next_batch(10)) {
      }
    });
    EXPECT_NE(err.find(path), std::string::npos) << err;
    EXPECT_NE(err.find("longer than " + std::to_string(acc::limits::kDataLineBytes)), std::string::npos) << err;
    EXPECT_LT(peak_rss_kib() - before, 3 * static_cast<long>(acc::limits::kDataLineBytes / 1024)) << name;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << name;
  }
}

TEST(DataBadInput, AFifoIsRefusedWithoutWaiting) {
  TempDir d;
  const std::string path = d.path + "/pipe.jsonl";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  const std::string err = error_of([&] { Reader::open(path); });  // a blocking open would hang here
  EXPECT_NE(err.find("not a regular file"), std::string::npos) << err;
  const std::string err2 = error_of([&] { Reader::open(std::vector<std::string>{"/dev/zero"}); });
  EXPECT_NE(err2.find("not a regular file"), std::string::npos) << err2;
}

TEST(DataBadInput, FoldersThatAreNotDatasets) {
  TempDir d;
  EXPECT_NE(error_of([&] { Reader::open(d.path); }).find("no state.json"), std::string::npos);
  write_file(d.path + "/state.json", "{\"_data_files\": [{\"filename\": \"../../etc/passwd\"}]}");
  EXPECT_NE(error_of([&] { Reader::open(d.path); }).find("leaves the folder"), std::string::npos);
  write_file(d.path + "/state.json", "{\"_data_files\": [{\"filename\": \"data-00000-of-00001.arrow\"}]}");
  EXPECT_NE(error_of([&] { Reader::open(d.path); }).find("data-00000-of-00001.arrow"), std::string::npos);
  fs::remove(d.path + "/state.json");
  write_file(d.path + "/dataset_dict.json", "{\"splits\": [\"train\"]}");
  fs::create_directory(d.path + "/train");
  EXPECT_NE(error_of([&] { Reader::open(d.path); }).find("DatasetDict folder; open one of its splits: train"),
            std::string::npos);
}

TEST(DataBadInput, CellsOfTheWrongTypeSayWhich) {
  Reader r = Reader::open(fixtures() + "/rows.stream.arrow");
  auto b = r.next_batch(3);
  ASSERT_TRUE(b);
  std::string err = error_of([&] { (void)b->column("id").str(0); });
  EXPECT_NE(err.find("column 'id' (int64), row 0"), std::string::npos) << err;
  EXPECT_NE(err.find("not a string"), std::string::npos) << err;
  err = error_of([&] { (void)b->column("messages").int_list(0); });
  EXPECT_NE(err.find("not a list of integers"), std::string::npos) << err;
  err = error_of([&] { (void)b->column("id").i64(3); });
  EXPECT_NE(err.find("row 3"), std::string::npos) << err;
}

int main(int argc, char** argv) {
  g_root = argc > 1 && argv[1][0] != '-' ? argv[1] : ".";  // before InitGoogleTest: the fixtures' names are params
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
