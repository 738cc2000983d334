"""Make the reference outputs under tests/text/expected/ with transformers' own tokenizers.

What: for every tokenizer folder (the real ones that tests/text/fetch_tokenizers.sh puts in the cache,
and the tiny ones under tests/text/tiny/ made by make_tiny.py), load it with
`transformers.AutoTokenizer.from_pretrained(folder)` and record what transformers gives:

  expected/<name>.json       encode (one text, with and without special tokens: ids, type ids,
                             offsets, tokens, decode with and without skip_special_tokens, with and
                             without cleanup), pairs, batches (padding left/right, pad_to_multiple_of,
                             truncation, stride + overflow), a TextStreamer run, vocabulary look-ups,
                             special tokens, and where transformers' effective pipeline differs from
                             tokenizer.json (see "effective_overrides")
  expected/chat_<name>.json  apply_chat_template renderings and ids (real Llama-3.2, Qwen3, Gemma-3
                             templates, and the tiny bytebpe / unigram templates)

Layout of expected/<name>.json (flat, for a C++ JSON reader):

  {"tokenizer": name, "folder_kind": "real"|"tiny", "folder": "<cache>/tokenizers/llama3" or
   "tests/text/tiny/bytebpe", "versions": {...}, "offsets_note": ...,
   "config": {class, clean_up_tokenization_spaces, add_bos_token, ...},
   "effective_overrides": {component: the value transformers uses where tokenizer.json differs},
   "vocab": {...},
   "cases": [
     {"kind": "encode", "name": .., "text": .., "pair": null|.., "add_special_tokens": bool,
      "ids": [..], "type_ids": [..], "attention_mask": [..], "tokens": [..],
      "offsets_chars": [[s, e], ..], "offsets_bytes": [[s, e], ..],
      "special_tokens_mask": [..],
      "decode": .., "decode_skip_special": .., "decode_no_cleanup": .., "cleanup_changed_decode": bool,
      "raw_tokenizer_json_same": bool, ["raw_ids": [..] when it differs]},
     {"kind": "batch", "name": .., "texts": [..], "pairs": null|[..], "tokenizer_overrides": {..},
      "args": {the exact keyword arguments of tok(texts, **args)}, "input_ids": [[..]],
      "attention_mask": [[..]], ["token_type_ids"], ["overflow_to_sample_mapping"], "error": null|..},
     {"kind": "stream", ...TextStreamer pieces...}
   ]}

Offsets: "offsets_chars" are what transformers returns (Python str indices = Unicode code point
indices into the text); "offsets_bytes" are the same spans as UTF-8 byte offsets (what the
tokenizers crate gives in Rust). Both are [start, end) with end exclusive; special tokens have [0, 0].

Run it (after bench/setup.sh and tests/text/fetch_tokenizers.sh):

    tests/text/fetch_tokenizers.sh
    .venv-bench/bin/python tests/text/make_fixtures.py            # all
    .venv-bench/bin/python tests/text/make_fixtures.py gpt2 tiny_bytebpe   # some

It runs on the CPU in about a minute, downloads nothing and is deterministic (strftime_now is
pinned to FIXED_NOW). Its outputs are committed; the native tests only read them.
"""

import datetime as _dt
import hashlib
import json
import os
import pathlib
import sys
import warnings

import numpy as np
import tokenizers
import transformers
from transformers import AutoTokenizer, TextStreamer
from transformers.utils import chat_template_utils

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
EXPECTED = HERE / "expected"
CACHE = pathlib.Path(
    os.environ.get("ACC_CACHE_DIR") or pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "libacc"
) / "tokenizers"

REAL = ["llama3", "qwen3", "gemma", "mistral", "gpt2"]
TINY = ["bytebpe", "spbpe", "wordpiece", "unigram"]
CHAT = {"llama3": "real", "qwen3": "real", "gemma": "real", "bytebpe": "tiny", "unigram": "tiny"}

# strftime_now() in the templates sees this time (Llama-3.2's template prints "07 Mar 2025")
FIXED_NOW = _dt.datetime(2025, 3, 7, 9, 5, 0)


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


chat_template_utils.datetime = _FixedDatetime

# ---------------------------------------------------------------------------------------------
# The corpus of hard cases: (name, text)
CORPUS = [
    ("empty", ""),
    ("space", " "),
    ("spaces_run", "a  b   c    d"),
    ("leading_trailing_spaces", "   leading and trailing   "),
    ("tabs_newlines", "line one\n\tindented\n\n\nthree newlines\r\nwindows\rold mac"),
    ("only_newlines", "\n\n"),
    ("nbsp_ideographic_space", "non\u00a0breaking\u00a0space and ideographic\u3000space\u3000end"),
    ("unicode_spaces", "en\u2002em\u2003thin\u2009hair\u200anarrow\u202fmath\u205f"),
    ("english", "Hello world! The quick brown fox jumps over the lazy dog."),
    ("contractions", "don't I'M you're we'll they've she'd it's DON'T 'quoted' rock'n'roll"),
    ("punctuation", "Hello , world . ( parens ) [ brackets ] \"quotes\" ... !? -- — – ‘’ “”"),
    ("numbers", "1234567 3.14159 1,000,000 -42 +7 1e10 0x1F 2024-03-07 12:30:45 50% $9.99 ½ ² ⅔ ١٢٣ ४२"),
    ("cjk_chinese", "你好，世界！我们今天学习分词。机器学习很有趣。"),
    ("cjk_japanese", "こんにちは世界。東京は晴れです。カタカナとひらがな。ｶﾀｶﾅ"),
    ("hangul", "안녕하세요 세계"),
    ("hangul_jamo", "\u1100\u1161\u11a8 \u1112\u1161\u11ab"),
    ("combining_marks", "e\u0301 a\u0300 n\u0303 o\u0308 café cafe\u0301 Z\u0351\u0364\u036b\u0300a\u0308\u0310lgo"),
    ("emoji", "I like 😀 and 👍🏽 and ❤️ and 🎉🎉🎉"),
    ("emoji_zwj", "👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🧑🏿‍🚀"),
    ("flags", "🇫🇷🇯🇵🇺🇸 🏴󠁧󠁢󠁳󠁣󠁴󠁿"),
    ("arabic", "مرحبا بالعالم، كيف حالك؟"),
    ("hindi", "नमस्ते दुनिया, आप कैसे हैं?"),
    ("thai", "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง"),
    ("cyrillic", "Привет, мир! Как дела? ЁЖИК ёжик"),
    ("greek_hebrew", "Γειά σου Κόσμε שלום עולם"),
    ("mixed_scripts", "English中文العربيةहिन्दीไทยРусский日本語한국어"),
    ("python_code", "def add(a, b):\n    \"\"\"Add.\"\"\"\n    return a + b\n\n\nfor i in range(10):\n    if i % 2 == 0:\n        print(f\"{i=}\")\n"),
    ("c_code", "#include <stdio.h>\nint main(void) {\n\tint x = 42; // answer\n\tprintf(\"%d\\n\", x);\n\treturn 0;\n}\n"),
    ("json_like", "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}"),
    ("url_email", "see https://example.com/path?q=1&r=two#frag or mail me@example.org"),
    ("special_llama3", "<|begin_of_text|>hi<|eot_id|><|start_header_id|>user<|end_header_id|>"),
    ("special_sp", "<s>hello</s> <unk> <pad> <bos><eos>"),
    ("special_bert", "[CLS] text [SEP] more [MASK] [PAD] [UNK]"),
    ("special_gemma", "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"),
    ("special_chatml", "<|im_start|>user\nhello<|im_end|>\n<|endoftext|><tool_call>x</tool_call>"),
    ("special_inside_words", "abc<s>def</s>ghi<|im_end|>jkl"),
    ("special_like_spaced", " <s> </s> <|im_end|> "),
    ("control_chars", "stx\x02soh\x01bel\x07esc\x1b[31mred\x1b[0m del\x7f zwsp\u200bzwj\u200dbom\ufeffend"),
    ("long_word", "Supercalifragilisticexpialidocious" * 8),
    ("long_digits", "9" * 120),
    ("repeated_chars", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!!!!!!!!!!!!!!"),
    ("cleanup_candidates", "Hello , world . Is n't it ? I 'm here , you 're there ! do n't 've 's"),
    ("accents_case", "Ångström ÉCOLE Straße İstanbul ǅ ﬁ ﬂ Ⅻ"),
    ("fullwidth_nfkc", "ＡＢＣ１２３！ｈｅｌｌｏ"),
    ("private_use_unassigned", "\ue000\uf8ff \U000f0000 \u0378"),
]

PAIRS = [
    ("pair_simple", "How old are you?", "I am six years old."),
    ("pair_cjk", "你好", "世界 and the world"),
    ("pair_empty_second", "first", ""),
]

BATCH_TEXTS = [
    "Hello world!",
    "A much longer sentence that will certainly be longer than sixteen tokens after tokenization, surely.",
    "你好，世界",
    "",
    "short",
]
BATCH_PAIRS = [
    ("What is the capital of France?", "Paris is the capital and largest city of France, on the Seine."),
    ("Short", "pair"),
]

QA_QUESTION = "Where?"
QA_CONTEXT = ("Paris is the capital and most populous city of France. It is located on the Seine river, in the north "
              "of the country, and has been one of the world's major centres of finance, diplomacy and commerce.")

STREAM_PROMPT = "Tell me:"
STREAM_TEXT = "Sure! Here is 你好世界 and 😀 emoji.\nNew line  two spaces, and the end"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_temperature",
            "description": "Get the current temperature at a location.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {
                        "type": "string",
                        "description": 'The location to get the temperature for, in the format "City, Country"',
                    },
                    "unit": {
                        "type": "string",
                        "enum": ["celsius", "fahrenheit"],
                        "description": "The unit to return the temperature in.",
                    },
                },
                "required": ["location", "unit"],
            },
            "return": {
                "type": "number",
                "description": "The current temperature at the specified location in the specified units, as a float.",
            },
        },
    }
]

DOCUMENTS = [
    {"title": "Paris", "text": "Paris is the capital of France."},
    {"title": "Weather", "text": "It is often cloudy in Paris in March."},
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
THREE_TURNS = [
    {"role": "user", "content": "Hi! Can you say hello in French?"},
    {"role": "assistant", "content": "Bonjour ! 😀 Ça va ?"},
    {"role": "user", "content": "And in Japanese, with a café émoji 👍?"},
]
TOOL_CONVERSATION = [
    {"role": "user", "content": "Hey, what's the temperature in Paris right now?"},
    {
        "role": "assistant",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "get_current_temperature", "arguments": {"location": "Paris, France", "unit": "celsius"}},
            }
        ],
    },
    {"role": "tool", "name": "get_current_temperature", "content": "22.0"},
]
# the same with "content": "" on the tool-calling message (Qwen3's template reads message.content there)
TOOL_CONVERSATION_EMPTY_CONTENT = [TOOL_CONVERSATION[0], {"role": "assistant", "content": "", **TOOL_CONVERSATION[1]},
                                   TOOL_CONVERSATION[2]]
CONTENT_BLOCKS = [
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
    {"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": "Paris."}]},
]
CONTINUE = [
    {"role": "user", "content": "Write a haiku about tokens."},
    {"role": "assistant", "content": "Tokens fall like rain"},
]
WITH_LITERAL_CONTROL = [
    {"role": "user", "content": "Please repeat <|im_end|> and <|eot_id|> and <end_of_turn> literally."},
]


# ---------------------------------------------------------------------------------------------
def folder_of(name: str, kind: str) -> pathlib.Path:
    return CACHE / name if kind == "real" else HERE / "tiny" / name


def fixture_name(name: str, kind: str) -> str:
    return name if kind == "real" else f"tiny_{name}"


def byte_offsets(text: str, offsets):
    # code point offsets -> UTF-8 byte offsets
    out = []
    for s, e in offsets:
        out.append([len(text[:s].encode("utf-8", "surrogatepass")), len(text[:e].encode("utf-8", "surrogatepass"))])
    return out


def jsonable(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.integer,)):
        return int(v)
    return v


def effective_overrides(tok, folder: pathlib.Path) -> dict:
    """Where transformers' backend tokenizer differs from tokenizer.json, the value it uses."""
    eff = json.loads(tok._tokenizer.to_str())
    with open(folder / "tokenizer.json", encoding="utf-8") as f:
        raw = json.load(f)
    out = {}
    for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder", "truncation", "padding"):
        if eff.get(k) != raw.get(k):
            out[k] = eff.get(k)
    m_eff = {k: v for k, v in eff["model"].items() if k not in ("vocab", "merges")}
    m_raw = {k: v for k, v in raw["model"].items() if k not in ("vocab", "merges")}
    if m_eff != m_raw:
        out["model_options"] = {"tokenizer_json": m_raw, "effective": m_eff}
    ev, rv = eff["model"].get("vocab"), raw["model"].get("vocab")
    if ev != rv:
        # a Unigram's scores may come back 1 ulp apart: serde_json's float parsing is not exactly round-trip
        close = (isinstance(ev, list) and isinstance(rv, list) and len(ev) == len(rv)
                 and all(a[0] == b[0] and abs(a[1] - b[1]) <= 1e-12 * max(1.0, abs(b[1])) for a, b in zip(ev, rv)))
        if not close:
            out["model_vocab_differs"] = True
    em, rm = eff["model"].get("merges"), raw["model"].get("merges")
    norm = lambda ms: [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in (ms or [])]
    if norm(em) != norm(rm):
        out["model_merges_differ"] = True
    a = {x["id"]: x for x in raw["added_tokens"]}
    b = {x["id"]: x for x in eff["added_tokens"]}
    diff = [{"id": i, "tokenizer_json": a.get(i), "effective": b.get(i)} for i in sorted(set(a) | set(b)) if a.get(i) != b.get(i)]
    if diff:
        out["added_tokens"] = diff
    return out


def encode_case(tok, raw, name, text, pair, add_special_tokens):
    enc = tok(
        text,
        pair,
        add_special_tokens=add_special_tokens,
        return_offsets_mapping=True,
        return_token_type_ids=True,
        return_attention_mask=True,
        return_special_tokens_mask=True,
    )
    ids = list(enc["input_ids"])
    offsets = [list(o) for o in enc["offset_mapping"]]
    dec = tok.decode(ids, skip_special_tokens=False)
    dec_skip = tok.decode(ids, skip_special_tokens=True)
    dec_noclean = tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    dec_skip_noclean = tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    case = {
        "kind": "encode",
        "name": name,
        "text": text,
        "pair": pair,
        "add_special_tokens": add_special_tokens,
        "ids": ids,
        "type_ids": list(enc["token_type_ids"]),
        "attention_mask": list(enc["attention_mask"]),
        "special_tokens_mask": list(enc["special_tokens_mask"]),
        "tokens": tok.convert_ids_to_tokens(ids),
        "offsets_chars": offsets,
        "offsets_bytes": None,
        "decode": dec,
        "decode_skip_special": dec_skip,
        "decode_no_cleanup": dec_noclean,
        "decode_skip_special_no_cleanup": dec_skip_noclean,
        "cleanup_changed_decode": dec != dec_noclean or dec_skip != dec_skip_noclean,
    }
    # offsets of the pair's tokens index into the pair's text
    if pair is None:
        case["offsets_bytes"] = byte_offsets(text, offsets)
    else:
        seq_ids = enc.sequence_ids() if hasattr(enc, "sequence_ids") else None
        ob = []
        for o, sid in zip(offsets, seq_ids):
            src = pair if sid == 1 else text
            ob.extend(byte_offsets(src, [o]))
        case["offsets_bytes"] = ob
        case["sequence_ids"] = seq_ids
    r = raw.encode(text, pair, add_special_tokens=add_special_tokens)
    same = r.ids == ids
    case["raw_tokenizer_json_same"] = same
    if not same:
        case["raw_ids"] = r.ids
    return case


def batch_case(tok, name, texts, pairs, overrides, args):
    saved = {k: getattr(tok, k) for k in overrides}
    case = {"kind": "batch", "name": name, "texts": texts, "pairs": pairs, "tokenizer_overrides": overrides, "args": args}
    try:
        for k, v in overrides.items():
            setattr(tok, k, v)
        out = tok(texts, pairs, **args) if pairs is not None else tok(texts, **args)
        for key in ("input_ids", "attention_mask", "token_type_ids", "overflow_to_sample_mapping", "special_tokens_mask"):
            if key in out:
                case[key] = jsonable(out[key])
        case["error"] = None
    except Exception as e:  # recorded: the native code must refuse the same calls
        case["error"] = f"{type(e).__name__}: {e}"
    finally:
        for k, v in saved.items():
            setattr(tok, k, v)
    return case


class _Capture(TextStreamer):
    def __init__(self, tok, **kw):
        super().__init__(tok, **kw)
        self.pieces = []

    def on_finalized_text(self, text, stream_end=False):
        self.pieces.append({"text": text, "stream_end": stream_end})


def stream_case(tok):
    prompt_ids = tok(STREAM_PROMPT, add_special_tokens=True)["input_ids"]
    gen_ids = tok(STREAM_TEXT, add_special_tokens=False)["input_ids"]
    if tok.eos_token_id is not None:
        gen_ids = gen_ids + [tok.eos_token_id]
    cap = _Capture(tok, skip_prompt=True, skip_special_tokens=True)
    cap.put(np.array([prompt_ids]))
    puts = []
    for t in gen_ids:
        before = len(cap.pieces)
        cap.put(np.array([t]))
        puts.append(cap.pieces[before]["text"])
    cap.end()
    return {
        "kind": "stream",
        "name": "text_streamer",
        "streamer_args": {"skip_prompt": True, "skip_special_tokens": True},
        "prompt_ids": prompt_ids,
        "generated_ids": gen_ids,
        "pieces_per_put": puts,
        "final_piece": cap.pieces[-1]["text"],
        "joined": "".join(p["text"] for p in cap.pieces),
        "note": "put(prompt_ids) first (skipped), then put(one id) for each generated id, then end(); "
        "pieces_per_put[i] is what on_finalized_text received for generated_ids[i]; "
        "final_piece what end() flushed",
    }


def vocab_info(tok):
    probe_tokens = ["hello", "Hello", "Ġhello", "▁hello", "the", "Ġthe", "▁the", "##s", "<unk>", "[UNK]",
                    "<|endoftext|>", "<s>", "</s>", "<0x0A>", "definitely-not-a-token-xyz"]
    for t in (tok.bos_token, tok.eos_token, tok.pad_token, tok.unk_token):
        if t is not None and t not in probe_tokens:
            probe_tokens.append(t)
    n = len(tok)
    probe_ids = sorted({0, 1, 2, 3, 10, 100, 255, 256, 1000, tok.vocab_size - 1, n - 1})
    probe_ids = [i for i in probe_ids if i < n]
    special_attrs = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]
    named = {}
    for a in special_attrs:
        named[a] = getattr(tok, a)
        named[a + "_id"] = getattr(tok, a + "_id")
    added = tok.added_tokens_decoder
    added_list = [
        {"id": i, "content": t.content, "special": t.special, "lstrip": t.lstrip, "rstrip": t.rstrip,
         "normalized": t.normalized, "single_word": t.single_word}
        for i, t in sorted(added.items())
    ]
    return {
        "vocab_size": tok.vocab_size,
        "len": n,
        "token_to_id": {t: tok.convert_tokens_to_ids(t) for t in probe_tokens},
        "token_to_id_note": "convert_tokens_to_ids: a token not in the vocabulary gives unk_token_id (null when there is no unk token)",
        "id_to_token": {str(i): tok.convert_ids_to_tokens(i) for i in probe_ids},
        "special": named,
        "all_special_tokens": tok.all_special_tokens,
        "all_special_ids": tok.all_special_ids,
        "special_tokens_map": tok.special_tokens_map,
        "extra_special_tokens": [str(t) for t in getattr(tok, "_extra_special_tokens", [])],
        "added_tokens_count": len(added_list),
        "added_tokens_first": added_list[:40],
        "added_tokens_special_count": sum(1 for a in added_list if a["special"]),
    }


def config_info(tok, folder):
    with open(folder / "tokenizer_config.json", encoding="utf-8") as f:
        cfg = json.load(f)
    return {
        "python_class": type(tok).__name__,
        "tokenizer_class_in_config": cfg.get("tokenizer_class"),
        "clean_up_tokenization_spaces": tok.clean_up_tokenization_spaces,
        "clean_up_tokenization_spaces_in_config": cfg.get("clean_up_tokenization_spaces", "<absent>"),
        # transformers 5.23 skips clean_up_tokenization for a BPE model (tokenization_utils_tokenizers.py _decode)
        "cleanup_applies_in_decode": bool(tok.clean_up_tokenization_spaces)
        and (type(tok.backend_tokenizer.model).__name__ != "BPE"
             or tok.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output),
        "model_type": type(tok.backend_tokenizer.model).__name__,
        "add_bos_token": getattr(tok, "add_bos_token", None),
        "add_eos_token": getattr(tok, "add_eos_token", None),
        "add_bos_token_in_config": cfg.get("add_bos_token", "<absent>"),
        "add_eos_token_in_config": cfg.get("add_eos_token", "<absent>"),
        "model_max_length": tok.model_max_length if tok.model_max_length < 2**63 else str(tok.model_max_length),
        "padding_side": tok.padding_side,
        "truncation_side": tok.truncation_side,
        "split_special_tokens": getattr(tok, "split_special_tokens", None),
        "model_input_names": list(tok.model_input_names),
        "has_chat_template": tok.chat_template is not None,
        "chat_template_names": sorted(tok.chat_template) if isinstance(tok.chat_template, dict) else None,
    }


def make_tokenizer_fixture(name, kind):
    folder = folder_of(name, kind)
    if not (folder / "tokenizer.json").is_file():
        sys.exit(f"{folder}/tokenizer.json is missing: run tests/text/fetch_tokenizers.sh first")
    tok = AutoTokenizer.from_pretrained(str(folder))
    raw = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    cases = []
    for cname, text in CORPUS:
        for ast in (True, False):
            cases.append(encode_case(tok, raw, cname, text, None, ast))
    for cname, a, b in PAIRS:
        cases.append(encode_case(tok, raw, cname, a, b, True))
        cases.append(encode_case(tok, raw, cname, a, b, False))

    pad_override = {} if tok.pad_token is not None else {"pad_token": tok.eos_token}
    common = {"return_attention_mask": True}
    batches = [
        ("no_pad_token_padding", {}, dict(padding=True, **common)) if tok.pad_token is None else None,
        ("pad_longest_right", {**pad_override, "padding_side": "right"}, dict(padding=True, **common)),
        ("pad_longest_left", {**pad_override, "padding_side": "left"}, dict(padding=True, **common)),
        ("pad_multiple_of_8", {**pad_override, "padding_side": "right"},
         dict(padding="longest", pad_to_multiple_of=8, **common)),
        ("truncate_16_pad_max_length", {**pad_override, "padding_side": "right"},
         dict(padding="max_length", truncation=True, max_length=16, **common)),
        ("truncate_16_no_pad", {}, dict(truncation=True, max_length=16, **common)),
        ("truncate_16_left_side", {"truncation_side": "left"}, dict(truncation=True, max_length=16, **common)),
        ("truncate_8_stride_3_overflow", {**pad_override, "padding_side": "right"},
         dict(truncation=True, max_length=8, stride=3, return_overflowing_tokens=True, padding=True, **common)),
        ("no_special_pad_multiple_of_8_left", {**pad_override, "padding_side": "left"},
         dict(add_special_tokens=False, padding=True, pad_to_multiple_of=8, **common)),
    ]
    for b in batches:
        if b is None:
            continue
        bname, ov, args = b
        cases.append(batch_case(tok, bname, BATCH_TEXTS, None, ov, args))
    texts = [p[0] for p in BATCH_PAIRS]
    seconds = [p[1] for p in BATCH_PAIRS]
    for bname, ov, args in [
        ("pairs_longest_first_16", {**pad_override, "padding_side": "right"},
         dict(truncation="longest_first", max_length=16, padding=True, return_token_type_ids=True, **common)),
        ("pairs_only_second_12", {}, dict(truncation="only_second", max_length=12, return_token_type_ids=True, **common)),
        ("pairs_only_second_24", {}, dict(truncation="only_second", max_length=24, return_token_type_ids=True, **common)),
    ]:
        cases.append(batch_case(tok, bname, texts, seconds, ov, args))
    # question answering style: a short question, a long context cut into windows that overlap by `stride`
    cases.append(batch_case(tok, "pairs_qa_only_second_16_stride_4_overflow", [QA_QUESTION], [QA_CONTEXT], {},
                            dict(truncation="only_second", max_length=16, stride=4, return_overflowing_tokens=True,
                                 return_token_type_ids=True, **common)))
    cases.append(stream_case(tok))

    doc = {
        "tokenizer": fixture_name(name, kind),
        "folder_kind": kind,
        "folder": f"<cache>/tokenizers/{name}" if kind == "real" else str(folder.relative_to(REPO)),
        "cache_note": "<cache> is ${ACC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/libacc}; tests/text/fetch_tokenizers.sh fills it",
        "tokenizer_json_sha256": hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest(),
        "versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
        "offsets_note": "offsets_chars: Python str (Unicode code point) indices as transformers returns them; "
        "offsets_bytes: the same spans in UTF-8 bytes; [start, end) end exclusive; pair tokens index the pair text",
        "config": config_info(tok, folder),
        "effective_overrides": effective_overrides(tok, folder),
        "vocab": vocab_info(tok),
        "cases": cases,
    }
    return doc


# ---------------------------------------------------------------------------------------------
def chat_case(tok, name, messages, **kwargs):
    case = {"name": name, "messages": messages, "kwargs": {k: v for k, v in kwargs.items() if k != "tools" and k != "documents"},
            "tools": kwargs.get("tools"), "documents": kwargs.get("documents")}
    try:
        text = tok.apply_chat_template(messages, tokenize=False, **kwargs)
        case["text"] = text
        out = tok.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)
        case["ids"] = list(out["input_ids"])
        case["ids_equal_encode_text"] = case["ids"] == tok(text, add_special_tokens=False)["input_ids"]
        case["error"] = None
    except Exception as e:
        case["text"] = None
        case["ids"] = None
        case["error"] = f"{type(e).__name__}: {e}"
    return case


def make_chat_fixture(name, kind):
    folder = folder_of(name, kind)
    tok = AutoTokenizer.from_pretrained(str(folder))
    tmpl = tok.chat_template
    all_text = json.dumps(tmpl)
    supports_docs = "documents" in all_text
    cases = [
        chat_case(tok, "three_turns_no_prompt", THREE_TURNS, add_generation_prompt=False),
        chat_case(tok, "three_turns_generation_prompt", THREE_TURNS, add_generation_prompt=True),
        chat_case(tok, "system_three_turns_generation_prompt", [SYSTEM] + THREE_TURNS, add_generation_prompt=True),
        chat_case(tok, "continue_final_message", CONTINUE, continue_final_message=True),
        chat_case(tok, "tools_generation_prompt", [SYSTEM, TOOL_CONVERSATION[0]], tools=TOOLS, add_generation_prompt=True),
        chat_case(tok, "tools_call_and_response", [SYSTEM] + TOOL_CONVERSATION, tools=TOOLS, add_generation_prompt=True),
        chat_case(tok, "tools_call_with_empty_content_and_response", [SYSTEM] + TOOL_CONVERSATION_EMPTY_CONTENT, tools=TOOLS,
                  add_generation_prompt=True),
        chat_case(tok, "bad_role", [{"role": "robot", "content": "beep"}], add_generation_prompt=True),
    ]
    if supports_docs:
        cases.append(chat_case(tok, "documents", [TOOL_CONVERSATION[0]], documents=DOCUMENTS, add_generation_prompt=True))
    if name in ("gemma", "qwen3"):
        cases.append(chat_case(tok, "content_blocks", CONTENT_BLOCKS, add_generation_prompt=True))
    if name == "llama3":
        cases.append(chat_case(tok, "date_string_variable", [SYSTEM, THREE_TURNS[0]], add_generation_prompt=True,
                               date_string="26 Jul 2024"))
    if name == "qwen3":
        cases.append(chat_case(tok, "enable_thinking_false", THREE_TURNS, add_generation_prompt=True, enable_thinking=False))
        cases.append(chat_case(tok, "enable_thinking_true", THREE_TURNS, add_generation_prompt=True, enable_thinking=True))
        with_reasoning = [THREE_TURNS[0], {"role": "assistant", "content": "Bonjour !", "reasoning_content": "French greeting."},
                          THREE_TURNS[2]]
        cases.append(chat_case(tok, "reasoning_content_history", with_reasoning, add_generation_prompt=True))
        cases.append(chat_case(tok, "continue_reasoning_content",
                               [THREE_TURNS[0], {"role": "assistant", "content": "", "reasoning_content": "Let me think"}],
                               continue_final_message="reasoning_content"))
    if name == "unigram":
        cases.append(chat_case(tok, "named_default_explicit", THREE_TURNS, chat_template="default", add_generation_prompt=True))
        cases.append(chat_case(tok, "named_tool_use_explicit", THREE_TURNS, chat_template="tool_use", add_generation_prompt=True))
        cases.append(chat_case(tok, "tool_use_chosen_by_tools", TOOL_CONVERSATION, tools=TOOLS, documents=DOCUMENTS))
    if name == "bytebpe":
        cases.append(chat_case(tok, "content_none_dropped", [THREE_TURNS[0], {"role": "assistant", "content": None,
                                                                              "tool_calls": TOOL_CONVERSATION[1]["tool_calls"]}]))
    # literal control tokens inside a message: encoded as tokens unless sanitize_control_tokens=True
    for sanitize in (False, True):
        c = {"name": f"literal_control_tokens_sanitize_{str(sanitize).lower()}", "messages": WITH_LITERAL_CONTROL,
             "kwargs": {"add_generation_prompt": True, "sanitize_control_tokens": sanitize}, "tools": None, "documents": None}
        try:
            c["text"] = tok.apply_chat_template(WITH_LITERAL_CONTROL, tokenize=False, add_generation_prompt=True)
            out = tok.apply_chat_template(WITH_LITERAL_CONTROL, tokenize=True, return_dict=True, add_generation_prompt=True,
                                          sanitize_control_tokens=sanitize)
            c["ids"] = list(out["input_ids"])
            c["error"] = None
        except Exception as e:
            c["text"], c["ids"], c["error"] = None, None, f"{type(e).__name__}: {e}"
        cases.append(c)
    # assistant masks: needs {% generation %} in the template
    if "generation" in all_text and "{% generation" in all_text.replace("{%-", "{%").replace("{%- ", "{% "):
        for mname, msgs in [("assistant_mask_three_turns", THREE_TURNS + [{"role": "assistant", "content": "こんにちは！"}]),
                            ("assistant_mask_tool_call", TOOL_CONVERSATION + [{"role": "assistant", "content": "It is 22 °C."}])]:
            c = {"name": mname, "messages": msgs, "kwargs": {"return_assistant_tokens_mask": True, "return_dict": True,
                                                            "tokenize": True}, "tools": None, "documents": None}
            out = tok.apply_chat_template(msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
            text = tok.apply_chat_template(msgs, tokenize=False)
            # the char spans the {% generation %} blocks produced, as render_jinja_template reports them
            _, gen_idx = chat_template_utils.render_jinja_template(
                conversations=[msgs], chat_template=tok.get_chat_template(), return_assistant_tokens_mask=True,
                **tok.special_tokens_map)
            c.update(text=text, ids=list(out["input_ids"]), assistant_masks=list(out["assistant_masks"]),
                     generation_char_spans=[list(s) for s in gen_idx[0]], error=None)
            cases.append(c)
    else:
        c = {"name": "assistant_mask_without_generation_block", "messages": THREE_TURNS + [{"role": "assistant", "content": "OK"}],
             "kwargs": {"return_assistant_tokens_mask": True, "return_dict": True, "tokenize": True}, "tools": None, "documents": None}
        out = tok.apply_chat_template(c["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        c.update(text=None, ids=list(out["input_ids"]), assistant_masks=list(out["assistant_masks"]), error=None)
        cases.append(c)

    t = tmpl if isinstance(tmpl, str) else None
    doc = {
        "tokenizer": fixture_name(name, kind),
        "folder_kind": kind,
        "folder": f"<cache>/tokenizers/{name}" if kind == "real" else str(folder.relative_to(REPO)),
        "versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
        "template_source": "tokenizer_config.json \"chat_template\"",
        "template_names": sorted(tmpl) if isinstance(tmpl, dict) else None,
        "template_sha256": {k: hashlib.sha256(v.encode()).hexdigest() for k, v in tmpl.items()} if isinstance(tmpl, dict)
        else hashlib.sha256(t.encode()).hexdigest(),
        "uses_strftime_now": "strftime_now" in all_text,
        "fixed_now": FIXED_NOW.isoformat(),
        "fixed_now_note": "strftime_now(fmt) returns FIXED_NOW.strftime(fmt) in these fixtures",
        "template_variables": {"special_tokens_map": tok.special_tokens_map,
                               "note": "apply_chat_template passes messages, tools, documents, add_generation_prompt, "
                               "every special_tokens_map entry (bos_token, eos_token, ...), then the extra kwargs"},
        "notes": "kwargs are apply_chat_template's keyword arguments (tools/documents are listed apart); "
        "'text' is tokenize=False, 'ids' is tokenize=True, return_dict=True -> input_ids; "
        "an 'error' case must fail (raise_exception or a ValueError) with no text",
        "cases": cases,
    }
    return doc


def write(doc, fname):
    EXPECTED.mkdir(parents=True, exist_ok=True)
    path = EXPECTED / fname
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    size = path.stat().st_size
    print(f"{path.relative_to(REPO)}: {size} bytes, {len(doc['cases'])} cases")
    if size > 300_000:
        print(f"  warning: {path.name} is over 300 KB", file=sys.stderr)


def main(argv):
    wanted = set(argv)
    for kind, names in (("real", REAL), ("tiny", TINY)):
        for name in names:
            fname = fixture_name(name, kind)
            if wanted and fname not in wanted:
                continue
            write(make_tokenizer_fixture(name, kind), f"{fname}.json")
            if name in CHAT and CHAT[name] == kind:
                write(make_chat_fixture(name, kind), f"chat_{fname}.json")


if __name__ == "__main__":
    main(sys.argv[1:])
