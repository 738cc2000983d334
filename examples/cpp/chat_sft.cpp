// examples/c/chat_sft.c in C++, over the C ABI (acc/acc.h; the C++ API of acc/torch.hpp has no text yet) with
// each handle owned by a std::unique_ptr and each failure an exception: a JSONL file of conversations in TRL's
// conversational format (examples/data/chat_sft.jsonl, {"messages": [...]} a line) becomes a byte-level BPE
// tokenizer trained on it (tokenizers' BpeTrainer) with Qwen2's ChatML chat template; the file becomes a dataset
// as TRL's SFTTrainer prepares one (acc_dataset_from_files, mode "sft"): every conversation rendered by that
// template and tokenized, truncated to 64 tokens, with the loss on the assistant's tokens only (the template's
// {% generation %} blocks: assistant_only_loss), batched by TRL's collator; a small Llama built from a config is
// fine-tuned with LoRA (r 16 on every linear layer, the embeddings and head trained whole since the base is
// fresh) in any number of processes; then it answers a question as text, streamed in pieces as transformers'
// TextStreamer prints them. It prints what the C program prints.
//
//   acc launch --num_processes 2 build/examples/chat_sft_cpp [--data FILE] [--steps N] [--batch B] [--out DIR]
//                                                            [--prompt TEXT]
//
// OUT/tokenizer holds the tokenizer (transformers' AutoTokenizer loads it), OUT/adapter the adapter.
#include <acc/acc.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int64_t kMaxLen = 64;

// Qwen2-Instruct's ChatML template, with {% generation %} around what the assistant says (what TRL asks of a
// template for assistant-only loss).
constexpr std::string_view kTemplate =
    R"({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %})"
    R"({{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %})"
    R"({% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}{% generation %})"
    R"({{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }})"
    R"({% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endif %})"
    R"({% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";

// peft's LoraConfig.
constexpr std::string_view kLora =
    R"({"r": 16, "lora_alpha": 32, "target_modules": "all-linear", "modules_to_save": ["embed_tokens", "lm_head"]})";

// libacc's handles, each freed by its destroy function.
template <auto Destroy>
struct Destroyer {
  template <class T>
  void operator()(T* p) const noexcept {
    Destroy(p);
  }
};
template <class T, auto Destroy>
using Owned = std::unique_ptr<T, Destroyer<Destroy>>;
using Accelerator = Owned<acc_accelerator, acc_accelerator_destroy>;
using Tokenizer = Owned<acc_tokenizer, acc_tokenizer_destroy>;
using Tensor = Owned<acc_tensor, acc_tensor_destroy>;
using Batch = Owned<acc_batch, acc_batch_destroy>;
using Dataset = Owned<acc_dataset, acc_dataset_destroy>;
using DataLoader = Owned<acc_dataloader, acc_dataloader_destroy>;
using Model = Owned<acc_model, acc_model_destroy>;
using Optimizer = Owned<acc_optimizer, acc_optimizer_destroy>;
using Text = Owned<char, acc_text_free>;  // a string libacc returned

// A failed call as an exception naming it, with libacc's message.
void check(acc_status st, const char* call) {
  if (st != ACC_OK)
    throw std::runtime_error(std::string(call) + " failed: " + acc_last_error_message() + " (" + acc_status_name(st) +
                             ")");
}
#define CHECK(call) check((call), #call)

// s as a JSON string, quoted.
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + '"';
}

// The non-empty lines of path.
std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
    if (!line.empty()) lines.push_back(std::move(line));
  }
  return lines;
}

// A tensor's int64 values.
std::vector<int64_t> int64_values(const acc_tensor* t) {
  int64_t n = 0;
  CHECK(acc_tensor_numel(t, &n));
  std::vector<int64_t> values(static_cast<size_t>(n));
  CHECK(acc_tensor_to_host(t, values.data(), values.size() * sizeof(int64_t)));
  return values;
}

struct Args {
  std::string data = "examples/data/chat_sft.jsonl", out = "out/chat_sft", prompt = "What is the capital of Japan?";
  int steps = 300, batch = 16;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    const char* value = i + 1 < argc ? argv[++i] : nullptr;
    if (!value) flag = "";  // a flag without its value: usage
    if (flag == "--data") a.data = value;
    else if (flag == "--out") a.out = value;
    else if (flag == "--prompt") a.prompt = value;
    else if (flag == "--steps") a.steps = std::atoi(value);
    else if (flag == "--batch") a.batch = std::atoi(value);
    else {
      std::fprintf(stderr, "usage: chat_sft_cpp [--data FILE] [--steps N] [--batch B] [--out DIR] [--prompt TEXT]\n");
      std::exit(2);
    }
  }
  return a;
}

void run(const Args& args) {
  CHECK(acc_abi_check(ACC_ABI_VERSION));
  acc_accelerator* acc_raw = nullptr;
  CHECK(acc_accelerator_create(R"({"seed": 42})", &acc_raw));
  const Accelerator acc(acc_raw);
  int32_t main_flag = 0;
  CHECK(acc_is_main_process(acc.get(), &main_flag));
  const bool is_main = main_flag != 0;
  const std::vector<std::string> lines = read_lines(args.data);

  // The tokenizer: trained by the main process on the conversations, saved, loaded by every process.
  const std::string tok_dir = args.out + "/tokenizer", adapter_dir = args.out + "/adapter";
  if (is_main) {
    std::filesystem::create_directories(args.out);
    std::vector<const char*> texts;
    std::vector<size_t> lengths;
    for (const auto& l : lines) texts.push_back(l.data()), lengths.push_back(l.size());
    const std::string options =
        R"({"vocab_size": 600, "special_tokens": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], )"
        R"("eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "model_max_length": )" +
        std::to_string(kMaxLen) + R"(, "chat_template": )" + json_string(kTemplate) + "}";
    acc_tokenizer* trained = nullptr;
    CHECK(acc_tokenizer_train_bpe(texts.data(), lengths.data(), static_cast<int64_t>(texts.size()), options.c_str(),
                                  &trained));
    const Tokenizer owned(trained);
    CHECK(acc_tokenizer_save_pretrained(owned.get(), tok_dir.c_str()));
  }
  CHECK(acc_wait_for_everyone(acc.get()));
  acc_tokenizer* tok_raw = nullptr;
  CHECK(acc_tokenizer_from_pretrained(tok_dir.c_str(), &tok_raw));
  const Tokenizer tok(tok_raw);

  // The dataset: TRL's SFT preparation of the file's "messages" rows, by the tokenizer's own template (saved with
  // it): each conversation rendered and tokenized, truncated to kMaxLen tokens, labels -100 outside the
  // assistant's tokens; each batch TRL's collator's, padded to its longest row (labels -100 on the padding).
  const std::string data_opts =
      R"({"mode": "sft", "assistant_only_loss": true, "max_length": )" + std::to_string(kMaxLen) + "}";
  acc_dataset* ds_raw = nullptr;
  CHECK(acc_dataset_from_files(args.data.c_str(), tok.get(), data_opts.c_str(), &ds_raw));
  const Dataset ds(ds_raw);
  int64_t n_conv = 0;
  CHECK(acc_dataset_length(ds.get(), &n_conv));
  // Each row as the collator gives it: conversation 0's ids decoded (the template's text), and the labels the
  // loss learns counted.
  int64_t supervised = 0;
  for (int64_t i = 0; i < n_conv; ++i) {
    acc_batch* row_raw = nullptr;
    CHECK(acc_dataset_get_batch(ds.get(), &i, 1, &row_raw));
    const Batch row(row_raw);
    acc_tensor *ids_raw = nullptr, *labels_raw = nullptr;
    CHECK(acc_batch_get(row.get(), "input_ids", &ids_raw));
    const Tensor ids(ids_raw);
    CHECK(acc_batch_get(row.get(), "labels", &labels_raw));
    const Tensor labels(labels_raw);
    for (const int64_t label : int64_values(labels.get())) supervised += label != -100;
    if (i == 0 && is_main) {
      const std::vector<int64_t> row_ids = int64_values(ids.get());
      char* text_raw = nullptr;
      CHECK(acc_tokenizer_decode(tok.get(), row_ids.data(), static_cast<int64_t>(row_ids.size()), nullptr, &text_raw,
                                 nullptr));
      std::printf("conversation 0 as the template renders it:\n%s\n", Text(text_raw).get());
    }
  }
  const std::string loader_opts =
      R"({"batch_size": )" + std::to_string(args.batch) + R"(, "shuffle": true, "seed": 42, "drop_last": true})";
  acc_dataloader* dl_raw = nullptr;
  CHECK(acc_dataloader_create(ds.get(), loader_opts.c_str(), &dl_raw));
  const DataLoader dl(dl_raw);

  // A small Llama sized to the tokenizer, with a LoRA adapter.
  char* info_raw = nullptr;
  CHECK(acc_tokenizer_info(tok.get(), &info_raw));
  const std::string info = Text(info_raw).get();
  const size_t at = info.find("\"len\":");
  const long long vocab = at == std::string::npos ? 0 : std::atoll(info.c_str() + at + 6);
  int64_t eos = 0, pad = 0;
  CHECK(acc_tokenizer_token_to_id(tok.get(), "<|im_end|>", &eos));
  CHECK(acc_tokenizer_token_to_id(tok.get(), "<|endoftext|>", &pad));
  const std::string config =
      R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": )" + std::to_string(vocab) +
      R"(, "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4, )"
      R"("num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-05, )"
      R"("tie_word_embeddings": false, "eos_token_id": )" +
      std::to_string(eos) + R"(, "pad_token_id": )" + std::to_string(pad) + R"(, "dtype": "float32"})";
  acc_model* model_raw = nullptr;
  CHECK(acc_model_from_config(config.c_str(), nullptr, &model_raw));
  const Model model(model_raw);
  CHECK(acc_model_add_lora(model.get(), std::string(kLora).c_str()));
  CHECK(acc_model_set_training(model.get(), 1));
  acc_optimizer* opt_raw = nullptr;
  CHECK(acc_optimizer_create(model.get(), R"({"type": "adamw", "lr": 0.005, "weight_decay": 0.0})", &opt_raw));
  const Optimizer opt(opt_raw);
  CHECK(acc_prepare(acc.get(), model.get(), opt.get(), nullptr, dl.get()));
  if (is_main)
    std::printf("%lld conversations, %lld assistant tokens to learn; vocabulary %lld; LoRA %s; %d steps\n",
                static_cast<long long>(n_conv), static_cast<long long>(supervised), vocab, kLora.data(), args.steps);

  for (int step = 1; step <= args.steps;) {
    acc_batch* b_raw = nullptr;
    CHECK(acc_dataloader_next_batch(dl.get(), &b_raw));
    if (!b_raw) continue;  // a new epoch
    const Batch b(b_raw);
    acc_batch* out_raw = nullptr;
    CHECK(acc_model_forward_batch(model.get(), b.get(), &out_raw));
    const Batch out(out_raw);
    acc_tensor* loss_raw = nullptr;
    CHECK(acc_batch_get(out.get(), "loss", &loss_raw));
    const Tensor loss(loss_raw);
    CHECK(acc_backward(acc.get(), loss.get()));
    CHECK(acc_optimizer_step(opt.get()));
    CHECK(acc_optimizer_zero_grad(opt.get()));
    if (step % 50 == 0 || step == 1 || step == args.steps) {
      acc_tensor* mean_raw = nullptr;
      CHECK(acc_reduce(acc.get(), loss.get(), ACC_REDUCE_MEAN, &mean_raw));
      const Tensor mean(mean_raw);
      double l = 0;
      CHECK(acc_tensor_item(mean.get(), &l));
      if (is_main) std::printf("step %4d/%d  loss %.4f\n", step, args.steps, l);
    }
    ++step;
  }
  CHECK(acc_model_save_adapter(model.get(), adapter_dir.c_str()));

  // The question, rendered by the template with the assistant's header, answered as text.
  if (is_main) {
    CHECK(acc_model_set_training(model.get(), 0));
    const std::string messages = R"([{"role": "user", "content": )" + json_string(args.prompt) + "}]";
    char* rendered_raw = nullptr;
    CHECK(acc_tokenizer_apply_chat_template(tok.get(), messages.c_str(), R"({"add_generation_prompt": true})",
                                            &rendered_raw, nullptr));
    const Text rendered(rendered_raw);
    std::printf("user: %s\nassistant: ", args.prompt.c_str());
    // Each piece printed as it comes (a captureless lambda is the C callback).
    auto print_piece = [](void*, const char* piece, size_t length) -> int32_t {
      std::fwrite(piece, 1, length, stdout);
      std::fflush(stdout);
      return 0;
    };
    char* answer_raw = nullptr;
    CHECK(acc_generate_text(model.get(), tok.get(), rendered.get(),
                            R"({"max_new_tokens": 24, "add_special_tokens": false, "skip_special_tokens": true})",
                            print_piece, nullptr, &answer_raw));
    const Text answer(answer_raw);
    std::printf("\nsaved the tokenizer to %s and the adapter to %s\n", tok_dir.c_str(), adapter_dir.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chat_sft_cpp: %s\n", e.what());
    return 1;
  }
  return 0;
}
