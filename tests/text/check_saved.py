"""transformers' AutoTokenizer loads the folders libacc's save_pretrained writes, with the same ids.

Runs test_text's SavedFolderLoadsBack with ACC_TEXT_SAVE_DIR (each fixture tokenizer saved by libacc), then loads
every saved folder with AutoTokenizer.from_pretrained and compares tok(text) with the fixture's ids (which
transformers itself gave on the original folder). Needs transformers (bench/setup.sh's .venv-bench); exits 77
(meson's skip) without it.
usage: check_saved.py TEST_TEXT SOURCE_ROOT CACHE_DIR"""
import json
import os
import subprocess
import sys
import tempfile

try:
    from transformers import AutoTokenizer
except ImportError:
    print("transformers is not installed (bench/setup.sh makes .venv-bench): skipped")
    sys.exit(77)

test_text, root, cache = sys.argv[1:4]
with tempfile.TemporaryDirectory() as out:
    env = dict(os.environ, ACC_TEXT_SAVE_DIR=out)
    subprocess.run([test_text, root, cache, "--gtest_filter=*SavedFolderLoadsBack*"], env=env, check=True)
    failures = checked = 0
    for name in sorted(os.listdir(out)):
        fixture = json.load(open(os.path.join(root, "tests/text/expected", name.removeprefix("saved_") + ".json")))
        tok = AutoTokenizer.from_pretrained(os.path.join(out, name))
        for case in fixture["cases"]:
            if case["kind"] != "encode" or case["pair"] is not None:
                continue
            got = tok(case["text"], add_special_tokens=case["add_special_tokens"])["input_ids"]
            checked += 1
            if got != case["ids"]:
                failures += 1
                print(f"{name} {case['name']}: AutoTokenizer on libacc's folder gives {got[:12]}..., "
                      f"transformers on the original {case['ids'][:12]}...")
    print(f"{checked} encodings compared, {failures} differ")
    sys.exit(1 if failures or not checked else 0)
