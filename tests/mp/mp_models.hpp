// What the C++ model-splitting workers (mp_tp.cpp, mp_cp.cpp) share: numbers as their checks print them, models made
// alike for the whole and the split side, and a TorchScript module on disk for the refusals.
#pragma once
#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "models/hf/pretrained.hpp"
#include "models/model.hpp"

namespace {

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

using Maker = std::function<std::unique_ptr<acc::core::Model>()>;

// The model of a config.json text, from the same seed each call: the same weights for the whole model and the split one.
Maker from_config(const std::string& text) {
  return [text] {
    at::manual_seed(7);
    return acc::core::hf::from_config(text, nullptr);
  };
}

// A TorchScript module (one matmul) saved under /tmp, named for `tag` and this process; removed when it goes.
struct ScriptFile {
  std::string path;
  explicit ScriptFile(const std::string& tag) : path("/tmp/" + tag + "_" + std::to_string(getpid()) + ".pt") {
    torch::jit::Module m("Scripted");
    m.register_parameter("w", at::ones({2, 2}), false);
    m.define("def forward(self, input):\n    return input.matmul(self.w)\n");
    m.save(path);
  }
  ~ScriptFile() { std::remove(path.c_str()); }
  ScriptFile(const ScriptFile&) = delete;
  ScriptFile& operator=(const ScriptFile&) = delete;
};

}  // namespace
