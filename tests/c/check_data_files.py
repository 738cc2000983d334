#!/usr/bin/env python3
"""Datasets from files through the C ABI equal Hugging Face's batches (issue 39 item 4).

check_data_files.py TEST_PROGRAM SOURCE_ROOT SCRATCH

Every case of tests/data/prep/expected/tiny_bytebpe.json (what datasets, transformers' collators and TRL make of the
committed inputs with the tiny tokenizer, tests/data/make_prep_fixtures.py) becomes the options of
acc_dataset_from_files (mode, its settings, the collator and its padding); the C program reads each through a loader
in order (batch_size as recorded) and writes its batches; every batch must equal the recorded one, element for
element, with the names in the collator's order.
"""
import json
import os
import subprocess
import sys


def options_of(case, collated):
    kind, args = case["kind"], case["args"]
    o = {"mode": kind}
    if kind in ("tokenize", "group_texts"):
        o["text_column"] = case["column"]
    if kind == "tokenize":
        o["truncation"] = args["truncation"]
        o["max_length"] = args["max_length"]
        o["add_special_tokens"] = args["add_special_tokens"]
    elif kind == "group_texts":
        o["block_size"] = args["block_size"]
    else:
        for k in ("max_length", "truncation_mode", "packing", "packing_strategy", "padding_free",
                  "completion_only_loss", "assistant_only_loss"):
            o[k] = args[k]
        if "chat_template" in case:
            o["chat_template"] = case["chat_template"]
    o["collator"] = collated["collator"]
    if "padding_side" in collated:
        o["padding_side"] = collated["padding_side"]
    if collated.get("pad_to_multiple_of") is not None:
        o["pad_to_multiple_of"] = collated["pad_to_multiple_of"]
    return o


def main():
    program, root, scratch = sys.argv[1:4]
    expected = json.load(open(os.path.join(root, "tests/data/prep/expected/tiny_bytebpe.json")))
    plan, wanted = [], []
    for n, case in enumerate(expected["cases"]):
        for collated in case["collated"]:
            o = options_of(case, collated)
            if n % 2 == 1:
                o["threads"] = 3  # the rows never depend on the threads
            plan.append(f"{case['input']}\t{json.dumps(o)}\t{expected['batch_size']}")
            wanted.append((n, o, collated["batches"]))
    os.makedirs(scratch, exist_ok=True)
    plan_path, out_path = os.path.join(scratch, "plan.tsv"), os.path.join(scratch, "batches.jsonl")
    with open(plan_path, "w") as f:
        f.write("\n".join(plan) + "\n")
    run = subprocess.run([program, root, "dump", plan_path, out_path])
    got = [json.loads(line) for line in open(out_path)]
    passed = failed = 0
    if len(got) != len(wanted):
        print(f"{len(got)} results for {len(wanted)} cases")
        failed += 1
    for (n, o, batches), g in zip(wanted, got):
        if "error" in g:
            print(f"case {n} {json.dumps(o)}: {g['error']}")
            failed += 1
            continue
        if len(g["batches"]) != len(batches):
            print(f"case {n} {json.dumps(o)}: {len(g['batches'])} batches, expected {len(batches)}")
            failed += 1
            continue
        for b, (mine, theirs) in enumerate(zip(g["batches"], batches)):
            if list(mine) != list(theirs) or mine != theirs:
                diff = [k for k in theirs if mine.get(k) != theirs[k]]
                print(f"case {n} {json.dumps(o)} batch {b}: names {list(mine)} vs {list(theirs)}; differ: {diff}")
                failed += 1
            else:
                passed += 1
    if run.returncode != 0:
        print(f"the program exited {run.returncode}")
        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
