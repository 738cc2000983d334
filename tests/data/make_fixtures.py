#!/usr/bin/env python3
"""The dataset files tests/data/test_data.cpp reads (fixtures/), and what `datasets` gives for every cell of them
(fixtures/expected.json). Run with bench/setup.sh's environment (datasets 5.2.0, pyarrow 26.0.1):

    .venv-bench/bin/python tests/data/make_fixtures.py

expected.json: {fixture: {"path", "num_rows", "fields": [[name, pyarrow type], ...], "cells": {column: [the cell as
json.dumps(value, ensure_ascii=False) of the value datasets gives, ...]}}}. Parquet and Arrow files are read back with
datasets.Dataset.from_parquet / from_file, the save_to_disk folder with load_from_disk, JSON lines and CSV with
load_dataset("json" / "csv"): the values a datasets user gets.
"""
import json
import os
import shutil

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.feather as feather  # noqa: E402
import pyarrow.ipc as ipc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")


def rows(n=23):
    """Rows with every kind of cell a fine-tuning set has: text (escapes, non-ASCII), numbers, nulls, token ids,
    chat messages (a list of structs), a struct."""
    texts = ["plain", "quote \" backslash \\ tab\t newline\n", "ünïcödé 日本語 🤗", "", "ctrl \x01\x1f del \x7f"]
    out = []
    for i in range(n):
        out.append({
            "id": i,
            "text": None if i % 11 == 5 else f"{texts[i % len(texts)]} #{i}",
            "score": [0.1, 1e16, 1e-05, -2.5, 0.0001, 123456789.125, 1.0][i % 7] * (1 if i % 2 else -1),
            "flag": None if i % 9 == 4 else i % 3 == 0,
            "input_ids": None if i % 13 == 7 else list(range(i, i + i % 5)),
            "messages": [
                {"role": "user", "content": f"question {i}?"},
                {"role": "assistant", "content": None if i % 8 == 3 else f"answer {i} ✓"},
            ][: 1 + i % 2],
            "meta": None if i % 10 == 9 else {"source": f"s{i % 3}", "n": i * 1000},
        })
    return out


def table(rs):
    schema = pa.schema([
        ("id", pa.int64()),
        ("text", pa.string()),
        ("score", pa.float64()),
        ("flag", pa.bool_()),
        ("input_ids", pa.list_(pa.int32())),
        ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("meta", pa.struct([("source", pa.string()), ("n", pa.int64())])),
    ])
    return pa.Table.from_pylist(rs, schema=schema)


def record(expected, name, path, ds):
    cells = {}
    for col in ds.column_names:
        cells[col] = [json.dumps(v, ensure_ascii=False) for v in ds[col]]
    expected[name] = {
        "path": os.path.relpath(path, OUT),
        "num_rows": len(ds),
        "fields": [[f.name, str(f.type)] for f in ds.data.schema],
        "cells": cells,
    }


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    t = table(rows())
    expected = {}
    # Parquet: several row groups and pages; each compression; dictionary and plain encodings.
    for codec, dictionary in [("snappy", True), ("zstd", False), ("gzip", True), ("none", False)]:
        path = os.path.join(OUT, f"rows.{codec}.parquet")
        pq.write_table(t, path, compression=codec, row_group_size=5, use_dictionary=dictionary,
                       data_page_size=64, write_statistics=False)
        record(expected, f"parquet_{codec}", path, datasets.Dataset.from_parquet(path, keep_in_memory=True))
    # Arrow IPC, stream and file format, in batches of 4 rows.
    path = os.path.join(OUT, "rows.stream.arrow")
    with ipc.new_stream(path, t.schema) as w:
        for b in t.to_batches(max_chunksize=4):
            w.write_batch(b)
    record(expected, "arrow_stream", path, datasets.Dataset.from_file(path, in_memory=True))
    path = os.path.join(OUT, "rows.file.arrow")
    feather.write_feather(t, path, compression="uncompressed", chunksize=4)
    record(expected, "arrow_file", path, datasets.Dataset(feather.read_table(path)))
    # A save_to_disk folder of 2 shards (Arrow IPC streams, state.json, dataset_info.json), its features inferred by
    # datasets from Python rows.
    path = os.path.join(OUT, "saved")
    datasets.Dataset.from_list(rows()).save_to_disk(path, num_shards=2)
    record(expected, "saved", path, datasets.load_from_disk(path, keep_in_memory=True))
    # JSON lines and CSV, read by datasets' own builders.
    path = os.path.join(OUT, "rows.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for r in rows():
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    cache = os.path.join(OUT, ".cache")
    record(expected, "jsonl", path, datasets.load_dataset("json", data_files=path, split="train", cache_dir=cache))
    path = os.path.join(OUT, "rows.csv")
    flat = [{"id": r["id"], "text": (r["text"] or "x").replace("\x01", "").replace("\x1f", "").replace("\x7f", ""),
             "score": r["score"], "flag": r["id"] % 3 == 0} for r in rows()]
    import csv
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["id", "text", "score", "flag"])
        w.writeheader()
        w.writerows(flat)
    record(expected, "csv", path, datasets.load_dataset("csv", data_files=path, split="train", cache_dir=cache))
    shutil.rmtree(cache, ignore_errors=True)
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote", OUT)


def refused():
    """Parquet files in the codecs libacc does not build in (refused naming the codec): bad/rows.lz4.parquet and
    bad/rows.brotli.parquet. Run alone: python -c 'import make_fixtures; make_fixtures.refused()'."""
    t = table(rows(4))
    for codec in ("lz4", "brotli"):
        pq.write_table(t, os.path.join(HERE, "bad", f"rows.{codec}.parquet"), compression=codec)


if __name__ == "__main__":
    main()
    refused()
