"""The roofline table of a serving benchmark (docs/results/serving.md; docs/serving.md "Roofline
counters"): per configuration, what mpkv serve's decode steps read and multiplied, from its /metrics
counters over the level (read by bench/serve_bench.py with roofline_counters, their growth over the
level by roofline_window), against the read bandwidth and int8
peak the server probed at startup (--probe-machine-limits). Nothing is re-derived here: the bytes and
multiply-adds are the server's own counts (engine/step_work.h), and this module only divides them.
Configurations without the counters (llama-server, llama_cpp.server) get n/a.

Columns: decode steps and tokens per step; ms per step (the steps' wall time / steps); MiB read per
step (weights + KV) and the KV by width (page bytes at each bit width, codes + scales, and the fp16
sink / window rows); GB/s and its share of the read probe; GMAC/s and its share of the int8 peak;
which limit binds (the larger share); the decode tok/s ceiling the binding limit allows at those
bytes and multiply-adds per step; and the served output tok/s as a share of that ceiling.
"""

MIB = 2 ** 20
NA = "n/a"

# mpkv serve's decode-step counters and probed limits: summary key -> metric name.
ROOFLINE_COUNTERS = {
    "decode_steps": "mpkv:decode_steps_total",
    "decode_tokens": "mpkv:decode_step_tokens_total",
    "decode_seconds": "mpkv:decode_step_seconds_total",
    "decode_weight_bytes": "mpkv:decode_step_weight_bytes_total",
    "decode_kv_fp16_row_bytes": "mpkv:decode_step_kv_fp16_row_bytes_total",
    "decode_macs": "mpkv:decode_step_macs_total",
}
MACHINE_GAUGES = {
    "machine_read_bytes_per_s": "mpkv:machine_read_bytes_per_second",
    "machine_int8_macs_per_s": "mpkv:machine_int8_macs_per_second",
    "machine_probe_threads": "mpkv:machine_probe_threads",
}


def roofline_counters(samples, metric):
    """From one scrape ({(name, labels): value}; metric(samples, name) reads one, None when absent):
    the decode-step totals and machine gauges (None where the server has none, e.g. llama-server) and
    the KV page bytes by bits ({"2": bytes, ...})."""
    out = {k: metric(samples, name) for k, name in {**ROOFLINE_COUNTERS, **MACHINE_GAUGES}.items()}
    out["decode_kv_bytes_by_bits"] = {dict(l).get("bits"): v for (n, l), v in samples.items()
                                      if n == "mpkv:decode_step_kv_bytes_total"}
    return out


def roofline_window(first, last):
    """The counters' growth from the scrape `first` to `last` (one level) and the machine gauges."""
    out = {}
    for key in ROOFLINE_COUNTERS:
        out[key] = None if first.get(key) is None or last.get(key) is None else last[key] - first[key]
    out["decode_kv_bytes_by_bits"] = {k: v - (first.get("decode_kv_bytes_by_bits") or {}).get(k, 0)
                                      for k, v in (last.get("decode_kv_bytes_by_bits") or {}).items()}
    out.update({k: last.get(k) for k in MACHINE_GAUGES})
    return out


def step_figures(roof):
    """Per decode step and per second figures of one level's roofline window, or None without counters."""
    if not roof or not roof.get("decode_steps"):
        return None
    steps = roof["decode_steps"]
    seconds = roof["decode_seconds"]
    kv = {int(b): v / steps for b, v in (roof.get("decode_kv_bytes_by_bits") or {}).items() if v}
    rows = roof["decode_kv_fp16_row_bytes"] / steps
    weights = roof["decode_weight_bytes"] / steps
    read = weights + rows + sum(kv.values())
    f = {"steps": steps, "tokens_per_step": roof["decode_tokens"] / steps, "step_s": seconds / steps,
         "weights": weights, "kv_pages": kv, "kv_rows": rows, "read": read, "macs": roof["decode_macs"] / steps,
         "read_probe": roof.get("machine_read_bytes_per_s") or None,
         "int8_peak": roof.get("machine_int8_macs_per_s") or None, "threads": roof.get("machine_probe_threads")}
    f["bytes_per_s"] = read / f["step_s"]
    f["macs_per_s"] = f["macs"] / f["step_s"]
    f["read_share"] = f["bytes_per_s"] / f["read_probe"] if f["read_probe"] else None
    f["mac_share"] = f["macs_per_s"] / f["int8_peak"] if f["int8_peak"] else None
    if f["read_share"] is not None and f["mac_share"] is not None:
        f["binds"] = "read bandwidth" if f["read_share"] >= f["mac_share"] else "int8 peak"
        # The step can take no less than its bytes at the probe's bandwidth nor its multiply-adds at the peak.
        floor_s = max(read / f["read_probe"], f["macs"] / f["int8_peak"])
        f["ceiling_tok_s"] = f["tokens_per_step"] / floor_s
    else:
        f["binds"], f["ceiling_tok_s"] = None, None
    return f


def fmt(v, fmtspec):
    return NA if v is None else format(v, fmtspec)


def kv_by_width(f):
    parts = [f"{b}-bit {v / MIB:.3f}" for b, v in sorted(f["kv_pages"].items(), reverse=True)]
    if f["kv_rows"]:
        parts.append(f"fp16 rows {f['kv_rows'] / MIB:.3f}")
    return ", ".join(parts) or "-"


def roofline_table(rows):
    """Markdown lines for [(result, level summary)] in order."""
    out = ["| configuration | decode steps | tokens / step | ms / step | MiB read / step (weights + KV) "
           "| KV by width, MiB / step | GB/s | % read probe | GMAC/s | % int8 peak | binds "
           "| ceiling tok/s | served tok/s / ceiling | probe: read GB/s, int8 GMAC/s (threads) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r, s in rows:
        f = step_figures(s.get("roofline"))
        if f is None:
            out.append(f"| {r['label']} |" + f" {NA} |" * 13)
            continue
        tok = s.get("output_tok_s")
        probe = (f"{f['read_probe'] / 1e9:.1f}, {f['int8_peak'] / 1e9:.0f} ({f['threads']:.0f})"
                 if f["read_probe"] and f["int8_peak"] else NA)
        out.append(
            f"| {r['label']} | {f['steps']:.0f} | {f['tokens_per_step']:.2f} | {f['step_s'] * 1e3:.2f} "
            f"| {f['read'] / MIB:.2f} ({f['weights'] / MIB:.2f} + {(f['read'] - f['weights']) / MIB:.2f}) "
            f"| {kv_by_width(f)} | {f['bytes_per_s'] / 1e9:.2f} "
            f"| {fmt(None if f['read_share'] is None else 100 * f['read_share'], '.0f')}% "
            f"| {f['macs_per_s'] / 1e9:.1f} | {fmt(None if f['mac_share'] is None else 100 * f['mac_share'], '.1f')}% "
            f"| {f['binds'] or NA} | {fmt(f['ceiling_tok_s'], '.1f')} "
            f"| {fmt(tok / f['ceiling_tok_s'] if tok and f['ceiling_tok_s'] else None, '.2f')} | {probe} |")
    return out
