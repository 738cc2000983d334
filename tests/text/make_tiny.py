"""Train the tiny tokenizers under tests/text/tiny/ with the Python `tokenizers` trainers.

Four models, one per model type that current checkpoints ship, each trained on CORPUS below and
saved as tokenizer.json + tokenizer_config.json (so that transformers' AutoTokenizer loads the folder):

  tiny/bytebpe/   BPE, GPT-2 style: ByteLevel pre-tokenizer (regex), ByteLevel decoder and
                  post-processor, vocab 500, <|bos|> added by a TemplateProcessing; its
                  tokenizer_config.json holds a chat template with {% generation %} blocks
  tiny/spbpe/     BPE, SentencePiece style: Metaspace pre-tokenizer (prepend_scheme "first"),
                  byte_fallback with the 256 <0xNN> tokens, Replace/ByteFallback/Fuse/Strip
                  decoder, vocab 400, <s> added in front
  tiny/wordpiece/ WordPiece, BERT style: BertNormalizer (lowercase, strip accents, CJK split),
                  BertPreTokenizer, [CLS] $A [SEP] / [CLS] $A [SEP] $B [SEP] with type ids
  tiny/unigram/   Unigram with NFKC + Metaspace, </s> appended (T5 style); its
                  tokenizer_config.json holds two named templates, "default" and "tool_use"

tokenizer_class is "PreTrainedTokenizerFast" (transformers then uses tokenizer.json as it is),
except wordpiece, which is "BertTokenizer" as real BERT checkpoints say.

Run it (after bench/setup.sh; .venv-bench has tokenizers 0.23.3 and transformers 5.23):

    .venv-bench/bin/python tests/text/make_tiny.py

then tests/text/make_fixtures.py to refresh tests/text/expected/. The outputs are committed; nothing
downloads anything. Training is not bit-reproducible from run to run (the WordPiece, Unigram and
byte-fallback BPE trainers break ties in hash order), so the committed files are the reference: re-run
this only to change them, and always re-run make_fixtures.py after it.
"""

import json
import pathlib
import sys

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE / "tiny"

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.",
    "Hello world! Hello, tokenizer. How are you today? I'm fine, thanks. Don't worry, we'll see.",
    "A tokenizer splits text into tokens, and a model reads the tokens as numbers.",
    "Fine-tuning a language model on chat logs needs a chat template and a tokenizer.",
    "The assistant answers the user's question; the system message sets the rules.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 1234 2024 3.14159 1,000,000 and 7%.",
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(add(i, i))\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "The weather in Paris is sunny, the temperature is 22 degrees celsius.",
    "get_current_temperature(location: str, unit: str) returns a float.",
    "Tools, documents and messages: user, assistant, system, tool.",
    "naïve café résumé über straße façade coöperate",
    "你好，世界。我们今天学习分词。机器学习很有趣。",
    "こんにちは世界。東京は晴れです。",
    "안녕하세요 세계",
    "Привет, мир! Как дела?",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "Emoji: 😀 👍 🎉 ❤️ 👩‍💻 🇫🇷",
    "   indented text\twith tabs\nand new lines\n\n\nand more spaces    here.",
    "Once upon a time there was a small model that wanted to learn every language in the world.",
    "It read books, code, and conversations, and it learned that words are made of pieces.",
    "Some pieces are common, like the, and, ing, tion; others are rare, like zyzzyva.",
]


def corpus_iter(repeat: int = 20):
    for _ in range(repeat):
        yield from CORPUS


# A chat template in the style of ChatML with {% generation %} around the assistant's text, so
# return_assistant_tokens_mask=True has something to mark. It also uses raise_exception, tojson
# on tools, strftime_now, and the bos_token variable.
BYTEBPE_CHAT_TEMPLATE = (
    "{{- bos_token -}}\n"
    "{%- if tools %}\n"
    "{{- '<|im_start|>system\\nToday is ' + strftime_now('%d %B %Y') + '. Tools:\\n' -}}\n"
    "{%- for tool in tools %}{{ tool | tojson }}\n{% endfor -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "{%- if message['role'] not in ['system', 'user', 'assistant', 'tool'] %}\n"
    "{{- raise_exception('Unknown role: ' + message['role']) }}\n"
    "{%- endif %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}\n"
    "{%- if message['role'] == 'assistant' %}\n"
    "{%- generation %}\n"
    "{%- if message.get('content') %}{{ message['content'] }}{% endif %}\n"
    "{%- if message.get('tool_calls') %}{% for call in message['tool_calls'] %}"
    "<tool_call>{{ {'name': call['function']['name'], 'arguments': call['function']['arguments']} | tojson }}</tool_call>"
    "{% endfor %}{% endif %}\n"
    "{{- '<|im_end|>' -}}\n"
    "{%- endgeneration %}\n"
    "{{- '\\n' -}}\n"
    "{%- else %}\n"
    "{{- message['content'] + '<|im_end|>\\n' -}}\n"
    "{%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' -}}{% endif %}\n"
)

UNIGRAM_DEFAULT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<' + message['role'] + '>' + message['content'] | trim + '</s>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<assistant>' }}{% endif %}"
)
UNIGRAM_TOOL_TEMPLATE = (
    "{% if tools %}{{ '<tools>' + (tools | tojson(indent=2)) + '</s>' }}{% endif %}"
    "{% if documents %}{% for doc in documents %}{{ '<doc ' + doc['title'] + '>' + doc['text'] + '</s>' }}{% endfor %}{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'tool' %}{{ '<tool>' + message['content'] | tojson + '</s>' }}"
    "{% elif message.tool_calls is defined %}{{ '<assistant>' + message.tool_calls | tojson + '</s>' }}"
    "{% else %}{{ '<' + message['role'] + '>' + message['content'] + '</s>' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<assistant>' }}{% endif %}"
)


def save(name: str, tok: Tokenizer, config: dict) -> None:
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"), pretty=False)
    with open(folder / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    size = (folder / "tokenizer.json").stat().st_size
    print(f"{folder.relative_to(HERE.parent.parent)}: vocab {tok.get_vocab_size()}, tokenizer.json {size} bytes")
    if size > 100_000:
        sys.exit(f"{name}: tokenizer.json is {size} bytes, over the 100 KB budget")


def bytebpe() -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|bos|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        min_frequency=2,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_iter(), trainer=trainer)
    # <tool_call> and </tool_call> are added tokens that are not special (as in Qwen)
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                    AddedToken("</tool_call>", special=False, normalized=False)])
    bos = tok.token_to_id("<|bos|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|bos|> $A", pair="<|bos|> $A <|bos|>:1 $B:1", special_tokens=[("<|bos|>", bos)]
        ),
    ])
    save("bytebpe", tok, {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 64,
        "bos_token": "<|bos|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|pad|>",
        "unk_token": None,
        "additional_special_tokens": ["<|im_start|>", "<|endoftext|>"],
        "clean_up_tokenization_spaces": False,
        "padding_side": "right",
        "chat_template": BYTEBPE_CHAT_TEMPLATE,
    })


def spbpe() -> None:
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([
        decoders.Replace("▁", " "),
        decoders.ByteFallback(),
        decoders.Fuse(),
        decoders.Strip(content=" ", left=1, right=0),
    ])
    specials = ["<unk>", "<s>", "</s>", "<pad>"] + [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(
        vocab_size=400, min_frequency=2, special_tokens=specials, limit_alphabet=60, show_progress=False
    )
    tok.train_from_iterator(corpus_iter(), trainer=trainer)
    # the byte tokens must be normal vocabulary entries, not added tokens (as in Llama-2's file):
    # rebuild the model from the trained vocab and merges, and add back only the 4 specials
    data = json.loads(tok.to_str())
    data["added_tokens"] = [a for a in data["added_tokens"] if not a["content"].startswith("<0x")]
    tok = Tokenizer.from_str(json.dumps(data))
    tok.add_special_tokens([AddedToken("<start_of_turn>", special=True, normalized=False),
                            AddedToken("<end_of_turn>", special=True, normalized=False)])
    s = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", s)]
    )
    save("spbpe", tok, {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 128,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"],
        "clean_up_tokenization_spaces": False,
        "padding_side": "left",
    })


def wordpiece() -> None:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=600, min_frequency=1, special_tokens=specials,
                                        continuing_subword_prefix="##", show_progress=False)
    tok.train_from_iterator(corpus_iter(), trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    save("wordpiece", tok, {
        "tokenizer_class": "BertTokenizer",
        "model_max_length": 512,
        "do_lower_case": True,
        "tokenize_chinese_chars": True,
        "strip_accents": None,
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
        "clean_up_tokenization_spaces": True,
    })


def unigram() -> None:
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([
        normalizers.NFKC(),
        normalizers.Replace(Regex(" {2,}"), " "),
    ])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    specials = ["<pad>", "</s>", "<unk>"]
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=specials, unk_token="<unk>",
                                      max_piece_length=12, shrinking_factor=0.75, n_sub_iterations=2,
                                      show_progress=False)
    tok.train_from_iterator(corpus_iter(), trainer=trainer)
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B:1 </s>:1", special_tokens=[("</s>", eos)]
    )
    save("unigram", tok, {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 256,
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "clean_up_tokenization_spaces": True,
        "chat_template": [
            {"name": "default", "template": UNIGRAM_DEFAULT_TEMPLATE},
            {"name": "tool_use", "template": UNIGRAM_TOOL_TEMPLATE},
        ],
    })


def main() -> None:
    bytebpe()
    spbpe()
    wordpiece()
    unigram()


if __name__ == "__main__":
    main()
