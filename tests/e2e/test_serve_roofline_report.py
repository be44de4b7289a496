#!/usr/bin/env python3
"""The serving benchmark's roofline columns (bench/serve_roofline.py), without a server: two /metrics
scrapes of made-up counters become one level's growth, and the table divides it as worked out here
by hand; a configuration without the counters (llama-server) gets n/a in every column; the long
report (bench/serve_long_report.py) prints the table under its own."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import serve_roofline  # noqa: E402

MIB = 2 ** 20


def lookup(samples, name):
    vals = [v for (n, _), v in samples.items() if n == name]
    return sum(vals) if vals else None


def scrape(steps, tokens, seconds, weights, kv2, kv16, rows, macs):
    m = "model_name=x"
    s = {("mpkv:decode_steps_total", frozenset()): steps, ("mpkv:decode_step_tokens_total", frozenset()): tokens,
         ("mpkv:decode_step_seconds_total", frozenset()): seconds,
         ("mpkv:decode_step_weight_bytes_total", frozenset()): weights,
         ("mpkv:decode_step_kv_bytes_total", frozenset({("bits", "2"), ("model_name", m)})): kv2,
         ("mpkv:decode_step_kv_bytes_total", frozenset({("bits", "16"), ("model_name", m)})): kv16,
         ("mpkv:decode_step_kv_fp16_row_bytes_total", frozenset()): rows,
         ("mpkv:decode_step_macs_total", frozenset()): macs,
         ("mpkv:machine_read_bytes_per_second", frozenset()): 10e9,
         ("mpkv:machine_int8_macs_per_second", frozenset()): 800e9,
         ("mpkv:machine_probe_threads", frozenset()): 2}
    return serve_roofline.roofline_counters(s, lookup)


def main():
    # 100 decode steps of 4 tokens over 1 s: per step 80 MiB of weights, 12 MiB of 2-bit pages,
    # 2 MiB of 16-bit pages, 6 MiB of fp16 rows (100 MiB) and 0.4e9 multiply-adds.
    first = scrape(10, 40, 0.5, 10 * 80 * MIB, 10 * 12 * MIB, 10 * 2 * MIB, 10 * 6 * MIB, 10 * 0.4e9)
    last = scrape(110, 440, 1.5, 110 * 80 * MIB, 110 * 12 * MIB, 110 * 2 * MIB, 110 * 6 * MIB, 110 * 0.4e9)
    roof = serve_roofline.roofline_window(first, last)
    assert roof["decode_steps"] == 100 and roof["decode_seconds"] == 1.0, roof
    f = serve_roofline.step_figures(roof)
    assert f["tokens_per_step"] == 4 and abs(f["step_s"] - 0.01) < 1e-12, f
    assert f["read"] == 100 * MIB and f["kv_pages"] == {2: 12 * MIB, 16: 2 * MIB} and f["kv_rows"] == 6 * MIB, f
    # 100 MiB per 10 ms = 10.49 GB/s, 105% of the 10 GB/s probe; 40 GMAC/s = 5% of the peak.
    assert abs(f["bytes_per_s"] - 100 * MIB / 0.01) < 1 and abs(f["read_share"] - 1.048576) < 1e-9, f
    assert abs(f["mac_share"] - 0.05) < 1e-12 and f["binds"] == "read bandwidth", f
    # Ceiling: 4 tokens per max(100 MiB / 10 GB/s, 0.4e9 / 800e9) = 4 / 10.49 ms.
    assert abs(f["ceiling_tok_s"] - 4 / (100 * MIB / 10e9)) < 1e-9, f

    mpkv = ({"label": "mpkv kivi-2"}, {"roofline": roof, "output_tok_s": 190.7})
    peer = ({"label": "llama-server q8_0"}, {"output_tok_s": 300.0})
    no_counters = ({"label": "mpkv old"}, {"roofline": serve_roofline.roofline_window({}, {})})
    table = serve_roofline.roofline_table([mpkv, peer, no_counters])
    assert len(table) == 5, table
    row = table[2]
    for cell in ("| 100 |", "| 4.00 |", "| 10.00 |", "| 100.00 (80.00 + 20.00) |",
                 "| 16-bit 2.000, 2-bit 12.000, fp16 rows 6.000 |", "| 10.49 |", "| 105% |", "| 40.0 |", "| 5.0% |",
                 "| read bandwidth |", "| 381.5 |", "| 0.50 |", "| 10.0, 800 (2) |"):
        assert cell in row, (cell, row)
    for r in table[3:]:
        assert r.count("| n/a ") == 13, r

    with tempfile.TemporaryDirectory() as d:
        result = {"label": "mpkv kivi-2", "workload": {"max_tokens": 128}, "extra": {},
                  "levels": [dict(mpkv[1], request_rate="inf", completed=8, requests=8, failed=0, ttft_p50_s=None,
                                  ttft_p99_s=None, tpot_p50_s=None, tpot_p99_s=None, itl_p99_s=None, e2e_p50_s=None,
                                  e2e_p99_s=None)]}
        path = os.path.join(d, "result_kivi-2.json")
        with open(path, "w") as fh:
            json.dump(result, fh)
        md = os.path.join(d, "tables.md")
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "serve_long_report.py"), path, "--md", md],
                       check=True, timeout=60)
        text = open(md).read()
        assert "Roofline of the decode steps" in text and "| read bandwidth | 381.5 | 0.50 |" in text, text
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
