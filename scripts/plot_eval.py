#!/usr/bin/env python3
"""Plots of `mpkv eval` results, with llama.cpp's KV types as reference points.

Usage:
  scripts/plot_eval.py --eval EVAL.json [--peer PEER.json] [--speed SPEED.json] --out-dir DIR
(installs matplotlib with pip when it is missing)

Inputs:
  EVAL.json   what `mpkv eval --json` writes: {"command", "n_ctx", "tokens_used", "scored", "rows": [{"method",
              "label", "bits", "protocol": "decode" | "prefill-fake", "ppl", "kl_mean", ...}], "drift": null |
              {"bucket_start": [...], "methods": [{"label", "kl_mean": [...], "top1": [...]}]}}
  PEER.json   what `bench/peer_llamacpp.py eval --json` writes: {"command", "rows": [{"kv_type", "bits", "ppl",
              "kl_mean", ...}], "numerics_floor": null | {"kl_mean", ...}}
  SPEED.json  decode speed against context, written by hand or by a script:
                {"command": "how the numbers were measured (or the file they were copied from)",
                 "contexts": [1024, 4096, 8192, 32768],
                 "series": [{"label": "mpkv f16", "tok_s": [t0, t1, t2, t3]},
                            {"label": "llama.cpp q4_0", "tok_s": [t0, t1, null, null]}, ...]}
              tok_s[i] is the decode tok/s at contexts[i]; null where not measured.

Writes into DIR (each figure's footer names the command that produced its data):
  eval_ppl_vs_bits.png    PPL against average bits, one panel per protocol, one line per method; the 16-bit
                          cache as a dashed line; llama.cpp's KV types (x = their bits incl. scales) in the
                          decode panel
  eval_kl_vs_bits.png     the same for mean KL against the 16-bit cache (log y)
  eval_drift.png          KL mean and top-1 agreement against position in a long greedy generation (if drift)
  eval_decode_speed.png   decode tok/s against context (if --speed)
Methods, rows or fields that are missing are skipped, never an error.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import textwrap

try:
    import matplotlib
except ImportError:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "matplotlib"])
    import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

METHOD_ORDER = ["uniform", "kivi", "rotated", "turbo", "progressive", "pmkvq", "ratequant", "combined"]
PROTOCOLS = [("decode", "decode protocol (token-by-token cache state)"),
             ("prefill-fake", "prefill-fake protocol (fake-quantized K/V, one pass)")]
MARKERS = "osD^v<>Pp*hX"


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def footer(fig, commands):
    """The commands that produced the plotted data, below the axes (kept by bbox_inches='tight')."""
    lines = []
    for who, cmd in commands:
        if cmd:
            lines += textwrap.wrap(f"{who}: {cmd}", 170, subsequent_indent="    ")
    if lines:
        fig.text(0.01, -0.01, "\n".join(lines), fontsize=6, va="top", ha="left", family="monospace")


def method_styles(methods):
    cmap = plt.get_cmap("tab10")
    known = [m for m in METHOD_ORDER if m in methods] + sorted(m for m in methods if m not in METHOD_ORDER)
    return known, {m: (cmap(i % 10), MARKERS[i % len(MARKERS)]) for i, m in enumerate(known)}


def rows_of(ev):
    return [r for r in ev.get("rows", []) if isinstance(r, dict)]


def is_reference(r):
    return r.get("method") == "f16" or (finite(r.get("bits")) and r["bits"] >= 16)


def plot_vs_bits(ev, peer, metric, ylabel, out, log_y):
    rows = rows_of(ev)
    methods, style = method_styles({r.get("method", "?") for r in rows if not is_reference(r)})
    protos = [p for p in PROTOCOLS if any(r.get("protocol") == p[0] for r in rows)] or PROTOCOLS[:1]
    fig, axes = plt.subplots(1, len(protos), figsize=(6.2 * len(protos), 4.6), sharey=True, squeeze=False)
    axes = axes[0]
    ok = lambda v: finite(v) and (v > 0 or not log_y)  # noqa: E731
    for ax, (proto, title) in zip(axes, protos):
        here = [r for r in rows if r.get("protocol") == proto]
        xs_all = []
        for m in methods:
            pts = sorted((r["bits"], r[metric]) for r in here
                         if r.get("method") == m and not is_reference(r) and finite(r.get("bits")) and ok(r.get(metric)))
            if not pts:
                continue
            color, marker = style[m]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=m, lw=1.3, ms=5)
            xs_all += [p[0] for p in pts]
        # The 16-bit row of this protocol, else of any (f16 is the same under both: nothing is quantized).
        ref = [r for r in here if is_reference(r) and ok(r.get(metric))] or \
            [r for r in rows if is_reference(r) and ok(r.get(metric))]
        if ref:
            ax.axhline(ref[0][metric], color="k", ls="--", lw=1, label=f"mpkv f16 ({ref[0][metric]:.4g})")
        if peer and proto == "decode":
            prow = [r for r in peer.get("rows", []) if finite(r.get("bits")) and ok(r.get(metric))]
            for k, r in enumerate(sorted(prow, key=lambda r: r["bits"])):
                if r["bits"] >= 16:  # f16 sits far right of the axis: a dotted line instead
                    ax.axhline(r[metric], color="0.45", ls=":", lw=1, label=f"llama.cpp f16 ({r[metric]:.4g})")
                    continue
                ax.plot(r["bits"], r[metric], marker="X", color="crimson", ms=8, ls="none")
                ax.annotate(f"llama.cpp {r.get('kv_type', '?')}", (r["bits"], r[metric]), textcoords="offset points",
                            xytext=(5, 6 if k % 2 == 0 else -13), fontsize=7, color="crimson")
                xs_all.append(r["bits"])
            fl = peer.get("numerics_floor") or {}
            if metric.startswith("kl") and ok(fl.get(metric)):
                ax.axhline(fl[metric], color="crimson", ls=":", lw=0.9,
                           label=f"llama.cpp numerics floor ({fl[metric]:.2g}):\nf16 without vs with flash attn")
            if prow:
                ax.plot([], [], marker="X", color="crimson", ls="none", label="llama.cpp KV types\n(bits incl. scales)")
        if xs_all:
            ax.set_xlim(min(2.0, min(xs_all)) - 0.25, max(4.0, max(xs_all)) + 0.6)
        if log_y:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("average bits per element")
        ax.grid(alpha=0.3, which="both" if log_y else "major")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
    axes[0].set_ylabel(ylabel)
    fig.suptitle(f"{os.path.basename(str(ev.get('model', '')))}: {ylabel}, n_ctx {ev.get('n_ctx', '?')}, "
                 f"{ev.get('tokens_used', '?')} tokens used, {ev.get('scored', '?')} scored", fontsize=10)
    notes = [("mpkv", ev.get("command"))]
    if peer:
        notes.append(("llama.cpp", peer.get("command")))
        if metric.startswith("kl"):
            notes.append(("note", "llama.cpp's KL is against llama.cpp's own f16 cache; mpkv's against mpkv's f16 cache"))
    footer(fig, notes)
    fig.tight_layout()
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def plot_drift(ev, out):
    d = ev.get("drift")
    if not isinstance(d, dict) or not d.get("methods") or not d.get("bucket_start"):
        return None
    xs = d["bucket_start"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.4))
    cmap = plt.get_cmap("tab10")
    for i, m in enumerate(d["methods"]):
        label = m.get("label", "?")
        for ax, key in ((a1, "kl_mean"), (a2, "top1")):
            ys = m.get(key) or []
            pts = [(x, y) for x, y in zip(xs, ys) if finite(y) and (key != "kl_mean" or y > 0)]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS[i % len(MARKERS)], ms=3,
                        color=cmap(i % 10), label=label, lw=1.2)
    a1.set_yscale("log")
    a1.set_ylabel("KL mean vs 16-bit cache (per bucket)")
    a2.set_ylabel("top-1 agreement with 16-bit cache (per bucket)")
    for ax in (a1, a2):
        ax.set_xlabel(f"position in generation (bucket start, buckets of {d.get('bucket', '?')} tokens)")
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(f"drift: greedy generation of {d.get('tokens', '?')} tokens with the 16-bit cache "
                 f"(prompt {d.get('prompt_tokens', '?')} tokens), teacher-forced through each method", fontsize=10)
    footer(fig, [("mpkv", ev.get("command"))])
    fig.tight_layout()
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def plot_speed(sp, out):
    ctx = sp.get("contexts") or []
    fig, ax = plt.subplots(figsize=(7, 4.4))
    for i, s in enumerate(sp.get("series", [])):
        pts = [(c, t) for c, t in zip(ctx, s.get("tok_s") or []) if finite(c) and finite(t)]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS[i % len(MARKERS)],
                    ls="--" if "llama" in s.get("label", "") else "-", label=s.get("label", "?"))
    ax.set_xscale("log", base=2)
    if ctx:
        ax.set_xticks([c for c in ctx if finite(c)])
        ax.set_xticklabels([str(c) for c in ctx if finite(c)])
    ax.set_xlabel("context (tokens in the cache)")
    ax.set_ylabel("decode tok/s")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.set_title("decode speed against context", fontsize=10)
    footer(fig, [("data", sp.get("command"))])
    fig.tight_layout()
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--eval", required=True, help="JSON from `mpkv eval --json`")
    p.add_argument("--peer", help="JSON from `bench/peer_llamacpp.py eval --json`")
    p.add_argument("--speed", help="decode tok/s against context (format above)")
    p.add_argument("--out-dir", required=True)
    a = p.parse_args()
    ev = json.load(open(a.eval))
    peer = json.load(open(a.peer)) if a.peer else None
    os.makedirs(a.out_dir, exist_ok=True)
    d = a.out_dir
    written = [plot_vs_bits(ev, peer, "ppl", "perplexity", os.path.join(d, "eval_ppl_vs_bits.png"), False),
               plot_vs_bits(ev, peer, "kl_mean", "KL mean vs 16-bit cache", os.path.join(d, "eval_kl_vs_bits.png"), True),
               plot_drift(ev, os.path.join(d, "eval_drift.png"))]
    if a.speed:
        written.append(plot_speed(json.load(open(a.speed)), os.path.join(d, "eval_decode_speed.png")))
    for w in written:
        if w:
            print(w)


if __name__ == "__main__":
    main()
