#!/usr/bin/env python3
"""Task accuracy under serving pressure (docs/accuracy_tasks.md "Under serving pressure"): the items
of a task file sent to `mpkv serve` over HTTP (POST /v1/completions, the token ids `mpkv eval --task`
feeds, temperature 0, each item's max_tokens and stop strings, prefix cache off) twice:

  alone     an f16 server, one request at a time (--max-seqs 1): the 16-bit answers;
  pressure  a server with --kv-plan PLAN and --kv-budget-mib = CONCURRENCY x the largest
            per-sequence budget that `mpkv eval --task` gave the BUDGET_ROW row (its --outputs
            file, budget_bytes), CONCURRENCY requests in flight at once, so that the pool fills and
            progressive pages shrink to their plan's bits (2 for most heads of combined_2.5).

Writes `mpkv eval --task --import` rows (bench/task_rows.py; never scored here): the alone row is
labelled "f16", so that the report pairs the pressure row with it (McNemar), and a JSON summary with
the fraction of answers identical to the alone answers (byte-equal generated text), the peak
mpkv:kv_bytes_used and the lowest non-zero mpkv:kv_effective_bits sampled from /metrics, and
mpkv:kv_page_shrinks_total at the end:

  bench/served_task.py --task tasks/passkey_1024.jsonl --items 100 --budget-from EVAL_outputs.jsonl \\
      --out-dir DIR
  build/mpkv eval -m MODEL --task tasks/passkey_1024.jsonl --task-items 100 \\
      --import DIR/passkey_1024_served_alone_outputs.jsonl,DIR/passkey_1024_served_pressure_outputs.jsonl
"""
import argparse
import concurrent.futures
import json
import os
import re
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_servers  # noqa: E402
import task_rows  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def metric(text, name):
    """The sum of a metric's samples over its label sets (one sample for a gauge; kv_page_shrinks_total
    has one per from/to bits pair); None when absent."""
    vals = re.findall(r"^" + re.escape(name) + r"(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", text, re.M)
    return sum(float(v) for v in vals) if vals else None


class MetricsSampler(threading.Thread):
    """Polls /metrics every `period` seconds: peak kv_bytes_used and the kv_effective_bits of that
    sample (stored bits per cached element when the pool was fullest), lowest non-zero kv_effective_bits."""

    def __init__(self, url, period=1.0):
        super().__init__(daemon=True)
        self.url, self.period, self.stop_flag = url, period, threading.Event()
        self.peak_bytes, self.bits_at_peak, self.min_bits = 0.0, None, None

    def sample(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            return r.read().decode()

    def run(self):
        while not self.stop_flag.is_set():
            try:
                t = self.sample()
            except OSError:
                t = ""
            used, bits = metric(t, "mpkv:kv_bytes_used"), metric(t, "mpkv:kv_effective_bits")
            if used is not None and used > self.peak_bytes:
                self.peak_bytes, self.bits_at_peak = used, bits
            if bits:
                self.min_bits = bits if self.min_bits is None else min(self.min_bits, bits)
            self.stop_flag.wait(self.period)


def complete(url, item, ids, timeout):
    r = task_rows.post_json(url + "/v1/completions",
                            {"prompt": ids, "max_tokens": item["max_tokens"], "temperature": 0.0,
                             "stop": item.get("stop", [])}, timeout=timeout)
    usage = r.get("usage", {})
    if usage.get("prompt_tokens") != len(ids):
        raise SystemExit(f"served_task: {item['id']}: the server counted {usage.get('prompt_tokens')} prompt tokens, "
                         f"{len(ids)} were sent; nothing written")
    return r["choices"][0]["text"], int(usage.get("completion_tokens", 0))


def serve_items(a, kv_args, max_seqs, concurrency, items, ids, log, label):
    n_ctx = max(len(p) + it["max_tokens"] for p, it in zip(ids, items))
    srv = serve_servers.mpkv_server(a.mpkv, a.model, kv_args, a.threads, n_ctx, max_seqs, len(items), log,
                                    extra=("--no-prefix-cache", *a.serve_arg))
    srv.ready_path = "/health"  # 200 once the model is loaded
    with srv:
        sampler = MetricsSampler(srv.url)
        sampler.start()
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
            outs = list(pool.map(lambda x: complete(srv.url, x[0], x[1], a.request_timeout), zip(items, ids)))
        seconds = time.monotonic() - t0
        sampler.stop_flag.set()
        sampler.join()
        final = sampler.sample()
    facts = {"label": label, "server_argv": srv.argv, "items": len(items), "seconds": seconds,
             "requests_at_once": concurrency, "peak_kv_bytes_used": sampler.peak_bytes,
             "kv_effective_bits_at_peak": sampler.bits_at_peak,
             "kv_budget_bytes": metric(final, "mpkv:kv_budget_bytes"),
             "min_kv_effective_bits": sampler.min_bits,
             "kv_page_shrinks_total": metric(final, "mpkv:kv_page_shrinks_total")}
    return outs, facts


def budget_bytes(path, row):
    per_item = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            j = json.loads(line)
            if j.get("method") == row:
                per_item.append(int(j["budget_bytes"]))
    if not per_item or max(per_item) <= 0:
        raise SystemExit(f"served_task: no budgeted '{row}' row in {path}")
    return max(per_item)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True)
    p.add_argument("--items", type=int, default=0, help="first N items (0: all), as --task-items")
    p.add_argument("-m", "--model", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--mpkv", default=os.path.join(REPO, "build", "mpkv"))
    p.add_argument("--plan", default=os.path.join(REPO, "docs", "results", "plans_kivi", "combined_2.5.json"))
    p.add_argument("--budget-from", required=True, help="an `mpkv eval --task --outputs` file with BUDGET_ROW's items")
    p.add_argument("--budget-row", default="combined-2.5")
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight at once under pressure")
    p.add_argument("--budget-scale", type=float, default=1.0,
                   help="x the budget (below 1: tighter than every sequence's bound, so pages must shrink)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("-t", "--threads", type=int, default=1)
    p.add_argument("--request-timeout", type=float, default=3600.0)
    p.add_argument("--skip-alone", action="store_true", help="reuse the alone rows already in --out-dir")
    p.add_argument("--serve-arg", action="append", default=[],
                   help="extra argument for both mpkv serve runs (repeatable), e.g. --serve-arg=--max-batch-tokens=64")
    a = p.parse_args()
    items = task_rows.read_items(a.task, a.items)
    ids = [task_rows.prompt_ids(a.mpkv, a.model, it["prompt"]) for it in items]
    stem = os.path.splitext(os.path.basename(a.task))[0]
    os.makedirs(a.out_dir, exist_ok=True)
    tag = f"pressure{a.budget_scale:g}" if a.budget_scale != 1 else "pressure"
    out = {"alone": os.path.join(a.out_dir, f"{stem}_served_alone_outputs.jsonl"),
           "pressure": os.path.join(a.out_dir, f"{stem}_served_{tag}_outputs.jsonl")}
    budget = int(a.budget_scale * a.concurrency * budget_bytes(a.budget_from, a.budget_row))
    plan_label = os.path.splitext(os.path.basename(a.plan))[0].replace("_", "-")
    summary = {"command": " ".join(["bench/served_task.py"] + sys.argv[1:]), "task": a.task, "items": len(items)}
    if a.skip_alone:
        with open(out["alone"], encoding="utf-8") as f:
            alone = [(json.loads(l)["generated"], json.loads(l)["generated_tokens"]) for l in f if l.strip()][: len(items)]
    else:
        alone, facts = serve_items(a, ["--kv-method", "f16"], 1, 1, items, ids,
                                   os.path.join(a.out_dir, f"{stem}_served_alone_server.log"), "f16")
        summary["alone"] = facts
        peak = facts["kv_effective_bits_at_peak"] or 16.0
        task_rows.write_rows(out["alone"], [task_rows.row_line("f16", it, t, len(p), n, 16.0, peak, facts["seconds"])
                                            for it, p, (t, n) in zip(items, ids, alone)])
    kv = ["--kv-plan", a.plan, "--kv-budget-mib", f"{budget / 2**20:.6f}"]
    label = f"served-{plan_label}-x{a.concurrency}" + (f"-budget{a.budget_scale:g}" if a.budget_scale != 1 else "")
    pressed, facts = serve_items(a, kv, a.concurrency, a.concurrency, items, ids,
                                 os.path.join(a.out_dir, f"{stem}_served_{tag}_server.log"), label)
    bits = float(m.group(1)) if (m := re.search(r"_(\d+(?:\.\d+)?)$", os.path.splitext(os.path.basename(a.plan))[0])) else 0.0
    peak_bits = facts["kv_effective_bits_at_peak"] or 0.0
    task_rows.write_rows(out["pressure"], [task_rows.row_line(label, it, t, len(p), n, bits, peak_bits, facts["seconds"])
                                           for it, p, (t, n) in zip(items, ids, pressed)])
    same = sum(x[0] == y[0] for x, y in zip(alone, pressed))
    summary["pressure"] = facts
    summary["identical_answers"] = same
    summary["identical_fraction"] = same / len(items)
    with open(os.path.join(a.out_dir, f"{stem}_served_{tag}_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"served_task: {label}: {same}/{len(items)} answers identical to f16 alone; "
          f"lowest kv_effective_bits {facts['min_kv_effective_bits']}, peak KV {facts['peak_kv_bytes_used'] / 2**20:.2f} MiB "
          f"of {budget / 2**20:.2f}")


if __name__ == "__main__":
    main()
