// `acc estimate-memory`: the memory a model needs to load and to train with Adam, per dtype, in the table
// `accelerate estimate-memory` prints. The model is a libacc model spec (the JSON acc_model_create takes: an
// "mlp" or a "gpt"), one of a few named GPT-2 sizes, or a safetensors checkpoint (a file, or a directory of shards).
// Parameter counts follow libacc's layouts (src/models/builtin.cpp); the largest layer is Accelerate's: the biggest
// module without child modules (calculate_maximum_sizes).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "acc/config.hpp"
#include "cli.hpp"
#include "commands.hpp"

namespace acc::launcher {
namespace {

constexpr const char* kMe = "acc estimate-memory";

struct Tensor {
  std::string name;
  int64_t numel = 0;
  int64_t bytes = 0;  // as Accelerate counts them: floating point tensors in float32, others at their own size
};

// A number as Python holds it in estimate.py: an int until it is divided.
struct Num {
  double v = 0;
  bool integral = true;
};

// Python's round(x, 2) printed with repr.
std::string py_round2(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  std::string s = buf;
  while (s.size() > 1 && s.back() == '0' && s[s.size() - 2] != '.') s.pop_back();
  return s;
}

std::string convert_bytes(Num n) {
  double size = n.v;
  bool integral = n.integral;
  for (const char* unit : {"bytes", "KB", "MB", "GB", "TB"}) {
    if (size < 1024.0) {
      if (integral) return std::to_string(static_cast<long long>(size)) + " " + unit;
      return py_round2(size) + " " + unit;
    }
    size /= 1024.0;
    integral = false;
  }
  return py_round2(size) + " PB";
}

// Python's str.center.
std::string center(const std::string& s, size_t width) {
  if (s.size() >= width) return s;
  size_t marg = width - s.size();
  size_t left = marg / 2 + (marg & width & 1);
  return std::string(left, ' ') + s + std::string(marg - left, ' ');
}

std::string repeat(const char* piece, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += piece;
  return out;
}

// create_ascii_table of estimate.py.
std::string ascii_table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows,
                        const std::string& title) {
  const char* sep = "│";
  const char* line = "─";
  std::vector<size_t> w;
  for (size_t i = 0; i < headers.size(); ++i) {
    size_t m = headers[i].size();
    for (const auto& r : rows) m = std::max(m, r[i].size());
    w.push_back(m);
  }
  const std::vector<size_t> fmt = w;  // widths of the %Ns formats, fixed before the title widens the last column
  size_t diff = 0;
  auto make_row = [&](const char* l, const char* mid, const char* r) {
    std::string out = l;
    for (size_t i = 0; i < w.size(); ++i) {
      if (i) out += mid;
      out += repeat(line, w[i]);
    }
    return out + repeat(line, diff) + r;
  };
  auto chars = [&](const std::vector<size_t>& widths) {  // visible length of a separator row
    size_t n = 2 + (widths.size() - 1) + diff;
    for (size_t x : widths) n += x;
    return n;
  };
  size_t total = 0;
  for (size_t x : w) total += x;
  if (title.size() > total) {
    size_t sep_len = chars(w);
    diff = title.size() > sep_len ? title.size() - sep_len : sep_len - title.size();
    w.back() += diff;
  }
  const size_t sep_len = chars(w);
  std::string table = make_row("┌", line, "┐") + "\n";
  table += std::string(sep) + center(title, sep_len - 2) + sep + "\n";
  table += make_row("├", "┬", "┤") + "\n";
  w.back() += diff;
  auto pattern = [&](const std::vector<std::string>& cells) {
    std::string out = sep;
    for (size_t i = 0; i < cells.size(); ++i) {
      if (i) out += sep;
      std::string c = cells[i];
      if (c.size() < fmt[i]) c = std::string(fmt[i] - c.size(), ' ') + c;  // "%Ns"
      out += c;
    }
    return out + sep;
  };
  std::vector<std::string> hc;
  for (size_t i = 0; i < headers.size(); ++i) hc.push_back(center(headers[i], w[i]));
  table += pattern(hc) + "\n";
  {
    std::string s = "├";
    for (size_t i = 0; i < w.size(); ++i) {
      if (i) s += "┼";
      s += repeat(line, w[i]);
    }
    // make_row("├", "┼", "┤") as computed before the second widening, plus diff: the same length.
    table += s + "┤\n";
  }
  for (const auto& r : rows) {
    std::vector<std::string> cells;
    for (size_t i = 0; i < r.size(); ++i) cells.push_back(center(r[i], w[i]));
    table += pattern(cells) + "\n";
  }
  std::string bottom = "└";
  for (size_t i = 0; i < w.size(); ++i) {
    if (i) bottom += "┴";
    bottom += repeat(line, w[i]);
  }
  return table + bottom + "┘";
}

// ----------------------------------------------------------------------------------------------------- models

int64_t get_int(const std::map<std::string, std::string>& spec, const std::string& key, std::optional<int64_t> def) {
  auto it = spec.find(key);
  if (it == spec.end()) {
    if (def) return *def;
    throw config::Error("model spec: '" + key + "' is required");
  }
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (*end || v < 1) throw config::Error("model spec: '" + key + "' must be an integer >= 1; got " + it->second);
  return v;
}

std::vector<Tensor> gpt_tensors(int64_t vocab, int64_t block, int64_t layers, int64_t embd, bool bias) {
  std::vector<Tensor> t;
  auto add = [&](const std::string& name, int64_t numel) { t.push_back({name, numel, numel * 4}); };
  auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    add(name + ".weight", out * in);
    if (bias) add(name + ".bias", out);
  };
  auto norm = [&](const std::string& name) {
    add(name + ".weight", embd);
    if (bias) add(name + ".bias", embd);
  };
  add("wte.weight", vocab * embd);
  add("wpe.weight", block * embd);
  for (int64_t l = 0; l < layers; ++l) {
    std::string h = "h." + std::to_string(l) + ".";
    norm(h + "ln_1");
    linear(h + "attn.c_attn", 3 * embd, embd);
    linear(h + "attn.c_proj", embd, embd);
    norm(h + "ln_2");
    linear(h + "mlp.c_fc", 4 * embd, embd);
    linear(h + "mlp.c_proj", embd, 4 * embd);
  }
  norm("ln_f");
  return t;  // the LM head is tied to wte
}

// A spec given as JSON text: {"type": "gpt", ...} or {"type": "mlp", "sizes": [...]}.
std::vector<Tensor> from_spec(const std::string& json) {
  // The launcher has no JSON library of its own here: a launch-style resolver would be overkill, so read the few
  // keys by hand through the config library's JSON reader (via a throwaway explicit config is not possible:
  // different schema). Minimal parse: keys with scalar or list-of-int values.
  std::map<std::string, std::string> kv;
  std::vector<int64_t> sizes;
  std::string s = json;
  size_t i = 0;
  auto skip = [&]() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  };
  auto string_at = [&]() {
    if (s[i] != '"') throw config::Error("model spec: malformed JSON near offset " + std::to_string(i));
    size_t end = s.find('"', i + 1);
    if (end == std::string::npos) throw config::Error("model spec: unterminated string");
    std::string out = s.substr(i + 1, end - i - 1);
    i = end + 1;
    return out;
  };
  skip();
  if (i >= s.size() || s[i] != '{') throw config::Error("model spec: a JSON object is expected");
  ++i;
  for (;;) {
    skip();
    if (i < s.size() && s[i] == '}') break;
    std::string key = string_at();
    skip();
    if (i >= s.size() || s[i] != ':') throw config::Error("model spec: ':' expected after \"" + key + "\"");
    ++i;
    skip();
    if (i < s.size() && s[i] == '[') {
      ++i;
      for (;;) {
        skip();
        if (i < s.size() && s[i] == ']') {
          ++i;
          break;
        }
        size_t start = i;
        while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '-')) ++i;
        if (start == i) throw config::Error("model spec: '" + key + "' must be a list of integers");
        int64_t v = std::stoll(s.substr(start, i - start));
        if (v < 1) throw config::Error("model spec: '" + key + "' entries must be >= 1");
        if (key == "sizes") sizes.push_back(v);
        skip();
        if (i < s.size() && s[i] == ',') ++i;
      }
      kv[key] = "[list]";
    } else if (i < s.size() && s[i] == '"') {
      kv[key] = string_at();
    } else {
      size_t start = i;
      while (i < s.size() && s[i] != ',' && s[i] != '}' && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      kv[key] = s.substr(start, i - start);
    }
    skip();
    if (i < s.size() && s[i] == ',') {
      ++i;
      continue;
    }
    skip();
    if (i < s.size() && s[i] == '}') break;
    throw config::Error("model spec: ',' or '}' expected near offset " + std::to_string(i));
  }
  const std::string type = kv.count("type") ? kv["type"] : "";
  static const std::set<std::string> gpt_keys = {"type", "vocab_size", "block_size", "n_layer", "n_head",
                                                 "n_embd", "dropout", "bias"};
  static const std::set<std::string> mlp_keys = {"type", "sizes", "activation", "loss"};
  const auto& allowed = type == "gpt" ? gpt_keys : mlp_keys;
  if (type != "gpt" && type != "mlp") throw config::Error("model spec: 'type' must be \"mlp\" or \"gpt\"");
  for (const auto& [k, v] : kv)
    if (!allowed.count(k)) {
      std::vector<std::string> names(allowed.begin(), allowed.end());
      std::string near = config::closest_match(k, names);
      throw config::Error(type + " spec: unknown key '" + k + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)"));
    }
  if (type == "gpt") {
    int64_t embd = get_int(kv, "n_embd", std::nullopt), heads = get_int(kv, "n_head", std::nullopt);
    if (embd % heads != 0)
      throw config::Error("gpt spec: 'n_embd' (" + std::to_string(embd) + ") must be a multiple of 'n_head' (" +
                          std::to_string(heads) + ")");
    bool bias = !kv.count("bias") || kv["bias"] == "true";
    return gpt_tensors(get_int(kv, "vocab_size", std::nullopt), get_int(kv, "block_size", std::nullopt),
                       get_int(kv, "n_layer", std::nullopt), embd, bias);
  }
  if (sizes.size() < 2) throw config::Error("mlp spec: 'sizes' needs at least [in, out]");
  std::vector<Tensor> t;
  for (size_t k = 0; k + 1 < sizes.size(); ++k) {
    std::string name = "layers." + std::to_string(k);
    t.push_back({name + ".weight", sizes[k + 1] * sizes[k], sizes[k + 1] * sizes[k] * 4});
    t.push_back({name + ".bias", sizes[k + 1], sizes[k + 1] * 4});
  }
  return t;
}

// Named GPT-2 sizes (vocab 50257, context 1024), as libacc's gpt spec builds them.
std::optional<std::string> preset(const std::string& name) {
  static const std::map<std::string, std::string> k = {
      {"gpt2", R"({"type":"gpt","vocab_size":50257,"block_size":1024,"n_layer":12,"n_head":12,"n_embd":768})"},
      {"gpt2-medium", R"({"type":"gpt","vocab_size":50257,"block_size":1024,"n_layer":24,"n_head":16,"n_embd":1024})"},
      {"gpt2-large", R"({"type":"gpt","vocab_size":50257,"block_size":1024,"n_layer":36,"n_head":20,"n_embd":1280})"},
      {"gpt2-xl", R"({"type":"gpt","vocab_size":50257,"block_size":1024,"n_layer":48,"n_head":25,"n_embd":1600})"}};
  auto it = k.find(name);
  if (it == k.end()) return std::nullopt;
  return it->second;
}

int64_t dtype_size(const std::string& d, bool* floating) {
  static const std::map<std::string, std::pair<int64_t, bool>> k = {
      {"F64", {8, true}}, {"F32", {4, true}},  {"F16", {2, true}},  {"BF16", {2, true}}, {"F8_E4M3", {1, true}},
      {"F8_E5M2", {1, true}}, {"I64", {8, false}}, {"I32", {4, false}}, {"I16", {2, false}}, {"I8", {1, false}},
      {"U8", {1, false}},  {"BOOL", {1, false}}, {"U16", {2, false}}, {"U32", {4, false}}, {"U64", {8, false}}};
  auto it = k.find(d);
  if (it == k.end()) throw config::Error("unknown safetensors dtype \"" + d + "\"");
  *floating = it->second.second;
  return it->second.first;
}

// The header of one safetensors file: u64 little-endian length, then a JSON object name -> {dtype, shape, ...}.
void read_safetensors(const std::string& path, std::vector<Tensor>& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw config::Error("cannot read '" + path + "': " + std::strerror(errno));
  unsigned char len8[8];
  if (!f.read(reinterpret_cast<char*>(len8), 8)) throw config::Error(path + ": not a safetensors file (too short)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len8[i];
  if (n == 0 || n > (100u << 20)) throw config::Error(path + ": not a safetensors file (header length " + std::to_string(n) + ")");
  std::string h(n, '\0');
  if (!f.read(h.data(), static_cast<std::streamsize>(n))) throw config::Error(path + ": truncated safetensors header");
  // Walk the JSON: "name": {"dtype": "F32", "shape": [a, b], "data_offsets": [x, y]}.
  size_t i = h.find('{');
  if (i == std::string::npos) throw config::Error(path + ": malformed safetensors header");
  ++i;
  auto skip = [&]() {
    while (i < h.size() && (std::isspace(static_cast<unsigned char>(h[i])) || h[i] == ',')) ++i;
  };
  auto str = [&]() {
    if (i >= h.size() || h[i] != '"') throw config::Error(path + ": malformed safetensors header at byte " + std::to_string(i));
    std::string s;
    for (++i; i < h.size() && h[i] != '"'; ++i) {
      if (h[i] == '\\' && i + 1 < h.size()) ++i;
      s += h[i];
    }
    ++i;
    return s;
  };
  auto skip_value = [&]() {  // an object or array or scalar
    int depth = 0;
    bool in_str = false;
    for (; i < h.size(); ++i) {
      char c = h[i];
      if (in_str) {
        if (c == '\\') ++i;
        else if (c == '"') in_str = false;
        continue;
      }
      if (c == '"') in_str = true;
      else if (c == '{' || c == '[') ++depth;
      else if (c == '}' || c == ']') {
        if (depth == 0) return;
        if (--depth == 0) {
          ++i;
          return;
        }
      } else if (c == ',' && depth == 0) return;
    }
  };
  for (;;) {
    skip();
    if (i >= h.size() || h[i] == '}') break;
    std::string name = str();
    skip();
    if (i >= h.size() || h[i] != ':') throw config::Error(path + ": malformed safetensors header");
    ++i;
    skip();
    if (name == "__metadata__") {
      skip_value();
      continue;
    }
    if (h[i] != '{') throw config::Error(path + ": tensor \"" + name + "\" has no description");
    ++i;
    std::string dtype;
    int64_t numel = 1;
    bool shape_seen = false;
    for (;;) {
      skip();
      if (i < h.size() && h[i] == '}') {
        ++i;
        break;
      }
      std::string key = str();
      skip();
      ++i;  // ':'
      skip();
      if (key == "dtype") {
        dtype = str();
      } else if (key == "shape") {
        shape_seen = true;
        ++i;  // '['
        for (;;) {
          skip();
          if (h[i] == ']') {
            ++i;
            break;
          }
          size_t start = i;
          while (i < h.size() && std::isdigit(static_cast<unsigned char>(h[i]))) ++i;
          if (start == i) throw config::Error(path + ": bad shape of \"" + name + "\"");
          numel *= std::stoll(h.substr(start, i - start));
        }
      } else {
        skip_value();
      }
    }
    if (dtype.empty() || !shape_seen) throw config::Error(path + ": tensor \"" + name + "\" lacks dtype or shape");
    bool floating = false;
    int64_t size = dtype_size(dtype, &floating);
    out.push_back({name, numel, floating ? numel * 4 : numel * size});
  }
}

std::vector<Tensor> from_path(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw config::Error("cannot read '" + path + "': " + std::strerror(errno));
  std::vector<Tensor> out;
  if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> files;
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0) files.push_back(path + "/" + n);
      }
      closedir(d);
    }
    if (files.empty()) throw config::Error("'" + path + "' holds no .safetensors files");
    std::sort(files.begin(), files.end());
    for (const auto& f : files) read_safetensors(f, out);
    return out;
  }
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return from_spec(ss.str());
  }
  read_safetensors(path, out);
  return out;
}

// calculate_maximum_sizes: the total, and the biggest "layer": a module without child modules, or a tensor that
// sits directly in the model.
std::pair<int64_t, std::vector<std::string>> largest_layer(const std::vector<Tensor>& tensors, int64_t* total) {
  std::map<std::string, int64_t> size;              // module name -> bytes below it
  std::map<std::string, std::set<std::string>> kids;  // module -> child modules
  std::set<std::string> top_tensors;
  *total = 0;
  for (const auto& t : tensors) {
    *total += t.bytes;
    size_t dot = t.name.rfind('.');
    if (dot == std::string::npos) {
      top_tensors.insert(t.name);
      size[t.name] += t.bytes;
      continue;
    }
    std::string module = t.name.substr(0, dot);
    for (size_t p = 0;;) {
      size_t d = module.find('.', p);
      std::string prefix = module.substr(0, d);
      size[prefix] += t.bytes;
      std::string parent = p == 0 ? "" : module.substr(0, p - 1);
      kids[parent].insert(prefix);
      if (d == std::string::npos) break;
      p = d + 1;
    }
  }
  int64_t best = 0;
  std::vector<std::string> names;
  auto consider = [&](const std::string& n) {
    int64_t s = size[n];
    if (s > best) {
      best = s;
      names = {n};
    } else if (s == best) {
      names.push_back(n);
    }
  };
  for (const auto& n : top_tensors) consider(n);
  std::vector<std::string> stack(kids[""].begin(), kids[""].end());
  std::reverse(stack.begin(), stack.end());
  while (!stack.empty()) {
    std::string m = stack.back();
    stack.pop_back();
    auto it = kids.find(m);
    if (it == kids.end() || it->second.empty()) {
      consider(m);
    } else {
      std::vector<std::string> c(it->second.begin(), it->second.end());
      for (auto r = c.rbegin(); r != c.rend(); ++r) stack.push_back(*r);
    }
  }
  return {best, names};
}

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  int n = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (n && n % 3 == 0) out += ',';
    out += *it;
    ++n;
  }
  return std::string(out.rbegin(), out.rend());
}

}  // namespace

int estimate_main(const std::vector<std::string>& args_in) {
  // --dtypes takes several values, as in accelerate (nargs="+"); commas work too.
  std::vector<std::string> args, dtypes;
  bool dtypes_given = false;
  for (size_t i = 0; i < args_in.size(); ++i) {
    const std::string& a = args_in[i];
    if (a == "--dtypes" || a.rfind("--dtypes=", 0) == 0) {
      dtypes_given = true;
      auto add = [&](const std::string& v) {
        std::stringstream ss(v);
        for (std::string d; std::getline(ss, d, ',');)
          if (!d.empty()) dtypes.push_back(d);
      };
      if (a != "--dtypes") add(a.substr(9));
      while (i + 1 < args_in.size() && args_in[i + 1].rfind("-", 0) != 0) {
        // A following token that is a model stays a positional: dtypes are short known names.
        static const std::set<std::string> names = {"float32", "float16", "bfloat16", "int8", "int4"};
        std::string next = args_in[i + 1];
        bool all = true;
        std::stringstream ss(next);
        for (std::string d; std::getline(ss, d, ',');) all = all && names.count(d);
        if (!all) break;
        add(next);
        ++i;
      }
      continue;
    }
    args.push_back(a);
  }
  std::vector<cli::Option> opts;
  auto opt = [&](const char* name, const char* metavar, const char* help, bool value, std::vector<std::string> s = {}) {
    cli::Option o;
    o.name = name;
    o.metavar = metavar;
    o.help = help;
    o.takes_value = value;
    o.group = "options";
    o.shorts = std::move(s);
    opts.push_back(o);
  };
  opt("--help", "", "show this help and exit", false, {"-h"});
  opt("--dtypes", "DTYPE [DTYPE ...]", "float32, float16, bfloat16, int8, int4 (default: float32 float16 int8 int4)", true);
  opt("--library_name", "NAME", "accepted for compatibility (acc reads no Hub models)", true);
  opt("--trust_remote_code", "", "accepted for compatibility", false);
  cli::Parsed p;
  try {
    p = cli::parse(opts, args, false);
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 2;
  }
  if (p.options.count("--help")) {
    std::fputs(cli::help("acc estimate-memory MODEL [--dtypes DTYPE ...]",
                         "Estimates the memory to load MODEL and to train it with Adam (batch size 1), per dtype, in\n"
                         "`accelerate estimate-memory`'s table. MODEL is one of:\n"
                         "  - a libacc model spec, as JSON text or a .json file: {\"type\": \"gpt\", \"vocab_size\": ..,\n"
                         "    \"block_size\": .., \"n_layer\": .., \"n_head\": .., \"n_embd\": ..} or {\"type\": \"mlp\",\n"
                         "    \"sizes\": [in, hidden, ..., out]};\n"
                         "  - gpt2, gpt2-medium, gpt2-large, gpt2-xl (those sizes as libacc GPT specs);\n"
                         "  - a .safetensors file, or a directory of them (a sharded checkpoint).\n"
                         "Sizes count floating point tensors in float32, as Accelerate instantiates models; training\n"
                         "with Adam takes 4x the float32 size (weights, gradients, two moments), or 2x with mixed\n"
                         "precision (fp32 weights and moments, fp16 gradients), N/A for int8/int4.",
                         opts)
                   .c_str(),
               stdout);
    return 0;
  }
  if (p.positionals.size() != 1) {
    std::fprintf(stderr, "%s: error: give one MODEL (a model spec, a GPT-2 size name or a safetensors file)\n", kMe);
    return 2;
  }
  if (!dtypes_given) dtypes = {"float32", "float16", "int8", "int4"};
  for (const auto& d : dtypes)
    if (d != "float32" && d != "float16" && d != "bfloat16" && d != "int8" && d != "int4") {
      std::fprintf(stderr, "%s: error: --dtypes: '%s' is not one of float32, float16, bfloat16, int8, int4\n", kMe,
                   d.c_str());
      return 2;
    }
  const std::string model = p.positionals.front();
  std::vector<Tensor> tensors;
  try {
    if (auto spec = preset(model)) tensors = from_spec(*spec);
    else if (!model.empty() && model.front() == '{') tensors = from_spec(model);
    else {
      struct stat st {};
      if (stat(model.c_str(), &st) != 0)
        throw config::Error("'" + model + "' is not a model spec, a known name (gpt2, gpt2-medium, gpt2-large, "
                            "gpt2-xl) or a file; acc estimate-memory does not download models from the Hub");
      tensors = from_path(model);
    }
  } catch (const config::Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 2;
  }
  if (tensors.empty()) {
    std::fprintf(stderr, "%s: error: the model has no tensors\n", kMe);
    return 2;
  }
  int64_t total = 0, params = 0;
  for (const auto& t : tensors) params += t.numel;
  auto [largest, names] = largest_layer(tensors, &total);
  std::vector<std::vector<std::string>> rows;
  for (const auto& d : dtypes) {
    Num tot{static_cast<double>(total), true}, big{static_cast<double>(largest), true};
    double div = d == "float16" || d == "bfloat16" ? 2 : d == "int8" ? 4 : d == "int4" ? 8 : 1;
    if (div != 1) {
      tot = {tot.v / div, false};
      big = {big.v / div, false};
    }
    std::string train;
    if (d == "float32") train = convert_bytes({static_cast<double>(total) * 4, true});
    else if (d == "float16" || d == "bfloat16") train = convert_bytes({static_cast<double>(total) * 2, true});
    else train = "N/A";
    rows.push_back({d, convert_bytes(big), convert_bytes(tot), train});
  }
  std::string title = "Memory Usage for loading `" + model + "`";
  std::printf("%s\n", ascii_table({"dtype", "Largest Layer", "Total Size", "Training using Adam"}, rows, title).c_str());
  std::string list;
  for (size_t i = 0; i < names.size() && i < 3; ++i) list += (i ? ", " : "") + names[i];
  if (names.size() > 3) list += ", ...";
  std::printf("%s parameters in %zu tensors; largest layer: %s\n", with_commas(params).c_str(), tensors.size(),
              list.c_str());
  return 0;
}

}  // namespace acc::launcher
