#!/usr/bin/env python3
"""Tokenizers and chat templates: libacc's acc::text (bench/text_bench.cpp, torch-free C++ over the tokenizers crate
and minijinja) beside Python's tokenizers and transformers, in the same run, on the same 10k-line corpus and the
same conversation. The corpus (English prose, source code, CJK; seeded, made here) is written once; each round runs,
in a turning order, one process per side:

  - `libacc`: text_bench, encode_batch(lines) with threads = 1 and every thread count of --threads, then
    render_chat renders/s;
  - `python-1`: the bench venv's Python with TOKENIZERS_PARALLELISM=false and RAYON_NUM_THREADS=1:
    tokenizers.Tokenizer.from_file(tokenizer.json).encode_batch(lines), transformers' AutoTokenizer(lines)
    and apply_chat_template(tokenize=False) renders/s;
  - `python-N`: the same encodings with TOKENIZERS_PARALLELISM=true and RAYON_NUM_THREADS=N (every core).

Each encoding is one untimed pass and --passes timed passes of the whole batch (a round's figure: their median);
the tables give the medians over the rounds and libacc / Python (above 1: libacc faster) with the range of the
per-round ratios. Token counts and the rendered text's hash are checked equal between libacc and transformers.

  bash bench/setup.sh && python3 bench/text.py [--tokenizers llama3,gemma] [--rounds 3] [--json out.json]
"""
import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(ROOT, ".venv-bench", "bin", "python")
CACHE = os.path.join(os.environ.get("ACC_CACHE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "libacc"), "tokenizers")

# The conversation every side renders (with add_generation_prompt); date_string pins the date Llama 3's template
# would otherwise take from the clock.
MESSAGES = [
    {"role": "system", "content": "You are a concise assistant. Answer in plain English and show code when asked."},
    {"role": "user", "content": "How do I read a file line by line in Python, skipping blank lines?"},
    {"role": "assistant", "content": "Open it and iterate:\n\n```python\nwith open(path, encoding=\"utf-8\") as f:\n"
                                     "    for line in f:\n        if line.strip():\n            print(line.rstrip())\n"
                                     "```\n\nThe file object yields one line at a time, so memory stays small."},
    {"role": "user", "content": "And in C++? Also, 请用中文简单解释一下。"},
]
EXTRA = {"date_string": "26 Jul 2024"}

# ----------------------------------------------------------------------------------------------------------- corpus
WORDS = ("the of and to in is that it for was on are as with his they at be this have from or one had by word but "
         "not what all were we when your can said there use an each which she do how their if will up other about "
         "out many then them these so some her would make like him into time has look two more write go see number "
         "no way could people my than first water been call who oil its now find long down day did get come made "
         "may part over new sound take only little work know place year live me back give most very after thing "
         "our just name good sentence man think say great where help through much before line right too mean old "
         "any same tell boy follow came want show also around form three small set put end does another well large "
         "must big even such because turn here why ask went men read need land different home us move try kind "
         "hand picture again change off play spell air away animal house point page letter mother answer found "
         "study still learn should America world tokenizer throughput benchmark encoding parallel thread").split()
NAMES = "data value index count result buffer node item config model token batch offset length cache state".split()
CJK = ("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定"
       "行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其"
       "些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建")
KANA = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんアイウエオカキクケコサシスセソ"
HANGUL = "가나다라마바사아자차카타파하고노도로모보소오조초코토포호구누두루무부수우주추쿠투푸후기니디리미비시이지치키티피히"


def prose(r):
    out = []
    for _ in range(r.randint(1, 3)):
        w = [r.choice(WORDS) for _ in range(r.randint(4, 16))]
        if r.random() < 0.3:
            w.insert(r.randrange(len(w)), str(r.randint(0, 99999)))
        if r.random() < 0.2:
            w.insert(r.randrange(len(w)), r.choice(["(see below)", "e.g.", "--", "i.e.", "\"quoted\"", "O'Brien's"]))
        s = " ".join(w)
        out.append(s[0].upper() + s[1:] + r.choice([".", ".", ".", "?", "!", ";", ","]))
    return " ".join(out)


def code(r):
    a, b, c = (r.choice(NAMES) + r.choice(["", "_" + r.choice(NAMES), str(r.randint(0, 9))]) for _ in range(3))
    n = r.randint(0, 4096)
    forms = [
        f"def {a}({b}, {c}=None):",
        f"    return [{b}[i] * {n} for i in range(len({c})) if {b}[i] != {c}]",
        f"for (size_t i = 0; i < {a}.size(); ++i) {{ {b}[i] += {c}[i] >> {n % 32}; }}",
        f"const {a} = await fetch(`/api/{b}/${{{c}}}?limit={n}`).then((r) => r.json());",
        f"if {a} is not None and len({b}) > {n}:  # {r.choice(WORDS)} {r.choice(WORDS)}",
        f"\tstd::vector<int64_t> {a}({b}.begin(), {b}.end());  // {n}",
        f"SELECT {a}, COUNT(*) FROM {b} WHERE {c} >= {n} GROUP BY {a};",
        f"{a}_{b} = {{\"{c}\": {n}, \"{b}\": [{n // 7}, {n % 13}, -1.5e-3], \"ok\": true}}",
    ]
    return r.choice(forms)


def cjk(r):
    k = r.random()
    if k < 0.6:
        parts = ["".join(r.choice(CJK) for _ in range(r.randint(4, 14))) for _ in range(r.randint(1, 4))]
        return "，".join(parts) + "。"
    if k < 0.8:
        return "".join(r.choice(CJK + KANA) for _ in range(r.randint(8, 40))) + "。"
    return " ".join("".join(r.choice(HANGUL) for _ in range(r.randint(1, 5))) for _ in range(r.randint(3, 10))) + "."


def corpus(n, seed=20240726):
    """n lines: half prose, three tenths code, a fifth CJK (Chinese, Japanese, Korean); the same for one seed."""
    r = random.Random(seed)
    lines = []
    for _ in range(n):
        k = r.random()
        lines.append(prose(r) if k < 0.5 else code(r) if k < 0.8 else cjk(r))
    return lines


# ----------------------------------------------------------------------------------------------------------- worker
def worker(a):
    """The Python side, in the bench venv: one JSON line (the environment picks the threads)."""
    from tokenizers import Tokenizer
    with open(a.lines, encoding="utf-8", newline="\n") as f:
        lines = f.read().rstrip("\n").split("\n")
    res = {"lines": len(lines)}

    def passes(fn):
        fn()
        times = []
        for _ in range(a.passes):
            t = time.perf_counter()
            n = fn()
            times.append(time.perf_counter() - t)
        return times, n

    tok = Tokenizer.from_file(os.path.join(a.dir, "tokenizer.json"))
    times, n = passes(lambda: sum(len(e.ids) for e in tok.encode_batch(lines)))
    res["tokenizers"] = {"seconds": times, "tokens": n}

    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(a.dir)
    times, n = passes(lambda: sum(len(ids) for ids in hf(lines)["input_ids"]))
    res["transformers"] = {"seconds": times, "tokens": n}

    if a.chat:
        with open(a.chat, encoding="utf-8") as f:
            messages = json.load(f)
        text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **EXTRA)
        rates = []
        for _ in range(3):
            n, t = 0, time.perf_counter()
            while True:
                for _ in range(20):
                    if len(hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                  **EXTRA)) != len(text):
                        raise SystemExit("renders differ")
                n += 20
                if (s := time.perf_counter() - t) >= a.chat_seconds:
                    break
            rates.append(n / s)
        raw = text.encode("utf-8")
        h = 1469598103934665603
        for c in raw:
            h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
        res["chat"] = {"renders_per_s": rates, "bytes": len(raw), "fnv1a": f"{h:016x}"}
    print(json.dumps(res), flush=True)


# ------------------------------------------------------------------------------------------------------------ driver
def last_json(out):
    return json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])


def run_side(cmd, env, lock, max_busy):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from run import holding, wait_for_idle  # run.py's build lock and its quiet-machine check
    with holding(lock):  # the lock first: a build holding it would not leave the machine quiet
        quiet = wait_for_idle(max_busy) if max_busy >= 0 else {}
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return last_json(p.stdout), quiet


def med(v):
    return statistics.median(v)


def bench_one(a, name, lines_path, chat_path, text_bench, threads, rounds):
    folder = os.path.join(CACHE, name)
    ncpu = max(threads)
    base = {k: v for k, v in os.environ.items() if k not in ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS")}
    sides = {
        "libacc": ([text_bench, folder, lines_path, "--passes", str(a.passes), "--threads", ",".join(map(str, threads)),
                    "--chat", chat_path, "--chat-seconds", str(a.chat_seconds), "--extra", json.dumps(EXTRA)], base),
        "python-1": ([PY, os.path.abspath(__file__), "--worker", "--dir", folder, "--lines", lines_path,
                      "--passes", str(a.passes), "--chat", chat_path, "--chat-seconds", str(a.chat_seconds)],
                     dict(base, TOKENIZERS_PARALLELISM="false", RAYON_NUM_THREADS="1")),
        f"python-{ncpu}": ([PY, os.path.abspath(__file__), "--worker", "--dir", folder, "--lines", lines_path,
                            "--passes", str(a.passes)],
                           dict(base, TOKENIZERS_PARALLELISM="true", RAYON_NUM_THREADS=str(ncpu))),
    }
    order = list(sides)
    results = {k: [] for k in sides}
    for r in range(rounds):
        for k in order[r % len(order):] + order[:r % len(order)]:
            t = time.monotonic()
            res, quiet = run_side(*sides[k], a.lock, a.max_busy)
            res["quiet"] = quiet
            results[k].append(res)
            print(f"  {name} round {r + 1}/{rounds} {k}: {time.monotonic() - t:.1f} s"
                  + (f" (busy {quiet['busy_cores']} cores before)" if quiet else ""), flush=True)
    return results


def rate(tokens, seconds):
    return tokens / med(seconds)


def report(name, results, threads):
    """The markdown table of one tokenizer, and its figures for the JSON."""
    lib, p1 = results["libacc"], results["python-1"]
    pn = results[f"python-{max(threads)}"]
    tokens = lib[0]["tokens"]
    rows, figures = [], {}
    checks = []
    if p1[0]["transformers"]["tokens"] != tokens:
        checks.append(f"token counts differ: libacc {tokens}, transformers {p1[0]['transformers']['tokens']}")
    if p1[0]["tokenizers"]["tokens"] != tokens:
        checks.append(f"(tokenizers' raw tokenizer.json gives {p1[0]['tokenizers']['tokens']} tokens, "
                      f"transformers' pipeline {p1[0]['transformers']['tokens']})")
    lc, pc = lib[0]["chat"], p1[0]["chat"]
    if (lc["bytes"], lc["fnv1a"]) != (pc["bytes"], pc["fnv1a"]):
        checks.append(f"rendered chats differ: libacc {lc['bytes']} bytes {lc['fnv1a']}, "
                      f"transformers {pc['bytes']} bytes {pc['fnv1a']}")

    def lib_rate(res, t):
        e = next(e for e in res["encode"] if e["threads"] == t)
        return rate(res["tokens"], e["seconds"])

    def py_rate(res, what):
        return rate(res[what]["tokens"], res[what]["seconds"])

    def row(label, lib_rates, py_rates, unit):
        ratios = [x / y for x, y in zip(lib_rates, py_rates)]
        lr, pr = med(lib_rates), med(py_rates)
        rows.append(f"| {name} | {label} | {lr:,.0f} | {pr:,.0f} | **{lr / pr:.2f}** ({min(ratios):.2f}-{max(ratios):.2f}) |")
        figures[label] = {"libacc": lr, "python": pr, "ratio": lr / pr, "ratio_range": [min(ratios), max(ratios)],
                          "unit": unit}

    for t in threads:
        py = p1 if t == 1 else pn
        pt = 1 if t == 1 else max(threads)
        for what in ("tokenizers", "transformers"):
            lab = (f"encode tokens/s, {t} thread{'s' if t > 1 else ''} vs {what}"
                   + (f" ({pt} thread{'s' if pt > 1 else ''})" if t != 1 else " (1 thread)"))
            row(lab, [lib_rate(x, t) for x in lib], [py_rate(x, what) for x in py], "tokens/s")
    row("chat renders/s vs transformers apply_chat_template", [med(x["chat"]["renders_per_s"]) for x in lib],
        [med(x["chat"]["renders_per_s"]) for x in p1], "renders/s")
    # Scaling: the all-threads rate over the one-thread rate, each side against itself.
    scale = {"libacc": med([lib_rate(x, max(threads)) for x in lib]) / med([lib_rate(x, 1) for x in lib])}
    for what in ("tokenizers", "transformers"):
        scale[what] = med([py_rate(x, what) for x in pn]) / med([py_rate(x, what) for x in p1])
    figures["scaling"] = scale
    figures["tokens"] = tokens
    figures["checks"] = checks
    return rows, figures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--lines", help=argparse.SUPPRESS)
    ap.add_argument("--chat", help=argparse.SUPPRESS)
    ap.add_argument("--tokenizers", default="llama3,gemma", help="folders under the cache's tokenizers/ "
                    "(tests/text/fetch_tokenizers.sh: llama3, qwen3, gemma, mistral, gpt2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--passes", type=int, default=3, help="timed passes of the batch per process (after one warm-up)")
    ap.add_argument("--lines-count", type=int, default=10000)
    ap.add_argument("--threads", help="libacc's thread counts (default 1 and every core); Python's all-threads "
                    "side uses the largest")
    ap.add_argument("--chat-seconds", type=float, default=1.0, help="each of the three timed render loops")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dir-out", default=None, help="where the corpus and conversation go (default BUILD/bench/text)")
    ap.add_argument("--json", help="write every run's result and the ratios here")
    ap.add_argument("--lock", help="hold this file's flock during each run (the shared build lock)")
    ap.add_argument("--max-busy", type=float, default=0.2,
                    help="before each run wait (up to 60 s) until others use at most this many cores; -1: never")
    a = ap.parse_args()
    if a.worker:
        return worker(a)

    threads = sorted({int(t) for t in a.threads.split(",")}) if a.threads else sorted({1, os.cpu_count()})
    if threads[0] != 1:
        threads = [1] + threads
    text_bench = os.path.join(os.path.abspath(a.build), "bench", "text_bench")
    if not os.path.exists(text_bench):
        raise SystemExit(f"{text_bench} is missing: ninja -C {a.build} bench/text_bench")
    if not os.path.exists(PY):
        raise SystemExit(f"{PY} is missing: bash bench/setup.sh")
    out = a.dir_out or os.path.join(os.path.abspath(a.build), "bench", "text")
    os.makedirs(out, exist_ok=True)
    lines = corpus(a.lines_count)
    lines_path, chat_path = os.path.join(out, "lines.txt"), os.path.join(out, "chat.json")
    with open(lines_path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    with open(chat_path, "w", encoding="utf-8") as f:
        json.dump(MESSAGES, f, ensure_ascii=False)
    nbytes = sum(len(s.encode("utf-8")) for s in lines)
    print(f"corpus: {len(lines)} lines, {nbytes} bytes ({lines_path}); threads {threads}; "
          f"{a.rounds} rounds x {a.passes} passes", flush=True)

    everything, table = {"threads": threads, "lines": len(lines), "bytes": nbytes, "tokenizers": {}}, []
    for name in a.tokenizers.split(","):
        results = bench_one(a, name, lines_path, chat_path, text_bench, threads, a.rounds)
        rows, figures = report(name, results, threads)
        table += rows
        everything["tokenizers"][name] = {"runs": results, "figures": figures}
    print(f"\nlibacc / Python, medians over {a.rounds} rounds (per-round ratio range); {len(lines)} lines, "
          f"{os.cpu_count()} cores\n")
    print("| tokenizer | measure | libacc | Python | libacc / Python |")
    print("| --- | --- | ---: | ---: | ---: |")
    print("\n".join(table))
    print(f"\nScaling: tokens/s with {max(threads)} threads over tokens/s with 1, each side against itself\n")
    print("| tokenizer | tokens | libacc | tokenizers | transformers |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, v in everything["tokenizers"].items():
        f = v["figures"]
        s = f["scaling"]
        print(f"| {name} | {f['tokens']:,} | {s['libacc']:.2f}x | {s['tokenizers']:.2f}x | {s['transformers']:.2f}x |")
    for name, v in everything["tokenizers"].items():
        for c in v["figures"]["checks"]:
            print(f"{name}: {c}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(everything, f, indent=1)


if __name__ == "__main__":
    main()
