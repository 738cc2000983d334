// Hostile input to the text library (issue 37 item 9, "Bad input"): tokenizer files and chat templates made to
// crash, hang or exhaust memory. Each must be refused with a clear std::invalid_argument naming the file or the
// input (std::ios_base::failure for a file that cannot be read), in bounded time. Torch-free.
// usage: test_text_hostile SOURCE_ROOT [gtest flags]
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <ios>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "text/chat_template.hpp"
#include "text/tokenizer.hpp"

namespace {
namespace fs = std::filesystem;
using acc::text::ChatOptions;
using acc::text::Tokenizer;

std::string g_root;

// Runs fn, which must throw E; returns its message (printed, so the test log shows what each case gives) and
// fails when it took longer than max_seconds.
template <typename E = std::invalid_argument>
std::string refused(const std::function<void()>& fn, double max_seconds = 5.0) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  try {
    fn();
    ADD_FAILURE() << "no exception";
  } catch (const std::exception& e) {
    message = e.what();
    if constexpr (!std::is_same_v<E, std::exception>)
      if (!dynamic_cast<const E*>(&e)) ADD_FAILURE() << "wrong exception type " << typeid(e).name() << ": " << message;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, max_seconds) << message;
  std::printf("    -> %.2f s: %.400s%s\n", s, message.c_str(), message.size() > 400 ? "..." : "");
  return message;
}

// A small byte-level-free BPE tokenizer.json: vocabulary, merges and pipeline parts given as JSON text.
std::string bpe_json(const std::string& vocab, const std::string& merges, const std::string& pre_tokenizer = "null",
                     const std::string& normalizer = "null") {
  return R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":)" + normalizer +
         R"(,"pre_tokenizer":)" + pre_tokenizer +
         R"(,"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,)"
         R"("continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,)"
         R"("ignore_merges":false,"vocab":)" +
         vocab + R"(,"merges":)" + merges + "}}";
}

const std::string kSmallVocab = R"({"a":0,"b":1,"ab":2})";
const std::string kSmallMerges = R"([["a","b"]])";

// A temporary folder, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("acc-text-hostile-" + std::to_string(::getpid()) + "-" + std::to_string(++n));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
  }
  static inline int n = 0;
};

std::shared_ptr<Tokenizer> bytebpe() { return Tokenizer::from_pretrained(g_root + "/tests/text/tiny/bytebpe"); }

const std::string kMessages = R"([{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}])";

std::string render(const std::string& source) {
  ChatOptions o;
  o.chat_template = source;
  return acc::text::render_chat(*bytebpe(), kMessages, o).text;
}

// --- tokenizer.json -------------------------------------------------------------------------------------------

TEST(HostileTokenizer, NotJson) {
  auto m = refused([] { Tokenizer::from_json("this is not JSON {", "tokenizer.json 'bad'"); });
  EXPECT_NE(m.find("tokenizer.json 'bad'"), std::string::npos) << m;
  EXPECT_NE(m.find("line 1"), std::string::npos) << m;
  // And through a folder: the message names the file.
  TempDir d;
  d.write("tokenizer.json", "\x01\x02 not json");
  m = refused([&] { Tokenizer::from_pretrained(d.path.string()); });
  EXPECT_NE(m.find((d.path / "tokenizer.json").string()), std::string::npos) << m;
  // Not UTF-8 at all.
  m = refused([] { Tokenizer::from_json("{\"a\": \"\xff\xfe\"}", "tokenizer.json 'latin1'"); });
  EXPECT_NE(m.find("not UTF-8"), std::string::npos) << m;
}

TEST(HostileTokenizer, NestedDeep) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto m = refused([&] { Tokenizer::from_json(deep, "tokenizer.json 'deep'"); });
  EXPECT_NE(m.find("tokenizer.json 'deep'"), std::string::npos) << m;
  EXPECT_NE(m.find("recursion limit"), std::string::npos) << m;
  // Deep inside a valid-looking file (the pre-tokenizer).
  const std::string deep_obj = bpe_json(kSmallVocab, kSmallMerges, std::string(100000, '[') + std::string(100000, ']'));
  m = refused([&] { Tokenizer::from_json(deep_obj, "tokenizer.json 'deep2'"); });
  EXPECT_NE(m.find("recursion limit"), std::string::npos) << m;
  // And in tokenizer_config.json, which libacc's own JSON reader reads.
  TempDir d;
  d.write("tokenizer.json", bpe_json(kSmallVocab, kSmallMerges));
  d.write("tokenizer_config.json", std::string(100000, '[') + std::string(100000, ']'));
  m = refused<std::exception>([&] { Tokenizer::from_pretrained(d.path.string()); });
  EXPECT_NE(m.find("tokenizer_config.json"), std::string::npos) << m;
}

TEST(HostileTokenizer, HugeVocabularyAndMerges) {
  // 200k merges over a 400k-token vocabulary (Gemma 3's size): loads, in bounded time.
  std::string vocab = "{", merges = "[";
  vocab.reserve(12 << 20), merges.reserve(12 << 20);
  for (int i = 0; i < 200000; ++i) {
    const std::string a = "a" + std::to_string(i), b = "b" + std::to_string(i);
    vocab += (i ? ",\"" : "\"") + a + "\":" + std::to_string(2 * i) + ",\"" + b + "\":" + std::to_string(2 * i + 1);
    merges += (i ? ",[\"" : "[\"") + a + "\",\"" + b + "\"]";
  }
  // the merged tokens: every merge's result must be in the vocabulary
  for (int i = 0; i < 200000; ++i)
    vocab += ",\"a" + std::to_string(i) + "b" + std::to_string(i) + "\":" + std::to_string(400000 + i);
  vocab += "}", merges += "]";
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = Tokenizer::from_json(bpe_json(vocab, merges), "tokenizer.json 'big'");
  EXPECT_EQ(tok->vocab_size(), 600000u);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);

  // A vocabulary that claims ids near 2^32: accepted (the crate keeps a map), no allocation by the claimed size.
  auto sparse = Tokenizer::from_json(bpe_json(R"({"a":0,"b":4294967294,"ab":4294967295})", kSmallMerges),
                                     "tokenizer.json 'sparse'");
  EXPECT_EQ(sparse->id_to_token(4294967295), "ab");
  EXPECT_EQ(sparse->decode(std::vector<int64_t>{4294967295}), "ab");
  // An id beyond 2^32 is refused, naming the file.
  auto m = refused([] {
    Tokenizer::from_json(bpe_json(R"({"a":0,"b":1,"ab":4294967296})", kSmallMerges), "tokenizer.json 'over'");
  });
  EXPECT_NE(m.find("tokenizer.json 'over'"), std::string::npos) << m;
  // An added token with such an id, and a Unigram unk_id past its vocabulary.
  m = refused([] {
    Tokenizer::from_json(R"({"added_tokens":[{"id":99999999999,"content":"x","special":true}],)"
                         R"("model":{"type":"WordLevel","vocab":{"a":0},"unk_token":"a"}})",
                         "tokenizer.json 'added'");
  });
  EXPECT_NE(m.find("tokenizer.json 'added'"), std::string::npos) << m;
  m = refused([] {
    Tokenizer::from_json(R"({"model":{"type":"Unigram","unk_id":1000000000,"vocab":[["a",-1.0]]}})",
                         "tokenizer.json 'unigram'");
  });
  EXPECT_NE(m.find("tokenizer.json 'unigram'"), std::string::npos) << m;
}

TEST(HostileTokenizer, MergesOutsideVocabulary) {
  auto m = refused([] { Tokenizer::from_json(bpe_json(kSmallVocab, R"([["a","zzz"]])"), "tokenizer.json 'merges'"); });
  EXPECT_NE(m.find("tokenizer.json 'merges'"), std::string::npos) << m;
  EXPECT_NE(m.find("zzz"), std::string::npos) << m;
  // The merge's result missing from the vocabulary, and longer than every token in it: the crate's builder
  // panicked on it (a slice out of range); now refused before, naming the merge.
  m = refused([] { Tokenizer::from_json(bpe_json(R"({"a":0,"b":1})", kSmallMerges), "tokenizer.json 'merged'"); });
  EXPECT_NE(m.find("tokenizer.json 'merged'"), std::string::npos) << m;
  EXPECT_NE(m.find("\"ab\" is not in the vocabulary"), std::string::npos) << m;
  EXPECT_EQ(m.find("internal error"), std::string::npos) << m;
  // A second part shorter than continuing_subword_prefix, or cut by it inside a character: the builder would slice
  // it into invalid UTF-8.
  for (const bool cut : {true, false}) {
    std::string json = cut ? bpe_json(R"({"a":0,"\u00e9":1,"a\u00e9":2})", R"([["a","\u00e9"]])")
                           : bpe_json(kSmallVocab, kSmallMerges);
    json.replace(json.find(R"("continuing_subword_prefix":null)"), 32,
                 cut ? R"("continuing_subword_prefix":"#")" : R"("continuing_subword_prefix":"###")");
    m = refused([&] { Tokenizer::from_json(json, "tokenizer.json 'prefix'"); });
    EXPECT_NE(m.find("continuing_subword_prefix"), std::string::npos) << m;
  }
  // Merges that are not pairs.
  m = refused([] { Tokenizer::from_json(bpe_json(kSmallVocab, R"([["a","b","c"]])"), "tokenizer.json 'triple'"); });
  EXPECT_NE(m.find("tokenizer.json 'triple'"), std::string::npos) << m;
}

TEST(HostileTokenizer, UnknownModelType) {
  auto m =
      refused([] { Tokenizer::from_json(R"({"model":{"type":"Quantum","vocab":{}}})", "tokenizer.json 'quantum'"); });
  EXPECT_NE(m.find("tokenizer.json 'quantum'"), std::string::npos) << m;
  // Unknown pipeline parts too.
  m = refused([] {
    Tokenizer::from_json(bpe_json(kSmallVocab, kSmallMerges, R"({"type":"Telepathy"})"), "tokenizer.json 'pretok'");
  });
  EXPECT_NE(m.find("tokenizer.json 'pretok'"), std::string::npos) << m;
}

TEST(HostileTokenizer, CatastrophicSplitRegex) {
  // Look-around sends the pattern to fancy-regex's backtracker, whose step limit must surface as an error (the
  // crate's own matcher would stop there and keep the rest of the text as one piece, silently).
  const std::string input(30000, 'a');
  auto split = [](const std::string& pattern) {
    const std::string pre =
        R"({"type":"Split","pattern":{"Regex":")" + pattern + R"("},"behavior":"Isolated","invert":false})";
    return Tokenizer::from_json(bpe_json(kSmallVocab, kSmallMerges, pre), "tokenizer.json 'split'");
  };
  for (const std::string pattern : {R"((a+)+(?!a)b)", R"((a*)*(?<=a)b)"}) {
    SCOPED_TRACE(pattern);
    auto tok = split(pattern);
    auto m = refused([&] { tok->encode(input); });
    EXPECT_NE(m.find("tokenizer.json 'split'"), std::string::npos) << m;
    EXPECT_NE(m.find("Max limit for backtracking count exceeded"), std::string::npos) << m;
  }
  // Without look-around the pattern runs on the linear-time engine: no match, the text is one piece (every 'a'
  // its own token), quickly.
  {
    auto tok = split(R"((a+)+$)");
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(tok->encode(input).ids.size(), input.size());
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  }
  // A look-around whose body can match unboundedly long text would rescan the text at every position (quadratic,
  // not counted by the step limit: "(?=(a+)+$)b" took minutes on long runs of 'a'): refused at load, naming it.
  for (const std::string pattern : {R"((?=(a+)+$)b)", R"((?=(a+)+b))", R"(x(?<!a*))"}) {
    SCOPED_TRACE(pattern);
    auto m = refused([&] { split(pattern); });
    EXPECT_NE(m.find("tokenizer.json 'split'"), std::string::npos) << m;
    EXPECT_NE(m.find("bounded length"), std::string::npos) << m;
  }
}

TEST(HostileTokenizer, ReplaceNormalizerLookAround) {
  const std::string norm =
      R"~({"type":"Sequence","normalizers":[{"type":"Replace","pattern":{"Regex":"a(?=b)"},"content":"x"}]})~";
  auto m = refused([&] {
    Tokenizer::from_json(bpe_json(kSmallVocab, kSmallMerges, "null", norm), "tokenizer.json 'replace'");
  });
  EXPECT_NE(m.find("tokenizer.json 'replace'"), std::string::npos) << m;
  EXPECT_NE(m.find("a(?=b)"), std::string::npos) << m;
  EXPECT_NE(m.find("normalizer"), std::string::npos) << m;
  // The decoder's Replace likewise.
  const std::string json = bpe_json(kSmallVocab, kSmallMerges);
  const std::string with_decoder =
      std::string(json).replace(json.find(R"("decoder":null)"), 14,
                                R"("decoder":{"type":"Replace","pattern":{"Regex":"(a)\\1"},"content":"x"})");
  m = refused([&] { Tokenizer::from_json(with_decoder, "tokenizer.json 'decoder'"); });
  EXPECT_NE(m.find("decoder"), std::string::npos) << m;
}

TEST(HostileTokenizer, InvalidUtf8Text) {
  auto tok = bytebpe();
  const std::string good = "hello", bad = std::string("ab\xc3(cd");
  std::vector<std::string_view> texts{good, bad};
  auto m = refused([&] { tok->encode_batch(texts, nullptr, {}); });
  EXPECT_NE(m.find("text 1"), std::string::npos) << m;
  EXPECT_NE(m.find("offset 2"), std::string::npos) << m;
  EXPECT_NE(m.find("bytebpe"), std::string::npos) << m;
  // In a pair.
  std::vector<std::string_view> firsts{good}, pairs{std::string_view("\xff")};
  m = refused([&] { tok->encode_batch(firsts, &pairs, {}); });
  EXPECT_NE(m.find("text pair 0"), std::string::npos) << m;
  EXPECT_NE(m.find("offset 0"), std::string::npos) << m;
  // decode: ids that are not token ids.
  m = refused<std::out_of_range>([&] { tok->decode(std::vector<int64_t>{-1}); });
  EXPECT_NE(m.find("-1"), std::string::npos) << m;
}

TEST(HostileTokenizer, SentencePieceModelOnly) {
  TempDir d;
  d.write("tokenizer.model", "\x0a\x05hello");
  auto m = refused([&] { Tokenizer::from_pretrained(d.path.string()); });
  EXPECT_NE(m.find(d.path.string()), std::string::npos) << m;
  EXPECT_NE(m.find("save_pretrained"), std::string::npos) << m;
  // No tokenizer at all, and no folder.
  TempDir e;
  m = refused([&] { Tokenizer::from_pretrained(e.path.string()); });
  EXPECT_NE(m.find("no tokenizer.json"), std::string::npos) << m;
  m = refused([&] { Tokenizer::from_pretrained((e.path / "missing").string()); });
  EXPECT_NE(m.find("not a directory"), std::string::npos) << m;
}

TEST(HostileTokenizer, UnreadableFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any file";
  TempDir d;
  d.write("tokenizer.json", bpe_json(kSmallVocab, kSmallMerges));
  fs::permissions(d.path / "tokenizer.json", fs::perms::none);
  auto m = refused<std::exception>([&] { Tokenizer::from_pretrained(d.path.string()); });
  EXPECT_NE(m.find("tokenizer.json"), std::string::npos) << m;
}

TEST(HostileTokenizer, TokenizerJsonIsAFolder) {
  TempDir d;
  fs::create_directories(d.path / "tokenizer.json");
  auto m = refused<std::exception>([&] { Tokenizer::from_pretrained(d.path.string()); });
  EXPECT_NE(m.find("tokenizer.json"), std::string::npos) << m;
}

// --- chat templates --------------------------------------------------------------------------------------------

TEST(HostileChatTemplate, RaiseException) {
  auto m = refused([] { render("{{ raise_exception('x marks the spot') }}"); });
  EXPECT_NE(m.find("x marks the spot"), std::string::npos) << m;
  EXPECT_NE(m.find("bytebpe"), std::string::npos) << m;
}

TEST(HostileChatTemplate, EndlessLoop) {
  // 10^10 iterations: the fuel (acc::limits::kChatTemplateFuelBase, 2^20 steps for a short conversation) stops it.
  auto m =
      refused([] { render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"); }, 30.0);
  EXPECT_NE(m.find("ran out of fuel"), std::string::npos) << m;
  // Printing as it goes: the output limit (or the fuel, whichever first) stops it.
  m = refused([] { render("{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}"); },
              30.0);
  EXPECT_TRUE(m.find("ran out of fuel") != std::string::npos || m.find("output exceeds") != std::string::npos) << m;
}

TEST(HostileChatTemplate, DeepRecursion) {
  auto m = refused([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); });
  EXPECT_NE(m.find("recursion"), std::string::npos) << m;
  // Nested brackets in the source: the parser's own limit.
  m = refused([] { render("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}"); });
  EXPECT_NE(m.find("recursion limits"), std::string::npos) << m;
  m = refused([] { render(std::string(50000, '[') + "{{ " + std::string(50000, '[') + " }}"); });
  EXPECT_NE(m.find("line 1"), std::string::npos) << m;
}

TEST(HostileChatTemplate, SyntaxError) {
  auto m = refused([] { render("{% for m in messages %}\n{{ m.content }}\n{% if %}\n{% endfor %}"); });
  EXPECT_NE(m.find("line 3"), std::string::npos) << m;
  m = refused([] { render("line one\n\n{{ messages[0].content "); });
  EXPECT_NE(m.find("line 3"), std::string::npos) << m;
  m = refused([] { render("{% for m in messages %}never closed"); });
  EXPECT_NE(m.find("line"), std::string::npos) << m;
}

TEST(HostileChatTemplate, HugeOutput) {
  // One piece over minijinja's limit, or over what the fuel pays for (a unit per 64 bytes): whichever comes first.
  auto too_much = [](const std::string& m) {
    return m.find("too large") != std::string::npos || m.find("out of fuel") != std::string::npos;
  };
  auto m = refused([] { render("{{ 'x' * 10**9 }}"); });
  EXPECT_TRUE(too_much(m)) << m;
  m = refused([] { render("{{ ['x'] * 10**9 }}"); });
  EXPECT_TRUE(too_much(m)) << m;
  // Each piece under minijinja's limit, many of them: the whole output is bounded too (before, this wrote 6 GB
  // in 30 s until the fuel ran out); the output's own limit or the fuel stops it.
  m = refused([] { render("{% for i in range(1000) %}{{ 'x' * 50000000 }}{% endfor %}"); });
  EXPECT_TRUE(m.find("output exceeds") != std::string::npos || m.find("out of fuel") != std::string::npos) << m;
}

// Values built without being written: the fuel charges each by its size (64 MiB of values for a short conversation),
// and what it does not charge (a list doubled with `+`, which minijinja materializes whole past 32 levels) stops at
// the rendering's memory budget; doubling a string or a list, or keeping many large strings, took all memory before.
size_t max_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<size_t>(u.ru_maxrss) * 1024;
}

TEST(HostileChatTemplate, ValuesBuiltWithoutOutput) {
  const size_t before = max_rss_bytes();
  for (const std::string body : {
           "{% set ns = namespace(s='x') %}{% for i in range(80) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
           "{% set ns = namespace(l=['x']) %}{% for i in range(80) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
           "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + ['x' * 1000000 ~ i] %}"
           "{% endfor %}",
       }) {
    SCOPED_TRACE(body);
    auto m = refused([&] { render(body); }, 30.0);
    EXPECT_TRUE(m.find("fuel") != std::string::npos || m.find("too large") != std::string::npos ||
                m.find("memory than its budget") != std::string::npos)
        << m;
  }
  EXPECT_LT(max_rss_bytes() - before, size_t{1} << 30);
  // The template that ran out of memory left the library working.
  EXPECT_EQ(render("{{ 'ok' }}"), "ok");
}

TEST(HostileChatTemplate, BadMessages) {
  auto tok = bytebpe();
  ChatOptions o;
  auto m = refused([&] { acc::text::render_chat(*tok, "[[[[", o); });
  m = refused([&] { acc::text::render_chat(*tok, std::string(100000, '[') + std::string(100000, ']'), o); });
  m = refused([&] { acc::text::render_chat(*tok, "[{\"role\":\"user\",\"content\":\"\xff\"}]", o); });
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: test_text_hostile SOURCE_ROOT [gtest flags]\n");
    return 2;
  }
  g_root = argv[1];
  return RUN_ALL_TESTS();
}
