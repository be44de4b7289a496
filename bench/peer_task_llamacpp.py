#!/usr/bin/env python3
"""llama.cpp's quantized KV caches on the task files of `mpkv eval --task`, as rows for its report.

For each --kv-types entry, llama-server (the pinned peer build, .peer/build-*/bin/llama-server, from
scripts/build_llama_server.sh) is started on loopback with -ctk/-ctv TYPE and flash attention on
(llama.cpp needs it for a quantized V cache), one slot of -c = the longest item's prompt +
max_tokens, no prompt cache, and every item is sent to POST /completion one at a time with the same
token ids mpkv feeds (mpkv's tokenizer: `mpkv tokenize --ids --no-parse-special`), greedy
(temperature 0), the item's max_tokens and stop strings. The answers are written as
`mpkv eval --task --import` rows (bench/task_rows.py), never scored here, rewritten after every item
(a stopped run leaves its first items; the row's seconds are those up to the last one):

  bench/peer_task_llamacpp.py --task tasks/passkey_1024.jsonl --items 200 --out-dir DIR
  build/mpkv eval -m MODEL --task tasks/passkey_1024.jsonl --task-items 200 --import DIR/...,...

Bits per element of a row: the KV type's stored bytes (q8_0: 34-byte blocks of 32 elements = 8.5
bits; q4_0: 18 of 32 = 4.5), every K/V element llama-server holds. Without a llama-server binary the
script says so and writes nothing (exit status 0), so callers run without the peer.
"""
import argparse
import glob
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_servers  # noqa: E402
import task_rows  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BITS = {"f16": 16.0, "q8_0": 8.5, "q4_0": 4.5}


def find_llama_server(given):
    if given:
        return given if os.path.isfile(given) and os.access(given, os.X_OK) else None
    found = sorted(glob.glob(os.path.join(REPO, ".peer", "build-*", "bin", "llama-server")))
    return found[-1] if found else None


def run_kv_type(a, binary, kv_type, items, ids, out_path):
    n_ctx = max(len(p) + it["max_tokens"] for p, it in zip(ids, items))
    n_ctx = (n_ctx + 255) // 256 * 256
    log = out_path[: -len("_outputs.jsonl")] + "_server.log"
    method = f"llama.cpp-{kv_type}"
    srv = serve_servers.llama_server_process(binary, a.model, kv_type, n_ctx, 1, a.threads, log,
                                             extra=("--cache-ram", "0"))
    results = []
    t0 = time.monotonic()

    def flush():  # after every item, so a stopped run leaves its first items (--task-items K reads them)
        seconds = time.monotonic() - t0
        task_rows.write_rows(out_path, [task_rows.row_line(method, it, text, n_prompt, n_gen, BITS[kv_type], BITS[kv_type],
                                                           seconds) for it, text, n_prompt, n_gen in results])
        return seconds

    with srv:
        for it, p in zip(items, ids):
            r = task_rows.post_json(srv.url + "/completion",
                                    {"prompt": p, "n_predict": it["max_tokens"], "temperature": 0.0,
                                     "stop": it.get("stop", []), "cache_prompt": False, "seed": 0},
                                    timeout=a.request_timeout)
            evaluated = int(r.get("tokens_evaluated", -1))
            if evaluated != len(p):
                sys.exit(f"peer_task_llamacpp: {it['id']}: llama-server evaluated {evaluated} prompt tokens, "
                         f"{len(p)} were sent (it added or dropped tokens); nothing written")
            results.append((it, r["content"], len(p), int(r.get("tokens_predicted", 0))))
            seconds = flush()
    print(f"peer_task_llamacpp: {method}: {len(results)} items in {seconds:.0f} s -> {out_path}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="task file (scripts/make_tasks.py JSONL)")
    p.add_argument("--items", type=int, default=0, help="first N items (0: all), as --task-items")
    p.add_argument("-m", "--model", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--kv-types", default="q8_0,q4_0", help=f"comma-separated, of {', '.join(BITS)}")
    p.add_argument("--out-dir", required=True, help="writes <task stem>_llama.cpp-<type>_outputs.jsonl here")
    p.add_argument("--llama-server", help="binary (default: the newest .peer/build-*/bin/llama-server)")
    p.add_argument("--mpkv", default=os.path.join(REPO, "build", "mpkv"), help="for tokenizing the prompts")
    p.add_argument("-t", "--threads", type=int, default=1)
    p.add_argument("--request-timeout", type=float, default=900.0, help="seconds per item")
    a = p.parse_args()
    types = [t for t in a.kv_types.split(",") if t]
    bad = [t for t in types if t not in BITS]
    if bad or not types:
        p.error(f"--kv-types: unknown {bad} (of {', '.join(BITS)})")
    binary = find_llama_server(a.llama_server)
    if binary is None:
        print(f"peer_task_llamacpp: no llama-server binary ({a.llama_server or '.peer/build-*/bin/llama-server'}); "
              "llama.cpp rows skipped (scripts/build_llama_server.sh builds the peer)")
        return
    items = task_rows.read_items(a.task, a.items)
    ids = [task_rows.prompt_ids(a.mpkv, a.model, it["prompt"]) for it in items]
    os.makedirs(a.out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(a.task))[0]
    print(f"peer_task_llamacpp: {binary}, {len(items)} items of {a.task}")
    for t in types:
        run_kv_type(a, binary, t, items, ids, os.path.join(a.out_dir, f"{stem}_llama.cpp-{t}_outputs.jsonl"))


if __name__ == "__main__":
    main()
