"""Task items in, `mpkv eval --task --import` rows out: what the drivers that generate task answers
outside `mpkv eval --task` (bench/peer_task_llamacpp.py, bench/served_task.py) share.

Items are the JSONL of scripts/make_tasks.py (docs/accuracy_tasks.md "Task files"). A row is one line
per item in the shape `mpkv eval --task --outputs` writes (tools/task_import.h): the drivers never
score; `mpkv eval --task FILE --import ROWS.jsonl` scores every answer with the one C++ rule
(src/eval/answer_rule.h) and pairs the row with the f16 row of the same items.
"""
import json
import os
import subprocess
import tempfile
import urllib.request


def read_items(path, n):
    """The first n items of a task file (n <= 0: all)."""
    items = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                items.append(json.loads(line))
    return items[:n] if n > 0 else items


def prompt_ids(mpkv, model, prompt):
    """The token ids `mpkv eval --task` feeds for a prompt: mpkv's tokenizer, the model's own BOS
    choice, special-token text not parsed (tools/eval_task.cpp encodes with parse_special=false)."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as t:
        t.write(prompt)
    try:
        out = subprocess.run([mpkv, "tokenize", "-m", model, "--ids", "--no-parse-special", "-f", t.name],
                             capture_output=True, text=True, check=True, timeout=120).stdout
    finally:
        os.unlink(t.name)
    return [int(x) for x in out.split()]


def post_json(url, body, timeout):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def row_line(method, item, generated, prompt_tokens, generated_tokens, bits, peak_bits, seconds):
    """One import line: an unbudgeted row over the whole prompt (budget_bytes 0, shown as '-')."""
    return json.dumps({"method": method, "id": item["id"], "answer": item["answer"], "generated": generated,
                       "prompt_tokens": prompt_tokens,
                       "kept_tokens": prompt_tokens,
                       "generated_tokens": generated_tokens, "budget_bytes": 0, "over_budget": False, "bits": bits,
                       "budgeted": False, "policy": "full", "peak_bits_per_elem": peak_bits,
                       "context_bits_per_elem": peak_bits, "seconds": seconds},
                      ensure_ascii=False)


def write_rows(path, lines):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(l + "\n" for l in lines))
    os.replace(tmp, path)
