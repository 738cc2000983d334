// libacc's side of bench/text.py: encoding throughput of acc::text::Tokenizer::encode_batch on a file of lines, at
// several thread counts, and chat-template renders per second (render_chat). Torch-free (acc_text_dep).
//
//   text_bench DIR LINES_FILE [--passes N] [--threads 1,2] [--chat MESSAGES_JSON_FILE] [--chat-seconds S]
//              [--extra JSON]
//
// Each thread count: one untimed pass (warm-up), then N timed passes over the whole batch (one encode_batch call
// each, the tokenizer's defaults: special tokens added, no truncation or padding). The chat renders: the
// conversation in MESSAGES_JSON_FILE with the tokenizer's template and add_generation_prompt, rendered in a loop for
// at least S seconds after a warm-up, three times. Prints one JSON object on its last line.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat_template.hpp"
#include "text/tokenizer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string json_string(std::string_view s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      case '\r': o += "\\r"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}

std::string json_list(const std::vector<double>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char b[32];
    std::snprintf(b, sizeof b, "%s%.6f", i ? ", " : "", v[i]);
    o += b;
  }
  return o + "]";
}

// 64-bit FNV-1a, so that text.py can check that libacc rendered what transformers rendered.
uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: text_bench DIR LINES_FILE [--passes N] [--threads 1,2] [--chat MESSAGES_JSON_FILE] "
                       "[--chat-seconds S] [--extra JSON]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 3) usage();
  std::string dir = argv[1], lines_path = argv[2], chat_path, extra;
  size_t passes = 3;
  double chat_seconds = 1.0;
  std::vector<size_t> thread_counts{1, 2};
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) usage();
    std::string v = argv[++i];
    if (a == "--passes") {
      passes = std::stoul(v);
    } else if (a == "--threads") {
      thread_counts.clear();
      std::stringstream s(v);
      for (std::string t; std::getline(s, t, ',');) thread_counts.push_back(std::stoul(t));
    } else if (a == "--chat") {
      chat_path = v;
    } else if (a == "--chat-seconds") {
      chat_seconds = std::stod(v);
    } else if (a == "--extra") {
      extra = v;
    } else {
      usage();
    }
  }
  if (passes == 0 || thread_counts.empty()) usage();

  auto t0 = Clock::now();
  auto tok = acc::text::Tokenizer::from_pretrained(dir);
  double load_s = seconds_since(t0);

  std::string corpus = read_file(lines_path);
  if (!corpus.empty() && corpus.back() == '\n') corpus.pop_back();
  std::vector<std::string_view> lines;
  for (size_t at = 0;;) {
    size_t nl = corpus.find('\n', at);
    lines.emplace_back(std::string_view(corpus).substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }

  std::ostringstream out;
  out << "{\"tokenizer\": " << json_string(dir) << ", \"lines\": " << lines.size() << ", \"bytes\": " << corpus.size()
      << ", \"load_s\": " << load_s << ", \"encode\": [";
  size_t tokens = 0;
  for (size_t k = 0; k < thread_counts.size(); ++k) {
    acc::text::EncodeOptions o;
    o.threads = thread_counts[k];
    std::vector<double> times;
    for (size_t p = 0; p <= passes; ++p) {
      auto t = Clock::now();
      auto encodings = tok->encode_batch(lines, nullptr, o);
      double s = seconds_since(t);
      size_t n = 0;
      for (const auto& e : encodings) n += e.ids.size();
      if (tokens == 0) tokens = n;
      if (n != tokens) throw std::runtime_error("a pass gave another token count");
      if (p > 0) times.push_back(s);  // pass 0: warm-up
    }
    out << (k ? ", " : "") << "{\"threads\": " << o.threads << ", \"seconds\": " << json_list(times) << "}";
  }
  out << "], \"tokens\": " << tokens;

  if (!chat_path.empty()) {
    std::string messages = read_file(chat_path);
    acc::text::ChatOptions co;
    co.add_generation_prompt = true;
    co.extra_json = extra;
    co.now_unix = 1721952000;  // fixed (26 Jul 2024), for templates that print the date
    std::string text = acc::text::render_chat(*tok, messages, co).text;
    std::vector<double> rates;
    for (int r = 0; r < 3; ++r) {
      size_t n = 0;
      auto t = Clock::now();
      double s = 0;
      do {
        for (int i = 0; i < 20; ++i, ++n) {
          if (acc::text::render_chat(*tok, messages, co).text.size() != text.size())
            throw std::runtime_error("renders differ");
        }
        s = seconds_since(t);
      } while (s < chat_seconds);
      rates.push_back(static_cast<double>(n) / s);
    }
    char h[24];
    std::snprintf(h, sizeof h, "%016llx", static_cast<unsigned long long>(fnv1a(text)));
    out << ", \"chat\": {\"renders_per_s\": " << json_list(rates) << ", \"bytes\": " << text.size() << ", \"fnv1a\": \""
        << h << "\"}";
  }
  out << "}";
  std::cout << out.str() << std::endl;
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "text_bench: %s\n", e.what());
  return 1;
}
