// Small core pieces: RE2 patterns (util/pattern.hpp), learning-rate schedules against transformers', and the FP8
// linear layer on the CPU.
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "models/model.hpp"
#include "precision/fp8.hpp"
#include "train/optim.hpp"
#include "util/pattern.hpp"

namespace acc::core {
namespace {

// Every regular expression runs on RE2 (util/pattern.hpp, issue 36): Python's re.fullmatch and re.search for the syntax
// both read, in time linear in the text; what RE2 cannot express, and a pattern past the length limit, refused naming
// the pattern (cut short) and the reason.
TEST(Pattern, FullmatchInLinearTimeAndRefusalsNamed) {
  EXPECT_TRUE(Pattern("a|ab", "p").full_match("ab"));  // fullmatch tries every alternative, not the first that fits
  EXPECT_FALSE(Pattern("q_proj", "p").full_match("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(Pattern(".*\\.(q_proj|v_proj)", "p").full_match("model.layers.0.self_attn.v_proj"));
  EXPECT_TRUE(Pattern("^.*(q|k|v)_proj$", "p").full_match("model.layers.0.self_attn.k_proj"));
  EXPECT_TRUE(Pattern("(?P<name>q)_proj", "p").full_match("q_proj"));  // Python's named groups
  EXPECT_TRUE(Pattern("norm", "p").search("model.norm.weight"));
  EXPECT_FALSE(Pattern("^norm", "p").search("model.norm.weight"));
  std::string group;
  EXPECT_TRUE(Pattern(R"(^.*?\.[^.]*\.(\d+)\.)", "p").search("model.layers.12.mlp.up_proj", &group));
  EXPECT_EQ(group, "12");
  EXPECT_TRUE(Pattern(R"((.*\.(layers|h)\.\d+)\..*)", "p").full_match("a.layers.1.b.h.2.w", &group));
  EXPECT_EQ(group, "a.layers.1.b.h.2");  // greedy, as Python's
  // (.|.)*x backtracks exponentially in std::regex (and in Python's re): here it is linear.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(Pattern("(.|.)*x", "p").full_match(std::string(100000, 'a')));
  EXPECT_FALSE(Pattern("(a*)*b", "p").search(std::string(100000, 'a')));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  auto refusal = [](const std::string& pattern) {
    try {
      Pattern(pattern, "target_modules");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(refusal("(q)\\1"), "target_modules: '(q)\\1' is not a regular expression libacc reads (invalid escape "
                               "sequence: \\1)");
  EXPECT_EQ(refusal("(?=q)q"), "target_modules: '(?=q)q' is not a regular expression libacc reads (invalid perl "
                               "operator: (?=)");
  EXPECT_EQ(refusal("(q"), "target_modules: '(q' is not a regular expression libacc reads (missing ): (q)");
  EXPECT_EQ(refusal("a{1001}"), "target_modules: 'a{1001}' is not a regular expression libacc reads (invalid "
                                "repetition size: {1001})");
  EXPECT_EQ(refusal(std::string(30000, '(') + std::string(30000, ')')),
            "target_modules: '" + std::string(200, '(') +
                "... (60000 bytes)' is not a regular expression libacc "
                "reads (longer than 4096 bytes, the limit)");
  EXPECT_EQ(refusal(std::string(4096, 'a')), "(no error)");
  EXPECT_EQ(refusal(std::string(2047, '(') + std::string(2047, ')')), "(no error)");  // deep, without recursion
  EXPECT_EQ(refusal("a\x1b"
                    "b("),
            "target_modules: 'a\\x1bb(' is not a regular expression libacc reads (missing ): "
            "a\\x1bb()");  // a control byte escaped
}

TEST(Schedule, ShapesMatchTransformers) {
  Schedule constant(R"({"type": "constant", "warmup_steps": 4})");
  EXPECT_DOUBLE_EQ(constant.factor(0), 0.0);
  EXPECT_DOUBLE_EQ(constant.factor(2), 0.5);
  EXPECT_DOUBLE_EQ(constant.factor(100), 1.0);
  Schedule linear(R"({"type": "linear", "warmup_steps": 10, "total_steps": 110})");
  EXPECT_DOUBLE_EQ(linear.factor(10), 1.0);
  EXPECT_DOUBLE_EQ(linear.factor(60), 0.5);
  EXPECT_DOUBLE_EQ(linear.factor(200), 0.0);
  Schedule cosine(R"({"type": "cosine", "total_steps": 100, "min_lr_ratio": 0.1})");
  EXPECT_DOUBLE_EQ(cosine.factor(0), 1.0);
  EXPECT_NEAR(cosine.factor(50), 0.55, 1e-12);
  EXPECT_NEAR(cosine.factor(100), 0.1, 1e-12);
}

// The FP8 path runs on the CPU too (ATen emulates _scaled_mm there), so its numerics and gradients are
// tested here even though mixed_precision "fp8" is only accepted on FP8-capable GPUs.
TEST(Fp8, LinearMatchesFp32WithinE4M3Precision) {
  at::manual_seed(0);
  at::Tensor x = at::randn({2, 16, 64}).requires_grad_();
  at::Tensor w = (at::randn({32, 64}) * 0.1).requires_grad_();
  at::Tensor b = at::randn({32}).requires_grad_();
  at::Tensor ref = at::linear(x, w, b);
  at::Tensor y = fp8_linear(x, w, b);
  ASSERT_EQ(y.sizes(), ref.sizes());
  // e4m3 keeps 3 mantissa bits: each product is within ~2^-3 relative; sums average that out.
  double rel = ((y - ref).norm() / ref.norm()).item<double>();
  EXPECT_LT(rel, 0.08) << rel;
  EXPECT_GT(rel, 0.0) << "the FP8 path must actually quantize";
  at::Tensor gy = at::randn_like(ref);
  auto g_ref = torch::autograd::grad({ref}, {x, w, b}, {gy});
  auto g = torch::autograd::grad({y}, {x, w, b}, {gy});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(at::allclose(g[i], g_ref[i], 1e-4, 1e-4)) << i;  // backward in fp32
  // Dimensions that are not multiples of 16 fall back to a plain linear.
  at::Tensor odd = at::randn({3, 10});
  at::Tensor wo = at::randn({5, 10});
  EXPECT_TRUE(at::equal(fp8_linear(odd, wo, {}), at::linear(odd, wo)));
}

TEST(Fp8, ScopeSwitchesTheModelsLinearLayers) {
  at::manual_seed(1);
  auto model = make_builtin_model(R"({"type": "mlp", "sizes": [64, 64, 16]})");
  at::Tensor x = at::randn({16, 64});
  at::Tensor plain = model->forward({{"input", x}}).at("output");
  at::Tensor quantized;
  {
    Fp8Scope scope;
    quantized = model->forward({{"input", x}}).at("output");
  }
  EXPECT_FALSE(at::equal(plain, quantized));
  EXPECT_LT(((quantized - plain).norm() / plain.norm()).item<double>(), 0.1);
  EXPECT_TRUE(at::equal(model->forward({{"input", x}}).at("output"), plain));  // the scope ended
}

}  // namespace
}  // namespace acc::core
