// The Hugging Face families against transformers itself: tests/hf/make_fixtures.py made tiny random models
// with transformers, saved them with save_pretrained and recorded their outputs (tests/hf/README.md). Here
// libacc loads each with from_pretrained and must give the same logits and loss.
//   test_hf FIXTURES_DIR [gtest flags]
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <sys/stat.h>
#include <unistd.h>

#include <c10/core/GradMode.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "formats/safetensors.hpp"
#include <acc/hf_shapes.hpp>

#include "checkpoint/save_model.hpp"
#include "models/hf/families.hpp"
#include "train/accelerator.hpp"
#include "models/hf/pretrained.hpp"
#include "models/hf/generate.hpp"
#include "models/module_tree.hpp"
#include "runtime/process_state.hpp"
#include "train/optim.hpp"
#include "train/param_groups.hpp"
#include "util/errors.hpp"
#include <acc/files.hpp>
#include <acc/json.hpp>

namespace acc::core {
namespace {

std::string g_fixtures;

std::map<std::string, at::Tensor> expected_of(const std::string& name) {
  std::map<std::string, at::Tensor> m;
  for (auto& [k, t] : load_safetensors(g_fixtures + "/" + name + "/expected.safetensors")) m[k] = t.clone();
  return m;
}

// max |a - b| over the positions attention_mask keeps (a padded position's logits mean nothing).
double masked_max_diff(const at::Tensor& a, const at::Tensor& b, const at::Tensor& mask) {
  at::Tensor keep = mask.ne(0).unsqueeze(-1).expand_as(a);
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().masked_select(keep).max().item<double>();
}

class CausalFixture : public testing::TestWithParam<const char*> {};

TEST_P(CausalFixture, LogitsAndLossEqualTransformers) {
  const std::string name = GetParam();
  auto e = expected_of(name);
  auto model = hf::from_pretrained(g_fixtures + "/" + name + "/model", R"({"dtype": "float32"})");
  EXPECT_FALSE(model->is_training());
  TensorDict batch{{"input_ids", e["input_ids"]}, {"attention_mask", e["attention_mask"]}, {"labels", e["labels"]}};
  TensorDict out = model->forward(batch);
  const double logits = masked_max_diff(out.at("logits"), e["logits"], e["attention_mask"]);
  const double loss = std::abs(out.at("loss").item<double>() - e["loss"].item<double>());
  std::printf("%s fp32: logits max |diff| %.3g, loss |diff| %.3g\n", name.c_str(), logits, loss);
  EXPECT_LE(logits, 1e-5) << name;
  EXPECT_LE(loss, 1e-5) << name;

  auto bf16 = hf::from_pretrained(g_fixtures + "/" + name + "/model", R"({"dtype": "bfloat16"})");
  TensorDict out16 = bf16->forward(TensorDict{{"input_ids", e["input_ids"]}, {"attention_mask", e["attention_mask"]}});
  EXPECT_EQ(out16.at("logits").scalar_type(), at::kBFloat16);
  // bf16 tolerance: libacc's bf16 logits are as close to transformers' bf16 ones as transformers' own bf16
  // and fp32 logits are to each other (bf16 rounding, 0.1 to 0.23 on these models), with 50% to spare.
  const double d16 = masked_max_diff(out16.at("logits"), e["logits_bf16"], e["attention_mask"]);
  const double own = masked_max_diff(e["logits"], e["logits_bf16"], e["attention_mask"]);
  std::printf("%s bf16: logits max |diff| %.3g (transformers' bf16 vs fp32: %.3g)\n", name.c_str(), d16, own);
  EXPECT_LE(d16, 1.5 * own) << name;
}

TEST_P(CausalFixture, GreedyGenerationEqualsTransformers) {
  const std::string name = GetParam();
  auto e = expected_of(name);
  auto model = hf::from_pretrained(g_fixtures + "/" + name + "/model", nullptr);
  auto& lm = dynamic_cast<hf::CausalLM&>(*model);
  hf::GenerationOptions o = hf::parse_generation_options(R"({"max_new_tokens": 8})", lm.generation_defaults);
  std::vector<int64_t> streamed;
  at::Tensor one = hf::generate(*model, e["prompt_ids"], {}, o, [&](const at::Tensor& t) {
    streamed.push_back(t.item<int64_t>());
    return true;
  });
  EXPECT_TRUE(one.equal(e["greedy_ids"])) << name << ": " << one << " vs " << e["greedy_ids"];
  EXPECT_EQ(streamed.size(), 8u);
  EXPECT_EQ(streamed.back(), e["greedy_ids"][0][-1].item<int64_t>());
  // A batch of two prompts, the second left-padded: the same as transformers' generate with the mask.
  at::Tensor batch = hf::generate(*model, e["batch_prompt_ids"], e["batch_prompt_mask"], o);
  EXPECT_TRUE(batch.equal(e["batch_greedy_ids"])) << name << ": " << batch << " vs " << e["batch_greedy_ids"];
  // The callback stops it.
  int calls = 0;
  at::Tensor stopped = hf::generate(*model, e["prompt_ids"], {}, o, [&](const at::Tensor&) { return ++calls < 3; });
  EXPECT_EQ(stopped.size(1), e["prompt_ids"].size(1) + 3);
}

TEST_P(CausalFixture, SamplingIsReproducibleWithASeed) {
  const std::string name = GetParam();
  auto e = expected_of(name);
  auto model = hf::from_pretrained(g_fixtures + "/" + name + "/model", nullptr);
  auto& lm = dynamic_cast<hf::CausalLM&>(*model);
  auto sample = [&](const char* json) {
    return hf::generate(*model, e["batch_prompt_ids"], e["batch_prompt_mask"],
                        hf::parse_generation_options(json, lm.generation_defaults));
  };
  const char* a = R"({"max_new_tokens": 12, "do_sample": true, "temperature": 1.5, "top_k": 40, "top_p": 0.95,
                      "repetition_penalty": 1.3, "seed": 7})";
  at::Tensor x = sample(a), y = sample(a);
  EXPECT_TRUE(x.equal(y)) << name;
  at::Tensor z = sample(R"({"max_new_tokens": 12, "do_sample": true, "temperature": 1.5, "seed": 8})");
  EXPECT_FALSE(x.equal(z)) << name;
  // top_k 1 is greedy, whatever the temperature and seed.
  at::Tensor k1 = sample(R"({"max_new_tokens": 8, "do_sample": true, "top_k": 1, "temperature": 3.0, "seed": 1})");
  EXPECT_TRUE(k1.equal(e["batch_greedy_ids"])) << name;
}

// TRL's padding-free packing: samples side by side in one row, position ids restarting at 0 for each, no
// attention_mask. transformers 5 (create_causal_mask -> find_packed_sequence_indices) keeps each sample's attention
// to itself, so each sample's logits are those of the sample alone; with an attention_mask it does not look.
TEST_P(CausalFixture, PackedSamplesDoNotAttendToEachOther) {
  const std::string name = GetParam();
  auto e = expected_of(name);
  auto model = hf::from_pretrained(g_fixtures + "/" + name + "/model", R"({"dtype": "float32"})");
  const at::Tensor row = e["input_ids"].slice(0, 0, 1);
  const int64_t T = row.size(1), cut = T / 3;
  ASSERT_GE(cut, 2) << name;
  const at::Tensor a = row.slice(1, 0, cut), b = row.slice(1, cut);
  const at::Tensor pos = at::cat({at::arange(cut, at::kLong), at::arange(T - cut, at::kLong)}).unsqueeze(0);
  const at::Tensor packed = model->forward(TensorDict{{"input_ids", row}, {"position_ids", pos}}).at("logits");
  const at::Tensor alone_a = model->forward(TensorDict{{"input_ids", a}}).at("logits");
  const at::Tensor alone_b = model->forward(TensorDict{{"input_ids", b}}).at("logits");
  EXPECT_LT((packed.slice(1, 0, cut) - alone_a).abs().max().item<double>(), 1e-4) << name;
  EXPECT_LT((packed.slice(1, cut) - alone_b).abs().max().item<double>(), 1e-4) << name;
  // The same ids and positions with an all-ones attention_mask: one sequence whose second part sees the first.
  const at::Tensor masked =
      model->forward(TensorDict{{"input_ids", row}, {"position_ids", pos}, {"attention_mask", at::ones_like(row)}})
          .at("logits");
  EXPECT_GT((masked.slice(1, cut) - alone_b).abs().max().item<double>(), 1e-3) << name;
}

INSTANTIATE_TEST_SUITE_P(Transformers, CausalFixture,
                         testing::Values("llama", "llama_linear", "llama_dynamic", "mistral", "qwen2", "mixtral",
                                         "gpt2"));

// transformers gives these families' token embedding config.pad_token_id as nn.Embedding's padding_idx: the lookup
// gives that row no gradient. tests/hf/make_embedding_grads.py recorded the embedding's gradient after one backward
// of the model's loss on a batch whose attended, labelled tokens include the pad id (0).
class EmbeddingGradient : public testing::TestWithParam<const char*> {};

TEST_P(EmbeddingGradient, EqualsTransformersWithNoneFromThePadTokens) {
  const std::string name = GetParam();
  std::map<std::string, at::Tensor> e;
  for (auto& [k, t] : load_safetensors(g_fixtures + "/" + name + "/embedding_grad.safetensors")) e[k] = t.clone();
  auto model = hf::from_pretrained(g_fixtures + "/" + name + "/model", R"({"dtype": "float32"})");
  TensorDict batch{{"input_ids", e["input_ids"]}, {"attention_mask", e["attention_mask"]}, {"labels", e["labels"]}};
  if (e.count("token_type_ids")) batch.set("token_type_ids", e["token_type_ids"]);
  at::Tensor loss = model->forward(batch).at("loss");
  loss.backward();
  const std::string param = name == "bert" ? "bert.embeddings.word_embeddings.weight" : "model.embed_tokens.weight";
  at::Tensor grad;
  for (const auto& [n, p] : model->named_parameters())
    if (n == param) grad = p.grad();
  ASSERT_TRUE(grad.defined()) << name << ": " << param << " has no gradient";
  const at::Tensor want = e["grad_rows"], got = grad.index_select(0, e["rows"]);
  const double scale = want.abs().max().item<double>();
  const double rows = (got - want).abs().max().item<double>();
  const double norm = std::abs(grad.norm().item<double>() - e["grad_norm"].item<double>());
  const double pad = grad[0].abs().max().item<double>();
  std::printf("%s: loss |diff| %.3g, embedding gradient rows max |diff| %.3g (max |g| %.3g), norm |diff| %.3g, "
              "pad row max |g| %.3g (transformers' %.3g)\n",
              name.c_str(), std::abs(loss.item<double>() - e["loss"].item<double>()), rows, scale, norm, pad,
              want[0].abs().max().item<double>());
  EXPECT_EQ(e["rows"][0].item<int64_t>(), 0);  // the pad id's row comes first
  EXPECT_LE(rows, 1e-5 * std::max(1.0, scale)) << name;
  // The whole gradient's norm: the rows of ids absent from the batch as transformers' (zero unless the head is tied).
  EXPECT_LE(norm, 1e-5 * e["grad_norm"].item<double>()) << name;
  auto* lm = dynamic_cast<hf::CausalLM*>(model.get());
  if (!lm || !lm->ties_embeddings()) {
    EXPECT_EQ(pad, 0.0) << name << ": the pad row got a gradient";
  }
}

// Llama, Mistral and Mixtral untied; Qwen2's head is the embedding (its pad row gets the head's share only); BERT's
// word embeddings.
INSTANTIATE_TEST_SUITE_P(Transformers, EmbeddingGradient,
                         testing::Values("llama", "mistral", "qwen2", "mixtral", "bert"));

// A left-padded batch whose labels keep the first real token: it is predicted from the last pad position, whose query
// may see no key. transformers' default attention (sdpa) gives such a row an output of zero and no gradient; libacc
// follows it (hf::Masking::attention). tests/hf/make_padded_grads.py recorded sdpa's loss, logits (pad rows too) and
// every parameter's gradient, and eager's loss, which differs: the fixture tells the two apart.
class PaddedGradient : public testing::TestWithParam<const char*> {};

TEST_P(PaddedGradient, EqualsTransformersSdpaThroughFullyMaskedRows) {
  const std::string name = GetParam();
  std::map<std::string, at::Tensor> e;
  for (auto& [k, t] : load_safetensors(g_fixtures + "/" + name + "/padded_grads.safetensors")) e[k] = t.clone();
  auto model = hf::from_pretrained(g_fixtures + "/" + name + "/model", R"({"dtype": "float32"})");
  TensorDict out = model->forward(TensorDict{
      {"input_ids", e["input_ids"]}, {"attention_mask", e["attention_mask"]}, {"labels", e["labels"]}});
  out.at("loss").backward();
  const double loss = std::abs(out.at("loss").item<double>() - e["loss"].item<double>());
  const double logits = (out.at("logits") - e["logits"]).abs().max().item<double>();
  double grads = 0, scale = 0;
  int compared = 0;
  for (const auto& [n, p] : model->named_parameters()) {
    auto it = e.find("grad." + n);
    if (it == e.end()) continue;  // (a tied head: transformers lists the embedding once)
    ASSERT_TRUE(p.grad().defined()) << name << ": " << n << " has no gradient";
    grads = std::max(grads, (p.grad() - it->second).abs().max().item<double>());
    scale = std::max(scale, it->second.abs().max().item<double>());
    ++compared;
  }
  std::printf("%s: loss |diff| %.3g (eager's loss is %.3g away), logits max |diff| %.3g, %d gradients max |diff| %.3g "
              "(max |g| %.3g)\n",
              name.c_str(), loss, std::abs(e["eager_loss"].item<double>() - e["loss"].item<double>()), logits, compared,
              grads, scale);
  EXPECT_LE(loss, 1e-5) << name;
  EXPECT_LE(logits, 1e-4) << name;
  EXPECT_GE(compared, 10) << name;
  EXPECT_LE(grads, 1e-5 * std::max(1.0, scale)) << name;
}

INSTANTIATE_TEST_SUITE_P(Transformers, PaddedGradient, testing::Values("llama", "mistral", "qwen2", "gpt2"));

TEST(FromPretrained, BertClassifierEqualsTransformers) {
  auto e = expected_of("bert");
  for (const char* dtype : {"float32", "bfloat16"}) {
    auto model =
        hf::from_pretrained(g_fixtures + "/bert/model", (std::string(R"({"dtype": ")") + dtype + "\"}").c_str());
    TensorDict out = model->forward(TensorDict{{"input_ids", e["input_ids"]},
                                               {"attention_mask", e["attention_mask"]},
                                               {"token_type_ids", e["token_type_ids"]},
                                               {"labels", e["labels"]}});
    const bool fp32 = std::string(dtype) == "float32";
    const at::Tensor& want = fp32 ? e["logits"] : e["logits_bf16"];
    const double d = (out.at("logits").to(at::kFloat) - want).abs().max().item<double>();
    std::printf("bert %s: logits max |diff| %.3g\n", dtype, d);
    if (fp32) {
      EXPECT_LE(d, 1e-5);
      EXPECT_LE(std::abs(out.at("loss").item<double>() - e["loss"].item<double>()), 1e-5);
    } else {
      EXPECT_LE(d, 1.5 * (e["logits"] - e["logits_bf16"]).abs().max().item<double>());
    }
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// save_pretrained of a changed model (every parameter moved a little, as fine-tuning does) loads back with
// the same logits (within 1e-5); sharded for the llama. With ACC_HF_SAVED set, the directories stay there with the inputs and
// libacc's logits (libacc_outputs.safetensors), for tests/hf/check_saved.py to load with transformers.
TEST(FromPretrained, SavePretrainedLoadsBackWithTheSameLogits) {
  namespace fs = std::filesystem;
  const char* keep = std::getenv("ACC_HF_SAVED");
  const fs::path root = keep ? fs::path(keep)
                             : fs::temp_directory_path() / ("acc_hf_saved_" + std::to_string(::getpid()));
  for (const char* name : {"llama", "mistral", "qwen2", "mixtral", "gpt2", "bert"}) {
    auto e = expected_of(name);
    auto model = hf::from_pretrained(g_fixtures + "/" + name + "/model", nullptr);
    {
      c10::NoGradGuard no_grad;
      at::manual_seed(3);
      for (auto& [n, p] : model->named_parameters()) p.add_(at::randn_like(p) * 0.01);
    }
    TensorDict in{{"input_ids", e["input_ids"]}, {"attention_mask", e["attention_mask"]}};
    if (e.count("token_type_ids")) in.set("token_type_ids", e["token_type_ids"]);
    at::Tensor logits = model->forward(in).at("logits");
    PreparedModel slot;
    slot.model = std::shared_ptr<Model>(std::move(model));
    const std::string dir = (root / name).string();
    save_pretrained(slot, dir, std::string(name) == "llama" ? "20KB" : "");
    EXPECT_EQ(fs::exists(fs::path(dir) / "model.safetensors.index.json"), std::string(name) == "llama") << name;
    auto back = hf::from_pretrained(dir, nullptr);
    // Not bitwise: loaded parameters are the mapped file's memory, and matrix kernels round differently at
    // another alignment (the tensors sit at other offsets of the new files).
    const double d = (back->forward(in).at("logits") - logits).abs().max().item<double>();
    EXPECT_LE(d, 1e-5) << name;
    NamedTensors outputs = in.items();
    outputs.emplace_back("logits", logits);
    save_safetensors(outputs, (fs::path(dir) / "libacc_outputs.safetensors").string());
  }
  if (!keep) fs::remove_all(root);
}

// save_pretrained's config.json is parsed and written again, never edited as text (issue 36: a valid config.json with
// 200 KB of whitespace before a key overflowed the stack of the regular expression that edited it): the weights'
// dtype in "dtype", or in "torch_dtype" (the key before transformers 5) where the config has that, or else a "dtype"
// first; every other value as it was, integers and floats apart.
TEST(FromPretrained, SavePretrainedWritesTheConfigAsJson) {
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("acc_hf_config_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  const std::string original = config::read_file(g_fixtures + "/llama/model/config.json");
  const json::Document fixture = json::Document::object(original, "fixture");
  auto saved = [&](const std::string& name, const std::string& text) {
    PreparedModel slot;
    slot.model = std::shared_ptr<Model>(hf::from_config(text, R"({"dtype": "bfloat16"})"));
    save_pretrained(slot, (tmp / name).string(), "");
    return config::read_file((tmp / name / "config.json").string());
  };
  // The other values: the same keys in the same order, each the same JSON of the same kind.
  auto same_otherwise = [&](const json::Value& v) {
    for (const auto& [k, e] : fixture.root().items()) {
      if (k == "dtype") continue;
      ASSERT_TRUE(v.has(k)) << k;
      EXPECT_EQ(v.get(k).text(), e.text()) << k;
      EXPECT_EQ(static_cast<int>(v.get(k).kind()), static_cast<int>(e.kind())) << k;
    }
  };
  // 200 KB of whitespace before a key, and on both sides of dtype's colon.
  const std::string wide(200000, ' ');
  std::string spaced = original;
  spaced.insert(spaced.find("\"vocab_size\""), wide + "\n\t\r\n");
  spaced.replace(spaced.find("\"dtype\": "), 9, "\"dtype\"" + wide + ":\n\t" + wide);
  const std::string text = saved("spaced", spaced);
  const json::Document doc = json::Document::object(text, "saved");
  EXPECT_EQ(doc.root().keys(), fixture.root().keys());
  EXPECT_EQ(doc.root().get_string("dtype"), "bfloat16");
  same_otherwise(doc.root());
  EXPECT_NE(text.find("\n  \"attention_dropout\": 0.0,\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n  \"rms_norm_eps\": 1e-06,\n"), std::string::npos) << text;
  EXPECT_LT(text.size(), 2000u);
  const auto back = hf::from_pretrained((tmp / "spaced").string(), nullptr);
  EXPECT_EQ(back->named_parameters().front().second.scalar_type(), at::kBFloat16);

  std::string older = original;  // transformers 4's key
  older.replace(older.find("\"dtype\""), 7, "\"torch_dtype\"");
  const json::Document o = json::Document::object(saved("torch_dtype", older), "saved");
  EXPECT_EQ(o.root().get_string("torch_dtype"), "bfloat16");
  EXPECT_FALSE(o.root().has("dtype"));
  same_otherwise(o.root());

  std::string none = original;  // no dtype: one is added, first
  none.erase(none.find("\"dtype\""), none.find('\n', none.find("\"dtype\"")) - none.find("\"dtype\"") + 1);
  const json::Document n = json::Document::object(saved("none", none), "saved");
  EXPECT_EQ(n.root().keys().front(), "dtype");
  EXPECT_EQ(n.root().get_string("dtype"), "bfloat16");
  same_otherwise(n.root());

  std::string null = original;  // a null dtype: set in place (once: JSON keys are unique)
  null.replace(null.find("\"float32\""), 9, "null");
  const json::Document z = json::Document::object(saved("null", null), "saved");
  EXPECT_EQ(z.root().get_string("dtype"), "bfloat16");
  EXPECT_EQ(z.root().keys().size(), fixture.root().keys().size());

  // A config naming no class, or a null one, is saved naming it first (once), as transformers writes it.
  for (const char* arch : {"absent", "null"}) {
    std::string unnamed = original;
    const size_t at = unnamed.find("\"architectures\"");
    const size_t end = unnamed.find(']', at) + 1;
    unnamed.replace(at, end - at, "\"architectures\": null");
    if (std::string(arch) == "absent") unnamed.erase(at, unnamed.find('\n', at) - at + 1);
    const json::Document a = json::Document::object(saved(std::string("arch_") + arch, unnamed), "saved");
    EXPECT_EQ(a.root().keys().front(), "architectures") << arch;
    EXPECT_EQ(a.root().get("architectures").at(0).as_string(), "LlamaForCausalLM") << arch;
    EXPECT_EQ(a.root().keys().size(), fixture.root().keys().size()) << arch;
  }
  fs::remove_all(tmp);
}

// The torch-free shapes `acc estimate-memory` reads from a config.json are those of the models libacc builds.
TEST(FromPretrained, ConfigShapesAreTheModelsOwn) {
  for (const char* name : {"llama", "llama_linear", "llama_dynamic", "mistral", "qwen2", "mixtral", "gpt2", "bert"}) {
    std::ifstream in(g_fixtures + "/" + name + "/model/config.json");
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    const auto shapes = config::hf_parameter_shapes(text);
    const auto model = hf::from_config(text, R"({"device": "meta"})");
    const NamedTensors params = model->named_parameters();
    ASSERT_EQ(shapes.size(), params.size()) << name;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(shapes[i].first, params[i].first) << name;
      EXPECT_EQ(shapes[i].second, params[i].second.sizes().vec()) << name << " " << params[i].first;
    }
  }
  EXPECT_THROW(config::hf_parameter_shapes(R"({"architectures": ["T5Model"]})"), config::Error);
}

// Past max_position_embeddings, dynamic NTK scaling changes every position's rotation: one forward of 13
// tokens (max_position_embeddings 8) without a cache.
TEST(FromPretrained, DynamicRopeScalingPastTheTrainedLength) {
  auto e = expected_of("llama_dynamic");
  auto model = hf::from_pretrained(g_fixtures + "/llama_dynamic/model", nullptr);
  at::Tensor logits = model->forward(TensorDict{{"input_ids", e["long_ids"]}}).at("logits");
  const double d = (logits - e["long_logits"]).abs().max().item<double>();
  std::printf("llama_dynamic, 13 tokens: logits max |diff| %.3g\n", d);
  EXPECT_LE(d, 1e-5);
}

TEST(FromPretrained, BadInputIsNamed) {
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("acc_hf_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const fs::path src = fs::path(g_fixtures) / "qwen2" / "model";
  auto copy = [&](const std::string& to) {
    fs::copy(src, tmp / to, fs::copy_options::recursive);
    return (tmp / to).string();
  };
  EXPECT_NE(error_of([&] { hf::from_pretrained((tmp / "none").string(), nullptr); }).find("is not a directory"),
            std::string::npos);
  const std::string no_config = copy("no_config");
  fs::remove(fs::path(no_config) / "config.json");
  EXPECT_NE(error_of([&] { hf::from_pretrained(no_config, nullptr); }).find("config.json"), std::string::npos);
  const std::string no_weights = copy("no_weights");
  fs::remove(fs::path(no_weights) / "model.safetensors");
  EXPECT_NE(error_of([&] { hf::from_pretrained(no_weights, nullptr); }).find("no model.safetensors"),
            std::string::npos);
  // An architecture libacc lacks: named, with the list of those it has.
  const std::string other = copy("other");
  std::ofstream(fs::path(other) / "config.json") << R"({"architectures": ["T5ForConditionalGeneration"]})";
  const std::string err = error_of([&] { hf::from_pretrained(other, nullptr); });
  EXPECT_NE(err.find("T5ForConditionalGeneration"), std::string::npos) << err;
  EXPECT_NE(err.find("LlamaForCausalLM"), std::string::npos) << err;
  // A model whose shapes differ from the file's: every mismatch named.
  const std::string wide = copy("wide");
  std::string config;
  {
    std::ifstream in(fs::path(wide) / "config.json");
    config.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto at = config.find("\"intermediate_size\": 64");
  ASSERT_NE(at, std::string::npos);
  config.replace(at, 23, "\"intermediate_size\": 48");
  std::ofstream(fs::path(wide) / "config.json") << config;
  const std::string shapes = error_of([&] { hf::from_pretrained(wide, nullptr); });
  EXPECT_NE(shapes.find("does not fit Qwen2ForCausalLM: mismatched shapes: "), std::string::npos) << shapes;
  EXPECT_NE(shapes.find("model.layers.1.mlp.down_proj.weight ([32, 64] in the checkpoint, [32, 48] in the model)"),
            std::string::npos)
      << shapes;
  // A sharded checkpoint with a shard gone: the shard and the index named.
  const std::string sharded = (tmp / "sharded").string();
  fs::copy(fs::path(g_fixtures) / "llama" / "model", sharded, fs::copy_options::recursive);
  fs::remove(fs::path(sharded) / "model-00002-of-00003.safetensors");
  const std::string shard = error_of([&] { hf::from_pretrained(sharded, nullptr); });
  EXPECT_NE(shard.find("model-00002-of-00003.safetensors"), std::string::npos) << shard;
  EXPECT_NE(shard.find("is missing"), std::string::npos) << shard;
  EXPECT_NE(error_of([&] { hf::from_pretrained(src.string(), R"({"dtype": "int8"})"); }).find("dtype"),
            std::string::npos);
  fs::remove_all(tmp);
}

// A tensor of the checkpoint whose dtype is not of the parameter's kind (an integer tensor for a float parameter)
// is refused naming the tensor and its file, on every process alike (it was converted by value: loss 1e10);
// floating point into floating point converts (the bf16 loads above).
TEST(FromPretrained, IntegerTensorsDoNotBecomeFloatParameters) {
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("acc_hf_dtype_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::copy(fs::path(g_fixtures) / "qwen2" / "model", tmp, fs::copy_options::recursive);
  const std::string file = (tmp / "model.safetensors").string();
  NamedTensors tensors;
  for (auto& [name, t] : load_safetensors(file))
    tensors.emplace_back(name, name == "model.norm.weight" ? (t * 1000).to(at::kLong) : t.clone());
  save_safetensors(tensors, file, {{"format", "pt"}});
  const std::string err = error_of([&] { hf::from_pretrained(tmp.string(), nullptr); });
  EXPECT_NE(err.find("dtypes that do not convert: model.norm.weight (Long in " + file + ", Float in the model)"),
            std::string::npos)
      << err;
  // The processes that read only the headers (cpu_ram_efficient_loading) refuse it alike.
  hold_ram_efficient_loading(true);
  const std::string headers_only = error_of([&] { hf::from_pretrained(tmp.string(), nullptr); });
  hold_ram_efficient_loading(false);
  EXPECT_NE(headers_only.find("model.norm.weight (Long in " + file), std::string::npos) << headers_only;
  fs::remove_all(tmp);
}

// Token ids generate writes or compares against must be in the vocabulary: a pad_token_id beyond it (from the
// options or from generation_config.json) is refused before the first step, naming the key and where it came from.
TEST(Generate, TokenIdsOutsideTheVocabularyAreRefusedFirst) {
  namespace fs = std::filesystem;
  auto e = expected_of("llama");
  auto model = hf::from_pretrained(g_fixtures + "/llama/model", nullptr);
  auto& lm = dynamic_cast<hf::CausalLM&>(*model);
  auto run = [&](hf::CausalLM& m, Model& mm, const char* json) {
    return error_of([&] {
      hf::generate(mm, e["prompt_ids"], {}, hf::parse_generation_options(json, m.generation_defaults));
    });
  };
  std::string err = run(lm, *model, R"({"max_new_tokens": 4, "pad_token_id": 1000, "eos_token_id": 5})");
  EXPECT_NE(err.find("pad_token_id 1000 (from generation options) is not a token of the model's vocabulary [0, 96)"),
            std::string::npos)
      << err;
  err = run(lm, *model, R"({"max_new_tokens": 4, "eos_token_id": [5, 96]})");
  EXPECT_NE(err.find("eos_token_id 96 (from generation options)"), std::string::npos) << err;
  // From the model's generation_config.json.
  const fs::path tmp = fs::temp_directory_path() / ("acc_hf_pad_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::copy(fs::path(g_fixtures) / "llama" / "model", tmp, fs::copy_options::recursive);
  std::ofstream(tmp / "generation_config.json") << R"({"eos_token_id": 95, "pad_token_id": 4096})";
  auto padded = hf::from_pretrained(tmp.string(), nullptr);
  err = run(dynamic_cast<hf::CausalLM&>(*padded), *padded, R"({"max_new_tokens": 4})");
  EXPECT_NE(err.find("pad_token_id 4096 (from " + (tmp / "generation_config.json").string() + ")"), std::string::npos)
      << err;
  fs::remove_all(tmp);
}

// An attention_mask holds 0 and 1 only: a 2 or a -1 (which transformers would read as padding) is refused by name in
// every model that takes one, and by generate.
TEST(FromPretrained, AttentionMasksHoldZerosAndOnes) {
  auto e = expected_of("llama");
  auto llama = hf::from_pretrained(g_fixtures + "/llama/model", nullptr);
  auto gpt2 = hf::from_pretrained(g_fixtures + "/gpt2/model", nullptr);
  auto bert = hf::from_pretrained(g_fixtures + "/bert/model", nullptr);
  const at::Tensor ids = e["input_ids"];
  for (double bad : {2.0, -1.0, 0.5}) {
    at::Tensor mask = at::ones_like(ids, at::kFloat);
    mask[0][1] = bad;
    for (Model* m : {llama.get(), gpt2.get(), bert.get()}) {
      const std::string err = error_of([&] { m->forward(TensorDict{{"input_ids", ids}, {"attention_mask", mask}}); });
      EXPECT_NE(err.find("attention_mask must hold only 0 (padding) and 1 (a token)"), std::string::npos) << err;
    }
    const std::string err = error_of([&] {
      hf::generate(*llama, ids, mask, hf::parse_generation_options(R"({"max_new_tokens": 2})", {}));
    });
    EXPECT_NE(err.find("attention_mask must hold only 0"), std::string::npos) << err;
  }
  // What transformers' masks hold passes: int64, bool and float zeros and ones.
  at::Tensor mask = at::ones_like(ids);
  mask[0][0] = 0;
  EXPECT_NO_THROW(llama->forward(TensorDict{{"input_ids", ids}, {"attention_mask", mask.to(at::kBool)}}));
  EXPECT_NO_THROW(bert->forward(TensorDict{{"input_ids", ids}, {"attention_mask", mask.to(at::kFloat)}}));
}

// What a model folder may hold in place of its files (issue 23): a FIFO blocked from_pretrained forever, a link to
// /dev/zero was read until memory ran out, a 300 MB config.json loaded. Each is refused naming the file; nothing
// blocks (a regression shows as this test's timeout).
TEST(FromPretrained, FolderFilesAreRegularAndBounded) {
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("acc_hf_files_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  // `name` in a copy of the fixture `model` replaced by what `make` puts there: the copy and the file.
  int copies = 0;
  auto replaced = [&](const char* model, const std::string& name, const std::function<void(const fs::path&)>& make) {
    const fs::path dir = tmp / std::to_string(++copies);
    fs::copy(fs::path(g_fixtures) / model / "model", dir, fs::copy_options::recursive);
    fs::remove(dir / name);
    make(dir / name);
    return std::make_pair(dir.string(), (dir / name).string());
  };
  const auto fifo = [](const fs::path& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0); };
  const auto zero = [](const fs::path& p) { fs::create_symlink("/dev/zero", p); };
  for (const char* name :
       {"config.json", "generation_config.json", "model.safetensors.index.json", "model-00002-of-00003.safetensors"}) {
    for (const auto& make : {std::function<void(const fs::path&)>(fifo), std::function<void(const fs::path&)>(zero)}) {
      const auto [dir, file] = replaced("llama", name, make);
      const std::string err = error_of([&] { hf::from_pretrained(dir, nullptr); });
      EXPECT_NE(err.find(file), std::string::npos) << err;
      EXPECT_NE(err.find("not a regular file"), std::string::npos) << err;
    }
  }
  // A single-file checkpoint's model.safetensors, as a FIFO.
  const auto [single, weights] = replaced("qwen2", "model.safetensors", fifo);
  EXPECT_NE(error_of([&] { hf::from_pretrained(single, nullptr); }).find(weights + "': is not a regular file"),
            std::string::npos);
  // A config.json of 300 MB (sparse: no disk used) is refused by its size, before a byte is read.
  const auto [big, config] = replaced("qwen2", "config.json", [](const fs::path& p) {
    std::ofstream(p).close();
    fs::resize_file(p, 300u << 20);
  });
  const std::string err = error_of([&] { hf::from_pretrained(big, nullptr); });
  EXPECT_NE(err.find("cannot read '" + config + "': it holds 314572800 bytes, more than the limit of 16777216"),
            std::string::npos)
      << err;
  fs::remove_all(tmp);
}

// config.json's values are checked as transformers checks them (and where it only warns, for what computes garbage)
// before any layer is built, naming the key and the file; JSON is strict (a duplicate key: Python keeps the last,
// a reader that kept the first would differ).
TEST(FromPretrained, ConfigValuesAreCheckedBeforeBuilding) {
  // A small config of `arch`, `changes` set (an empty value removes the key).
  auto config = [](const std::string& arch, const std::map<std::string, std::string>& changes) {
    std::map<std::string, std::string> keys;
    if (arch == "GPT2LMHeadModel") keys = {{"vocab_size", "16"}, {"n_embd", "8"}, {"n_layer", "1"}, {"n_head", "2"}};
    else if (arch == "BertForSequenceClassification")
      keys = {{"vocab_size", "16"},
              {"hidden_size", "8"},
              {"num_hidden_layers", "1"},
              {"num_attention_heads", "2"},
              {"intermediate_size", "16"}};
    else
      keys = {{"vocab_size", "16"},       {"hidden_size", "8"},         {"intermediate_size", "16"},
              {"num_hidden_layers", "1"}, {"num_attention_heads", "2"}, {"num_key_value_heads", "2"}};
    if (arch == "MixtralForCausalLM") keys.insert({{"num_local_experts", "4"}, {"num_experts_per_tok", "2"}});
    for (const auto& [k, v] : changes) {
      if (v.empty()) keys.erase(k);
      else keys[k] = v;
    }
    std::string s = "{\"architectures\": [\"" + arch + "\"]";
    for (const auto& [k, v] : keys) s += ", \"" + k + "\": " + v;
    return s + "}";
  };
  const std::string llama = "LlamaForCausalLM";
  const std::vector<std::tuple<std::string, std::map<std::string, std::string>, std::string>> refused = {
      {llama, {{"rms_norm_eps", "-1e-6"}}, "'rms_norm_eps' must be a number at least 0; got -1e-06"},
      {llama, {{"rope_parameters", "\"linear\""}}, "'rope_parameters' must be an object"},
      {llama, {{"rope_scaling", "[2.0]"}}, "'rope_scaling' must be an object"},
      {llama, {{"rope_theta", "-10000"}}, "'rope_theta' must be a number above 0; got -10000"},
      {llama, {{"rope_theta", "0"}}, "'rope_theta' must be a number above 0"},
      {llama,
       {{"rope_parameters", R"({"rope_type": "default", "rope_theta": -1})"}},
       "'rope_parameters.rope_theta' must be a number above 0"},
      {llama,
       {{"rope_parameters", R"({"rope_type": "linear", "factor": 0})"}},
       "'rope_parameters.factor' must be a number above 0; got 0"},
      {llama,
       {{"rope_scaling", R"({"type": "dynamic", "factor": -2.0})"}},
       "'rope_scaling.factor' must be a number above 0"},
      {llama, {{"rope_parameters", R"({"rope_type": "linear"})"}}, "'rope_parameters.factor' is missing"},
      {llama,
       {{"rope_parameters", R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4})"}},
       "'rope_parameters.high_freq_factor' must be above 'low_freq_factor'"},
      {llama,
       {{"rope_parameters", R"({"rope_type": "llama3", "factor": 8, "high_freq_factor": 4})"}},
       "'rope_parameters.low_freq_factor' is missing"},
      {llama,
       {{"rope_parameters", R"({"rope_type": "default", "partial_rotary_factor": 0.5})"}},
       "'rope_parameters.partial_rotary_factor' must be 1"},
      {llama,
       {{"rope_parameters", R"({"full_attention": {"rope_type": "default"}})"}},
       "'rope_parameters.full_attention' is an object"},
      {llama, {{"max_position_embeddings", "-1"}}, "'max_position_embeddings' must be an integer between 1 and"},
      {llama, {{"vocab_size", "16.5"}}, "'vocab_size' must be an integer between 1 and"},
      {llama, {{"hidden_size", "0"}}, "'hidden_size' must be an integer between 1 and"},
      {llama,
       {{"num_hidden_layers", "1000000"}},
       "'num_hidden_layers' must be an integer between 1 and 65536 (the limit)"},
      {llama, {{"num_attention_heads", "3"}}, "'hidden_size' (8) must be a multiple of 'num_attention_heads' (3)"},
      {llama,
       {{"num_key_value_heads", "3"}},
       "'num_attention_heads' (2) must be a multiple of 'num_key_value_heads' (3)"},
      {llama, {{"head_dim", "3"}}, "'head_dim' must be even"},
      {llama, {{"attention_dropout", "1.5"}}, "'attention_dropout' must be a number between 0 and 1"},
      {llama, {{"initializer_range", "2"}}, "'initializer_range' must be a number between 0 and 1"},
      {llama, {{"tie_word_embeddings", "\"yes\""}}, "'tie_word_embeddings' must be true or false"},
      {llama, {{"intermediate_size", ""}}, "'intermediate_size' is missing"},
      {"MistralForCausalLM", {{"sliding_window", "0"}}, "'sliding_window' must be an integer between 1 and"},
      // Missing, MistralConfig's and MixtralConfig's default 8 (null: num_attention_heads, accepted below).
      {"MistralForCausalLM",
       {{"num_key_value_heads", ""}},
       "'num_attention_heads' (2) must be a multiple of 'num_key_value_heads' (8, the default when it is missing)"},
      {"Qwen2ForCausalLM", {{"max_window_layers", "-1"}}, "'max_window_layers' must be an integer between 0 and"},
      // Values transformers honours and libacc's models do not have: refused by name, never ignored.
      {"GPT2LMHeadModel", {{"tie_word_embeddings", "false"}}, "'tie_word_embeddings' must be true"},
      {"BertForSequenceClassification", {{"is_decoder", "true"}}, "'is_decoder' must be false"},
      {llama, {{"partial_rotary_factor", "0.5"}}, "'partial_rotary_factor' must be 1"},
      // `rope_scaling or rope_parameters`: a non-empty rope_scaling is the one read.
      {llama,
       {{"rope_scaling", R"({"type": "linear"})"}, {"rope_parameters", R"({"rope_type": "default"})"}},
       "'rope_scaling.factor' is missing"},
      {"MixtralForCausalLM", {{"router_jitter_noise", "-1"}}, "'router_jitter_noise' must be a number at least 0"},
      {"Qwen2ForCausalLM",
       {{"layer_types", R"(["full_attention", "full_attention"])"}},
       "'layer_types' must be a list of one attention type per layer (1)"},
      {"MixtralForCausalLM",
       {{"num_experts_per_tok", "5"}},
       "'num_experts_per_tok' must be an integer between 1 and 4"},
      {"MixtralForCausalLM",
       {{"num_hidden_layers", "1024"}, {"num_local_experts", "1024"}},
       "'num_hidden_layers' times 'num_local_experts' must be at most 65536 (the limit)"},
      {"GPT2LMHeadModel", {{"n_head", "3"}}, "'n_embd' (8) must be a multiple of 'n_head' (3)"},
      {"GPT2LMHeadModel", {{"layer_norm_epsilon", "-1e-5"}}, "'layer_norm_epsilon' must be a number at least 0"},
      {"GPT2LMHeadModel", {{"attn_pdrop", "2"}}, "'attn_pdrop' must be a number between 0 and 1"},
      {"GPT2LMHeadModel", {{"n_positions", "-5"}}, "'n_positions' must be an integer between 1 and"},
      {"BertForSequenceClassification", {{"num_attention_heads", "3"}}, "'hidden_size' (8) must be a multiple of"},
      {"BertForSequenceClassification", {{"layer_norm_eps", "-1"}}, "'layer_norm_eps' must be a number at least 0"},
      {"BertForSequenceClassification", {{"id2label", R"(["a", "b"])"}}, "'id2label' must be an object"},
      {"BertForSequenceClassification", {{"id2label", R"({"0": "a", "x": "b"})"}}, "'id2label' has the key \"x\""},
      {"BertForSequenceClassification", {{"problem_type", "\"ranking\""}}, "'problem_type' must be regression"},
      {"BertForSequenceClassification",
       {{"problem_type", "\"single_label_classification\""}, {"num_labels", "1"}},
       "'problem_type' single_label_classification needs more than one label"},
      {"BertForSequenceClassification",
       {{"classifier_dropout", "1.5"}},
       "'classifier_dropout' must be a number between"},
      // nn.Embedding refuses a padding_idx outside [-vocab, vocab); transformers' strict config, one not an integer.
      {llama, {{"pad_token_id", "16"}}, "'pad_token_id' must be null or a token id of the vocabulary (16 tokens"},
      {"MixtralForCausalLM", {{"pad_token_id", "-17"}}, "'pad_token_id' must be null or a token id of the vocabulary"},
      {"BertForSequenceClassification", {{"pad_token_id", "[0]"}}, "'pad_token_id' must be null or a token id of"},
  };
  for (const auto& [arch, changes, expected] : refused) {
    const std::string text = config(arch, changes);
    const std::string err = error_of([&] { hf::from_config(text, R"({"device": "meta"})"); });
    EXPECT_NE(err.find("the model config: " + expected), std::string::npos) << text << "\n" << err;
    // acc estimate-memory's torch-free shapes refuse it alike.
    EXPECT_THROW(config::hf_parameter_shapes(text), config::Error) << text;
  }
  // What transformers accepts loads: a factor below 1 (it only warns), an epsilon of 0, a null rope_scaling, the old
  // "type" spelling, llama3's original_max_position_embeddings taken from max_position_embeddings.
  for (const std::string& ok :
       {config(llama, {{"rope_parameters", R"({"rope_type": "linear", "factor": 0.5})"}, {"rms_norm_eps", "0"}}),
        config(llama, {{"rope_scaling", "null"}, {"head_dim", "null"}}),
        config(llama, {{"rope_scaling", R"({"type": "dynamic", "factor": 2})"}, {"rope_theta", "500000.0"}}),
        config(llama, {{"rope_parameters",
                        R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4})"}}),
        config("Qwen2ForCausalLM", {{"layer_types", R"(["full_attention"])"}, {"sliding_window", "null"}}),
        config("BertForSequenceClassification", {{"id2label", R"({"0": "neg", "1": "pos", "2": "neutral"})"}}),
        config(llama, {{"pad_token_id", "-16"}}), config(llama, {{"pad_token_id", "15"}}),
        config("MixtralForCausalLM", {{"num_key_value_heads", "null"}})})
    EXPECT_NO_THROW(hf::from_config(ok, R"({"device": "meta"})")) << ok;
  // An activation of transformers' ACT2FN that libacc lacks is refused naming the family's key.
  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {config("GPT2LMHeadModel", {{"activation_function", "\"quick_gelu\""}}),
            "'activation_function' 'quick_gelu' is not one libacc has"},
           {config(llama, {{"hidden_act", "\"relu6\""}}), "'hidden_act' 'relu6' is not one libacc has"}})
    EXPECT_NE(error_of([&] { hf::from_config(text, R"({"device": "meta"})"); }).find("the model config: " + expected),
              std::string::npos)
        << text;
  // Strict JSON: a duplicate key, text after the document, bytes that are not UTF-8.
  const std::string base = config(llama, {});
  const std::vector<std::pair<std::string, std::string>> malformed = {
      {base.substr(0, base.size() - 1) + ", \"hidden_size\": 16}", "duplicate key \"hidden_size\""},
      {base + " {}", "unexpected text after the JSON value"},
      {base.substr(0, base.size() - 1) + ", \"hidden_act\": \"si\xffu\"}", "invalid UTF-8"},
  };
  for (const auto& [text, expected] : malformed) {
    const std::string err = error_of([&] { hf::from_config(text, nullptr); });
    EXPECT_NE(err.find("the model config: malformed JSON at line 1"), std::string::npos) << err;
    EXPECT_NE(err.find(expected), std::string::npos) << err;
  }
  // From a folder, the message names config.json.
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("acc_hf_values_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::copy(fs::path(g_fixtures) / "llama" / "model", tmp, fs::copy_options::recursive);
  std::ofstream(tmp / "config.json") << config(llama, {{"rms_norm_eps", "-1"}});
  EXPECT_NE(error_of([&] {
              hf::from_pretrained(tmp.string(), nullptr);
            }).find((tmp / "config.json").string() + ": 'rms_norm_eps' must be a number at least 0"),
            std::string::npos);
  std::ofstream(tmp / "config.json") << base;
  std::ofstream(tmp / "model.safetensors.index.json")
      << R"({"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}})";
  EXPECT_NE(error_of([&] { hf::from_pretrained(tmp.string(), nullptr); }).find("duplicate key \"a\""),
            std::string::npos);
  std::ofstream(tmp / "model.safetensors.index.json") << R"({"weight_map": {"a": "../x.safetensors"}})";
  EXPECT_NE(error_of([&] { hf::from_pretrained(tmp.string(), nullptr); }).find("it must stay inside"),
            std::string::npos);
  fs::remove_all(tmp);
}

// config.json's pad_token_id is the token embedding's padding_idx as transformers builds it (nn.Embedding(vocab,
// hidden, config.pad_token_id)): that row starts at zero and the lookup gives it no gradient. Absent it is None for
// the decoders and 0 for BERT (the config classes' defaults); null is None; a negative one counts from the end.
TEST(FromPretrained, PadTokenIsTheEmbeddingsPaddingIdx) {
  const std::string llama = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 16, "hidden_size": 8,
      "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2)";
  const std::string bert = R"({"architectures": ["BertForSequenceClassification"], "vocab_size": 16,
      "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2)";
  // {config, the embedding, the padding row (-1: none)}
  const std::vector<std::tuple<std::string, std::string, int64_t>> cases = {
      {llama + "}", "model.embed_tokens.weight", -1},
      {llama + R"(, "pad_token_id": null})", "model.embed_tokens.weight", -1},
      {llama + R"(, "pad_token_id": 3})", "model.embed_tokens.weight", 3},
      {llama + R"(, "pad_token_id": -1})", "model.embed_tokens.weight", 15},
      {llama + R"(, "pad_token_id": 3, "tie_word_embeddings": true})", "model.embed_tokens.weight", 3},
      {bert + "}", "bert.embeddings.word_embeddings.weight", 0},
      {bert + R"(, "pad_token_id": null})", "bert.embeddings.word_embeddings.weight", -1},
      {bert + R"(, "pad_token_id": 5})", "bert.embeddings.word_embeddings.weight", 5},
  };
  for (const auto& [text, param, pad] : cases) {
    auto model = hf::from_config(text, nullptr);
    at::Tensor w;
    for (const auto& [n, p] : model->named_parameters())
      if (n == param) w = p;
    ASSERT_TRUE(w.defined()) << text;
    // Initialised as transformers' _init_weights does: normal, the padding row zeroed.
    const at::Tensor zero_rows = w.abs().amax(1).eq(0).nonzero().flatten();
    EXPECT_EQ(zero_rows.numel(), pad >= 0 ? 1 : 0) << text;
    if (pad >= 0 && zero_rows.numel() == 1) {
      EXPECT_EQ(zero_rows.item<int64_t>(), pad) << text;
    }
    // Every id, the padding one included, attended and (a token after each) labelled.
    at::Tensor ids = at::arange(17, at::kLong).remainder(16).view({1, 17});
    TensorDict batch{{"input_ids", ids}, {"labels", param.rfind("bert", 0) == 0 ? at::zeros({1}, at::kLong) : ids}};
    model->forward(batch).at("loss").backward();
    const at::Tensor g = w.grad().abs().amax(1);
    // Every other row gets a gradient; the padding row none (a tied head's share aside).
    const bool tied = text.find("tie_word_embeddings") != std::string::npos;
    for (int64_t r = 0; r < 16; ++r)
      if (r == pad && !tied) {
        EXPECT_EQ(g[r].item<double>(), 0.0) << text << ": row " << r;
      } else EXPECT_GT(g[r].item<double>(), 0.0) << text << ": row " << r;
  }
}

// Mixtral's router settings that change transformers' loss or training forward are refused where they apply:
// output_router_logits (the load-balancing loss added with labels) and router_jitter_noise (noise in training).
TEST(FromPretrained, MixtralRouterLossAndNoiseAreRefusedWhereTheyApply) {
  auto make = [](const std::string& extra) {
    return hf::from_config(R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 16, "hidden_size": 8,
        "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
        "num_local_experts": 4, "num_experts_per_tok": 2, )" +
                               extra + "}",
                           R"({"dtype": "float32"})");
  };
  const at::Tensor ids = at::arange(6, at::kLong).view({1, 6});
  const TensorDict with_labels{{"input_ids", ids}, {"labels", ids}};
  auto aux = make(R"("output_router_logits": true)");
  EXPECT_NE(error_of([&] { aux->forward(with_labels); }).find("config.json's output_router_logits is true"),
            std::string::npos);
  EXPECT_NO_THROW(aux->forward(TensorDict{{"input_ids", ids}}));  // no labels, no loss: the logits are the same
  EXPECT_NO_THROW(make(R"("output_router_logits": true, "router_aux_loss_coef": 0)")->forward(with_labels));
  auto noisy = make(R"("router_jitter_noise": 0.1)");
  noisy->train(false);
  EXPECT_NO_THROW(noisy->forward(with_labels));
  noisy->train(true);
  EXPECT_NE(error_of([&] { noisy->forward(with_labels); }).find("config.json's router_jitter_noise is 0.1"),
            std::string::npos);
}

// transformers reads `rope_scaling or rope_parameters`: with both, the linear scaling in rope_scaling gives the
// llama_linear fixture's logits even though rope_parameters says "default".
TEST(FromPretrained, RopeScalingIsReadBeforeRopeParameters) {
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("acc_hf_rope_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::copy(fs::path(g_fixtures) / "llama_linear" / "model", tmp, fs::copy_options::recursive);
  const std::string text = config::read_file((tmp / "config.json").string(), 1 << 20);
  const size_t at_key = text.find("\"rope_parameters\"");
  ASSERT_NE(at_key, std::string::npos);
  std::ofstream(tmp / "config.json")
      << text.substr(0, at_key) +
             R"("rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "rope_scaling")" +
             text.substr(at_key + std::string("\"rope_parameters\"").size());
  auto e = expected_of("llama_linear");
  auto model = hf::from_pretrained(tmp.string(), R"({"dtype": "float32"})");
  TensorDict out = model->forward(TensorDict{{"input_ids", e["input_ids"]}, {"attention_mask", e["attention_mask"]}});
  EXPECT_LE(masked_max_diff(out.at("logits"), e["logits"], e["attention_mask"]), 1e-5);
  fs::remove_all(tmp);
}

// config.json values transformers reads in a way libacc once did not (tests/hf/make_parity.py, which lists them):
// configuration-class defaults that differ by family (Mistral's sliding_window 4096; Mixtral's num_key_value_heads,
// rms_norm_eps, rope_theta, experts), keys a family does not read (Mistral's and Mixtral's attention_bias), Qwen2's
// per-layer sliding windows (max_window_layers, layer_types). The loss, the last logits and the token embedding's
// gradient, in training mode, against transformers'.
class ConfigParity : public testing::TestWithParam<const char*> {};

TEST_P(ConfigParity, LossLogitsAndGradientEqualTransformers) {
  const std::string dir = g_fixtures + "/../parity/" + GetParam();
  std::map<std::string, at::Tensor> e;
  for (auto& [k, t] : load_safetensors(dir + "/expected.safetensors")) e[k] = t.clone();
  const at::Tensor ids = e["input_ids"].to(at::kLong);
  const at::Tensor mask = e.count("attention_mask") ? e["attention_mask"].to(at::kLong) : at::ones_like(ids);
  auto model = hf::from_pretrained(dir + "/model", R"({"dtype": "float32"})");
  model->train(true);
  TensorDict out = model->forward(TensorDict{
      {"input_ids", ids}, {"attention_mask", mask}, {"labels", ids.masked_fill(mask.eq(0), -100)}});
  const at::Tensor loss = out.at("loss");
  loss.backward();
  const int64_t last = e["logits"].size(1);
  const at::Tensor logits = out.at("logits").narrow(1, out.at("logits").size(1) - last, last);
  const double logit_diff = masked_max_diff(logits, e["logits"], mask.narrow(1, mask.size(1) - last, last));
  at::Tensor grad;
  for (const auto& [n, p] : model->named_parameters())
    if (n == "model.embed_tokens.weight") grad = p.grad();
  ASSERT_TRUE(grad.defined());
  const double grad_diff = (grad - e["embed_grad"]).abs().max().item<double>();
  const double grad_scale = e["embed_grad"].abs().max().item<double>();
  std::printf("%s: loss |diff| %.3g, last logits max |diff| %.3g, embedding gradient max |diff| %.3g (max |g| %.3g)\n",
              GetParam(), std::abs(loss.item<double>() - e["loss"].item<double>()), logit_diff, grad_diff, grad_scale);
  EXPECT_NEAR(loss.item<double>(), e["loss"].item<double>(), 1e-5);
  EXPECT_LE(logit_diff, 1e-4);
  EXPECT_LE(grad_diff, 1e-5 * std::max(1.0, grad_scale));
}

INSTANTIATE_TEST_SUITE_P(Transformers, ConfigParity,
                         testing::Values("mistral_window", "mixtral_defaults", "qwen2_mixed", "qwen2_types",
                                         "qwen2_full"));

// The index's weight map is read in one pass: 100k entries (a large model's index) took over 40 s when each entry
// was looked up by key. Its own meson test ('hf-large-index') runs this with a short timeout.
TEST(FromPretrained, LargeIndexIsReadInLinearTime) {
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / ("acc_hf_index_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::copy(fs::path(g_fixtures) / "qwen2" / "model", tmp, fs::copy_options::recursive);
  fs::rename(tmp / "model.safetensors", tmp / "model-00001-of-00001.safetensors");
  std::string index = R"({"metadata": {}, "weight_map": {)";
  for (const auto& [name, t] : load_safetensors((tmp / "model-00001-of-00001.safetensors").string()))
    index += "\"" + name + "\": \"model-00001-of-00001.safetensors\", ";
  for (int i = 0; i < 100000; ++i)
    index += "\"extra." + std::to_string(i) + ".weight\": \"model-00001-of-00001.safetensors\", ";
  index.resize(index.size() - 2);
  std::ofstream(tmp / "model.safetensors.index.json") << index << "}}";
  const std::string err = error_of([&] { hf::from_pretrained(tmp.string(), nullptr); });
  EXPECT_NE(err.find("puts 'extra.0.weight' in " + (tmp / "model-00001-of-00001.safetensors").string() +
                     ", which does not hold it"),
            std::string::npos)
      << err.substr(0, 300);
  fs::remove_all(tmp);
}

// Trainer's weight-decay split (get_decay_parameter_names) on each family, against the names transformers computed
// on the same checkpoints (tests/finetune/make_fixtures.py): the tied head appears under both names, as there.
TEST(ParamGroups, NoDecayNamesAreTransformers) {
  const std::string path = g_fixtures + "/../../finetune/fixtures/decay_names.json";
  const auto doc = json::Document::object(config::read_file(path, size_t{1} << 20), path);
  int families = 0;
  for (const auto& [family, want] : doc.root().items()) {
    if (!want.has("no_decay")) continue;  // the adapted models: a later test
    auto model = hf::from_pretrained(g_fixtures + "/" + family + "/model", nullptr);
    const std::vector<std::string> got = no_decay_parameter_names(tree_of(*model));
    std::set<std::string> want_no_decay, want_decay, got_no_decay(got.begin(), got.end()), got_all;
    for (const json::Value& n : want.get("no_decay").elements()) want_no_decay.insert(n.as_string());
    for (const json::Value& n : want.get("decay").elements()) want_decay.insert(n.as_string());
    EXPECT_EQ(got_no_decay, want_no_decay) << family;
    const ModuleTree tree = tree_of(*model);
    std::function<void(int, const std::string&)> all = [&](int m, const std::string& prefix) {
      for (const auto& [name, child] : tree.modules[static_cast<size_t>(m)].children) all(child, prefix + name + ".");
      for (const auto& [name, t] : tree.modules[static_cast<size_t>(m)].parameters) got_all.insert(prefix + name);
    };
    all(0, "");
    std::set<std::string> got_decay;
    for (const auto& n : got_all)
      if (!got_no_decay.count(n)) got_decay.insert(n);
    // transformers 5 renames Mixtral's block_sparse_moe to mlp in memory and fuses its experts
    // (mlp.experts.gate_up_proj); libacc keeps the checkpoint's tensors (block_sparse_moe.experts.N.w1): each of
    // them decays on both sides.
    if (family == "mixtral") {
      std::set<std::string> renamed;
      for (std::string n : got_decay) {
        if (n.find(".experts.") != std::string::npos) continue;
        if (const size_t at = n.find("block_sparse_moe."); at != std::string::npos) n.replace(at, 16, "mlp");
        renamed.insert(n);
      }
      got_decay = renamed;
      std::erase_if(want_decay, [](const std::string& n) { return n.find(".experts.") != std::string::npos; });
    }
    EXPECT_EQ(got_decay, want_decay) << family;
    // acc_optimizer_create's preset: the trainable parameters (a tied weight once) in two groups.
    const auto opt = make_optimizer(*model, R"({"type": "adamw", "param_groups": "transformers"})");
    const auto& groups = opt->impl().param_groups();
    ASSERT_EQ(groups.size(), 2u) << family;
    size_t no_decay_trainable = 0;
    for (const auto& [name, t] : model->trainable_parameters()) no_decay_trainable += got_no_decay.count(name);
    EXPECT_EQ(groups[1].params().size(), no_decay_trainable) << family;
    EXPECT_EQ(groups[0].params().size() + groups[1].params().size(), model->trainable_parameters().size()) << family;
    ++families;
  }
  EXPECT_EQ(families, 6);
}

}  // namespace
}  // namespace acc::core

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: test_hf FIXTURES_DIR\n");
    return 2;
  }
  acc::core::g_fixtures = argv[1];
  return RUN_ALL_TESTS();
}
