// Shared by the pattern fuzz targets (fuzz_adapter_config, fuzz_param_pattern): the names of the models libacc adapts
// and trains, and a check of one regular expression from a file or a caller as libacc compiles and runs it
// (acc::core::Pattern, src/util/pattern.cpp: RE2), against those names or others.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "util/pattern.hpp"

namespace acc_fuzz {

[[noreturn]] inline void pattern_finding(const std::string& what) {
  std::fprintf(stderr, "==fuzz== %s\n", what.c_str());
  std::abort();
}

// A two-layer Llama's (transformers' names) and a GPT-2's modules, and the built-in MLP's.
inline const std::vector<std::string>& module_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v = {"model",         "model.embed_tokens", "model.layers",
                                  "model.norm",    "model.rotary_emb",   "lm_head",
                                  "transformer",   "transformer.wte",    "transformer.wpe",
                                  "transformer.h", "transformer.ln_f",   "fc1",
                                  "fc2",           "classifier",         "score"};
    for (const std::string i : {"0", "1"}) {
      const std::string l = "model.layers." + i;
      for (const char* m : {"", ".self_attn", ".self_attn.q_proj", ".self_attn.k_proj", ".self_attn.v_proj",
                            ".self_attn.o_proj", ".mlp", ".mlp.gate_proj", ".mlp.up_proj", ".mlp.down_proj",
                            ".mlp.act_fn", ".input_layernorm", ".post_attention_layernorm"})
        v.push_back(l + m);
      const std::string h = "transformer.h." + i;
      for (const char* m :
           {"", ".ln_1", ".attn", ".attn.c_attn", ".attn.c_proj", ".ln_2", ".mlp", ".mlp.c_fc", ".mlp.c_proj"})
        v.push_back(h + m);
    }
    return v;
  }();
  return names;
}

// Their parameters: every module's weight, and the biases GPT-2 and the MLP have.
inline const std::vector<std::string>& parameter_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const std::string& m : module_names()) {
      v.push_back(m + ".weight");
      if (m.rfind("transformer.", 0) == 0 || m.rfind("fc", 0) == 0) v.push_back(m + ".bias");
    }
    return v;
  }();
  return names;
}

// acc::core::Pattern(pattern, what), as libacc compiles a pattern; nullopt when refused. A refusal must be the
// documented one: std::invalid_argument "<what>: '<pattern>' is not a regular expression libacc reads (<reason>)",
// its pattern and reason cut short (an error message stays small whatever the pattern; 30,000 nested groups crashed
// std::regex). Anything else escapes to the target's guard, a finding.
inline std::optional<acc::core::Pattern> compile_pattern(std::string_view pattern, const std::string& what) {
  try {
    return acc::core::Pattern(pattern, what);
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    if (m.rfind(what + ": '", 0) != 0 || m.find("' is not a regular expression libacc reads (") == std::string::npos)
      pattern_finding("a refused pattern's message does not name it as documented: " + m.substr(0, 400));
    if (m.size() > what.size() + 2048)
      pattern_finding("a refused pattern's message is " + std::to_string(m.size()) + " bytes: " + m.substr(0, 400));
    return std::nullopt;
  }
}

// Matches a compiled pattern against names, both ways libacc does (full_match: re.fullmatch, for target_modules,
// requires_grad and param_groups; search: re.search). A whole match is a match somewhere too.
inline size_t match_names(const acc::core::Pattern& p, const std::vector<std::string>& names) {
  size_t hits = 0;
  for (const std::string& name : names) {
    const bool whole = p.full_match(name);
    if (whole && !p.search(name)) pattern_finding("'" + name + "' matches whole but search finds nothing in it");
    hits += whole;
  }
  return hits;
}

}  // namespace acc_fuzz
