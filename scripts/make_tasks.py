#!/usr/bin/env python3
"""Task files for `mpkv eval --task` (docs/accuracy_tasks.md): JSONL, one item per line, made
from fixed seeds so the same command always writes the same bytes (tests/e2e/test_make_tasks.py
checks it against committed sha256 values). Standard library only.

Tasks (each item: id, task, prompt, answer, max_tokens, stop, rule, length, depth):
  passkey   a 5-digit pass key stated once at a depth in [0, 1] of filler prose; the prompt ends
            "... The pass key is" and the first number generated is the answer (rule first_number).
  kv        a JSON object of random 8-hex-digit keys -> 6-digit values, asked for one key at a
            depth in [0, 1] of the object (the lost-in-the-middle task; rule first_number).
  arith     chain-of-thought arithmetic: three fixed worked examples, then a generated problem
            (multi-step sums or a GSM-style word problem with an exact integer answer), answered
            by greedy generation of up to 512 tokens; rule final_number (the number after the
            first "The answer is", docs/accuracy_tasks.md).

Filler prose: WikiText-2 test (../shared/data/wikitext-2/test.txt), only its bytes
[300000, size - 300000): the first 300 KB hold every window `mpkv ppl` / `mpkv eval` score and the
last 300 KB are the calibration text (scripts/calibrate_all.sh), so neither is used here.
Lengths are targets in tokens, turned into characters with a fixed ratio per task (CHARS_PER_TOKEN,
measured once on SmolLM2's tokenizer); `mpkv eval --task` reports the real token counts.

Usage: scripts/make_tasks.py [--out tasks] [--items N] [--lengths 1024,2048,4096,8192]
       [--tasks passkey,kv,arith] [--wiki ../shared/data/wikitext-2/test.txt]
Writes OUT/passkey_<L>.jsonl, OUT/kv_<L>.jsonl for each length and OUT/arith.jsonl.
"""
import argparse
import json
import os
import random
import re
import sys

HELD_OUT_MARGIN = 300000  # bytes skipped at each end of WikiText-2 test (see above)
# Characters per SmolLM2 token, measured with `mpkv tokenize` on items made by this script.
CHARS_PER_TOKEN = {"passkey": 4.2, "kv": 1.2}
# Tokens left for the instructions, the question and the answer inside `length`.
PROMPT_MARGIN = 100
BASE_SEED = {"passkey": 1000, "kv": 2000, "arith": 3000}


def repo_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def filler_sentences(wiki_path):
    """Sentences of the held-out part of WikiText-2 test, its tokenization undone a little."""
    with open(wiki_path, "rb") as f:
        data = f.read()
    if len(data) < 3 * HELD_OUT_MARGIN:
        sys.exit(f"make_tasks: {wiki_path} has {len(data)} bytes, fewer than {3 * HELD_OUT_MARGIN}")
    text = data[HELD_OUT_MARGIN:len(data) - HELD_OUT_MARGIN].decode("utf-8", errors="replace")
    out = []
    for line in text.split("\n"):
        line = line.strip()
        if not line or line.startswith("="):  # headings
            continue
        for sent in line.split(" . "):  # WikiText's sentence ends, before the spacing is undone
            sent = sent.strip().rstrip(" .").replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
            sent = re.sub(r" *<unk> *", " ", sent)  # unknown words dropped
            sent = re.sub(r" ([.,;:!?')])", r"\1", sent).replace("( ", "(").strip()
            if len(sent) > 20:
                out.append(sent + ".")
    return out


def depths(n_items):
    """Depths 0, 0.1, ..., 1 in turn, so every depth has about n_items / 11 items."""
    return [round((i % 11) / 10, 1) for i in range(n_items)]


def passkey_item(rng, sentences, length, depth, idx):
    key = rng.randint(10000, 99999)
    budget = int((length - PROMPT_MARGIN) * CHARS_PER_TOKEN["passkey"])
    start = rng.randrange(len(sentences))
    chosen, n = [], 0
    while n < budget:
        s = sentences[(start + len(chosen)) % len(sentences)]
        chosen.append(s)
        n += len(s) + 1
    needle = f"The pass key is {key}. Remember it. {key} is the pass key."
    # The sentence boundary nearest to depth x the filler's characters.
    ends, n = [0], 0
    for c in chosen:
        n += len(c) + 1
        ends.append(n)
    at = min(range(len(ends)), key=lambda i: abs(ends[i] - depth * n))
    chosen.insert(at, needle)
    prompt = ("There is a pass key hidden inside a lot of irrelevant text. Find it and memorize it. "
              "I will quiz you about the pass key.\n\n" + " ".join(chosen) +
              "\n\nWhat is the pass key? The pass key is")
    return {"id": f"passkey_{length}_{idx}", "task": "passkey", "prompt": prompt, "answer": str(key),
            "max_tokens": 12, "stop": ["\n"], "rule": "first_number", "length": length, "depth": depth}


def kv_item(rng, length, depth, idx):
    n_pairs = max(2, int((length - PROMPT_MARGIN) * CHARS_PER_TOKEN["kv"]) // 20)  # '"9f3a01bc": 483920, ' is 20 chars
    pairs, seen = [], set()
    while len(pairs) < n_pairs:
        k = "%08x" % rng.getrandbits(32)
        if k not in seen:
            seen.add(k)
            pairs.append((k, rng.randint(100000, 999999)))
    at = min(n_pairs - 1, round(depth * (n_pairs - 1)))
    key, value = pairs[at]
    body = "{" + ", ".join(f'"{k}": {v}' for k, v in pairs) + "}"
    prompt = ("Below is a JSON object of keys and their values.\n\n" + body +
              f"\n\nIn the JSON object above, the value of key \"{key}\" is")
    return {"id": f"kv_{length}_{idx}", "task": "kv", "prompt": prompt, "answer": str(value),
            "max_tokens": 12, "stop": ["\n"], "rule": "first_number", "length": length, "depth": depth}


ARITH_SHOTS = (
    "Q: Tom has 3 apples. He buys 5 more apples and then eats 2. How many apples does Tom have now?\n"
    "A: Tom starts with 3 apples. After buying 5 more he has 3 + 5 = 8. After eating 2 he has 8 - 2 = 6. "
    "The answer is 6.\n\n"
    "Q: What is 12 + 7 - 4?\n"
    "A: First 12 + 7 = 19. Then 19 - 4 = 15. The answer is 15.\n\n"
    "Q: A box holds 4 pens. Sara buys 3 boxes. How many pens does she have?\n"
    "A: Each box holds 4 pens and she buys 3 boxes, so she has 3 * 4 = 12 pens. The answer is 12.\n\n")
NAMES = ["Anna", "Ben", "Carla", "David", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jamal", "Kira", "Leo"]
THINGS = ["apples", "books", "marbles", "stickers", "coins", "shells", "cards", "stamps"]


def arith_problem(rng):
    """(question, answer): one of three generated forms, every intermediate value >= 0."""
    form = rng.randrange(3)
    if form == 0:  # multi-step sum of 3 or 4 numbers
        vals = [rng.randint(2, 30)]
        expr = str(vals[0])
        for _ in range(rng.randint(2, 3)):
            v = rng.randint(1, 20)
            if rng.random() < 0.5 and sum(vals) - v >= 0:
                vals.append(-v)
                expr += f" - {v}"
            else:
                vals.append(v)
                expr += f" + {v}"
        return f"What is {expr}?", sum(vals)
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    if form == 1:  # start, gain, lose
        a, b = rng.randint(3, 20), rng.randint(2, 15)
        c = rng.randint(1, a + b)
        q = (f"{name} has {a} {thing}. {name} gets {b} more {thing} and then gives away {c}. "
             f"How many {thing} does {name} have now?")
        return q, a + b - c
    n, k, extra = rng.randint(2, 6), rng.randint(2, 9), rng.randint(1, 10)  # groups, then more
    q = (f"A bag holds {k} {thing}. {name} buys {n} bags and finds {extra} more {thing}. "
         f"How many {thing} does {name} have?")
    return q, n * k + extra


def arith_item(rng, idx):
    q, ans = arith_problem(rng)
    return {"id": f"arith_{idx}", "task": "arith", "prompt": ARITH_SHOTS + f"Q: {q}\nA:", "answer": str(ans),
            "max_tokens": 512, "stop": ["\nQ:", "\n\n"], "rule": "final_number", "length": 0, "depth": 0}


def write_jsonl(path, items):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False, sort_keys=True) + "\n")
    os.replace(tmp, path)
    print(f"make_tasks: {len(items)} items -> {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tasks")
    ap.add_argument("--items", type=int, default=220)
    ap.add_argument("--lengths", default="1024,2048,4096,8192")
    ap.add_argument("--tasks", default="passkey,kv,arith")
    ap.add_argument("--wiki", default=os.path.join(repo_root(), "..", "shared", "data", "wikitext-2", "test.txt"))
    a = ap.parse_args()
    tasks = a.tasks.split(",")
    unknown = [t for t in tasks if t not in BASE_SEED]
    if unknown or a.items < 1:
        sys.exit(f"make_tasks: unknown task(s) {unknown} (passkey, kv, arith) or --items < 1")
    lengths = [int(x) for x in a.lengths.split(",")]
    os.makedirs(a.out, exist_ok=True)
    sentences = filler_sentences(a.wiki) if "passkey" in tasks else None
    for t in tasks:
        if t == "arith":
            rng = random.Random(BASE_SEED[t])
            write_jsonl(os.path.join(a.out, "arith.jsonl"), [arith_item(rng, i) for i in range(a.items)])
            continue
        for L in lengths:
            rng = random.Random(BASE_SEED[t] + L)  # one stream per (task, length)
            ds = depths(a.items)
            items = [passkey_item(rng, sentences, L, ds[i], i) if t == "passkey" else kv_item(rng, L, ds[i], i)
                     for i in range(a.items)]
            write_jsonl(os.path.join(a.out, f"{t}_{L}.jsonl"), items)


if __name__ == "__main__":
    main()
