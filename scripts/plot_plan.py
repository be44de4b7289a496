#!/usr/bin/env python3
"""Heatmap of a KV plan's final bits: layers x KV heads, keys and values side by side.
For models with sliding-window layers (model.sliding_window in the plan, e.g. Gemma 3) each row is
labelled "l  W<window>" or "l  global", global rows are framed in red, and the title gives the mean
final bits of each kind.
Usage: scripts/plot_plan.py PLAN.json OUT.png   (installs matplotlib with pip when it is missing)"""
import json
import subprocess
import sys

try:
    import matplotlib
except ImportError:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "matplotlib"])
    import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def main(plan_path, out_path):
    plan = json.load(open(plan_path))
    m = plan["model"]
    L, H = m["n_layer"], m["n_head_kv"]
    bits = {"key": np.full((L, H), np.nan), "value": np.full((L, H), np.nan)}
    for c in plan["components"]:
        bits[c["role"]][c["layer"], c["head"]] = c["bits"]
    solve = plan.get("solve", {})
    windows = m.get("sliding_window", [0] * L)
    title = "%s: %s%.3f avg bits, %s tokens" % (
        plan_path.split("/")[-1], "progressive, " if plan.get("progressive") else "", solve.get("avg_bits", float("nan")),
        solve.get("max_len", "?"))
    if any(windows):
        kinds = [("global", [l for l in range(L) if windows[l] == 0]), ("sliding-window", [l for l in range(L) if windows[l]])]
        title += "\n" + "; ".join("%s layers (%d): K %.2f, V %.2f mean bits" % (
            name, len(ls), np.mean(bits["key"][ls]), np.mean(bits["value"][ls])) for name, ls in kinds if ls)
    levels = sorted({int(b) for v in bits.values() for b in v.ravel()} | {2, 4, 8})
    fig, axes = plt.subplots(1, 2, figsize=(2.2 + 0.6 * H * 2, 1.5 + 0.18 * L), sharey=True)
    cmap = plt.get_cmap("viridis", len(levels))
    norm = matplotlib.colors.BoundaryNorm([levels[0] - 0.5] + [b + 0.5 for b in levels], cmap.N)
    for ax, role in zip(axes, ["key", "value"]):
        im = ax.imshow(bits[role], aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
        for l in range(L):
            for h in range(H):
                ax.text(h, l, "%d" % bits[role][l, h], ha="center", va="center", fontsize=6, color="w")
        ax.set_title("K" if role == "key" else "V")
        ax.set_xlabel("KV head")
        ax.set_xticks(range(H))
        if any(windows):
            for l in range(L):
                if windows[l] == 0:
                    ax.add_patch(plt.Rectangle((-0.5, l - 0.5), H, 1, fill=False, edgecolor="red", linewidth=1.5))
    if any(windows):
        axes[0].set_yticks(range(L))
        axes[0].set_yticklabels(["%d  %s" % (l, "global" if windows[l] == 0 else "W%d" % windows[l]) for l in range(L)],
                                fontsize=6)
    axes[0].set_ylabel("layer")
    fig.colorbar(im, ax=axes, ticks=levels, label="final bits")
    fig.suptitle(title, fontsize=8)
    fig.savefig(out_path, dpi=110, bbox_inches="tight")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
