#!/usr/bin/env python3
"""bench/multi_turn.py against a scripted fake OpenAI server on loopback (no model, a few seconds).

The fake server streams answers of numbered words (" w1", " w2", ...), reports prompt tokens
as characters / 4 and cached tokens as those of every message before the last user message once the
conversation's previous turn was served (the system prompt alone for a first turn after any other
request), and counts queries and hits in /metrics; it fails the first second-turn request it gets.
Checked from the server's own log, not from the client's figures: the turn order (round-robin
slots; a turn arrives only after its conversation's previous answer ended), every history (system,
then each user message and the answer streamed for it, verbatim), the fields sent (ignore_eos,
max_tokens, top_logprobs), the token hit rate and output token count, the /metrics deltas, the
failed conversation's later turns skipped, and the logprobs file that bench/served_quality.cpp reads.
Exit 77 (skipped) without httpx (scripts/test.sh installs openai, which brings it).
"""
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
try:
    import multi_turn
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

C, T, MAX_TOKENS = 3, 3, 4


class Fake:
    def __init__(self):
        self.lock = threading.Lock()
        self.log = []          # (arrival, finish, body, prompt_tokens, cached_tokens, answer, failed)
        self.answered = set()  # json of message lists already answered, as a prefix cache would hold them
        self.queries = self.hits = 0
        self.failed_once = False
        self.words = 0


def handler(fake):
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def send_json(self, obj, code=200):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                self.send_json({"data": [{"id": "fake"}]})
            elif self.path == "/metrics":
                text = f"vllm:prefix_cache_queries {fake.queries}\nvllm:prefix_cache_hits {fake.hits}\n"
                data = text.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self.send_json({}, 404)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/v1/completions":  # the warm-up: 4 characters per token
                self.send_json({"usage": {"prompt_tokens": len(body["prompt"]) // 4, "completion_tokens": 1}})
                return
            arrival = time.monotonic()
            msgs = body["messages"]
            prompt = sum(len(m["content"]) for m in msgs) // 4
            with fake.lock:
                if len(msgs) > 2:
                    cached = prompt - len(msgs[-1]["content"]) // 4 if json.dumps(msgs[:-2]) in fake.answered else 0
                else:
                    cached = len(msgs[0]["content"]) // 4 if fake.log else 0
                fail = len(msgs) == 4 and not fake.failed_once
                fake.failed_once |= fail
            if fail:
                self.send_json({"error": {"message": "scripted failure"}}, 500)
                with fake.lock:
                    fake.log.append((arrival, time.monotonic(), body, prompt, 0, "", True))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            pieces = []
            for i in range(body["max_tokens"]):
                with fake.lock:
                    fake.words += 1
                    piece = f" w{fake.words}"
                pieces.append(piece)
                entry = {"token": piece, "logprob": -0.5, "bytes": list(piece.encode()),
                         "top_logprobs": [{"token": piece, "logprob": -0.5, "bytes": list(piece.encode())},
                                          {"token": " x", "logprob": -1.5, "bytes": list(b" x")}]}
                chunk = {"choices": [{"delta": {"content": piece}, "logprobs": {"content": [entry]},
                                      "finish_reason": "length" if i == body["max_tokens"] - 1 else None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.02)  # answers (80 ms) outlast the gap between a conversation's slots (30 ms)
            usage = {"prompt_tokens": prompt, "completion_tokens": body["max_tokens"],
                     "prompt_tokens_details": {"cached_tokens": cached}}
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()
            with fake.lock:
                fake.queries += prompt
                fake.hits += cached
                fake.answered.add(json.dumps(msgs))
                fake.log.append((arrival, time.monotonic(), body, prompt, cached, "".join(pieces), False))
    return H


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}")
        sys.exit(1)


def test_slots():
    rr = multi_turn.turn_slots(C, T, "round-robin", 0)
    check(rr == [(c, t) for t in range(T) for c in range(C)], "round-robin slots are conversation order per round")
    sh = multi_turn.turn_slots(5, 4, "shuffled", 7)
    check(sh == multi_turn.turn_slots(5, 4, "shuffled", 7), "shuffled slots depend on the seed only")
    for t in range(4):
        check(sorted(sh[5 * t:5 * t + 5]) == [(c, t) for c in range(5)], "each round holds every conversation once")


def main():
    test_slots()
    fake = Fake()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler(fake))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    with tempfile.TemporaryDirectory() as d:
        out, lp = os.path.join(d, "r.json"), os.path.join(d, "lp.json")
        cmd = [sys.executable, os.path.join(ROOT, "bench", "multi_turn.py"), "--url", url, "--label", "fake",
               "--text", os.path.join(ROOT, "README.md"), "--conversations", str(C), "--turns", str(T),
               "--max-tokens", str(MAX_TOKENS), "--rate", "100", "--order", "round-robin", "--system-tokens", "80",
               "--user-tokens-min", "10", "--user-tokens-max", "20", "--top-logprobs", "2", "--logprobs-out", lp,
               "-o", out]
        subprocess.run(cmd, check=True, timeout=120)
        result, lps = json.load(open(out)), json.load(open(lp))
    srv.shutdown()
    log = fake.log
    check(len(log) == C * T - 1, f"{C * T - 1} chat requests reach the server (one skipped), got {len(log)}")
    by_first_user = {}
    for arrival, finish, body, *_ in log:
        check(body["max_tokens"] == MAX_TOKENS and body.get("ignore_eos") is True and body.get("stream") is True
              and body.get("top_logprobs") == 2 and body.get("temperature") == 0.0, "request fields")
        by_first_user.setdefault(body["messages"][1]["content"], []).append((arrival, finish, body))
    check(len(by_first_user) == C, "every conversation starts with its own user message")
    systems = {body["messages"][0]["content"] for _, _, body, *_ in log}
    check(len(systems) == 1 and all(body["messages"][0]["role"] == "system" for _, _, body, *_ in log),
          "one shared system prompt first in every request")
    answers = {json.dumps(e[2]["messages"]): e[5] for e in log}
    for turns in by_first_user.values():
        turns.sort(key=lambda x: len(x[2]["messages"]))
        for prev, cur in zip(turns, turns[1:]):
            pm, cm = prev[2]["messages"], cur[2]["messages"]
            check(cur[0] >= prev[1] - 1e-3, "a turn arrives after its conversation's previous answer ended")
            check(cm[:len(pm)] == pm and cm[len(pm)] == {"role": "assistant", "content": answers[json.dumps(pm)]}
                  and cm[-1]["role"] == "user" and len(cm) == len(pm) + 2,
                  "history = previous messages + the answer streamed for them + a new user message")
    s = result["summary"]
    ok = [e for e in log if not e[6]]
    check(s["completed"] == len(ok) and s["failed"] == 1 and s["skipped"] == 1,
          f"completed / failed / skipped: {s['completed']} / {s['failed']} / {s['skipped']}")
    prompt, cached = sum(e[3] for e in ok), sum(e[4] for e in ok)
    check(cached > 0 and abs(s["hit_rate"] - cached / prompt) < 1e-12, f"hit rate {s['hit_rate']} vs {cached}/{prompt}")
    check(s["output_tokens"] == MAX_TOKENS * len(ok), "output tokens")
    delta = result["metrics"]["delta"]
    check(delta.get("vllm:prefix_cache_queries") == prompt and delta.get("vllm:prefix_cache_hits") == cached,
          f"/metrics deltas {delta}")
    check(len(lps["records"]) == len(ok) and lps["workload"]["endpoint"] == "chat", "logprobs file: completed turns")
    for rec in lps["records"]:
        check(len(rec["logprobs"]) == MAX_TOKENS and rec["text"] == answers[json.dumps(rec["prompt"])]
              and "".join(bytes.fromhex(e[0]).decode() for e in rec["logprobs"]) == rec["text"]
              and [bytes.fromhex(t[0]).decode() for t in rec["logprobs"][0][2]][1] == " x",
              "logprobs records: messages, answer and per-token hex bytes with alternatives")
    check(all("prompt" not in r and "logprobs" not in r for r in result["records"]),
          "the main records carry no texts without --keep-text")
    print(f"ok: {len(log)} requests, hit rate {s['hit_rate']:.3f}")


if __name__ == "__main__":
    main()
