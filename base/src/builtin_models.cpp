// The built-in model specs (mlp, gpt): parsing, validation and parameter shapes. See acc/builtin_models.hpp.
#include "acc/builtin_models.hpp"

#include <cmath>

#include "acc/limits.hpp"
#include "internal.hpp"

namespace acc::config {
namespace {

using detail::Kind;
using detail::Node;

// Reads the keys of one spec object; every message starts with `what` ("gpt spec") and names the key.
class SpecReader {
 public:
  SpecReader(const Node& obj, std::string what, std::vector<std::string> accepted) : obj_(obj), what_(std::move(what)) {
    for (const auto& [k, v] : obj_.map) {
      bool known = false;
      for (const auto& a : accepted) known = known || a == k;
      if (known) continue;
      std::string near = closest_match(k, accepted);
      fail("unknown key '" + k + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)") +
           "; accepted: " + detail::join(accepted, ", "));
    }
  }

  [[noreturn]] void fail(const std::string& msg) const { throw Error(what_ + ": " + msg); }

  const Node* get(const std::string& key) const {  // null counts as not given
    const Node* n = obj_.find(key);
    return n && n->kind != Kind::Null ? n : nullptr;
  }

  std::string choice(const std::string& key, const std::vector<std::string>& choices) const {
    std::string accepted;
    for (const auto& c : choices) accepted += (accepted.empty() ? "" : ", ") + json::quote(c);
    const Node* n = get(key);
    if (!n) return choices.front();  // the default
    if (n->kind == Kind::String)
      for (const auto& c : choices)
        if (c == n->s) return c;
    fail("'" + key + "' must be one of " + accepted + "; got " + detail::brief_value(*n));
  }

  // An integer >= 1; JSON numbers like 768.0 count as integers.
  static std::optional<int64_t> positive(const Node& n) {
    if (n.kind == Kind::Int && n.i >= 1) return n.i;
    if (n.kind == Kind::Double && n.d >= 1 && n.d <= 9.0e15 && n.d == std::floor(n.d)) return static_cast<int64_t>(n.d);
    return std::nullopt;
  }

  // An integer >= 1, at most `most` (acc/limits.hpp: a size, or a count of blocks).
  int64_t required_int(const std::string& key, int64_t most = limits::kModelSize) const {
    const Node* n = get(key);
    if (!n) fail("'" + key + "' is required (an integer >= 1)");
    auto v = positive(*n);
    if (!v) fail("'" + key + "' must be an integer >= 1; got " + detail::brief_value(*n));
    if (*v > most) fail("'" + key + "' is " + std::to_string(*v) + ", more than the limit of " + std::to_string(most));
    return *v;
  }

 private:
  const Node& obj_;
  std::string what_;
};

MlpSpec parse_mlp(const Node& obj, std::string& device) {
  SpecReader r(obj, "mlp spec", {"type", "sizes", "activation", "loss", "device"});
  device = r.choice("device", {"cpu", "meta"});
  MlpSpec m;
  const Node* sizes = r.get("sizes");
  if (!sizes) r.fail("'sizes' is required: a list [in, hidden..., out] of integers >= 1");
  bool ok = sizes->kind == Kind::List && sizes->list.size() >= 2;
  for (size_t i = 0; ok && i < sizes->list.size(); ++i) {
    auto v = SpecReader::positive(sizes->list[i]);
    ok = v.has_value() && *v <= limits::kModelSize && i < static_cast<size_t>(limits::kModelBlocks);
    if (ok) m.sizes.push_back(*v);
  }
  if (!ok)
    r.fail("'sizes' must be a list [in, hidden..., out] of at least two integers >= 1 (at most " +
           std::to_string(limits::kModelBlocks) + " of them, each at most " + std::to_string(limits::kModelSize) +
           "); got " + detail::brief_value(*sizes));
  m.activation = r.choice("activation", {"relu", "gelu", "tanh"});
  m.loss = r.choice("loss", {"mse", "cross_entropy", "none"});
  return m;
}

GptSpec parse_gpt(const Node& obj, std::string& device) {
  SpecReader r(obj, "gpt spec",
               {"type", "vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "bias", "device"});
  device = r.choice("device", {"cpu", "meta"});
  GptSpec g;
  g.vocab_size = r.required_int("vocab_size");
  g.block_size = r.required_int("block_size");
  g.n_layer = r.required_int("n_layer", limits::kModelBlocks);
  g.n_head = r.required_int("n_head");
  g.n_embd = r.required_int("n_embd");
  if (g.n_embd % g.n_head != 0)
    r.fail("'n_embd' (" + std::to_string(g.n_embd) + ") must be a multiple of 'n_head' (" + std::to_string(g.n_head) +
           ")");
  if (const Node* d = r.get("dropout")) {
    double v = d->kind == Kind::Int ? static_cast<double>(d->i) : d->kind == Kind::Double ? d->d : -1;
    if ((d->kind != Kind::Int && d->kind != Kind::Double) || v < 0 || v >= 1)
      r.fail("'dropout' must be a number in [0, 1); got " + detail::brief_value(*d));
    g.dropout = v;
  }
  if (const Node* b = r.get("bias")) {
    if (b->kind != Kind::Bool) r.fail("'bias' must be true or false; got " + detail::brief_value(*b));
    g.bias = b->b;
  }
  return g;
}

}  // namespace

BuiltinSpec parse_builtin_spec(const std::string& json) {
  const bool blank = json.find_first_not_of(" \t\r\n") == std::string::npos;
  Node root;
  root.kind = Kind::Map;  // blank text: {}
  try {
    if (!blank) root = detail::parse_json(json);
  } catch (const Error& e) {
    throw Error(std::string("model spec: ") + e.what());
  }
  if (root.kind != Kind::Map) throw Error("model spec: expected a JSON object; got " + detail::brief_value(root));
  const Node* type = root.find("type");
  if (!type || type->kind == Kind::Null) throw Error("model spec: 'type' is required: \"mlp\" or \"gpt\"");
  BuiltinSpec spec;
  if (type->kind == Kind::String && type->s == "mlp") {
    spec.mlp = parse_mlp(root, spec.device);
  } else if (type->kind == Kind::String && type->s == "gpt") {
    spec.gpt = parse_gpt(root, spec.device);
  } else {
    throw Error("model spec: 'type' must be \"mlp\" or \"gpt\"; got " + detail::brief_value(*type));
  }
  spec.type = type->s;
  return spec;
}

ParameterShapes builtin_parameter_shapes(const BuiltinSpec& spec) {
  ParameterShapes out;
  if (spec.mlp) {
    const auto& s = spec.mlp->sizes;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const std::string layer = "layers." + std::to_string(i);
      out.push_back({layer + ".weight", {s[i + 1], s[i]}});  // torch.nn.Linear: [out, in]
      out.push_back({layer + ".bias", {s[i + 1]}});
    }
    return out;
  }
  if (!spec.gpt) throw Error("model spec: neither an mlp nor a gpt spec");
  const GptSpec& g = *spec.gpt;
  const int64_t C = g.n_embd;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) { out.push_back({name, std::move(shape)}); };
  auto norm = [&](const std::string& name) {
    add(name + ".weight", {C});
    if (g.bias) add(name + ".bias", {C});
  };
  auto conv1d = [&](const std::string& name, int64_t in, int64_t out_features) {  // GPT-2's Conv1D: [in, out]
    add(name + ".weight", {in, out_features});
    if (g.bias) add(name + ".bias", {out_features});
  };
  add("transformer.wte.weight", {g.vocab_size, C});
  add("transformer.wpe.weight", {g.block_size, C});
  for (int64_t l = 0; l < g.n_layer; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    norm(h + "ln_1");
    conv1d(h + "attn.c_attn", C, 3 * C);
    conv1d(h + "attn.c_proj", C, C);
    norm(h + "ln_2");
    conv1d(h + "mlp.c_fc", C, 4 * C);
    conv1d(h + "mlp.c_proj", 4 * C, C);
  }
  norm("transformer.ln_f");
  return out;  // lm_head.weight is transformer.wte.weight
}

}  // namespace acc::config
