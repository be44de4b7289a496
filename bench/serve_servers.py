"""Starting and stopping the servers the serving benchmark drives, on loopback only.

mpkv serve is started with --port 0 and announces `listening on http://127.0.0.1:PORT` on stdout
or stderr; llama_cpp.server (uvicorn) gets a free port picked here. Both are waited for with a
bounded loop (the process must stay alive and answer GET /v1/models, or the router's ready path), and stopped with SIGINT, then
SIGKILL after a deadline. Logs go to files next to the results.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


class ServerError(RuntimeError):
    pass


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_ok(url, timeout=2.0, api_key=None):
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


class Server:
    """A child process serving the OpenAI API on 127.0.0.1; use as a context manager."""

    def __init__(self, argv, log_path, url=None, env=None, ready_timeout=300.0, api_key=None, ready_path="/v1/models"):
        self.argv, self.log_path, self.url, self.ready_path = argv, log_path, url, ready_path
        self.env, self.ready_timeout, self.api_key = env, ready_timeout, api_key
        self.proc = None

    def __enter__(self):
        self.log = open(self.log_path, "w")
        self.log.write("$ " + " ".join(self.argv) + "\n")
        self.log.flush()
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def _announced_url(self):
        with open(self.log_path, errors="replace") as f:
            m = LISTENING.search(f.read())
        return m.group(1) if m else None

    def _wait_ready(self):
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"server exited with {self.proc.returncode} before it was ready; "
                                  f"see {self.log_path}:\n{tail(self.log_path)}")
            if self.url is None:
                self.url = self._announced_url()
            if self.url and http_ok(self.url + self.ready_path, api_key=self.api_key):
                return
            time.sleep(0.5)
        raise ServerError(f"server not ready after {self.ready_timeout:.0f} s; see {self.log_path}")

    def stop(self, grace=30.0):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            print(f"serve_servers: server did not stop within {grace:.0f} s of SIGINT; killed", file=sys.stderr)
        self.log.write(f"\n[exit status {self.proc.returncode}]\n")
        self.log.close()


def tail(path, n=15):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])


def mpkv_server(mpkv, model, kv_args, threads, ctx, max_seqs, max_queue, log_path, extra=()):
    """mpkv serve on an ephemeral loopback port. --http-threads (completions handled at once; a
    non-streaming one holds its thread while it runs) leaves room beside max_seqs requests."""
    argv = [mpkv, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "-t", str(threads), "-c", str(ctx),
            "--max-seqs", str(max_seqs), "--max-queue", str(max_queue), "--http-threads", str(max_seqs + 16),
            *kv_args, *extra]
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
    return Server(argv, log_path, env=env)


# llama.cpp KV element types as llama-cpp-python numbers them (ggml_type), with bytes per element
# (q8_0: 34-byte blocks of 32, q4_0: 18-byte blocks of 32).
LLAMA_KV_TYPES = {"f16": (1, 2.0), "q8_0": (8, 34 / 32), "q4_0": (2, 18 / 32)}


def llama_kv_bytes_per_token(model):
    """KV bytes per token position at f16 elements: layers x (K + V) x KV heads x head dim, from GGUF."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    md = llm.metadata
    arch = md["general.architecture"]
    layers = int(md[f"{arch}.block_count"])
    heads = int(md[f"{arch}.attention.head_count"])
    kv_heads = int(md.get(f"{arch}.attention.head_count_kv", heads))
    head_dim = int(md.get(f"{arch}.attention.key_length", int(md[f"{arch}.embedding_length"]) // heads))
    return layers * 2 * kv_heads * head_dim


def llamacpp_server(model, kv_type, budget_bytes, threads, log_path, python=sys.executable):
    """llama_cpp.server with a KV cache of `kv_type` whose context fills budget_bytes (flash attention
    on: llama.cpp needs it for a quantized V cache). llama-cpp-python runs one sequence and one
    request at a time (no n_parallel); interrupt_requests is off so that a new request waits for the
    running one instead of cutting its stream short (the default), and logits_all is off so prefill
    computes only the last position's logits, as mpkv does. Returns (Server, n_ctx, KV bytes/token)."""
    type_id, bytes_per_elem = LLAMA_KV_TYPES[kv_type]
    per_token = llama_kv_bytes_per_token(model) * bytes_per_elem
    n_ctx = int(budget_bytes // per_token) // 256 * 256
    port = free_port()
    argv = [python, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch", str(threads),
            "--type_k", str(type_id), "--type_v", str(type_id), "--flash_attn", "true",
            "--n_batch", "512", "--logits_all", "false", "--interrupt_requests", "false", "--verbose", "false"]
    return Server(argv, log_path, url=f"http://127.0.0.1:{port}"), n_ctx, per_token


def gguf_kv_elements_per_token(mpkv, model):
    """K + V elements per token position over all layers (layers x 2 x KV heads x head dim), read from
    `mpkv info` (no Python GGUF reader needed)."""
    out = subprocess.run([mpkv, "info", "-m", model], capture_output=True, text=True, check=True).stdout
    layers = re.search(r"^layers\s+(\d+)", out, re.M)
    heads = re.search(r"KV heads (\d+), head_dim (\d+)", out)
    if not layers or not heads:
        raise ServerError(f"cannot read layers / KV heads from mpkv info:\n{out}")
    return int(layers.group(1)) * 2 * int(heads.group(1)) * int(heads.group(2))


def llama_server(binary, model, mpkv, kv_type, budget_bytes, slot_ctx, threads, log_path):
    """llama.cpp's llama-server with continuous batching and flash attention, its KV cache of
    `kv_type` sized to budget_bytes: as many slots of slot_ctx positions as fit (-np), -c = slots x
    slot_ctx (llama-server splits -c evenly over its slots). Default sampling; the client sends the
    same sampling fields to every server. Returns (Server, facts)."""
    _, bytes_per_elem = LLAMA_KV_TYPES[kv_type]
    per_token = gguf_kv_elements_per_token(mpkv, model) * bytes_per_elem
    slots = int(budget_bytes // (per_token * slot_ctx))
    if slots < 1:
        raise ServerError(f"a KV budget of {budget_bytes / 2**20:.1f} MiB holds no {kv_type} slot of {slot_ctx} tokens")
    facts = {"n_parallel": slots, "slot_ctx": slot_ctx, "n_ctx": slots * slot_ctx, "kv_bytes_per_token": per_token,
             "kv_bytes": slots * slot_ctx * per_token}
    return llama_server_process(binary, model, kv_type, slots * slot_ctx, slots, threads, log_path), facts


def llama_server_process(binary, model, kv_type, n_ctx, slots, threads, log_path, extra=()):
    """llama-server on a free loopback port: -c n_ctx over -np slots, flash attention, /metrics."""
    port = free_port()
    argv = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-t", str(threads), "-tb", str(threads),
            "-c", str(n_ctx), "-np", str(slots), "-ctk", kv_type, "-ctv", kv_type, "-fa", "on",
            "-b", "512", "-ub", "512", "--no-webui", "--metrics", *extra]
    return Server(argv, log_path, url=f"http://127.0.0.1:{port}", ready_path="/health")


def llama_server_unified(binary, model, mpkv, budget_bytes, slots, threads, log_path, extra=()):
    """llama-server for the prefix-cache benchmark (docs/results/prefix_cache.md): one unified f16 KV
    cache (--kv-unified) of budget_bytes shared by `slots` slots, each of which keeps its last prompt
    for reuse (cache_prompt). n_ctx = budget / (layers x 2 x KV heads x head_dim x 2 bytes), rounded
    down to a multiple of 256 (llama.cpp pads n_ctx up to one). --cache-ram 0: no host-RAM prompt
    cache beside it (that would be memory outside the budget). Returns (Server, facts)."""
    per_token = gguf_kv_elements_per_token(mpkv, model) * LLAMA_KV_TYPES["f16"][1]
    n_ctx = int(budget_bytes // per_token) // 256 * 256
    if n_ctx < 256:
        raise ServerError(f"a KV budget of {budget_bytes / 2**20:.1f} MiB holds fewer than 256 f16 positions")
    srv = llama_server_process(binary, model, "f16", n_ctx, slots, threads, log_path,
                               extra=("--kv-unified", "--cache-ram", "0", *extra))
    facts = {"n_parallel": slots, "n_ctx": n_ctx, "kv_unified": True, "kv_bytes_per_token": per_token,
             "kv_bytes": n_ctx * per_token}
    return srv, facts


def smg_router(smg, worker_urls, policy, log_path, health_interval_s=5):
    """The SGLang Model Gateway (`smg launch`, PyPI package smg) in front of HTTP workers: routing
    policy `policy`, /health of every worker polled every health_interval_s seconds, no tokenizer
    (plain load balancing of OpenAI requests; cache_aware then matches on request text)."""
    port, prom = free_port(), free_port()
    argv = [smg, "launch", "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *worker_urls,
            "--policy", policy, "--health-check-endpoint", "/health",
            "--health-check-interval-secs", str(health_interval_s), "--disable-tokenizer-autoload",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom)]
    return Server(argv, log_path, url=f"http://127.0.0.1:{port}", ready_path="/v1/models")
