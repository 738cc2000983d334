// Preprocessing (src/data/prep) against what datasets, transformers' collators and TRL make of the same rows
// (prep/expected/*.json, by make_prep_fixtures.py): every processed dataset and every batch, element for element, on
// one thread and on three. The tiny committed tokenizer always; the real ones where fetch_tokenizers.sh put them.
// Then the cache, and errors that name their culprit. Torch-free.
// usage: test_prep SOURCE_ROOT CACHE_DIR [gtest flags]
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "acc/files.hpp"
#include "acc/json.hpp"
#include "data/prep/from_files.hpp"
#include "data/prep/prep.hpp"
#include "text/tokenizer.hpp"

namespace {
namespace fs = std::filesystem;
using namespace acc;
using data::Examples;
using data::Table;

std::string g_root, g_cache;

std::vector<int64_t> ints(const json::Value& v) {
  std::vector<int64_t> out;
  for (const auto& e : v.elements()) out.push_back(e.as_int());
  return out;
}

// A JSONL file's rows as cells of JSON text (what the file readers' Column::json gives).
Table read_jsonl(const std::string& path) {
  Table t;
  std::ifstream in(path);
  std::string line;
  std::vector<std::vector<std::string>> cells;
  size_t n = 0;
  while (std::getline(in, line)) {
    json::Document doc(line, path + " line " + std::to_string(++n));
    auto items = doc.root().items();
    if (t.names.empty())
      for (const auto& item : items) t.names.push_back(item.first);
    cells.resize(t.names.size());
    for (size_t c = 0; c < items.size(); ++c) cells[c].push_back(items[c].second.text());
  }
  t.cells = std::move(cells);
  return t;
}

void expect_dataset(const json::Value& expected, const Examples& got) {
  for (const auto& [name, rows] : expected.items()) {
    SCOPED_TRACE("column " + name);
    const auto* col = got.find(name);
    ASSERT_TRUE(col) << "missing";
    ASSERT_EQ(col->rows(), rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      auto row = col->row(r);
      EXPECT_EQ(std::vector<int64_t>(row.begin(), row.end()), ints(rows.at(r))) << "row " << r;
    }
  }
  EXPECT_EQ(got.names.size(), expected.keys().size());
}

void expect_batch(const json::Value& expected, const data::Batch& got) {
  for (const auto& [name, m] : expected.items()) {
    SCOPED_TRACE("field " + name);
    const auto* g = got.find(name);
    ASSERT_TRUE(g) << "missing";
    EXPECT_EQ(g->shape, ints(m.get("shape")));
    EXPECT_EQ(g->data, ints(m.get("data")));
  }
  EXPECT_EQ(got.fields.size(), expected.keys().size());
}

template <class Collate>
void expect_batches(const json::Value& collated, const Examples& ex, size_t batch_size, Collate collate) {
  auto batches = collated.get("batches");
  size_t b = 0;
  for (size_t first = 0; first < ex.rows(); first += batch_size, ++b) {
    SCOPED_TRACE("batch " + std::to_string(b));
    std::vector<size_t> rows;
    for (size_t r = first; r < std::min(ex.rows(), first + batch_size); ++r) rows.push_back(r);
    ASSERT_LT(b, batches.size());
    expect_batch(batches.at(b), collate(rows));
  }
  EXPECT_EQ(b, batches.size());
}

data::PadSide side_of(const json::Value& c) {
  return c.get_string("padding_side") == "left" ? data::PadSide::Left : data::PadSide::Right;
}

std::optional<size_t> multiple_of(const json::Value& c) {
  if (!c.has_value("pad_to_multiple_of")) return std::nullopt;
  return static_cast<size_t>(c.get_int("pad_to_multiple_of"));
}

// The transformers collator a case names.
void check_hf_collated(const json::Value& collated, const Examples& ex, const text::Tokenizer& tok, size_t batch_size) {
  for (const auto& c : collated.elements()) {
    const std::string kind = c.get_string("collator");
    SCOPED_TRACE("collator " + kind + " " + c.text().substr(0, 90));
    if (kind == "default") {
      expect_batches(c, ex, batch_size,
                     [&](const std::vector<size_t>& rows) { return data::collate_default(ex, rows); });
      continue;
    }
    data::PadOptions o = data::pad_options(tok);
    o.padding_side = side_of(c);
    o.pad_to_multiple_of = multiple_of(c);
    if (kind == "with_padding")
      expect_batches(c, ex, batch_size,
                     [&](const std::vector<size_t>& rows) { return data::collate_with_padding(ex, rows, o); });
    else if (kind == "language_modeling")
      expect_batches(c, ex, batch_size,
                     [&](const std::vector<size_t>& rows) { return data::collate_language_modeling(ex, rows, o); });
    else ADD_FAILURE() << "unknown collator " << kind;
  }
}

data::SftOptions sft_options(const json::Value& c) {
  auto a = c.get("args");
  data::SftOptions o;
  o.max_length = a.has_value("max_length") ? std::optional<size_t>(a.get_int("max_length")) : std::nullopt;
  o.truncation_mode = a.get_string("truncation_mode") == "keep_end" ? data::TruncationMode::KeepEnd
                                                                    : data::TruncationMode::KeepStart;
  o.packing = a.get_bool("packing");
  const std::string s = a.get_string("packing_strategy");
  o.packing_strategy = s == "wrapped"     ? data::PackingStrategy::Wrapped
                       : s == "bfd_split" ? data::PackingStrategy::BfdSplit
                                          : data::PackingStrategy::Bfd;
  if (a.has_value("completion_only_loss")) o.completion_only_loss = a.get_bool("completion_only_loss");
  o.assistant_only_loss = a.get_bool("assistant_only_loss");
  if (c.has_value("chat_template")) o.chat_template = c.get_string("chat_template");
  o.padding_free = a.get_bool("padding_free");
  return o;
}

std::string folder_of(const json::Value& root) {
  std::string f = root.get_string("folder");
  if (f.rfind("<cache>/", 0) == 0) return g_cache + "/" + f.substr(8);
  return g_root + "/" + f;
}

class Prep : public ::testing::TestWithParam<std::string> {};

TEST_P(Prep, EqualHuggingFace) {
  const std::string file = g_root + "/tests/data/prep/expected/" + GetParam() + ".json";
  json::Document doc(config::read_file(file), file);
  auto root = doc.root();
  const std::string folder = folder_of(root);
  if (!fs::is_directory(folder)) GTEST_SKIP() << folder << " missing (tests/text/fetch_tokenizers.sh fetches it)";
  auto tok = text::Tokenizer::from_pretrained(folder);
  if (root.has_value("pad_token_set")) tok->set_special_token("pad_token", root.get_string("pad_token_set"));
  const size_t batch_size = root.get_int("batch_size");
  const int64_t now_unix = root.get_int("now_unix");  // the day the fixture's templates printed
  std::map<std::string, Table> inputs;
  auto input = [&](const std::string& name) -> const Table& {
    if (!inputs.count(name)) {
      // Through the file readers, as a job reads them; the same rows as the JSON lines parsed one by one.
      auto reader = data::Reader::open(g_root + "/tests/data/prep/" + name);
      inputs[name] = data::read_table(reader);
      const Table direct = read_jsonl(g_root + "/tests/data/prep/" + name);
      EXPECT_EQ(inputs[name].names, direct.names);
      EXPECT_EQ(inputs[name].rows(), direct.rows());
    }
    return inputs[name];
  };
  int n = 0;
  for (const auto& c : root.get("cases").elements()) {
    const std::string kind = c.get_string("kind");
    SCOPED_TRACE(GetParam() + " case " + std::to_string(n++) + " " + kind + " " + c.get_string("input") + " " +
                 c.get("args").text());
    const Table& rows = input(c.get_string("input"));
    for (size_t threads : {1, 3}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      data::RunOptions run{threads};
      if (kind == "tokenize") {
        auto a = c.get("args");
        data::TokenizeOptions o;
        o.column = c.get_string("column");
        o.truncation = a.get_bool("truncation");
        if (a.has_value("max_length")) o.max_length = a.get_int("max_length");
        o.add_special_tokens = a.get_bool("add_special_tokens");
        Examples ex = data::tokenize(*tok, rows, o, run);
        expect_dataset(c.get("dataset"), ex);
        check_hf_collated(c.get("collated"), ex, *tok, batch_size);
      } else if (kind == "group_texts") {
        data::TokenizeOptions t;
        t.column = c.get_string("column");
        data::GroupOptions g;
        g.block_size = c.get("args").get_int("block_size");
        Examples ex = data::group_texts(data::tokenize(*tok, rows, t, run), g);
        expect_dataset(c.get("dataset"), ex);
        check_hf_collated(c.get("collated"), ex, *tok, batch_size);
      } else if (kind == "sft") {
        data::SftOptions sft = sft_options(c);
        sft.now_unix = now_unix;
        Examples ex = data::sft_prepare(*tok, rows, sft, run);
        expect_dataset(c.get("dataset"), ex);
        for (const auto& col : c.get("collated").elements()) {
          SCOPED_TRACE("collator " + col.text().substr(0, 90));
          data::TrlCollatorOptions o = data::trl_collator_options(*tok, sft);
          EXPECT_EQ(o.pad_token_id, c.get_int("pad_token_id"));
          EXPECT_EQ(o.padding_free, col.get_bool("padding_free"));
          o.pad_to_multiple_of = multiple_of(col);
          o.padding_side = side_of(col);
          expect_batches(col, ex, batch_size,
                         [&](const std::vector<size_t>& r) { return data::collate_trl(ex, r, o); });
        }
      } else {
        ADD_FAILURE() << "unknown case kind " << kind;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Data, Prep, ::testing::Values("tiny_bytebpe", "llama3", "gemma", "qwen3"));

std::shared_ptr<text::Tokenizer> tiny() {
  return text::Tokenizer::from_pretrained(g_root + "/tests/text/tiny/bytebpe");
}

Table text_rows(std::vector<std::string> texts) {
  Table t;
  std::vector<std::string> cells;
  for (const auto& s : texts) cells.push_back(json::quote(s));
  t.add("text", std::move(cells));
  return t;
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// Rows go to the threads in chunks (prep_internal.hpp run_chunked, 256 rows each): on many chunks the result is the
// one thread's, and of two bad rows in different chunks the first is named, whatever thread met which.
TEST(PrepThreads, ChunksJoinInRowOrderAndTheFirstErrorIsNamed) {
  auto tok = tiny();
  std::vector<std::string> texts;
  for (int i = 0; i < 1000; ++i) texts.push_back("row " + std::to_string(i) + std::string(i % 37, 'x'));
  Table t = text_rows(texts);
  const Examples one = data::tokenize(*tok, t, {}, data::RunOptions{1});
  ASSERT_EQ(one.rows(), 1000u);
  for (size_t threads : {2, 3, 8}) EXPECT_EQ(data::tokenize(*tok, t, {}, data::RunOptions{threads}), one) << threads;
  t.cells[0][300] = "null";
  t.cells[0][900] = "null";
  for (size_t threads : {1, 3})
    EXPECT_NE(error_of([&] { data::tokenize(*tok, t, {}, data::RunOptions{threads}); }).find("column 'text' row 300"),
              std::string::npos)
        << threads;
}

TEST(PrepErrors, NameTheCulprit) {
  auto tok = tiny();
  Table t = text_rows({"fine", "also fine"});
  t.cells[0][1] = "null";
  EXPECT_NE(error_of([&] { data::tokenize(*tok, t, {}); }).find("column 'text' row 1"), std::string::npos);
  data::TokenizeOptions o;
  o.column = "body";
  const auto missing = error_of([&] { data::tokenize(*tok, t, o); });
  EXPECT_NE(missing.find("'body'"), std::string::npos) << missing;
  EXPECT_NE(missing.find("'text'"), std::string::npos) << missing;  // the columns there are
  // Assistant-only loss with a template that marks no assistant tokens (TRL's RuntimeError), naming the row.
  Table chat;
  chat.add("messages", {R"([{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}])"});
  data::SftOptions s;
  s.assistant_only_loss = true;
  s.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
  const auto no_marks = error_of([&] { data::sft_prepare(*tok, chat, s); });
  EXPECT_NE(no_marks.find("column 'messages' row 0"), std::string::npos) << no_marks;
  // ... and on data that is not conversational.
  EXPECT_NE(error_of([&] { data::sft_prepare(*tok, text_rows({"a"}), s); }).find("not conversational"),
            std::string::npos);
  // A row in another form than the first.
  Table mixed;
  mixed.add("messages", {chat.cells[0][0], json::quote("plain text")});
  EXPECT_NE(error_of([&] { data::sft_prepare(*tok, mixed, {}); }).find("column 'messages' row 1"), std::string::npos);
  // Padding without a pad token.
  Examples ex = data::tokenize(*tok, text_rows({"a", "bcd"}), {});
  data::PadOptions p;
  const std::vector<size_t> rows{0, 1};
  EXPECT_NE(error_of([&] { data::collate_with_padding(ex, rows, p); }).find("no pad token"), std::string::npos);
  // Ragged rows in default_data_collator name the column.
  EXPECT_NE(error_of([&] { data::collate_default(ex, rows); }).find("'input_ids'"), std::string::npos);
}

TEST(PrepPack, BestFitDecreasing) {
  // TRL's own docstring example of pack_dataset (trl/data_utils.py), by hand.
  Examples ex;
  auto& ids = ex.add("input_ids");
  auto& mask = ex.add("attention_mask");
  ids.push(std::vector<int64_t>{1, 2, 3, 4, 5});
  ids.push(std::vector<int64_t>{6, 7});
  ids.push(std::vector<int64_t>{8, 9, 10});
  ids.push(std::vector<int64_t>{11});
  mask.push(std::vector<int64_t>{1, 1, 1, 0, 0});
  mask.push(std::vector<int64_t>{1, 0});
  mask.push(std::vector<int64_t>{1, 1, 0});
  mask.push(std::vector<int64_t>{1});
  auto rows = [](const data::SeqColumn& c) {
    std::vector<std::vector<int64_t>> out;
    for (size_t r = 0; r < c.rows(); ++r) out.emplace_back(c.row(r).begin(), c.row(r).end());
    return out;
  };
  using V = std::vector<std::vector<int64_t>>;
  auto bfd = data::pack(ex, 4, data::PackingStrategy::Bfd);
  EXPECT_EQ(rows(bfd.column("input_ids")), (V{{1, 2, 3, 4}, {8, 9, 10, 11}, {6, 7}}));
  EXPECT_EQ(rows(bfd.column("attention_mask")), (V{{1, 1, 1, 0}, {1, 1, 0, 1}, {1, 0}}));
  EXPECT_EQ(rows(bfd.column("seq_lengths")), (V{{4}, {3, 1}, {2}}));
  auto split = data::pack(ex, 4, data::PackingStrategy::BfdSplit);
  EXPECT_EQ(rows(split.column("input_ids")), (V{{1, 2, 3, 4}, {8, 9, 10, 5}, {6, 7, 11}}));
  EXPECT_EQ(rows(split.column("seq_lengths")), (V{{4}, {3, 1}, {2, 1}}));
  auto wrapped = data::pack(ex, 4, data::PackingStrategy::Wrapped);
  EXPECT_EQ(rows(wrapped.column("input_ids")), (V{{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11}}));
  EXPECT_FALSE(wrapped.find("seq_lengths"));
  // Within map batches: two rows per batch pack alone.
  auto batched = data::pack(ex, 4, data::PackingStrategy::Wrapped, 2);
  EXPECT_EQ(rows(batched.column("input_ids")), (V{{1, 2, 3, 4}, {5, 6, 7}, {8, 9, 10, 11}}));
}

TEST(PrepCache, BuildsOnceRebuildsDamageRefusesForeign) {
  auto tok = tiny();
  const std::string dir = fs::temp_directory_path() / ("acc-prep-cache-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Table t = text_rows({"one", "two words", "three words here"});
  int builds = 0;
  auto build = [&] {
    ++builds;
    return data::tokenize(*tok, t, {});
  };
  const std::string key = "test " + data::fingerprint_tokenizer(*tok) + data::settings_key(data::TokenizeOptions{});
  Examples first = data::cached(dir, key, build);
  Examples second = data::cached(dir, key, build);
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(first, second);
  EXPECT_EQ(first, build());
  builds = 0;
  // Another key is another file.
  data::cached(dir, key + " other", build);
  EXPECT_EQ(builds, 1);
  // A flipped byte: reported, rebuilt, replaced.
  const std::string path = data::cache_path(dir, key);
  std::string bytes = config::read_file(path);
  bytes[bytes.size() / 2] ^= 0x5a;
  config::write_file_atomic(path, bytes);
  builds = 0;
  EXPECT_EQ(data::cached(dir, key, build), first);
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(data::cached(dir, key, build), first);
  EXPECT_EQ(builds, 1);
  // Cut short: the same.
  config::write_file_atomic(path, config::read_file(path).substr(0, 20));
  EXPECT_EQ(data::cached(dir, key, build), first);
  EXPECT_EQ(builds, 2);
  // Not ours: refused and left as it was.
  config::write_file_atomic(path, "somebody's notes");
  const auto err = error_of([&] { data::cached(dir, key, build); });
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_EQ(config::read_file(path), "somebody's notes");
  fs::remove_all(dir);
}

TEST(PrepCache, FingerprintsFollowTheFiles) {
  const std::string dir = fs::temp_directory_path() / ("acc-prep-fp-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string f = dir + "/a.jsonl";
  config::write_file_atomic(f, "{\"text\": \"a\"}\n");
  const auto before = data::fingerprint_files({f}, true);
  EXPECT_EQ(before, data::fingerprint_files({f}, true));
  config::write_file_atomic(f, "{\"text\": \"b\"}\n");
  EXPECT_NE(before, data::fingerprint_files({f}, true));
  data::SftOptions packed;
  packed.packing = true;
  EXPECT_NE(data::settings_key(data::SftOptions{}), data::settings_key(packed));
  fs::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    fprintf(stderr, "usage: test_prep SOURCE_ROOT CACHE_DIR\n");
    return 2;
  }
  g_root = argv[1];
  g_cache = argv[2];
  return RUN_ALL_TESTS();
}
