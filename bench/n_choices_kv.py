#!/usr/bin/env python3
# Usage (repository root): python3 bench/n_choices_kv.py [build/mpkv]
# KV bytes of one chat request with n = 1 and n = 4 (same ~330-token prompt, 200 tokens each), read
# from /metrics while they decode: the prompt's full pages are held once with the prefix cache.
import json, re, subprocess, sys, threading, time, urllib.request
def run(extra):
    p = subprocess.Popen([sys.argv[1] if len(sys.argv) > 1 else "build/mpkv", "serve", "-m", "models/SmolLM2-135M-Instruct.Q4_1.gguf",
                          "--port", "0", "-t", "2", "--kv-budget-mib", "64"] + extra,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    base = "http://127.0.0.1:%s" % re.search(r":(\d+)", p.stdout.readline()).group(1)
    for _ in range(200):
        try:
            if urllib.request.urlopen(base + "/health").status == 200: break
        except Exception: time.sleep(0.3)
    text = " ".join("Rule %d: answer briefly, politely and never invent facts." % i for i in range(26))
    out = {}
    for n in (1, 4):
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 200,
                           "n": n, "ignore_eos": True, "temperature": 0.8, "seed": 1}).encode()
        peak = [0, 0]
        def req():
            out[n] = json.load(urllib.request.urlopen(urllib.request.Request(base + "/v1/chat/completions", body,
                               {"Content-Type": "application/json"})))["usage"]
        t = threading.Thread(target=req); t.start()
        while t.is_alive():
            m = urllib.request.urlopen(base + "/metrics").read().decode()
            used = float(re.search(r"^mpkv:kv_bytes_used\{[^}]*\} (\S+)", m, re.M).group(1))
            cold = float(re.search(r"^mpkv:prefix_cache_bytes\{[^}]*\} (\S+)", m, re.M).group(1)) if "prefix_cache_bytes" in m else 0
            running = float(re.search(r"^vllm:num_requests_running\{[^}]*\} (\S+)", m, re.M).group(1))
            if running == n and used - cold > peak[0]: peak = [used - cold, running]
            time.sleep(0.05)
        print(extra, "n=%d" % n, "peak KV bytes held by running requests %.2f MiB" % (peak[0] / 1048576), "usage", out[n], flush=True)
    p.terminate(); p.wait()
run([])
run(["--no-prefix-cache"])
