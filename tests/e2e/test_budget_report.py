#!/usr/bin/env python3
"""scripts/bench_budget.sh's report (bench/budget_report.py), without running the engine: made-up
`mpkv bench --json` files of three rounds for two caches become one table whose medians, ratios to
f16 and roofline columns (from the median run) are worked out here by hand; a cache list that does
not start with f16, and a missing round, are refused with a message and no JSON written."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT = os.path.join(ROOT, "bench", "budget_report.py")
MIB = 2 ** 20


def bench_json(tok_s, sequences, step_s, kv_by_bits, read_share):
    return {"decode": [{"tok_s": tok_s, "sequences": sequences, "kv_mib": 100.0,
                        "roofline": {"step_seconds": step_s, "weight_bytes": 92 * MIB,
                                     "kv_bytes_by_bits": {str(b): v * MIB for b, v in kv_by_bits.items()},
                                     "read_probe_fraction": read_share, "int8_peak_fraction": 0.05,
                                     "binds": "read bandwidth"}}],
            "machine": {"read_gb_s": 17.0}, "isa": "avx512", "threads": 2}


def write_runs(raw, label, runs):
    for r, d in enumerate(runs, 1):
        with open(os.path.join(raw, f"{label}_r{r}.json"), "w") as f:
            json.dump(d, f)


def run(raw, configs, rounds, out):
    return subprocess.run([sys.executable, REPORT, "--raw", raw, "--configs", configs, "--rounds", str(rounds),
                           "--out", out, "--command", "test"], capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as raw:
        # f16: 50, 52, 40 tok/s -> median 50 (the run with step 0.06 s); kivi-2: 150, 120, 160 -> 150.
        write_runs(raw, "f16", [bench_json(50.0, 3, 0.060, {16: 540}, 0.69), bench_json(52.0, 3, 0.058, {16: 540}, 0.70),
                                bench_json(40.0, 3, 0.075, {16: 540}, 0.55)])
        write_runs(raw, "kivi-2", [bench_json(150.0, 20, 0.133, {16: 70, 2: 609}, 0.35),
                                   bench_json(120.0, 20, 0.166, {16: 70, 2: 609}, 0.28),
                                   bench_json(160.0, 20, 0.125, {16: 70, 2: 609}, 0.37)])
        out = os.path.join(raw, "out.json")
        configs = "f16|--kv-method f16;kivi-2|--kv-method kivi --kv-bits 2"
        p = run(raw, configs, 3, out)
        assert p.returncode == 0, p.stderr
        rows = {r["cache"]: r for r in json.load(open(out))["rows"]}
        assert rows["f16"]["tok_s"] == 50.0 and rows["kivi-2"]["tok_s"] == 150.0, rows
        assert rows["kivi-2"]["tok_s_vs_f16"] == 3.0 and abs(rows["kivi-2"]["sequences_vs_f16"] - 20 / 3) < 1e-12, rows
        # The roofline columns are the median run's (150 tok/s: step 0.133 s, 35% of the probe).
        assert abs(rows["kivi-2"]["step_ms"] - 133.0) < 1e-9 and rows["kivi-2"]["read_probe_fraction"] == 0.35, rows
        assert rows["kivi-2"]["kv_mib_by_bits"] == {"16": 70.0, "2": 609.0} and rows["kivi-2"]["weights_mib"] == 92.0, rows
        assert rows["kivi-2"]["tok_s_runs"] == [150.0, 120.0, 160.0], rows
        assert "| kivi-2 | 20 | 6.67 | 150.0, 120.0, 160.0 | 150.0 | **3.00x** | 133.0 | 92, 16:70 2:609 | 35% | 5.0% |" in p.stdout, p.stdout

        # The reference row must come first; a round that is missing is named, and nothing is written.
        os.remove(out)
        p = run(raw, "kivi-2|x;f16|y", 3, out)
        assert p.returncode != 0 and "must be f16" in p.stderr and not os.path.exists(out), p.stderr
        p = run(raw, configs, 4, out)
        assert p.returncode != 0 and "f16_r4.json" in p.stderr and not os.path.exists(out), p.stderr
    print("test_budget_report: ok")


if __name__ == "__main__":
    main()
