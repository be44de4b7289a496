#!/usr/bin/env python3
"""The drivers that write `mpkv eval --task --import` rows (bench/task_rows.py,
bench/peer_task_llamacpp.py, bench/served_task.py), without a model or a server:
- a row line carries every field tools/task_import.cpp requires, with the item's id and answer;
- the peer driver without a llama-server binary says so, exits 0 and writes nothing;
- /metrics samples are read by name, labels or not, summed over label sets."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import served_task  # noqa: E402
import task_rows  # noqa: E402

# The fields import_task_runs reads (tools/task_import.cpp); a missing one is an input error there.
REQUIRED = {"id", "method", "answer", "generated", "prompt_tokens", "kept_tokens", "generated_tokens", "budget_bytes",
            "over_budget", "bits", "budgeted", "policy", "peak_bits_per_elem", "context_bits_per_elem", "seconds"}


def main():
    item = {"id": "passkey_1024_7", "answer": "48213", "prompt": "p", "max_tokens": 12}
    row = json.loads(task_rows.row_line("llama.cpp-q4_0", item, " 48213.", 931, 4, 4.5, 4.5, 12.5))
    missing = REQUIRED - set(row)
    assert not missing, f"row line lacks {missing}"
    assert row["id"] == "passkey_1024_7" and row["answer"] == "48213" and row["generated"] == " 48213."
    assert row["policy"] == "full" and row["budgeted"] is False and row["budget_bytes"] == 0
    assert row["kept_tokens"] == row["prompt_tokens"] == 931
    assert "correct" not in row, "drivers never score: mpkv eval --import does"

    with tempfile.TemporaryDirectory() as d:
        task = os.path.join(d, "t.jsonl")
        with open(task, "w") as f:
            f.write(json.dumps(item) + "\n")
        out = os.path.join(d, "rows")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "peer_task_llamacpp.py"), "--task", task,
                            "--out-dir", out, "--llama-server", os.path.join(d, "no-such-llama-server")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "no llama-server binary" in r.stdout and "skipped" in r.stdout, r.stdout
        assert not os.path.exists(out), "nothing is written without the peer"

    text = ('# HELP mpkv:kv_bytes_used x\nmpkv:kv_bytes_used{model_name="m"} 123456\n'
            "mpkv:kv_effective_bits 2.75\nmpkv:kv_effective_bits_other 9\n"
            'mpkv:kv_page_shrinks_total{from="16",to="8"} 10\nmpkv:kv_page_shrinks_total{from="4",to="2"} 5\n')
    assert served_task.metric(text, "mpkv:kv_bytes_used") == 123456
    assert served_task.metric(text, "mpkv:kv_effective_bits") == 2.75
    assert served_task.metric(text, "mpkv:kv_page_shrinks_total") == 15  # summed over its label sets
    assert served_task.metric(text, "mpkv:kv_tokens") is None
    print("test_task_drivers: ok")


if __name__ == "__main__":
    main()
