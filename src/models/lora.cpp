#include "models/lora.hpp"

#include <c10/core/GradMode.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string_view>
#include <unordered_set>

#include "util/errors.hpp"
#include "util/pattern.hpp"
#include <acc/json.hpp>
#include <acc/limits.hpp>

namespace acc::core::lora {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A list of strings, or (when `string_ok`) one string; the kind is returned.
Config::Kind strings(const json::Value& v, std::vector<std::string>& out, bool string_ok) {
  if (v.is_null()) return Config::Kind::None;
  if (string_ok && v.is_string()) {
    out = {v.as_string()};
    return Config::Kind::String;
  }
  if (!v.is_array()) v.fail(string_ok ? "expected a list of strings or a string" : "expected a list of strings");
  // peft keeps a set; the first of each name in the text's order (a hash set: a long list stays linear).
  std::unordered_set<std::string_view> seen;
  for (const auto& e : v.elements()) {
    const std::string& s = e.as_string();  // lives as long as the document
    if (seen.insert(s).second) out.push_back(s);
  }
  return Config::Kind::List;
}

// LoraConfig's fields that libacc does not act on, with the only values it accepts (peft's defaults, as tight JSON;
// "*" takes any value). adapter_config.json gets the first of each.
struct Passive {
  const char* key;
  std::vector<const char*> accepted;
};
const std::vector<Passive>& passive_fields() {
  static const std::vector<Passive> fields = {{"alora_invocation_tokens", {"null"}},
                                              {"arrow_config", {"null"}},
                                              {"corda_config", {"null"}},
                                              {"ensure_weight_tying", {"false"}},
                                              {"eva_config", {"null"}},
                                              {"kasa_config", {"null"}},
                                              {"layer_replication", {"null"}},
                                              {"loftq_config", {"{}", "null"}},
                                              {"lora_bias", {"false"}},
                                              {"lora_ga_config", {"null"}},
                                              {"megatron_config", {"null"}},
                                              {"megatron_core", {"\"megatron.core\"", "*"}},
                                              {"monteclora_config", {"null"}},
                                              {"qalora_group_size", {"16", "*"}},
                                              {"trainable_token_indices", {"null"}},
                                              {"use_bdlora", {"null", "false"}},
                                              {"use_dora", {"false"}},
                                              {"use_qalora", {"false"}},
                                              {"velora_config", {"null"}},
      // Written by peft itself: read, and written again by libacc.
                                              {"auto_mapping", {"null", "*"}},
                                              {"peft_version", {"\"0.21.2\"", "*"}},
                                              {"runtime_config", {"*"}}};
  return fields;
}

const char* const kTaskTypes[] = {"SEQ_CLS",   "SEQ_2_SEQ_LM", "CAUSAL_LM",
                                  "TOKEN_CLS", "QUESTION_ANS", "FEATURE_EXTRACTION"};

// A rank_pattern / alpha_pattern key as peft's get_pattern_key matches it: the end of a module name, at a dot.
// Compiled in this form when the config is read, so that a key refused (too long once wrapped, an unbalanced \Q)
// is named then, not when the adapter is planned.
Pattern key_pattern(const std::string& key, const std::string& where) {
  return Pattern("(.*\\.)?(" + key + ")", where);
}

// A layers_pattern entry as peft's get_layer_index reads it: group 1 is the layer's number, so the entry may not
// capture a group of its own (peft's int() fails on it too).
Pattern layers_matcher(const std::string& p, const std::string& where) {
  Pattern re("^(?:|.*?\\.)" + p + "\\.(\\d+)\\.", where);
  if (re.groups() != 1)
    throw std::invalid_argument(where + ": layers_pattern '" + p +
                                "' captures a group of its own, where peft reads "
                                "the layer number; write its groups as (?:...)");
  return re;
}

// rank_pattern's, alpha_pattern's and layers_pattern's expressions, compiled once per plan: each is matched against
// every module name (compiling them per name took seconds on a large config).
struct Matchers {
  std::vector<std::pair<Pattern, int64_t>> rank;
  std::vector<std::pair<Pattern, double>> alpha;
  std::vector<Pattern> layers;
  explicit Matchers(const Config& c) {
    for (const auto& [k, r] : c.rank_pattern) rank.emplace_back(key_pattern(k, "rank_pattern"), r);
    for (const auto& [k, a] : c.alpha_pattern) alpha.emplace_back(key_pattern(k, "alpha_pattern"), a);
    if (!c.layers_pattern || c.layers_pattern->empty())
      layers.emplace_back(R"(^.*?\.[^.]*\.(\d+)\.)", "layers_pattern");
    else
      for (const auto& p : *c.layers_pattern) layers.push_back(layers_matcher(p, "layers_pattern"));
  }
};

}  // namespace

bool Config::all_linear() const { return target_kind == Kind::String && lower(target_modules.front()) == "all-linear"; }

// A config file's limits (nesting, keys per object, string values); keys are rank_pattern's and alpha_pattern's
// patterns, as long as a pattern may be.
constexpr json::Limits kConfigTextLimits{limits::kConfigDepth, limits::kKeysPerMapping, limits::kPatternBytes,
                                         limits::kStringBytes, false};

namespace {

void read_init_lora_weights(Config& c, const json::Value& v) {
  if (v.is_bool()) {
    c.init_lora_weights = v.as_bool() ? "true" : "false";
  } else if (v.is_string() && v.as_string() == "gaussian") {
    c.init_lora_weights = "gaussian";
  } else if (v.is_string()) {
    throw UnsupportedError(v.where() + ": init_lora_weights " + v.text() +
                           " is not one libacc has (true, \"gaussian\", false)");
  } else {
    v.fail("init_lora_weights must be true, \"gaussian\" or false; got " + v.text());
  }
}

// The adapter itself: rank, scaling, dropout, targets, bias, initialisation. False: not one of these keys.
bool read_adapter_field(Config& c, const std::string& key, const json::Value& v) {
  if (key == "r") {
    if (!v.is_integer() || v.as_int() <= 0) v.fail("r must be a positive integer; got " + v.text());
    c.r = v.as_int();
  } else if (key == "lora_alpha") {
    c.lora_alpha = v.as_double();
  } else if (key == "lora_dropout") {
    c.lora_dropout = v.as_double();
    if (!(c.lora_dropout >= 0 && c.lora_dropout < 1)) v.fail("lora_dropout must be in [0, 1); got " + v.text());
  } else if (key == "target_modules") {
    c.target_kind = strings(v, c.target_modules, true);
    if (c.target_kind == Config::Kind::List && c.target_modules.empty()) v.fail("target_modules is an empty list");
  } else if (key == "exclude_modules") {
    c.exclude_kind = strings(v, c.exclude_modules, true);
  } else if (key == "fan_in_fan_out") {
    c.fan_in_fan_out = v.as_bool();
  } else if (key == "bias") {
    c.bias = v.as_string();
    if (c.bias != "none" && c.bias != "all" && c.bias != "lora_only")
      v.fail("bias must be \"none\", \"all\" or \"lora_only\"; got " + v.text());
  } else if (key == "use_rslora") {
    c.use_rslora = v.as_bool();
  } else if (key == "modules_to_save") {
    std::vector<std::string> m;
    if (strings(v, m, false) != Config::Kind::None) c.modules_to_save = m;
  } else if (key == "init_lora_weights") {
    read_init_lora_weights(c, v);
  } else {
    return false;
  }
  return true;
}

// Which layers, and ranks and alphas per module pattern. False: not one of these keys.
bool read_layer_field(Config& c, const std::string& key, const json::Value& v) {
  if (key == "layers_to_transform") {
    if (v.is_null()) return true;
    std::vector<int64_t> layers;
    if (v.is_array()) {
      for (const auto& e : v.elements()) layers.push_back(e.as_int());
    } else {
      layers.push_back(v.as_int());
      c.layers_to_transform_is_int = true;
    }
    c.layers_to_transform = layers;
  } else if (key == "layers_pattern") {
    std::vector<std::string> p;
    const Config::Kind k = strings(v, p, true);
    if (k != Config::Kind::None) c.layers_pattern = p;
    c.layers_pattern_is_string = k == Config::Kind::String;
    for (const auto& one : p) layers_matcher(one, v.where());  // refused when read, naming the key
  } else if (key == "rank_pattern") {
    if (v.is_null()) return true;
    if (!v.is_object()) v.fail("rank_pattern must be an object of module patterns and ranks");
    for (const auto& [pattern, rank] : v.items()) {
      if (!rank.is_integer() || rank.as_int() <= 0) rank.fail("a rank must be a positive integer; got " + rank.text());
      key_pattern(pattern, rank.where());  // refused when read, naming the key
      c.rank_pattern.emplace_back(pattern, rank.as_int());
    }
  } else if (key == "alpha_pattern") {
    if (v.is_null()) return true;
    if (!v.is_object()) v.fail("alpha_pattern must be an object of module patterns and alphas");
    for (const auto& [pattern, alpha] : v.items()) {
      key_pattern(pattern, alpha.where());  // refused when read, naming the key
      c.alpha_pattern.emplace_back(pattern, alpha.as_double());
    }
  } else {
    return false;
  }
  return true;
}

// What the adapter is for and where it came from. False: not one of these keys.
bool read_meta_field(Config& c, const std::string& key, const json::Value& v) {
  if (key == "task_type") {
    if (v.is_null()) return true;
    c.task_type = v.as_string();
    if (std::none_of(std::begin(kTaskTypes), std::end(kTaskTypes), [&](const char* t) { return c.task_type == t; }))
      v.fail("task_type must be null or one of peft's TaskType values (CAUSAL_LM, SEQ_CLS, SEQ_2_SEQ_LM, "
             "TOKEN_CLS, QUESTION_ANS, FEATURE_EXTRACTION); got " +
             v.text());
  } else if (key == "base_model_name_or_path") {
    if (!v.is_null()) c.base_model_name_or_path = v.as_string();
  } else if (key == "revision") {
    if (!v.is_null()) c.revision = v.as_string();
  } else if (key == "inference_mode") {
    c.inference_mode = v.as_bool();
  } else if (key == "target_parameters") {
    strings(v, c.target_parameters, false);
  } else if (key == "peft_type") {
    if (v.as_string() != "LORA") v.fail("this is a " + v.as_string() + " adapter; libacc reads LoRA (\"LORA\")");
  } else {
    return false;
  }
  return true;
}

// A LoraConfig field libacc does not act on: accepted only with a value that asks for nothing; an unknown field
// is refused.
void check_passive_field(const std::string& key, const json::Value& v) {
  const auto& fields = passive_fields();
  auto it = std::find_if(fields.begin(), fields.end(), [&](const Passive& p) { return key == p.key; });
  if (it == fields.end()) v.fail("unknown LoraConfig field '" + key + "' (peft 0.21's LoraConfig has no such field)");
  const std::string given = v.text();
  if (std::none_of(it->accepted.begin(), it->accepted.end(),
                   [&](const char* a) { return std::string(a) == "*" || given == a; })) {
    throw UnsupportedError(v.where() + ": libacc implements LoRA without " + key + "; it must be " +
                           it->accepted.front() + " (got " + given + ")");
  }
}

// LoraConfig.__post_init__
void post_init(Config& c, const std::string& source) {
  if (c.target_kind == Config::Kind::String && (c.layers_to_transform || c.layers_pattern))
    throw std::invalid_argument(source + ": layers_to_transform and layers_pattern apply to a list of target_modules, "
                                         "not to a regular expression");
  if (c.layers_pattern && !c.layers_to_transform)
    throw std::invalid_argument(source + ": layers_pattern needs layers_to_transform");
  if (c.task_type == "SEQ_CLS") {  // PeftModelForSequenceClassification adds the heads
    std::vector<std::string> m = c.modules_to_save.value_or(std::vector<std::string>{});
    for (const char* head : {"classifier", "score"})
      if (std::find(m.begin(), m.end(), head) == m.end()) m.push_back(head);
    c.modules_to_save = m;
  }
}

}  // namespace

Config parse_config(std::string_view text, const std::string& source) {
  const json::Document doc = json::Document::object(text, source, kConfigTextLimits);
  Config c;
  for (const auto& [key, v] : doc.root().items()) {
    if (read_adapter_field(c, key, v) || read_layer_field(c, key, v) || read_meta_field(c, key, v)) continue;
    check_passive_field(key, v);
  }
  post_init(c, source);
  return c;
}

/* ------------------------------------------------------------------------------------------ the layers */

Factor::Factor(int64_t rows, int64_t cols, bool a, std::string init_mode, int64_t rank, const at::TensorOptions& o)
    : InitModule("Linear"), is_a(a), init(std::move(init_mode)), r(rank) {
  register_parameter("weight", at::empty({rows, cols}, o));
}

void Factor::reset() {
  at::Tensor& w = param("weight");
  const double fan_in = static_cast<double>(w.size(1));
  if (init == "false" || (is_a && init == "true")) {
    // nn.Linear's kaiming_uniform_(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    w.uniform_(-1 / std::sqrt(fan_in), 1 / std::sqrt(fan_in));
  } else if (is_a) {  // gaussian
    w.normal_(0, 1.0 / static_cast<double>(r));
  } else {
    w.zero_();  // B = 0: the adapter starts as a no-op
  }
}

std::pair<at::Tensor, at::Tensor> Branch::factors() const {
  const at::Tensor& a = A->param("weight");
  const at::Tensor& b = B->param("weight");
  if (experts == 0) return {a, b};
  const int64_t r = a.size(0) / experts;
  return {a.view({experts, r, a.size(1)}).select(0, expert),
          b.view({b.size(0), r, experts}).select(2, expert).narrow(0, row0, rows)};
}

at::Tensor Branch::add_to(const at::Tensor& x, const at::Tensor& y, bool training) const {
  const auto [a, b] = factors();
  at::Tensor h = x.scalar_type() == a.scalar_type() ? x : x.to(a.scalar_type());
  if (dropout > 0) h = at::dropout(h, dropout, training);
  at::Tensor out = y + at::linear(at::linear(h, a), b) * scaling;
  return out.scalar_type() == y.scalar_type() ? out : out.to(y.scalar_type());
}

Host* default_host_of(torch::nn::Module& m) { return dynamic_cast<Host*>(&m); }

/* ------------------------------------------------------------------------------------------ matching */

namespace {

using ModuleMap = std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>;

ModuleMap modules_of(torch::nn::Module& root) {
  ModuleMap out;
  for (const auto& item : root.named_modules("", /*include_self=*/false)) out.emplace_back(item.key(), item.value());
  return out;
}

torch::nn::Module& module_at(torch::nn::Module& root, const std::string& name) {
  for (const auto& item : root.named_modules("", false))
    if (item.key() == name) return *item.value();
  throw std::logic_error("lora: no module '" + name + "'");
}

// A list of target (or excluded) names, for peft's test of a module name against it: the name equals one, or ends
// with "." and one. Looked up by the name's suffixes at dots, so a long list costs one hash per suffix, not a
// comparison with every entry.
class NameList {
 public:
  explicit NameList(const std::vector<std::string>& names) : names_(names.begin(), names.end()) {}
  bool matches(const std::string& key) const {
    if (names_.count(key)) return true;
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1))
      if (names_.count(key.substr(dot + 1))) return true;
    return false;
  }

 private:
  std::unordered_set<std::string> names_;
};

// A list for a message: its first names, and how many there are when it is long.
std::string shown_list(const std::vector<std::string>& v) {
  constexpr size_t kShown = 20;
  if (v.size() <= kShown) return "[" + join(v) + "]";
  return "[" + join(std::vector<std::string>(v.begin(), v.begin() + kShown)) + ", ... (" + std::to_string(v.size()) +
         " names)]";
}

// peft's layer index of a module name: the first number after a layers_pattern (or after any second component).
std::optional<int64_t> layer_index(const std::string& key, const Matchers& m) {
  for (const auto& re : m.layers) {
    std::string index;
    if (re.search(key, &index)) return std::stoll(index);  // digits: layers_matcher refused a group of its own
  }
  return std::nullopt;
}

// get_pattern_key: the first key (in order) that matches the end of the name at a dot.
template <class V>
const V* pattern_for(const std::string& name, const std::vector<std::pair<Pattern, V>>& p) {
  for (const auto& [re, value] : p)
    if (re.full_match(name)) return &value;
  return nullptr;
}

const std::map<std::string, std::vector<std::string>>& default_targets() {
  static const std::map<std::string, std::vector<std::string>> m = {{"llama", {"q_proj", "v_proj"}},
                                                                    {"mistral", {"q_proj", "v_proj"}},
                                                                    {"mixtral", {"q_proj", "v_proj"}},
                                                                    {"qwen2", {"q_proj", "v_proj"}},
                                                                    {"gpt2", {"c_attn"}},
                                                                    {"bert", {"query", "value"}}};
  return m;
}

bool is_torch_linear(torch::nn::Module& m) { return dynamic_cast<torch::nn::LinearImpl*>(&m) != nullptr; }

// peft's _find_minimal_target_modules: the shortest suffixes that name the targets and no other module.
std::vector<std::string> minimal_targets(const std::vector<std::string>& targets,
                                         const std::vector<std::string>& others) {
  auto suffixes = [](const std::string& name) {  // shortest first
    std::vector<std::string> out;
    for (size_t i = name.size(); i-- > 0;)
      if (name[i] == '.') out.push_back(name.substr(i + 1));
    out.push_back(name);
    return out;
  };
  std::set<std::string> other;
  for (const auto& o : others)
    for (auto& s : suffixes(o)) other.insert(s);
  std::vector<std::pair<std::vector<std::string>, std::string>> sorted;
  for (const auto& t : targets) sorted.emplace_back(suffixes(t), t);
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> required;
  for (const auto& [sfx, item] : sorted) {
    for (const auto& s : sfx) {
      if (std::find(required.begin(), required.end(), s) != required.end() || other.count(s)) continue;
      if (std::none_of(required.begin(), required.end(),
                       [&](const std::string& r) { return item == r || ends_with(item, "." + r); }))
        required.push_back(s);
      break;
    }
  }
  return required.empty() ? targets : required;
}

// peft's _convert_peft_config_moe for Mixtral (transformers 5 fuses the experts): the v4 names of the experts' and
// the router's layers in target_modules become parameter targets; w1 and w3, fused into gate_up_proj, go together and
// get twice the rank and alpha (the same scaling). `linear` holds the leaf names of the model's linear layers.
void convert_mixtral(Config& c, const std::vector<std::string>& linear) {
  static const std::pair<const char*, const char*> kMapping[] = {
      {"w1", "gate_up_proj"}, {"w3", "gate_up_proj"}, {"w2", "down_proj"}, {"gate", "gate.weight"}};
  if (c.target_kind == Config::Kind::String) {
    if (!c.all_linear()) return;
    std::vector<std::string> leaves = linear;
    for (const auto& [old_name, new_name] : kMapping) leaves.push_back(old_name);
    c.target_kind = Config::Kind::List;
    c.target_modules.clear();
    for (const auto& l : leaves)
      if (std::find(c.target_modules.begin(), c.target_modules.end(), l) == c.target_modules.end())
        c.target_modules.push_back(l);
  }
  if (c.target_kind != Config::Kind::List) return;
  std::vector<std::string> remaining, params = c.target_parameters;
  std::set<std::string> fused;
  for (const auto& t : c.target_modules) {
    const auto* m = std::find_if(std::begin(kMapping), std::end(kMapping), [&](const auto& item) {
      return t == item.first || ends_with(t, std::string(".") + item.first);
    });
    if (m == std::end(kMapping)) {
      remaining.push_back(t);
      continue;
    }
    if (std::find(params.begin(), params.end(), m->second) == params.end()) params.push_back(m->second);
    if (std::string(m->second) == "gate_up_proj") fused.insert(m->first);
  }
  if (fused.size() == 1)
    throw std::invalid_argument("target_modules names " + *fused.begin() + " without " +
                                (fused.count("w1") ? "w3" : "w1") +
                                ": Mixtral's w1 and w3 are one fused gate_up_proj under transformers 5, so peft "
                                "targets both or neither");
  if (fused.size() == 2) {
    c.rank_pattern.emplace_back(".*\\.gate_up_proj", 2 * c.r);
    c.alpha_pattern.emplace_back(".*\\.gate_up_proj", 2 * c.lora_alpha);
  }
  c.target_parameters = params;
  c.target_modules = remaining;
}

std::string parent_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? "" : name.substr(0, dot);
}

std::string local_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

// A target's rank and alpha: rank_pattern's and alpha_pattern's first key matching `key`, else r and lora_alpha.
void set_rank(Adapter::Target& t, const std::string& key, const Config& c, const Matchers& m) {
  const int64_t* rp = pattern_for(key, m.rank);
  const double* ap = pattern_for(key, m.alpha);
  t.r = rp ? *rp : c.r;
  t.alpha = ap ? *ap : c.lora_alpha;
  t.scaling = c.use_rslora ? t.alpha / std::sqrt(static_cast<double>(t.r)) : t.alpha / static_cast<double>(t.r);
}

// A target's two tensors in the file and the model.
void add_lora_entries(Adapter& a, const Adapter::Target& t) {
  const int64_t rank = t.r * std::max<int64_t>(t.experts, 1);
  const std::string key = kKeyPrefix + (t.key_module.empty() ? t.module : t.key_module);
  a.entries.push_back({t.module + ".lora_A.weight", key + ".lora_A.weight", {rank, t.in}});
  a.entries.push_back({t.module + ".lora_B.weight", key + ".lora_B.weight", {t.out, rank}});
}

// peft's parameter targets on transformers 5's Mixtral, where libacc keeps the experts per expert (the checkpoint's
// block_sparse_moe.experts.E.w1/w2/w3) and the router as a linear layer: gate.weight is a LoRA on the router;
// gate_up_proj (w1 rows, then w3 rows) and down_proj (w2) are fused over the experts, each expert's layers using
// their slices of one A and one B. The file names them as transformers 5 does (mlp.gate, mlp.experts).
void add_parameter_targets(Adapter& a, const ModuleMap& modules, const HostOf& host_of, const Matchers& matchers) {
  const Config& c = a.config;
  const bool mixtral = a.info.model_type == "mixtral";
  for (const auto& p : c.target_parameters)
    if (!mixtral || (p != "gate_up_proj" && p != "down_proj" && p != "gate.weight"))
      throw UnsupportedError("target_parameters '" + p +
                             "': libacc has peft's parameter targets of Mixtral's fused "
                             "experts and router only (gate_up_proj, down_proj, gate.weight)");
  if (c.lora_dropout > 0)
    throw std::invalid_argument("lora_dropout must be 0 with target_parameters (peft's ParamWrapper has no dropout)");
  if (c.layers_to_transform)
    throw UnsupportedError("layers_to_transform with target_parameters is not implemented by libacc");
  auto has = [&](const char* p) {
    return std::find(c.target_parameters.begin(), c.target_parameters.end(), p) != c.target_parameters.end();
  };
  auto find_module = [&](const std::string& n) -> torch::nn::Module* {
    for (const auto& [name, m] : modules)
      if (name == n) return m.get();
    return nullptr;
  };
  const std::string moe_name = "block_sparse_moe";
  for (const auto& [name, m] : modules) {
    if (local_of(name) != moe_name) continue;
    const std::string v5 = parent_of(name) + ".mlp";  // transformers 5's name of the block
    if (has("gate.weight")) {
      Host* h = find_module(name + ".gate") ? host_of(*find_module(name + ".gate")) : nullptr;
      if (!h) throw std::logic_error("lora: no router at " + name + ".gate");
      Adapter::Target t;
      t.module = name + ".gate";
      t.key_module = v5 + ".gate";
      t.in = h->host_weight().size(1);
      t.out = h->host_weight().size(0);
      set_rank(t, v5 + ".gate.weight", c, matchers);
      a.targets.push_back(t);
    }
    int64_t experts = 0;
    while (find_module(name + ".experts." + std::to_string(experts))) ++experts;
    if (experts == 0) continue;
    Host* w1 = host_of(*find_module(name + ".experts.0.w1"));
    const int64_t inter = w1->host_weight().size(0), hidden = w1->host_weight().size(1);
    const bool both = has("gate_up_proj") && has("down_proj");
    if (has("gate_up_proj")) {  // peft's nesting when both are targeted: gate_up_proj inside (match_fused_keys)
      Adapter::Target t;
      t.module = name + ".experts.gate_up_proj";
      t.key_module = v5 + ".experts" + (both ? ".base_layer" : "");
      t.in = hidden;
      t.out = 2 * inter;
      t.experts = experts;
      set_rank(t, v5 + ".experts.gate_up_proj", c, matchers);
      for (int64_t e = 0; e < experts; ++e) {
        const std::string expert = name + ".experts." + std::to_string(e);
        t.uses.push_back({expert + ".w1", e, 0, inter});
        t.uses.push_back({expert + ".w3", e, inter, inter});
      }
      a.targets.push_back(t);
    }
    if (has("down_proj")) {
      Adapter::Target t;
      t.module = name + ".experts.down_proj";
      t.key_module = v5 + ".experts";
      t.in = inter;
      t.out = hidden;
      t.experts = experts;
      set_rank(t, v5 + ".experts.down_proj", c, matchers);
      for (int64_t e = 0; e < experts; ++e)
        t.uses.push_back({name + ".experts." + std::to_string(e) + ".w2", e, 0, hidden});
      a.targets.push_back(t);
    }
  }
}

bool has_module(const ModuleMap& modules, const std::string& n) {
  return std::any_of(modules.begin(), modules.end(), [&](const auto& m) { return m.first == n; });
}

// No target_modules: peft's default for the model type (none: the error names the model's linear layers).
void default_targets_for(Config& c, const ModelInfo& info, const std::vector<std::string>& linear) {
  auto it = default_targets().find(info.model_type);
  if (it == default_targets().end())
    throw std::invalid_argument("target_modules is required: peft has no default for " +
                                (info.model_type.empty() ? std::string("this model")
                                                         : "model_type '" + info.model_type + "'") +
                                " (its linear layers: " + join(linear) + ")");
  c.target_kind = Config::Kind::List;
  c.target_modules = it->second;
}

// A tied head is not a module of its own in libacc: peft would adapt or copy it, libacc cannot.
void refuse_tied_head(const Config& c) {
  auto names_head = [&](const std::vector<std::string>& v, bool suffix_only) {
    for (const auto& m : v)
      if (suffix_only ? ends_with("lm_head", m) : ("lm_head" == m)) return true;
    return false;
  };
  if ((c.modules_to_save && names_head(*c.modules_to_save, true)) ||
      (c.target_kind == Config::Kind::List && names_head(c.target_modules, false)))
    throw UnsupportedError("this model's lm_head is tied to its input embedding and is not a module of its own in "
                           "libacc: it cannot be in target_modules or modules_to_save");
}

// "all-linear" (_maybe_include_all_linear_layers): every linear layer but the output head becomes a target; the
// adapter's file names them, or fewer suffixes that select the same (minimal_targets).
void expand_all_linear(Adapter& a, Config& c, const ModelInfo& info, const ModuleMap& modules,
                       const std::vector<std::string>& linear) {
  std::string output;
  if (info.transformers && has_module(modules, "lm_head")) {
    output = "lm_head";
  } else if (info.transformers && c.task_type == "SEQ_CLS") {
    for (const char* head : {"score", "classifier"})
      if (has_module(modules, head)) {
        output = head;
        break;
      }
  }
  std::vector<std::string> names;
  for (const auto& n : linear)
    if (n != output) names.push_back(n);
  c.target_kind = Config::Kind::List;
  c.target_modules = names;
  std::vector<std::string> others;
  for (const auto& [n, m] : modules)
    if (std::find(names.begin(), names.end(), n) == names.end()) others.push_back(n);
  a.written_targets = names.size() >= 20 ? minimal_targets(names, others) : names;
}

// modules_to_save (_set_trainable): every module whose name ends with one of them, not inside another.
void find_saved_modules(Adapter& a, const ModuleMap& modules) {
  const Config& c = a.config;
  if (!c.modules_to_save) return;
  for (const auto& [name, m] : modules) {
    if (std::any_of(a.saved_modules.begin(), a.saved_modules.end(),
                    [&, &n = name](const std::string& s) { return n.rfind(s + ".", 0) == 0; }))
      continue;
    for (const auto& s : *c.modules_to_save)
      if (ends_with(name, s)) {
        a.saved_modules.push_back(name);
        break;
      }
  }
}

// The target a matched module makes (it must be a libacc linear layer).
Adapter::Target module_target(const std::string& name, torch::nn::Module& m, const HostOf& host_of, const Config& c,
                              const Matchers& matchers, const std::vector<std::string>& linear) {
  Host* h = host_of(m);
  if (!h) {
    if (is_torch_linear(m))
      throw std::invalid_argument("target '" + name +
                                  "' is a torch::nn::Linear, whose forward libacc cannot extend: "
                                  "build the layer as acc::Linear (acc/torch.hpp), a drop-in that takes an adapter");
    throw std::invalid_argument("target '" + name + "' (" + m.name() +
                                ") is not a linear layer: LoRA adapts "
                                "linear layers (the model's: " +
                                join(linear) + ")");
  }
  Adapter::Target t;
  t.module = name;
  const at::Tensor w = h->host_weight();
  t.fan_in_fan_out = h->fan_in_fan_out();
  t.in = w.size(t.fan_in_fan_out ? 0 : 1);
  t.out = w.size(t.fan_in_fan_out ? 1 : 0);
  set_rank(t, name, c, matchers);
  return t;
}

// check_target_module_exists over every module: the targets of target_modules (a list or a regular expression),
// less exclude_modules, modules_to_save and layers outside layers_to_transform. True when some module matched
// before layers_to_transform was applied (for the message when none is left).
bool add_module_targets(Adapter& a, const ModuleMap& modules, const HostOf& host_of, const Matchers& matchers,
                        bool mixtral, const std::vector<std::string>& linear) {
  const Config& c = a.config;
  std::optional<Pattern> target_re, exclude_re;
  if (c.target_kind == Config::Kind::String) target_re = Pattern(c.target_modules.front(), "target_modules");
  if (c.exclude_kind == Config::Kind::String) exclude_re = Pattern(c.exclude_modules.front(), "exclude_modules");
  std::vector<Pattern> saved_res;
  if (c.modules_to_save)
    for (const auto& s : *c.modules_to_save)
      saved_res.push_back(Pattern("(^|.*\\.)" + s + "($|\\..*)", "modules_to_save"));
  const NameList target_list(c.target_kind == Config::Kind::List ? c.target_modules : std::vector<std::string>{});
  const NameList exclude_list(c.exclude_kind == Config::Kind::List ? c.exclude_modules : std::vector<std::string>{});
  bool any_unexcluded = false;
  for (const auto& [name, m] : modules) {
    if (exclude_re ? exclude_re->full_match(name) : exclude_list.matches(name)) continue;
    if (std::any_of(saved_res.begin(), saved_res.end(), [&, &n = name](const Pattern& r) { return r.full_match(n); }))
      continue;
    bool hit = target_re ? target_re->full_match(name) : target_list.matches(name);
    if (hit && mixtral && target_re && name.find(".block_sparse_moe.") != std::string::npos)
      throw UnsupportedError("target_modules '" + c.target_modules.front() +
                             "' reaches Mixtral's experts or router "
                             "('" +
                             name +
                             "'), which peft targets as transformers 5's fused parameters: name them as "
                             "a list (w1, w3, w2, gate) instead of a regular expression");
    if (hit) any_unexcluded = true;
    if (hit && !target_re && c.layers_to_transform) {
      const auto idx = layer_index(name, matchers);
      hit = idx && std::find(c.layers_to_transform->begin(), c.layers_to_transform->end(), *idx) !=
                       c.layers_to_transform->end();
    }
    if (!hit) continue;
    a.targets.push_back(module_target(name, *m, host_of, c, matchers, linear));
  }
  return any_unexcluded;
}

[[noreturn]] void refuse_no_target(const Config& c, bool any_unexcluded, const std::vector<std::string>& linear) {
  std::string given = c.target_kind == Config::Kind::String ? "'" + c.target_modules.front() + "'"
                                                            : shown_list(c.target_modules);
  std::string why = any_unexcluded && c.layers_to_transform ? " in the layers layers_to_transform names"
                    : c.exclude_kind != Config::Kind::None  ? " (after exclude_modules)"
                                                            : "";
  throw std::invalid_argument("target_modules " + given + " matched no linear layer of the model" + why +
                              "; its linear layers are: " + join(linear));
}

// The entries: what trains and what the file holds (get_peft_model_state_dict).
void add_entries(Adapter& a, torch::nn::Module& root) {
  const Config& c = a.config;
  auto targeted = [&](const std::string& module) {
    return std::any_of(a.targets.begin(), a.targets.end(),
                       [&](const Adapter::Target& t) { return t.module == module; });
  };
  for (const auto& item : root.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    const size_t dot = name.rfind('.');
    const std::string module = dot == std::string::npos ? "" : name.substr(0, dot);
    const std::string local = name.substr(dot == std::string::npos ? 0 : dot + 1);
    const auto shape = item.value().sizes().vec();
    if (std::any_of(a.saved_modules.begin(), a.saved_modules.end(),
                    [&](const std::string& s) { return name.rfind(s + ".", 0) == 0; })) {
      a.entries.push_back({name, kKeyPrefix + name, shape});
    } else if (local == "bias" && (c.bias == "all" || (c.bias == "lora_only" && targeted(module)))) {
      a.entries.push_back({name, kKeyPrefix + (targeted(module) ? module + ".base_layer.bias" : name), shape});
    }
  }
  for (const auto& t : a.targets) add_lora_entries(a, t);
}

}  // namespace

std::shared_ptr<Adapter> find(torch::nn::Module& root, const HostOf& host_of) {
  for (const auto& m : root.modules(/*include_self=*/true))
    if (Host* h = host_of(*m); h && h->branch) return std::const_pointer_cast<Adapter>(h->branch->adapter);
  return nullptr;
}

std::shared_ptr<Adapter> plan(torch::nn::Module& root, const Config& config, const ModelInfo& info,
                              const HostOf& host_of) {
  if (find(root, host_of)) throw StateError("the model has an adapter already (merge it first: one adapter at a time)");
  auto a = std::make_shared<Adapter>();
  a->config = config;
  a->info = info;
  Config& c = a->config;
  const ModuleMap modules = modules_of(root);
  // The model's linear layers, for "all-linear" and for messages.
  std::vector<std::string> linear;
  for (const auto& [name, m] : modules)
    if (host_of(*m) || is_torch_linear(*m)) linear.push_back(name);

  if (c.target_kind == Config::Kind::None) default_targets_for(c, info, linear);
  if (info.tied_lm_head) refuse_tied_head(c);
  const bool mixtral = info.model_type == "mixtral";
  if (mixtral) {
    std::vector<std::string> leaves;
    for (const auto& n : linear)
      if (n != "lm_head" && std::find(leaves.begin(), leaves.end(), local_of(n)) == leaves.end())
        leaves.push_back(local_of(n));
    convert_mixtral(c, leaves);
  }
  const Matchers matchers(c);  // (after convert_mixtral, which adds gate_up_proj's rank and alpha)
  if (c.all_linear()) expand_all_linear(*a, c, info, modules, linear);
  else a->written_targets = c.target_modules;
  find_saved_modules(*a, modules);
  const bool any_unexcluded = add_module_targets(*a, modules, host_of, matchers, mixtral, linear);
  if (!c.target_parameters.empty()) add_parameter_targets(*a, modules, host_of, matchers);
  if (a->targets.empty()) refuse_no_target(c, any_unexcluded, linear);
  add_entries(*a, root);
  return a;
}

void apply(torch::nn::Module& root, const std::shared_ptr<Adapter>& adapter, bool init, bool trainable,
           const HostOf& host_of, bool cpu_for_meta) {
  c10::NoGradGuard no_grad;
  for (auto& p : root.parameters(/*recurse=*/true)) p.requires_grad_(false);
  for (const auto& t : adapter->targets) {
    const bool fused = t.experts > 0;
    Host* first = host_of(module_at(root, fused ? t.uses.front().host : t.module));
    at::TensorOptions o = first->host_weight().options();
    if (cpu_for_meta && o.device().is_meta()) o = o.device(c10::kCPU);
    // peft's autocast_adapter_dtype: adapters of a float16 / bfloat16 base are float32.
    if (o.dtype() == at::kHalf || o.dtype() == at::kBFloat16) o = o.dtype(at::kFloat);
    const std::string& mode = adapter->config.init_lora_weights;
    const int64_t rank = t.r * std::max<int64_t>(t.experts, 1);
    auto A = std::make_shared<Factor>(rank, t.in, true, mode, t.r, o);
    auto B = std::make_shared<Factor>(t.out, rank, false, mode, t.r, o);
    for (auto* f : {A.get(), B.get()}) {
      if (init) f->reset();
      else f->param("weight").zero_();
      f->param("weight").requires_grad_(false);
    }
    // Where they live: the layer itself, or (fused experts) a container of their own beside the experts.
    std::shared_ptr<torch::nn::Module> holder;
    if (fused) {
      holder = std::make_shared<torch::nn::Module>("LoraExperts");
      module_at(root, parent_of(t.module)).register_module(local_of(t.module), holder);
    }
    torch::nn::Module& owner = fused ? *holder : module_at(root, t.module);
    owner.register_module("lora_A", A);
    owner.register_module("lora_B", B);
    std::vector<Adapter::Target::Use> uses = fused ? t.uses : std::vector<Adapter::Target::Use>{{t.module}};
    for (const auto& use : uses) {
      auto branch = std::make_shared<Branch>();
      branch->A = A;
      branch->B = B;
      branch->scaling = t.scaling;
      branch->dropout = adapter->config.lora_dropout;
      branch->adapter = adapter;
      if (fused) {
        branch->experts = t.experts;
        branch->expert = use.expert;
        branch->row0 = use.row0;
        branch->rows = use.rows;
      }
      host_of(module_at(root, use.host))->branch = std::move(branch);
    }
  }
  std::map<std::string, at::Tensor> params;
  for (const auto& item : root.named_parameters(true)) params[item.key()] = item.value();
  for (const auto& e : adapter->entries) params.at(e.name).requires_grad_(trainable);
}

void merge(torch::nn::Module& root, const HostOf& host_of) {
  std::shared_ptr<Adapter> adapter = find(root, host_of);
  if (!adapter) throw StateError("the model has no adapter to merge");
  c10::NoGradGuard no_grad;
  auto hosts = [](const Adapter::Target& t) {
    std::vector<std::string> v;
    if (t.experts == 0) v.push_back(t.module);
    for (const auto& use : t.uses) v.push_back(use.host);
    return v;
  };
  for (const auto& t : adapter->targets)
    for (const auto& name : hosts(t)) {
      Host* h = host_of(module_at(root, name));
      const auto [a, b] = h->branch->factors();
      // get_delta_weight: transpose(B @ A, fan_in_fan_out) * scaling, added to the base weight.
      at::Tensor delta = at::matmul(b, a);
      if (t.fan_in_fan_out) delta = delta.t();
      delta = delta * t.scaling;
      at::Tensor w = h->host_weight();
      w.add_(delta.to(w.scalar_type()));
    }
  for (const auto& t : adapter->targets) {
    for (const auto& name : hosts(t)) host_of(module_at(root, name))->branch.reset();
    if (t.experts > 0) {
      module_at(root, parent_of(t.module)).unregister_module(local_of(t.module));
    } else {
      torch::nn::Module& m = module_at(root, t.module);
      m.unregister_module("lora_A");
      m.unregister_module("lora_B");
    }
  }
}

/* ------------------------------------------------------------------------------------------ files */

std::string config_file_text(const Adapter& a) {
  const Config& c = a.config;
  using W = json::Writer;
  std::map<std::string, std::function<void(W&)>> fields;
  auto number = [](W& w, double v) {
    if (v == std::floor(v) && std::fabs(v) < 9e15) w.value(static_cast<int64_t>(v));
    else w.value(v);
  };
  auto list = [](W& w, const std::vector<std::string>& v) {
    w.begin_array();
    for (const auto& s : v) w.value(s);
    w.end_array();
  };
  auto optional_string = [](W& w, const std::optional<std::string>& s) {
    if (s) w.value(*s);
    else w.null();
  };
  for (const auto& p : passive_fields())
    if (std::string(p.key) != "runtime_config")
      fields[p.key] = [text = std::string(p.accepted.front())](W& w) { w.raw(text); };
  fields["r"] = [&](W& w) { w.value(c.r); };
  fields["lora_alpha"] = [&](W& w) { number(w, c.lora_alpha); };
  fields["lora_dropout"] = [&](W& w) { w.value(c.lora_dropout); };
  fields["target_modules"] = [&](W& w) {
    if (a.config.target_kind == Config::Kind::String) w.value(c.target_modules.front());
    else list(w, a.written_targets);
  };
  fields["exclude_modules"] = [&](W& w) {
    if (c.exclude_kind == Config::Kind::None) w.null();
    else if (c.exclude_kind == Config::Kind::String) w.value(c.exclude_modules.front());
    else list(w, c.exclude_modules);
  };
  // peft rewrites fan_in_fan_out per layer; the config keeps what was given.
  fields["fan_in_fan_out"] = [&](W& w) { w.value(c.fan_in_fan_out); };
  fields["bias"] = [&](W& w) { w.value(c.bias); };
  fields["use_rslora"] = [&](W& w) { w.value(c.use_rslora); };
  fields["modules_to_save"] = [&](W& w) {
    if (c.modules_to_save) list(w, *c.modules_to_save);
    else w.null();
  };
  fields["init_lora_weights"] = [&](W& w) {
    if (c.init_lora_weights == "gaussian") w.value("gaussian");
    else w.value(c.init_lora_weights == "true");
  };
  fields["layers_to_transform"] = [&](W& w) {
    if (!c.layers_to_transform) return void(w.null());
    if (c.layers_to_transform_is_int) return void(w.value(c.layers_to_transform->front()));
    w.begin_array();
    for (int64_t l : *c.layers_to_transform) w.value(l);
    w.end_array();
  };
  fields["layers_pattern"] = [&](W& w) {
    if (!c.layers_pattern) w.null();
    else if (c.layers_pattern_is_string) w.value(c.layers_pattern->front());
    else list(w, *c.layers_pattern);
  };
  fields["rank_pattern"] = [&](W& w) {
    std::map<std::string, int64_t> sorted(c.rank_pattern.begin(), c.rank_pattern.end());
    w.begin_object();
    for (const auto& [k, v] : sorted) w.key(k).value(v);
    w.end_object();
  };
  fields["alpha_pattern"] = [&](W& w) {
    std::map<std::string, double> sorted(c.alpha_pattern.begin(), c.alpha_pattern.end());
    w.begin_object();
    for (const auto& [k, v] : sorted) {
      w.key(k);
      number(w, v);
    }
    w.end_object();
  };
  fields["task_type"] = [&](W& w) {
    if (c.task_type.empty()) w.null();
    else w.value(c.task_type);
  };
  fields["auto_mapping"] = [&](W& w) {  // PeftModel.save_pretrained: only without a task type
    if (!c.task_type.empty()) return void(w.null());
    w.begin_object().key("base_model_class").value(a.info.base_model_class);
    w.key("parent_library").value(a.info.parent_library).end_object();
  };
  fields["base_model_name_or_path"] = [&](W& w) {
    optional_string(w, c.base_model_name_or_path ? c.base_model_name_or_path : a.info.name_or_path);
  };
  fields["revision"] = [&](W& w) { optional_string(w, c.revision); };
  fields["target_parameters"] = [&](W& w) {
    if (c.target_parameters.empty()) w.null();
    else list(w, c.target_parameters);
  };
  fields["inference_mode"] = [](W& w) { w.value(true); };
  fields["peft_type"] = [](W& w) { w.value("LORA"); };
  W w(W::Layout::Indented, 2);
  w.begin_object();
  for (const auto& [key, write] : fields) {
    w.key(key);
    write(w);
  }
  w.end_object();
  return w.str();
}

NamedTensors file_tensors(const Adapter& adapter, const NamedTensors& state) {
  std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  NamedTensors out;
  for (const auto& e : adapter.entries) {
    auto it = by_name.find(e.name);
    if (it == by_name.end()) throw std::logic_error("save_adapter: the model has no tensor '" + e.name + "'");
    out.emplace_back(e.key, it->second.detach().to(at::kCPU).contiguous().clone());
  }
  return out;
}

NamedTensors check_file_tensors(const Adapter& adapter, const NamedTensors& tensors, const std::string& source) {
  std::map<std::string, at::Tensor> by_key(tensors.begin(), tensors.end());
  NamedTensors out;
  std::set<std::string> expected;
  for (const auto& e : adapter.entries) {
    expected.insert(e.key);
    auto it = by_key.find(e.key);
    if (it == by_key.end())
      throw std::invalid_argument(source + " lacks '" + e.key +
                                  "', which this adapter has (its config and the model "
                                  "give " +
                                  std::to_string(adapter.entries.size()) + " tensors)");
    if (it->second.sizes().vec() != e.shape)
      throw std::invalid_argument("'" + e.key + "' has shape " + c10::str(it->second.sizes()) + " in " + source +
                                  " but " + c10::str(at::IntArrayRef(e.shape)) + " in the adapter on this model");
    if (!at::isFloatingType(it->second.scalar_type()))
      throw std::invalid_argument("'" + e.key + "' is " + c10::str(it->second.scalar_type()) + " in " + source +
                                  "; an adapter's tensors are floating point");
    out.emplace_back(e.name, it->second);
  }
  for (const auto& [key, t] : by_key)
    if (!expected.count(key)) {
      std::string hint = key.rfind(kKeyPrefix, 0) == 0 ? "" : " (peft's keys start with \"base_model.model.\")";
      throw std::invalid_argument(source + " holds '" + key + "', which the adapter on this model does not have" +
                                  hint);
    }
  return out;
}

void match_fused_keys(Adapter& adapter, const NamedTensors& tensors) {
  std::map<std::string, at::Tensor> by_key(tensors.begin(), tensors.end());
  for (auto& inner : adapter.targets) {
    if (inner.experts == 0 || !ends_with(inner.key_module, ".base_layer")) continue;
    const std::string outer_key = parent_of(inner.key_module);
    auto outer = std::find_if(adapter.targets.begin(), adapter.targets.end(),
                              [&](const Adapter::Target& t) { return t.key_module == outer_key; });
    auto b = by_key.find(kKeyPrefix + outer_key + ".lora_B.weight");
    if (outer == adapter.targets.end() || b == by_key.end() || outer->out == inner.out) continue;
    if (b->second.dim() != 2 || b->second.size(0) != inner.out) continue;  // as planned, or wrong: checked next
    std::swap(inner.key_module, outer->key_module);
    for (auto& e : adapter.entries)
      for (const auto* t : {&inner, &*outer})
        if (e.name.rfind(t->module + ".lora_", 0) == 0)
          e.key = kKeyPrefix + t->key_module + e.name.substr(t->module.size());
  }
}

}  // namespace acc::core::lora
