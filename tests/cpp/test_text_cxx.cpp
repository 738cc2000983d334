// The C++ API's text classes (acc/torch.hpp: Tokenizer, HfModel::generate_text) on the tiny byte-level BPE of
// tests/text/tiny. Their equality with transformers is tests/text's; this checks the C++ surface.
#include <gtest/gtest.h>

#include <acc/torch.hpp>
#include <filesystem>

namespace {
std::string g_root;

TEST(TextCxx, EncodeDecodeAndChat) {
  auto tok = acc::Tokenizer::from_pretrained(g_root + "/tests/text/tiny/bytebpe");
  acc::Batch b = tok.encode({"Hello world!", "A longer sentence, with more tokens."}, R"({"padding": true})");
  torch::Tensor ids = b.at("input_ids");
  ASSERT_EQ(ids.dim(), 2);
  EXPECT_EQ(ids.size(0), 2);
  EXPECT_EQ(b.at("attention_mask").sum().item<int64_t>() < ids.numel(), true);  // the short row is padded
  auto rows = tok.encode_ids({"Hello world!"}, R"({"add_special_tokens": false})");
  EXPECT_EQ(tok.decode(rows.at(0)), "Hello world!");
  EXPECT_THROW(tok.encode({"a", "a longer one"}), std::invalid_argument);  // ragged without padding
  EXPECT_THROW(tok.encode({"a"}, R"({"paddin": true})"), std::runtime_error);
  const std::string chat = R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}])";
  EXPECT_NE(tok.apply_chat_template(chat, R"({"now": 0})").find("Hello!"), std::string::npos);
  acc::Batch c = tok.encode_chat(chat, R"({"now": 0})");
  const int64_t learned = c.at("assistant_masks").sum().item<int64_t>();
  EXPECT_GT(learned, 0);
  EXPECT_LT(learned, c.at("input_ids").numel());
  ASSERT_TRUE(tok.token_to_id("<|im_end|>").has_value());
  EXPECT_EQ(tok.id_to_token(*tok.token_to_id("<|im_end|>")).value_or(""), "<|im_end|>");
  EXPECT_NE(tok.info().find("\"eos_token\":\"<|im_end|>\""), std::string::npos);
}

TEST(TextCxx, TrainSaveReloadAndGenerate) {
  auto tok = acc::Tokenizer::train_bpe({"the cat sat on the mat", "the dog sat on the log"},
                                       R"({"vocab_size": 300, "special_tokens": ["<|end|>"], "eos_token": "<|end|>"})");
  const std::string dir = ::testing::TempDir() + "/text_cxx_tok";
  tok.save_pretrained(dir);
  auto back = acc::Tokenizer::from_pretrained(dir);
  EXPECT_EQ(back.encode_ids({"the cat"}), tok.encode_ids({"the cat"}));
  std::filesystem::remove_all(dir);

  const std::string config =
      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 300, "hidden_size": 16, "intermediate_size": 32,
          "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1})";
  auto model = acc::HfModel::from_config(config);
  std::string streamed;
  const std::string text =
      model.generate_text(back, "the cat", R"({"max_new_tokens": 8, "eos_token_id": []})", [&](std::string_view piece) {
        streamed += piece;
        return true;
      });
  EXPECT_EQ(text, streamed);
}

}  // namespace

// Datasets from files through the C++ API: TRL's packing, padding-free batches with position_ids; options named.
TEST(TextCxx, DataLoaderFromFiles) {
  auto tok = acc::Tokenizer::from_pretrained(g_root + "/tests/text/tiny/bytebpe");
  auto dl = acc::DataLoader::from_files(g_root + "/tests/data/prep/text.jsonl", tok,
                                        R"({"packing": true, "max_length": 128})", R"({"batch_size": 4})");
  EXPECT_EQ(dl.length(), 2);
  auto b = dl.next();
  ASSERT_TRUE(b.has_value());
  torch::Tensor pos = b->at("position_ids");
  EXPECT_EQ(pos.size(0), 1);
  EXPECT_EQ(b->at("input_ids").sizes(), pos.sizes());
  EXPECT_GT((pos == 0).sum().item<int64_t>(), 1);
  try {
    acc::DataLoader::from_files(g_root + "/tests/data/prep/text.jsonl", tok, R"({"packing_strategy": "best"})");
    ADD_FAILURE() << "a bad packing_strategy was taken";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("packing_strategy"), std::string::npos) << e.what();
  }
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2) return 2;
  g_root = argv[1];
  return RUN_ALL_TESTS();
}
