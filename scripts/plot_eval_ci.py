#!/usr/bin/env python3
"""dPPL and KL with their 95% bootstrap intervals against stored bits per element (every byte the
cache holds), from `mpkv eval --json` (decode rows), with llama.cpp's KV types as reference points.

Usage:
  scripts/plot_eval_ci.py --eval EVAL.json [EVAL2.json | --eval EVAL2.json ...] [--peer PEER.json ...] --title TITLE --out OUT.png

Several --eval files (runs on the same windows, e.g. an earlier run and a later one with more rows)
are drawn together; a label already drawn is not drawn again. Several --peer files likewise (each
has its own f16 row, against which its other rows' dPPL is taken).

EVAL.json rows need "stored_bits_per_element", "ppl_delta_pct", "kl_mean" and "ci95" (`mpkv eval`
since the bootstrap intervals). PEER.json is `bench/peer_llamacpp.py eval --json`: its rows are
plotted at their bits (codes + fp16 block scales, no window), dPPL against its own f16 row, without
intervals (the peer keeps no per-position series).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--eval", required=True, action="extend", nargs="+")
    p.add_argument("--peer", action="extend", nargs="+", default=[])
    p.add_argument("--title", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    evs = [json.load(open(f)) for f in a.eval]
    rows, seen = [], set()
    for ev in evs:
        for r in ev["rows"]:
            if r.get("protocol") == "decode" and r["method"] != "f16" and r["label"] not in seen:
                seen.add(r["label"])
                rows.append(r)
    fig, (ax_p, ax_k) = plt.subplots(1, 2, figsize=(12, 4.8))
    markers = "os^Dv<>p"  # with the 10-colour cycle: distinct (colour, marker) pairs for up to 40 rows
    for i, r in enumerate(rows):
        x, fmt = r["stored_bits_per_element"], markers[(i // 10) % len(markers)]
        lo, hi = r["ci95"]["ppl_delta_pct"]
        ax_p.errorbar([x], [r["ppl_delta_pct"]], yerr=[[r["ppl_delta_pct"] - lo], [hi - r["ppl_delta_pct"]]],
                      fmt=fmt, capsize=4, label=r["label"])
        lo, hi = r["ci95"]["kl_mean"]
        ax_k.errorbar([x], [r["kl_mean"]], yerr=[[r["kl_mean"] - lo], [hi - r["kl_mean"]]], fmt=fmt, capsize=4,
                      label=r["label"])
    if rows and max(r["ci95"]["ppl_delta_pct"][1] for r in rows) > 100:  # a broken row would flatten the rest
        ax_p.set_yscale("symlog", linthresh=1)
    drawn = set()
    for peer in (json.load(open(f)) for f in a.peer):
        ref = next(r for r in peer["rows"] if r["kv_type"] == "f16")
        for r in peer["rows"]:
            if r["kv_type"] == "f16" or r["kv_type"] in drawn:
                continue
            drawn.add(r["kv_type"])
            d = 100 * (r["ppl"] / ref["ppl"] - 1)
            ax_p.plot([r["bits"]], [d], "s", color="gray")
            ax_p.annotate("llama.cpp " + r["kv_type"], (r["bits"], d), fontsize=8)
            ax_k.plot([r["bits"]], [r["kl_mean"]], "s", color="gray")
            ax_k.annotate("llama.cpp " + r["kv_type"], (r["bits"], r["kl_mean"]), fontsize=8)
    ax_p.axhline(0, color="k", lw=0.5)
    ax_p.set_xlabel("stored bits per K/V element (every byte)")
    ax_p.set_ylabel("dPPL % vs 16-bit cache (95% CI)")
    ax_k.set_xlabel("stored bits per K/V element (every byte)")
    ax_k.set_ylabel("KL(16-bit || method), nats (95% CI)")
    ax_k.set_yscale("log")
    ax_p.legend(fontsize=8)
    fig.suptitle(a.title, fontsize=10)
    fig.text(0.01, 0.01, " | ".join(ev["command"][:200] for ev in evs)[:400], fontsize=5)
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
