#!/usr/bin/env python3
"""Records what Hugging Face's own code makes of the committed inputs in tests/data/prep/, for test_prep.

  .venv-bench/bin/python tests/data/make_prep_fixtures.py [CACHE_DIR]

(bench/setup.sh installs the pinned datasets, transformers and TRL into .venv-bench.) CACHE_DIR holds the real
tokenizers tests/text/fetch_tokenizers.sh fetched (default ~/.cache/libacc/tokenizers' parent); the tiny committed
one is always used. For every tokenizer it writes tests/data/prep/expected/<name>.json: each case's processed
dataset (the columns after datasets.map, group_texts, TRL's SFT preparation and packing) and the batches the
collators make of it, in order, `batch_size` rows at a time. Nothing here is reimplemented: the modes call
`datasets`, transformers' collators and TRL's SFTTrainer._prepare_dataset / DataCollatorForLanguageModeling.
"""
import datetime as _dt
import json
import os
import sys
import types
from itertools import chain
from pathlib import Path

import datasets
import torch
import transformers
import trl
from transformers import AutoTokenizer, DataCollatorForLanguageModeling, DataCollatorWithPadding, default_data_collator
from trl import SFTConfig, SFTTrainer
from trl.chat_template_utils import get_training_chat_template, has_generation_markers
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling as TrlCollator
from trl.trainer.utils import pad as trl_pad
from transformers.utils import chat_template_utils

ROOT = Path(__file__).resolve().parents[2]
INPUTS = ROOT / "tests" / "data" / "prep"
OUT = INPUTS / "expected"
BATCH = 4  # rows per collated batch

# strftime_now() in the templates (Llama 3's prints today's date) sees this time, written into each fixture as
# "now_unix" for test_prep to pass on; the fixtures were first made on that day.
FIXED_NOW = _dt.datetime(2026, 11, 28, 12, 0, 0, tzinfo=_dt.timezone.utc)


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW if tz is None else FIXED_NOW.astimezone(tz)


chat_template_utils.datetime = _FixedDatetime

VERSIONS = {"datasets": datasets.__version__, "transformers": transformers.__version__, "trl": trl.__version__}


def load(name):
    return datasets.load_dataset("json", data_files=str(INPUTS / name), split="train")


def tensor_json(v):
    if isinstance(v, torch.Tensor):
        return {"shape": list(v.shape), "data": [int(x) for x in v.flatten().tolist()]}
    if isinstance(v, int):
        return {"shape": [], "data": [v]}
    raise TypeError(f"unexpected batch value {type(v)}")


def batches(rows, collate):
    out = []
    for i in range(0, len(rows), BATCH):
        b = collate(rows[i : i + BATCH])
        out.append({k: tensor_json(v) for k, v in b.items()})
    return out


def rows_of(ds, columns):
    return [{c: ds[i][c] for c in columns} for i in range(len(ds))]


def columns_json(ds, columns):
    return {c: [list(x) for x in ds[c]] for c in columns if c in ds.column_names}


def tokenize_cases(tok, max_length):
    cases = []
    text = load("text.jsonl")
    default_side = tok.padding_side
    # Truncated with special tokens, whole without; each collated three ways.
    for truncation, add_special_tokens in ((True, True), (False, False)):
        args = {"truncation": truncation, "max_length": max_length if truncation else None,
                "add_special_tokens": add_special_tokens}
        # `dataset.map(lambda b: tok(b["text"], ...), batched=True)`, the tokenizer's columns kept.
        ds = text.map(lambda b: tok(b["text"], truncation=truncation, max_length=args["max_length"],
                                    add_special_tokens=add_special_tokens),
                      batched=True, remove_columns=text.column_names)
        cols = ["input_ids", "attention_mask"]
        rows = rows_of(ds, cols)
        collated = []
        for kind, side, multiple in (("with_padding", "right", None), ("with_padding", "left", 8),
                                     ("language_modeling", "right", 8), ("language_modeling", "left", None)):
            tok.padding_side = side
            collator = (DataCollatorWithPadding(tok, pad_to_multiple_of=multiple) if kind == "with_padding"
                        else DataCollatorForLanguageModeling(tok, mlm=False, pad_to_multiple_of=multiple))
            collated.append({"collator": kind, "padding_side": side, "pad_to_multiple_of": multiple,
                             "batches": batches(rows, collator)})
        tok.padding_side = default_side
        cases.append({"kind": "tokenize", "input": "text.jsonl", "column": "text", "args": args,
                      "dataset": columns_json(ds, cols), "collated": collated})
    return cases


def group_texts_cases(tok, block_size):
    # transformers' examples/pytorch/language-modeling/run_clm_no_trainer.py: tokenize the text column whole, then
    # group_texts in map's batches (1000 rows), dropping each batch's remainder; labels a copy of input_ids.
    text = load("text.jsonl")
    tokenized = text.map(lambda b: tok(b["text"]), batched=True, remove_columns=text.column_names)

    def group_texts(examples):
        concatenated = {k: list(chain(*examples[k])) for k in examples.keys()}
        total_length = len(concatenated[list(examples.keys())[0]])
        total_length = (total_length // block_size) * block_size
        result = {k: [t[i : i + block_size] for i in range(0, total_length, block_size)]
                  for k, t in concatenated.items()}
        result["labels"] = result["input_ids"].copy()
        return result

    ds = tokenized.map(group_texts, batched=True)
    cols = ["input_ids", "attention_mask", "labels"]
    rows = rows_of(ds, cols)
    collated = [{"collator": "default", "batches": batches(rows, default_data_collator)},
                {"collator": "language_modeling", "padding_side": tok.padding_side, "pad_to_multiple_of": None,
                 "batches": batches(rows, DataCollatorForLanguageModeling(tok, mlm=False))}]
    return [{"kind": "group_texts", "input": "text.jsonl", "column": "text", "args": {"block_size": block_size},
             "dataset": columns_json(ds, cols), "collated": collated}]


def training_template(tok):
    try:
        return get_training_chat_template(tok)
    except ValueError:
        return None


def sft_prepare(tok, ds, config, assistant_only_loss):
    """TRL's own SFTTrainer._prepare_dataset, on an object holding what it reads of the trainer."""
    template = None
    if assistant_only_loss and not has_generation_markers(tok.chat_template):
        template = get_training_chat_template(tok)  # as SFTTrainer.__init__ swaps in a training template
    sample = next(iter(ds))
    completion_only_loss = config.completion_only_loss
    if completion_only_loss is None:
        completion_only_loss = "prompt" in sample and "completion" in sample
    fake = types.SimpleNamespace(_tokenizer=tok, chat_template=template, completion_only_loss=completion_only_loss)
    out = SFTTrainer._prepare_dataset(fake, ds, tok, config, config.packing, None, "train")
    return out, template


def sft_cases(tok, max_length, pack_length):
    cases = []
    settings = [
        ("text.jsonl", {"max_length": max_length}),
        ("text.jsonl", {"packing": True, "packing_strategy": "bfd", "max_length": pack_length}),
        ("text.jsonl", {"packing": True, "packing_strategy": "bfd_split", "max_length": pack_length}),
        ("text.jsonl", {"packing": True, "packing_strategy": "wrapped", "max_length": pack_length}),
        ("messages.jsonl", {}),
        ("messages.jsonl", {"assistant_only_loss": True}),
        ("messages.jsonl", {"assistant_only_loss": True, "max_length": max_length, "truncation_mode": "keep_end"}),
        ("messages.jsonl", {"assistant_only_loss": True, "packing": True, "max_length": pack_length}),
        ("prompt_completion.jsonl", {}),
        ("prompt_completion.jsonl", {"completion_only_loss": False, "max_length": max_length}),
        ("prompt_completion.jsonl", {"max_length": max_length}),
        ("prompt_completion.jsonl", {"packing": True, "max_length": pack_length}),
        # A text column beside prompt/completion: TRL's add_eos (an if/elif) ends the text, not the completion.
        ("prompt_completion_text.jsonl", {}),
        ("prompt_completion_conv.jsonl", {}),
        ("prompt_completion_conv.jsonl", {"assistant_only_loss": True}),
        ("prompt_completion_conv.jsonl", {"packing": True, "packing_strategy": "wrapped", "max_length": pack_length}),
        ("prompt_completion_conv.jsonl", {"padding_free": True}),
    ]
    trainable = bool(tok.chat_template) and (has_generation_markers(tok.chat_template) or training_template(tok))
    for input_name, over in settings:
        args = {"max_length": None, "truncation_mode": "keep_start", "packing": False, "packing_strategy": "bfd",
                "padding_free": False, "completion_only_loss": None, "assistant_only_loss": False,
                "pad_to_multiple_of": None}
        args.update(over)
        if args["assistant_only_loss"] and not trainable:
            continue  # TRL refuses: neither the template nor TRL has {% generation %} markers for it
        if input_name in ("messages.jsonl", "prompt_completion_conv.jsonl") and not tok.chat_template:
            continue
        config = SFTConfig(output_dir="/tmp/acc-prep-fixtures", report_to=[], use_cpu=True, bf16=False,
                           **{k: v for k, v in args.items()})
        ds, template = sft_prepare(tok, load(input_name), config, args["assistant_only_loss"])
        cols = [c for c in ("input_ids", "labels", "seq_lengths") if c in ds.column_names]
        rows = rows_of(ds, cols)
        padding_free = args["padding_free"] or (args["packing"] and args["packing_strategy"] in ("bfd", "bfd_split"))
        pad_id = tok.pad_token_id if tok.pad_token is not None else tok.convert_tokens_to_ids(tok.eos_token)
        # TRL's collator, and with pad_to_multiple_of where the case is a packing or a first one of its input.
        collated = []
        for multiple in (None, 8) if (args["packing"] or not over) else (None,):
            c = TrlCollator(pad_token_id=pad_id, padding_free=padding_free, pad_to_multiple_of=multiple)
            collated.append({"collator": "trl", "padding_free": padding_free, "pad_to_multiple_of": multiple,
                             "padding_side": "right", "batches": batches(rows, c)})
        # TRL's collator always pads on the right; its pad() helper, which it calls, does left too.
        if not padding_free and not over:
            def left(examples):
                ids = [torch.tensor(e["input_ids"]) for e in examples]
                labels = [torch.tensor(e["labels"]) for e in examples]
                return {"input_ids": trl_pad(ids, pad_id, "left"), "labels": trl_pad(labels, -100, "left"),
                        "attention_mask": trl_pad([torch.ones_like(i) for i in ids], 0, "left")}
            collated.append({"collator": "trl", "padding_free": False, "pad_to_multiple_of": None,
                             "padding_side": "left", "batches": batches(rows, left)})
        case = {"kind": "sft", "input": input_name, "args": args, "pad_token_id": pad_id,
                "dataset": columns_json(ds, cols), "collated": collated}
        if template is not None:
            case["chat_template"] = template
        cases.append(case)
    return cases


def tokenizers(cache):
    # name, folder as the fixture names it, folder, max_length, packing's max_length, block_size
    yield "tiny_bytebpe", "tests/text/tiny/bytebpe", ROOT / "tests/text/tiny/bytebpe", 24, 128, 32
    for name in ("llama3", "gemma", "qwen3"):
        folder = Path(cache) / "tokenizers" / name
        if folder.is_dir():
            yield name, f"<cache>/tokenizers/{name}", folder, 12, 48, 16
        else:
            print(f"skipping {name}: {folder} missing (tests/text/fetch_tokenizers.sh fetches it)", file=sys.stderr)


def main():
    cache = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/libacc")
    OUT.mkdir(parents=True, exist_ok=True)
    for name, label, folder, max_length, pack_length, block_size in tokenizers(cache):
        tok = AutoTokenizer.from_pretrained(folder)
        pad_token = None
        if tok.pad_token is None:
            # transformers' collators need a pad token: the usual `tok.pad_token = tok.eos_token` (TRL does the same).
            tok.pad_token = tok.eos_token
            pad_token = tok.eos_token
        cases = (tokenize_cases(tok, max_length) + group_texts_cases(tok, block_size)
                 + sft_cases(tok, max_length, pack_length))
        doc = {"versions": VERSIONS, "folder": label, "pad_token_set": pad_token, "batch_size": BATCH,
               "now_unix": int(FIXED_NOW.timestamp()), "cases": cases}
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"{path.relative_to(ROOT)}: {len(cases)} cases, {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
