// `acc estimate-memory`: the memory a model needs to load and to train with Adam, per dtype, in the table
// `accelerate estimate-memory` prints. The model is a libacc model spec (the JSON acc_model_create takes: an
// "mlp" or a "gpt"), one of a few named GPT-2 sizes, or a safetensors checkpoint (a file, or a directory of shards).
// Parameter shapes are libacc's (acc/builtin_models.hpp); the largest layer is Accelerate's: the biggest
// module without child modules (calculate_maximum_sizes).
#include <cerrno>
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "acc/builtin_models.hpp"
#include "acc/config.hpp"
#include "acc/files.hpp"
#include "acc/hf_shapes.hpp"
#include "acc/limits.hpp"
#include "acc/safetensors_header.hpp"
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

// Each process's bytes of model state (weights, gradients, Adam's moments) under DDP and ZeRO stages 1-3, as the
// ZeRO paper counts them: fp32 (4-byte weights and gradients, 8 bytes of moments) and mixed precision (16-bit
// weights and gradients, fp32 master weights and moments: 12 bytes). Stage 3 also holds the largest layer gathered.
std::string sharded_table(double params, double largest, int64_t n) {
  const double N = static_cast<double>(n);
  struct Stage {
    const char* name;
    double fp32, mixed;
  };
  const Stage stages[] = {
      {"DDP", 16 * params, 16 * params},
      {"ZeRO-1", 8 * params + 8 * params / N, 4 * params + 12 * params / N},
      {"ZeRO-2", 4 * params + 12 * params / N, 2 * params + 14 * params / N},
      {"ZeRO-3 / FSDP", 16 * params / N + 4 * largest, 16 * params / N + 2 * largest},
  };
  std::vector<std::vector<std::string>> rows;
  for (const auto& st : stages)
    rows.push_back({st.name, convert_bytes({st.fp32, true}), convert_bytes({st.mixed, true})});
  return ascii_table({"Strategy", "float32", "Mixed precision"}, rows,
                     "Training using Adam, per process of " + std::to_string(n));
}

// ----------------------------------------------------------------------------------------------------- models

// A spec given as JSON text: {"type": "gpt", ...} or {"type": "mlp", "sizes": [...]}; the shapes are libacc's
// (one definition in the config library). Every parameter is float32.
// Parameters in float32 (as Accelerate instantiates models to count them).
std::vector<Tensor> from_shapes(const config::ParameterShapes& shapes) {
  std::vector<Tensor> t;
  for (const auto& [name, shape] : shapes) {
    int64_t numel = 1, bytes = 0;
    for (int64_t d : shape)
      if (__builtin_mul_overflow(numel, d, &numel))
        throw config::Error("parameter " + name + " has more than 2^63 elements");
    if (__builtin_mul_overflow(numel, int64_t{4}, &bytes))
      throw config::Error("parameter " + name + " has more than 2^63 bytes");
    t.push_back({name, numel, bytes});
  }
  return t;
}

std::vector<Tensor> from_spec(const std::string& json) {
  return from_shapes(config::builtin_parameter_shapes(config::parse_builtin_spec(json)));
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

// One safetensors file: floating point tensors count in float32 (as Accelerate instantiates models).
void read_safetensors(const std::string& path, std::vector<Tensor>& out) {
  for (const auto& e : config::read_safetensors_header(path).tensors) {
    bool floating = false;
    int64_t size = *config::safetensors_dtype_size(e.dtype, &floating);
    out.push_back({e.name, e.numel(), e.numel() * (floating ? 4 : size)});
  }
}

std::vector<Tensor> from_path(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) throw config::Error("cannot read '" + path + "': " + std::strerror(errno));
  std::vector<Tensor> out;
  if (S_ISDIR(st.st_mode) && stat((path + "/config.json").c_str(), &st) == 0) return from_path(path + "/config.json");
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
    // A regular file within the limit of a config.json (a FIFO, /dev/zero or a 300 MB file is refused, naming it).
    const std::string text = config::read_file(path, limits::kHfConfigBytes);
    // A Hugging Face config.json (it names its architectures), or a libacc model spec.
    if (text.find("\"architectures\"") != std::string::npos)
      return from_shapes(config::hf_parameter_shapes(text, path));
    return from_spec(text);
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

std::vector<cli::Option> estimate_options() {
  std::vector<cli::Option> opts;
  auto opt = [&](const char* name, const char* metavar, const char* help, bool value, std::vector<std::string> s = {},
                 bool many = false) {
    cli::Option o;
    o.name = name;
    o.metavar = metavar;
    o.help = help;
    o.takes_value = value;
    o.many = many;
    o.group = "options";
    o.shorts = std::move(s);
    opts.push_back(o);
  };
  opt("--help", "", "show this help and exit", false, {"-h"});
  // Several values, as accelerate's nargs="+" (which also takes a model name after them: give MODEL first); commas
  // work too.
  opt("--dtypes", "DTYPE [DTYPE ...]", "float32, float16, bfloat16, int8, int4 (default: float32 float16 int8 int4)",
      true, {}, true);
  opt("--num_processes", "N", "processes of the per-process table for DDP and ZeRO stages 1-3 (default: 8)", true);
  opt("--library_name", "NAME", "accepted for compatibility (acc reads no Hub models)", true);
  opt("--trust_remote_code", "", "accepted for compatibility", false);
  return opts;
}

constexpr const char* kDescription =
    "Estimates the memory to load MODEL and to train it with Adam (batch size 1), per dtype, in\n"
    "`accelerate estimate-memory`'s table. MODEL is one of:\n"
    "  - a libacc model spec, as JSON text or a .json file: {\"type\": \"gpt\", \"vocab_size\": ..,\n"
    "    \"block_size\": .., \"n_layer\": .., \"n_head\": .., \"n_embd\": ..} or {\"type\": \"mlp\",\n"
    "    \"sizes\": [in, hidden, ..., out]};\n"
    "  - gpt2, gpt2-medium, gpt2-large, gpt2-xl (those sizes as libacc GPT specs);\n"
    "  - a .safetensors file, or a directory of them (a sharded checkpoint);\n"
    "  - a Hugging Face config.json, or a model directory holding one (Llama, Mistral, Qwen2,\n"
    "    Mixtral, GPT-2, BERT: built empty, as Accelerate does for a Hub model).\n"
    "Sizes count floating point tensors in float32, as Accelerate instantiates models; training\n"
    "with Adam takes 4x the float32 size (weights, gradients, two moments), or 2x with mixed\n"
    "precision (fp32 weights and moments, fp16 gradients), N/A for int8/int4.\n"
    "A second table gives each process's share of that training state across N processes\n"
    "(--num_processes) under DDP and ZeRO stages 1-3 (DeepSpeed's zero_stage; FSDP's FULL_SHARD\n"
    "and SHARD_GRAD_OP are stage 3), as the ZeRO paper counts it: with P parameters, fp32 takes\n"
    "DDP 16P, ZeRO-1 8P+8P/N, ZeRO-2 4P+12P/N, ZeRO-3 16P/N plus the largest layer gathered;\n"
    "mixed precision keeps fp32 master weights and moments (12P) beside 16-bit weights and\n"
    "gradients (2P each). Activations are not included.";

// --num_processes (default 8); false, the error told, when it is not a number of processes.
bool parse_processes(const cli::Parsed& p, int64_t* processes) {
  *processes = 8;
  if (auto it = p.options.find("--num_processes"); it != p.options.end()) {
    const std::string& v = it->second.value;
    char* end = nullptr;
    errno = 0;
    *processes = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || errno || *processes < 1 || *processes > 1000000) {
      std::fprintf(stderr, "%s: error: --num_processes: '%s' is not a number of processes (1 to 1000000)\n", kMe,
                   v.c_str());
      return false;
    }
  }
  return true;
}

// --dtypes (several values, or comma-separated; default float32 float16 int8 int4); false, the error told, on an
// unknown dtype.
bool parse_dtypes(const cli::Parsed& p, std::vector<std::string>* dtypes) {
  if (auto it = p.options.find("--dtypes"); it != p.options.end()) {
    for (const auto& v : it->second.values) {
      std::stringstream ss(v);
      for (std::string d; std::getline(ss, d, ',');)
        if (!d.empty()) dtypes->push_back(d);
    }
  } else {
    *dtypes = {"float32", "float16", "int8", "int4"};
  }
  for (const auto& d : *dtypes)
    if (d != "float32" && d != "float16" && d != "bfloat16" && d != "int8" && d != "int4") {
      std::fprintf(stderr, "%s: error: --dtypes: '%s' is not one of float32, float16, bfloat16, int8, int4\n", kMe,
                   d.c_str());
      return false;
    }
  return true;
}

// The model's tensors, from a preset name, a JSON spec or a path; 0, or the exit status with the error told.
int load_model(const std::string& model, std::vector<Tensor>* tensors) {
  try {
    if (auto spec = preset(model)) *tensors = from_spec(*spec);
    else if (!model.empty() && model.front() == '{') *tensors = from_spec(model);
    else {
      struct stat st{};
      if (stat(model.c_str(), &st) != 0)
        throw config::Error("'" + model +
                            "' is not a model spec, a known name (gpt2, gpt2-medium, gpt2-large, "
                            "gpt2-xl) or a file; acc estimate-memory does not download models from the Hub");
      *tensors = from_path(model);
    }
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory\n", kMe);
    return 1;
  } catch (const std::exception& e) {  // config::Error, and FileError naming the file (a FIFO, a device, too large)
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 2;
  }
  if (tensors->empty()) {
    std::fprintf(stderr, "%s: error: the model has no tensors\n", kMe);
    return 2;
  }
  return 0;
}

// accelerate estimate-memory's table: per dtype, the largest layer, the total and the training size with Adam.
std::vector<std::vector<std::string>> dtype_rows(const std::vector<std::string>& dtypes, int64_t total,
                                                 int64_t largest) {
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
  return rows;
}

}  // namespace

int estimate_main(const std::vector<std::string>& args) {
  const std::vector<cli::Option> opts = estimate_options();
  cli::Parsed p;
  if (auto done =
          cli::parse_or_help(opts, args, kMe, "acc estimate-memory MODEL [--dtypes DTYPE ...]", kDescription, p))
    return *done;
  if (p.positionals.size() != 1) {
    std::fprintf(stderr, "%s: error: give one MODEL (a model spec, a GPT-2 size name or a safetensors file)\n", kMe);
    return 2;
  }
  int64_t processes = 8;
  if (!parse_processes(p, &processes)) return 2;
  std::vector<std::string> dtypes;
  if (!parse_dtypes(p, &dtypes)) return 2;
  const std::string model = p.positionals.front();
  std::vector<Tensor> tensors;
  if (int rc = load_model(model, &tensors)) return rc;
  int64_t total = 0, params = 0;
  for (const auto& t : tensors)
    if (__builtin_add_overflow(params, t.numel, &params) || __builtin_add_overflow(total, t.bytes, &total)) {
      std::fprintf(stderr, "%s: error: %s: the model has more than 2^63 parameters or bytes\n", kMe, model.c_str());
      return 2;
    }
  auto [largest, names] = largest_layer(tensors, &total);
  const auto rows = dtype_rows(dtypes, total, largest);
  std::string title = "Memory Usage for loading `" + model + "`";
  std::printf("%s\n",
              ascii_table({"dtype", "Largest Layer", "Total Size", "Training using Adam"}, rows, title).c_str());
  std::printf("%s\n",
              sharded_table(static_cast<double>(total) / 4, static_cast<double>(largest) / 4, processes).c_str());
  std::string list;
  for (size_t i = 0; i < names.size() && i < 3; ++i) list += (i ? ", " : "") + names[i];
  if (names.size() > 3) list += ", ...";
  std::printf("%s parameters in %zu tensors; largest layer: %s\n", with_commas(params).c_str(), tensors.size(),
              list.c_str());
  return 0;
}

}  // namespace acc::launcher
