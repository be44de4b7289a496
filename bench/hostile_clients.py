#!/usr/bin/env python3
"""Hostile and careless clients against `mpkv serve` on loopback; prints the figures of
docs/serving.md, "Limits and vanished clients" (no benchmark library, plain sockets):

- the time a good chat request takes alone, then while each attack runs: 300 connections sending
  headers slowly, 300 sending one byte of a declared 100 KB body, 1,000 idle connections;
- for 16 clients that vanish 0.5 s after their requests (1,000 tokens each, non-streaming, then
  streaming) all run: seconds from their close until the server holds no KV bytes and runs nothing
  (polling /metrics every 20 ms; tests/unit/test_server_hostile.cpp checks a good request meanwhile);
- malformed requests (deep JSON nesting, invalid UTF-8, huge numbers and strings, broken HTTP):
  the statuses they get (any 5xx is a failure).

Usage: bench/hostile_clients.py --mpkv build/mpkv [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import argparse
import json
import os
import re
import resource
import socket
import statistics
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_servers  # noqa: E402

GOOD = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8, "temperature": 0}
LONG = {"messages": [{"role": "user", "content": "Count to a thousand."}], "max_tokens": 1000, "ignore_eos": True}


def request_bytes(path, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    return s


def read_response(s, timeout):
    """Status and body of one HTTP response (Content-Length or until close), or (0, '') on timeout."""
    s.settimeout(timeout)
    got = b""
    try:
        while True:
            head, sep, rest = got.partition(b"\r\n\r\n")
            if sep:
                m = re.search(rb"Content-Length: (\d+)", head, re.I)
                if m and len(rest) >= int(m.group(1)):
                    break
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError:
        return 0, ""
    m = re.match(rb"HTTP/1\.1 (\d{3})", got)
    return (int(m.group(1)) if m else 0), got.partition(b"\r\n\r\n")[2].decode(errors="replace")


def good_request_seconds(port, timeout=60.0):
    """Seconds a good chat request takes to be answered (checked: 200 and a message), or None."""
    t0 = time.monotonic()
    with connect(port) as s:
        s.sendall(request_bytes("/v1/chat/completions", GOOD))
        status, body = read_response(s, timeout)
    if status != 200 or "choices" not in body:
        return None
    return time.monotonic() - t0


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    val = lambda name: float(re.search(rf"^{re.escape(name)}{{[^}}]*}} (\S+)", text, re.M).group(1))
    return val("mpkv:kv_bytes_used"), val("vllm:num_requests_running")


def open_attackers(port, n, payload):
    socks = []
    for _ in range(n):
        s = connect(port)
        if payload:
            s.sendall(payload)
        socks.append(s)
    return socks


def median_of(runs):
    """Median of the runs' figures (None when any failed), and the figures."""
    ok = sorted(r for r in runs if r is not None)
    return (statistics.median(ok) if len(ok) == len(runs) else None), runs


def under_attack(port, label, n, payload, reps):
    socks = open_attackers(port, n, payload)
    time.sleep(0.2)
    secs = median_of([good_request_seconds(port) for _ in range(reps)])
    for s in socks:
        s.close()
    return label, secs


def vanishing(url, port, stream, n=16, stay=0.5):
    """n clients send LONG requests, wait until all run (their KV bytes held), stay `stay` s more
    and close; (KV bytes, running) at the close and the seconds from the close until no KV bytes are
    held and nothing runs (None: not within 300 s)."""
    body = dict(LONG, stream=stream)
    socks = open_attackers(port, n, request_bytes("/v1/chat/completions", body))
    t_sent = time.monotonic()
    while metrics(url)[1] < n and time.monotonic() - t_sent < 120:
        time.sleep(0.02)
    time.sleep(stay)
    before = metrics(url)
    for s in socks:
        s.close()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 300:
        kv, running = metrics(url)
        if kv == 0 and running == 0:
            return before, time.monotonic() - t0
        time.sleep(0.02)
    return before, None


MALFORMED = {
    "deep JSON arrays (200k)": request_bytes("/v1/chat/completions", b"[" * 200000),
    "deep JSON objects (50k)": request_bytes("/v1/chat/completions", b'{"a":' * 50000),
    "invalid UTF-8": request_bytes("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}'),
    "max_tokens 1e999999": request_bytes("/v1/completions", b'{"prompt": "hi", "max_tokens": 1e999999}'),
    "max_tokens 30 digits": request_bytes("/v1/completions", b'{"prompt": "hi", "max_tokens": 123456789012345678901234567890}'),
    "900 KB prompt string": request_bytes("/v1/completions", b'{"prompt": "' + b"x " * 450000 + b'", "max_tokens": 1}'),
    "2 MiB body": request_bytes("/v1/completions", b" " * (2 << 20)),
    "garbage request line": b"GARBAGE\r\n\r\n",
    "bad Content-Length": b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    "40 KB header": b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n",
}


def malformed(port):
    out = []
    for label, payload in MALFORMED.items():
        with connect(port) as s:
            try:
                s.sendall(payload)
            except OSError:
                pass
            status, _ = read_response(s, 30)
        out.append((label, status))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mpkv", required=True)
    p.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3, help="figures are medians of this many runs")
    p.add_argument("--extra", default="", help="more `mpkv serve` options, space-separated")
    a = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))
    log = os.path.join(tempfile.mkdtemp(prefix="hostile_"), "serve.log")
    argv = [a.mpkv, "serve", "-m", a.model, "--port", "0", "-t", str(a.threads), "-c", "2048", "--max-seqs", "16", *a.extra.split()]
    with serve_servers.Server(argv, log) as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        fmt = lambda s: "timed out / failed" if s is None else f"{s:.3f} s"
        fmt_runs = lambda m: f"{fmt(m[0])} ({', '.join('-' if r is None else f'{r:.2f}' for r in m[1])})"
        good_request_seconds(port)  # warm-up
        rows = [("none (alone)", median_of([good_request_seconds(port) for _ in range(a.reps)]))]
        rows.append(under_attack(port, "300 connections, headers sent slowly",
                                 300, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", a.reps))
        rows.append(under_attack(port, "300 connections, 1 byte of a 100 KB body", 300,
                                 b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{", a.reps))
        rows.append(under_attack(port, "1,000 idle connections", 1000, b"", a.reps))
        print(f"medians of {a.reps} runs (the runs in brackets)\n")
        print("| attack | good request (chat, 8 tokens) answered in |\n|---|---|")
        for label, secs in rows:
            print(f"| {label} | {fmt_runs(secs)} |")
        print("\n| 16 clients vanish 0.5 s after all run (1,000 tokens each) | KV bytes, running at the close | "
              "seconds until KV bytes = 0 and nothing runs |\n|---|---|---|")
        for stream in (False, True):
            runs = [vanishing(srv.url, port, stream) for _ in range(a.reps)]
            kv, running = runs[0][0]
            print(f"| {'streaming' if stream else 'non-streaming'} | {kv / 2**20:.1f} MiB, {running:.0f} | "
                  f"{fmt_runs(median_of([r[1] for r in runs]))} |")
        print("\n| malformed request | status |\n|---|---|")
        bad = 0
        for label, status in malformed(port):
            print(f"| {label} | {status} |")
            bad += status >= 500 or status == 0
        print(f"\ngood request after everything: {fmt(good_request_seconds(port))}; malformed answered 5xx or not at all: {bad}")
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
