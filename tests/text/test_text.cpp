// Tokenizers and chat templates against transformers' own outputs (expected/*.json, made by make_fixtures.py
// from real tokenizer files fetched by fetch_tokenizers.sh and the tiny ones in tiny/). Torch-free.
// usage: test_text SOURCE_ROOT CACHE_DIR [gtest flags]
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <thread>

#include "acc/files.hpp"
#include "acc/json.hpp"
#include "text/chat_template.hpp"
#include "text/streamer.hpp"
#include "text/tokenizer.hpp"

namespace {
namespace fs = std::filesystem;
using namespace acc;
using text::Tokenizer;

std::string g_root, g_cache;

std::vector<int64_t> ints(const json::Value& v) {
  std::vector<int64_t> out;
  for (const auto& e : v.elements()) out.push_back(e.as_int());
  return out;
}

std::string folder_of(const json::Value& fixture) {
  std::string f = fixture.get_string("folder");
  if (f.rfind("<cache>/", 0) == 0) return g_cache + "/" + f.substr(8);
  return g_root + "/" + f;
}

struct Fixture {
  std::string name;
  std::unique_ptr<json::Document> doc;
  std::shared_ptr<Tokenizer> tok;
};

Fixture load(const std::string& name) {
  Fixture f;
  f.name = name;
  f.doc = std::make_unique<json::Document>(config::read_file(g_root + "/tests/text/expected/" + name + ".json"), name);
  f.tok = Tokenizer::from_pretrained(folder_of(f.doc->root()));
  return f;
}

// A batch case's arguments as transformers' __call__ took them.
text::EncodeOptions batch_options(const json::Value& c) {
  text::EncodeOptions o;
  auto args = c.get("args");
  o.add_special_tokens = args.get_bool_or("add_special_tokens", true);
  if (auto p = args.find("padding")) {
    if (p->is_bool()) o.padding = p->as_bool() ? text::Padding::Longest : text::Padding::None;
    else o.padding = p->as_string() == "max_length" ? text::Padding::MaxLength : text::Padding::Longest;
  }
  if (auto t = args.find("truncation")) {
    if (t->is_bool()) o.truncation = t->as_bool() ? text::Truncation::LongestFirst : text::Truncation::None;
    else if (t->as_string() == "only_first") o.truncation = text::Truncation::OnlyFirst;
    else if (t->as_string() == "only_second") o.truncation = text::Truncation::OnlySecond;
    else o.truncation = text::Truncation::LongestFirst;
  }
  if (args.has_value("max_length")) o.max_length = args.get_int("max_length");
  o.stride = args.get_int_or("stride", 0);
  if (args.has_value("pad_to_multiple_of")) o.pad_to_multiple_of = args.get_int("pad_to_multiple_of");
  o.return_overflowing_tokens = args.get_bool_or("return_overflowing_tokens", false);
  auto over = c.get("tokenizer_overrides");
  if (over.has_value("padding_side"))
    o.padding_side = over.get_string("padding_side") == "left" ? text::Side::Left : text::Side::Right;
  if (over.has_value("truncation_side"))
    o.truncation_side = over.get_string("truncation_side") == "left" ? text::Side::Left : text::Side::Right;
  return o;
}

class Tokenizers : public ::testing::TestWithParam<std::string> {};

TEST_P(Tokenizers, EqualTransformers) {
  Fixture f = load(GetParam());
  const Tokenizer& tok = *f.tok;
  auto root = f.doc->root();
  // The vocabulary and the special tokens.
  auto vocab = root.get("vocab");
  EXPECT_EQ(tok.vocab_size(), static_cast<size_t>(vocab.get_int("vocab_size")));
  EXPECT_EQ(tok.size(), static_cast<size_t>(vocab.get_int("len")));
  auto unk = tok.special_token_id("unk_token");
  for (const auto& [token, id] : vocab.get("token_to_id").items()) {
    auto got = tok.token_to_id(token);
    if (!got) got = unk;
    if (id.is_null()) {
      EXPECT_FALSE(got) << token;
    } else EXPECT_EQ(got.value_or(-1), id.as_int()) << token;
  }
  for (const auto& [id, token] : vocab.get("id_to_token").items())
    EXPECT_EQ(tok.id_to_token(std::stoll(id)).value_or("<none>"), token.as_string()) << id;
  std::vector<std::string> all;
  for (const auto& t : vocab.get("all_special_tokens").elements()) all.push_back(t.as_string());
  EXPECT_EQ(tok.all_special_tokens(), all);
  EXPECT_EQ(tok.all_special_ids(), ints(vocab.get("all_special_ids")));

  int encodes = 0, batches = 0;
  for (const auto& c : root.get("cases").elements()) {
    const std::string kind = c.get_string("kind"), name = c.get_string("name");
    SCOPED_TRACE(f.name + " " + kind + " " + name);
    if (kind == "encode") {
      ++encodes;
      text::EncodeOptions o;
      o.add_special_tokens = c.get_bool("add_special_tokens");
      const std::string t = c.get_string("text");
      const std::string p = c.get("pair").is_null() ? "" : c.get_string("pair");
      std::vector<std::string_view> texts{t}, pairs{p};
      // transformers' single call drops an empty pair (`if text_pair`).
      auto e = tok.encode_batch(texts, p.empty() ? nullptr : &pairs, o).at(0);
      EXPECT_EQ(e.ids, ints(c.get("ids")));
      EXPECT_EQ(e.type_ids, ints(c.get("type_ids")));
      EXPECT_EQ(e.attention_mask, ints(c.get("attention_mask")));
      EXPECT_EQ(e.special_tokens_mask, ints(c.get("special_tokens_mask")));
      auto offsets = c.get("offsets_bytes");
      ASSERT_EQ(e.offsets.size(), offsets.size());
      for (size_t i = 0; i < e.offsets.size(); ++i) {
        EXPECT_EQ(static_cast<int64_t>(e.offsets[i].first), offsets.at(i).at(0).as_int()) << "token " << i;
        EXPECT_EQ(static_cast<int64_t>(e.offsets[i].second), offsets.at(i).at(1).as_int()) << "token " << i;
      }
      auto ids = ints(c.get("ids"));
      EXPECT_EQ(tok.decode(ids, false), c.get_string("decode"));
      EXPECT_EQ(tok.decode(ids, true), c.get_string("decode_skip_special"));
      auto tokens = c.get("tokens");
      for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(tok.id_to_token(ids[i]).value_or(""), tokens.at(i).as_string());
    } else if (kind == "batch") {
      ++batches;
      std::vector<std::string> texts, pairs;
      for (const auto& t : c.get("texts").elements()) texts.push_back(t.as_string());
      if (!c.get("pairs").is_null())
        for (const auto& t : c.get("pairs").elements()) pairs.push_back(t.as_string());
      std::vector<std::string_view> tv(texts.begin(), texts.end()), pv(pairs.begin(), pairs.end());
      auto over = c.get("tokenizer_overrides");
      std::shared_ptr<Tokenizer> use = f.tok;
      if (over.has_value("pad_token")) {
        use = Tokenizer::from_pretrained(folder_of(root));
        use->set_special_token("pad_token", over.get_string("pad_token"));
      }
      text::EncodeOptions o = batch_options(c);
      if (c.has_value("error")) {
        EXPECT_THROW(use->encode_batch(tv, pairs.empty() ? nullptr : &pv, o), std::invalid_argument);
        continue;
      }
      auto encs = use->encode_batch(tv, pairs.empty() ? nullptr : &pv, o);
      text::EncodeOptions threaded = o;
      threaded.threads = 2;  // the rayon path gives the same rows in the same order
      auto encs2 = use->encode_batch(tv, pairs.empty() ? nullptr : &pv, threaded);
      ASSERT_EQ(encs2.size(), encs.size());
      for (size_t i = 0; i < encs.size(); ++i) EXPECT_EQ(encs2[i].ids, encs[i].ids) << "row " << i << " on 2 threads";
      auto want = c.get("input_ids");
      ASSERT_EQ(encs.size(), want.size());
      for (size_t i = 0; i < encs.size(); ++i) {
        EXPECT_EQ(encs[i].ids, ints(want.at(i))) << "row " << i;
        EXPECT_EQ(encs[i].attention_mask, ints(c.get("attention_mask").at(i))) << "row " << i;
        if (c.has_value("token_type_ids")) {
          EXPECT_EQ(encs[i].type_ids, ints(c.get("token_type_ids").at(i))) << "row " << i;
        }
        if (c.has_value("overflow_to_sample_mapping")) {
          EXPECT_EQ(static_cast<int64_t>(encs[i].sample), c.get("overflow_to_sample_mapping").at(i).as_int());
        }
      }
    } else if (kind == "stream") {
      auto sargs = c.get("streamer_args");
      text::TextStream stream(tok, sargs.get_bool_or("skip_special_tokens", false));
      auto pieces = c.get("pieces_per_put");
      auto gen = ints(c.get("generated_ids"));
      ASSERT_EQ(gen.size(), pieces.size());
      for (size_t i = 0; i < gen.size(); ++i) EXPECT_EQ(stream.put(gen[i]), pieces.at(i).as_string()) << "token " << i;
      EXPECT_EQ(stream.end(), c.get_string("final_piece"));
    }
  }
  EXPECT_GT(encodes, 10);
  EXPECT_GT(batches, 3);
}

// save_pretrained, then from_pretrained again: the same ids on every encode case. The folders stay in
// $ACC_TEXT_SAVE_DIR when set (check_saved.py loads them with transformers' AutoTokenizer).
TEST_P(Tokenizers, SavedFolderLoadsBack) {
  Fixture f = load(GetParam());
  const char* keep = std::getenv("ACC_TEXT_SAVE_DIR");
  const std::string dir = std::string(keep ? keep : ::testing::TempDir()) + "/saved_" + f.name;
  fs::create_directories(dir);
  f.tok->save_pretrained(dir);
  auto back = Tokenizer::from_pretrained(dir);
  EXPECT_EQ(back->all_special_tokens(), f.tok->all_special_tokens());
  EXPECT_EQ(back->chat_templates(), f.tok->chat_templates());
  int compared = 0;
  for (const auto& c : f.doc->root().get("cases").elements()) {
    if (c.get_string("kind") != "encode" || !c.get("pair").is_null()) continue;
    text::EncodeOptions o;
    o.add_special_tokens = c.get_bool("add_special_tokens");
    EXPECT_EQ(back->encode(c.get_string("text"), o).ids, ints(c.get("ids"))) << c.get_string("name");
    ++compared;
  }
  EXPECT_GT(compared, 10);
  if (!keep) fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Tokenizers,
                         ::testing::Values("llama3", "qwen3", "gemma", "mistral", "gpt2", "tiny_bytebpe", "tiny_spbpe",
                                           "tiny_wordpiece", "tiny_unigram"));

// The fixtures' strftime_now time: a local time, as transformers' datetime.now().
int64_t fixed_now(const std::string& iso) {
  std::tm tm{};
  sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec);
  tm.tm_year -= 1900, tm.tm_mon -= 1, tm.tm_isdst = -1;
  return static_cast<int64_t>(std::mktime(&tm));
}

class ChatTemplates : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplates, EqualTransformers) {
  json::Document doc(config::read_file(g_root + "/tests/text/expected/" + GetParam() + ".json"), GetParam());
  auto root = doc.root();
  auto tok = Tokenizer::from_pretrained(folder_of(root));
  const int64_t now = root.has_value("fixed_now") ? fixed_now(root.get_string("fixed_now")) : -1;
  int checked = 0;
  for (const auto& c : root.get("cases").elements()) {
    SCOPED_TRACE(GetParam() + " " + c.get_string("name"));
    auto kw = c.get("kwargs");
    if (kw.get_bool_or("sanitize_control_tokens", false)) continue;  // transformers 5's sanitizing: not yet
    text::ChatOptions o;
    o.now_unix = now;
    json::Writer extra(json::Writer::Layout::Tight);
    extra.begin_object();
    for (const auto& [k, v] : kw.items()) {
      if (k == "add_generation_prompt") o.add_generation_prompt = v.as_bool();
      else if (k == "continue_final_message" && v.is_string())
        o.continue_final_message = true, o.continue_field = v.as_string();
      else if (k == "continue_final_message") o.continue_final_message = v.as_bool();
      else if (k == "chat_template") o.chat_template = v.as_string();
      else if (k != "tokenize" && k != "return_dict" && k != "return_assistant_tokens_mask" &&
               k != "sanitize_control_tokens")
        extra.key(k).value(v);
    }
    extra.end_object();
    o.extra_json = extra.str();
    if (!c.get("tools").is_null()) o.tools_json = c.get("tools").text();
    if (!c.get("documents").is_null()) o.documents_json = c.get("documents").text();
    const std::string messages = c.get("messages").text();
    if (c.has_value("error")) {
      EXPECT_THROW(text::encode_chat(*tok, messages, o), std::invalid_argument) << c.get_string("error");
      continue;
    }
    auto enc = text::encode_chat(*tok, messages, o);
    if (!c.get("text").is_null()) {
      EXPECT_EQ(enc.text, c.get_string("text"));
    }
    EXPECT_EQ(enc.encoding.ids, ints(c.get("ids")));
    if (c.has_value("assistant_masks")) {
      EXPECT_EQ(enc.assistant_masks, ints(c.get("assistant_masks")));
    }
    ++checked;
  }
  EXPECT_GT(checked, 3);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChatTemplates,
                         ::testing::Values("chat_llama3", "chat_qwen3", "chat_gemma", "chat_tiny_bytebpe",
                                           "chat_tiny_unigram"));

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    fprintf(stderr, "usage: test_text SOURCE_ROOT CACHE_DIR\n");
    return 2;
  }
  g_root = argv[1];
  g_cache = argv[2];
  return RUN_ALL_TESTS();
}
