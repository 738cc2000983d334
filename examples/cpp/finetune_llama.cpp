// A tiny Llama (transformers' LlamaForCausalLM from a config) fine-tuned through the C++ API on the demo's text
// (the license texts of /usr/share/common-licenses, one token a byte), with a torch::optim::AdamW, saved in
// Hugging Face format, then asked to continue a prompt, the bytes printed as they come. The same program on one
// process or many under `acc launch`; examples/c/finetune_llama.c is the C version.
//
//   acc launch --num_processes 2 build/examples/finetune_llama_cpp --steps 300 --out out/llama-cpp [--lora]
//
// --lora fine-tunes a LoRA adapter instead (acc::add_lora, peft's get_peft_model: r 8, lora_alpha 16 on every linear
// layer; the base stays frozen): the base model is saved to OUT/model first, the trained adapter to OUT/adapter
// (peft's files), and the continuation comes from a fresh copy of the base with the adapter loaded.
#include <acc/torch.hpp>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace fs = std::filesystem;

// The regular files of dir, sorted by name, as one byte string.
static std::string read_corpus(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), {});
  }
  return text;
}

int main(int argc, char** argv) {
  int steps = 300, batch = 8, new_tokens = 120;
  std::string out = "out/llama-cpp", text_dir = "/usr/share/common-licenses", prompt = "This program is free software";
  bool lora = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--lora") {
      lora = true;
      continue;
    }
    const char* value = i + 1 < argc ? argv[++i] : nullptr;
    if (!value) flag = "";  // a flag without its value: usage
    if (flag == "--steps") steps = std::atoi(value);
    else if (flag == "--batch") batch = std::atoi(value);
    else if (flag == "--out") out = value;
    else if (flag == "--text-dir") text_dir = value;
    else if (flag == "--prompt") prompt = value;
    else if (flag == "--new-tokens") new_tokens = std::atoi(value);
    else {
      std::fprintf(stderr,
                   "usage: finetune_llama_cpp [--steps N] [--batch B] [--out DIR] [--text-dir DIR] [--prompt TEXT]"
                   " [--new-tokens N] [--lora]\n");
      return 2;
    }
  }
  acc::Accelerator accelerator(R"({"seed": 42})");
  const std::string text = read_corpus(text_dir);
  constexpr int64_t kBlock = 64;
  const int64_t windows = static_cast<int64_t>(text.size()) / kBlock;
  // Sample i: the bytes of window i as input_ids, and as labels (the model shifts them).
  acc::DataLoader loader(
      windows,
      [&](int64_t i) {
        torch::Tensor ids = torch::empty({kBlock}, torch::kLong);
        for (int64_t t = 0; t < kBlock; ++t) ids[t] = static_cast<unsigned char>(text[i * kBlock + t]);
        return acc::Batch({{"input_ids", ids}, {"labels", ids}});
      },
      R"({"batch_size": )" + std::to_string(batch) + R"(, "shuffle": true, "seed": 42, "drop_last": true})");

  acc::HfModel model = acc::HfModel::from_config(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256, "hidden_size": 64,
    "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 128, "rms_norm_eps": 1e-05, "hidden_act": "silu", "tie_word_embeddings": false,
    "bos_token_id": 1, "eos_token_id": 0, "dtype": "float32"})");
  model.module().train();
  const std::string model_dir = out + "/model", adapter_dir = out + "/adapter";
  if (lora) {
    // The base the adapter trains on (frozen from here on), saved for loading the adapter onto it below.
    if (accelerator.is_main_process()) model.save_pretrained(model_dir);
    acc::add_lora(model, R"({"r": 8, "lora_alpha": 16, "target_modules": "all-linear"})");
  }
  std::vector<torch::Tensor> trainable;  // all of them, or the adapter's
  for (const auto& p : model.module().parameters())
    if (p.requires_grad()) trainable.push_back(p);
  auto adamw = std::make_shared<torch::optim::AdamW>(trainable, torch::optim::AdamWOptions(3e-3).weight_decay(0.01));
  accelerator.prepare(model);
  acc::Optimizer optimizer = accelerator.prepare(adamw);
  loader = accelerator.prepare(loader);
  if (accelerator.is_main_process())
    std::printf("LlamaForCausalLM; batch %d x %d processes x %lld tokens; %d steps%s\n", batch,
                accelerator.num_processes(), static_cast<long long>(kBlock), steps,
                lora ? "; a LoRA adapter (r 8, every linear layer) trains" : "");

  for (int step = 1; step <= steps;) {
    std::optional<acc::Batch> b = loader.next();
    if (!b) continue;  // a new epoch
    torch::Tensor loss = model(*b).at("loss");
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    if (step % 50 == 0 || step == 1 || step == steps) {
      const double mean = accelerator.reduce(loss.detach(), acc::Accelerator::Reduce::Mean).item<double>();
      if (accelerator.is_main_process()) std::printf("step %4d/%d  loss %.4f\n", step, steps, mean);
    }
    ++step;
  }
  // Every process calls it; the main process writes.
  if (lora) acc::save_adapter(model, adapter_dir);
  else model.save_pretrained(model_dir);
  if (accelerator.is_main_process()) {
    std::optional<acc::HfModel> loaded;
    if (lora) {  // as a user of the adapter would: a fresh copy of the base, the adapter loaded onto it
      loaded = acc::HfModel::from_pretrained(model_dir);
      acc::load_adapter(*loaded, adapter_dir);
      std::printf("loaded %s onto %s\n", adapter_dir.c_str(), model_dir.c_str());
    }
    const acc::HfModel& generator = loaded ? *loaded : model;
    generator.module().eval();
    torch::Tensor ids = torch::empty({1, static_cast<int64_t>(prompt.size())}, torch::kLong);
    for (size_t i = 0; i < prompt.size(); ++i) ids[0][static_cast<int64_t>(i)] = static_cast<unsigned char>(prompt[i]);
    std::printf("--- %s", prompt.c_str());
    generator.generate(ids, {},
                       R"({"do_sample": true, "temperature": 0.8, "top_k": 40, "seed": 0, "max_new_tokens": )" +
                           std::to_string(new_tokens) + "}",
                       [](const torch::Tensor& t) {
                         const int c = static_cast<int>(t[0].item<int64_t>());
                         std::putchar(c == '\n' || (c >= 32 && c < 127) ? c : '?');
                         std::fflush(stdout);
                         return true;
                       });
    std::printf("\n---\n");
  }
  accelerator.wait_for_everyone();
  return 0;
}
