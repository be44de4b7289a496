#!/usr/bin/env python3
"""Task accuracy against stored bits per K/V element, one panel per task file, one line per method.

Usage:
  scripts/plot_accuracy.py --json REPORT.json [REPORT.json ...] --out docs/results/accuracy/PNG
  [--title TEXT]
(installs matplotlib with pip when it is missing)

Input: what `mpkv eval --task --json` writes (tools/task_report.cpp): {"command", "model", "files":
[{"path", "items", "rows": [{"method", "bits", "right", "n", "accuracy", "wilson95": [lo, hi],
"context_bits_per_elem", "peak_bits_per_elem", ...}]}]}. One panel per file entry (of every report).

x: context_bits_per_elem, the peak bytes the row's cache stored (codes, scales, zeros, the fp16 sink
and window, page records) x 8 over the K/V elements of the whole context (prompt + generated), so a
cut f16 row (f16-evict, f16-trunc) sits at the bytes it used, not at 16; llama.cpp rows sit at
their type's bytes (q8_0 8.5, q4_0 4.5). Rows without it fall back to peak_bits_per_elem.
y: accuracy % with its Wilson 95% interval as an error bar. Rows of one method at several bits
(kivi-2, kivi-3) are joined by a line; the f16 row (the whole context) is also a dashed line.
The footer names each report's command.
"""
import argparse
import json
import math
import re
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

MARKERS = "osD^v<>Pp*hX"


def family(label):
    """'kivi-2' -> 'kivi', 'ratequant-2.5' -> 'ratequant', 'f16-evict' -> 'f16-evict', 'llama.cpp-q4_0' -> 'llama.cpp'."""
    if label.startswith("llama.cpp-"):
        return "llama.cpp"
    m = re.match(r"^(.*?)-\d+(\.\d+)?( \(.*\))?$", label)
    return m.group(1) if m else label


def x_of(r):
    for k in ("context_bits_per_elem", "peak_bits_per_elem"):
        v = r.get(k)
        if isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
            return v
    return None


def panel(ax, f, style):
    rows = [r for r in f.get("rows", []) if x_of(r) is not None and r.get("n")]
    fams = {}
    for r in rows:
        fams.setdefault(family(r["method"]), []).append(r)
    for fam, rs in fams.items():
        rs = sorted(rs, key=x_of)
        color, marker = style[fam]
        xs = [x_of(r) for r in rs]
        ys = [100 * r["accuracy"] for r in rs]
        lo = [100 * (r["accuracy"] - r["wilson95"][0]) for r in rs]
        hi = [100 * (r["wilson95"][1] - r["accuracy"]) for r in rs]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker=marker, color=color, ms=5, lw=1.2, capsize=2.5,
                    ls="-" if len(rs) > 1 else "none", label=fam)
        for r, x, y in zip(rs, xs, ys):
            ax.annotate(r["method"], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=6, color=color)
        if fam == "f16":
            ax.axhline(ys[0], color="k", ls="--", lw=0.8)
    n = max((r["n"] for r in rows), default=0)
    ax.set_title(f"{f.get('path', '?')}  ({n} items per row)", fontsize=9)
    ax.set_xlabel("stored bits per K/V element of the whole context (every byte)")
    ax.set_ylabel("exact-match accuracy %")
    ax.set_ylim(-3, 103)
    ax.grid(alpha=0.3)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", nargs="+", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--title", default="")
    a = p.parse_args()
    panels, commands = [], []
    for path in a.json:
        with open(path) as fh:
            rep = json.load(fh)
        commands.append(rep.get("command", ""))
        panels += rep.get("files", [])
    if not panels:
        sys.exit("plot_accuracy: no files in the reports")
    fams = []
    for f in panels:
        for r in f.get("rows", []):
            if family(r["method"]) not in fams:
                fams.append(family(r["method"]))
    cmap = plt.get_cmap("tab20")
    style = {m: (("k" if m == "f16" else cmap(i % 20)), MARKERS[i % len(MARKERS)]) for i, m in enumerate(fams)}
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.8), squeeze=False)
    for ax, f in zip(axes[0], panels):
        panel(ax, f, style)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in labels:
                handles.append(h)
                labels.append(l)
    fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 7), fontsize=7, bbox_to_anchor=(0.5, 1.06))
    if a.title:
        fig.suptitle(a.title, y=1.11, fontsize=10)
    lines = []
    for c in commands:
        lines += textwrap.wrap(c, 200, subsequent_indent="    ")
    fig.text(0.01, -0.02, "\n".join(lines), fontsize=5.5, va="top", ha="left", family="monospace")
    fig.savefig(a.out, dpi=130, bbox_inches="tight")
    print(f"plot_accuracy: {len(panels)} panels -> {a.out}")


if __name__ == "__main__":
    main()
