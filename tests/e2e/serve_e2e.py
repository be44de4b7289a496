"""What the serving end-to-end tests share (test_serve_openai.py, test_serve_tools.py,
test_serve_structured.py; CTest runs each as a script): failing with a message, a server process on
127.0.0.1 with bounded waits (its stderr in a log file shown on failure), plain HTTP requests,
/metrics, a 400 that names its field, and the main() tail (the model or a skip, the test packages,
the server's log when a test fails, PASS).
"""
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

API_KEY = "sk-e2e-test"
DEFAULT_MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
SKIP = 77  # CTest's SKIP_RETURN_CODE for these tests


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def http_request(base, method, path, body=None, auth=True, timeout=60):
    """(status, body text) of one plain HTTP request; status 0 when the connection failed."""
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = "Bearer " + API_KEY
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, socket.timeout):
        return 0, ""


class ServerProcess:
    """A server whose first stdout line is 'listening on http://127.0.0.1:PORT' (mpkv serve,
    mpkv_script_serve). health_timeout: also wait (bounded) until GET /health answers 200."""

    def __init__(self, cmd, listen_timeout=60, health_timeout=None, preexec_fn=None):
        self.log_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "mpkv_e2e_%s_%d.log" % (
            os.path.basename(cmd[0]), os.getpid()))
        self.log = open(self.log_path, "w")
        print("starting: " + " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True, preexec_fn=preexec_fn)
        box = {}
        t = threading.Thread(target=lambda: box.update(line=self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(listen_timeout)
        line = box.get("line", "")
        m = re.match(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.kill()
            fail("no 'listening on' line from %s within %ds (got %r); log:\n%s" % (cmd[0], listen_timeout, line, self.read_log()))
        self.port = int(m.group(1))
        self.base = "http://127.0.0.1:%d" % self.port
        if health_timeout:
            self._wait_healthy(health_timeout)

    def _wait_healthy(self, timeout):
        end = time.time() + timeout
        while time.time() < end:
            if http_request(self.base, "GET", "/health")[0] == 200:
                return
            check(self.proc.poll() is None, "server exited while loading; log:\n" + self.read_log())
            time.sleep(0.1)
        fail("/health not 200 within %ds" % timeout)

    def read_log(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def stop(self):
        """SIGTERM, then SIGKILL after a deadline."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def mpkv_serve(mpkv, model, args, api_key=API_KEY, preexec_fn=None):
    """`mpkv serve` on an ephemeral loopback port, loaded (GET /health 200); preexec_fn runs in the
    child before exec (e.g. to start it with a signal ignored, as a shell's background job is)."""
    cmd = [mpkv, "serve", "-m", model, "--port", "0", "-t", "2"] + (["--api-key", api_key] if api_key else []) + list(args)
    return ServerProcess(cmd, listen_timeout=60, health_timeout=120, preexec_fn=preexec_fn)


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r"\{[^}]*\} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def metric_labelled(text, name, labels):
    """The sample of `name` whose labels start with `labels` (e.g. 'bits="16"'), or None."""
    m = re.search(r"^" + re.escape(name) + r"\{" + re.escape(labels) + r"[,}][^ ]* (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def metrics(base):
    status, text = http_request(base, "GET", "/metrics")
    check(status == 200, "/metrics answered %d" % status)
    return text


def expect_400(openai, fn, param, what=None, exact=True):
    """fn() must raise the client's BadRequestError naming param: the error's `param` equal to it
    (exact), or param anywhere in the error (for fields named with a suffix, e.g. logit_bias.<id>)."""
    what = what or param
    try:
        fn()
    except openai.BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        got = body.get("param") if "param" in body else (body.get("error") or {}).get("param")
        if exact:
            check(got == param, "%s: 400 with param %r, expected %r (%s)" % (what, got, param, e))
        else:
            check(e.status_code == 400 and param in str(e), "%s: %s" % (what, e))
        return
    fail("%s: no 400" % what)


def model_path(source):
    """The model the tests serve: $MPKV_MODEL, else SmolLM2 under SOURCE/models."""
    return os.environ.get("MPKV_MODEL") or os.path.join(source, "models", DEFAULT_MODEL)


def need_model(source):
    """The model's path, or None after printing the skip (the caller returns SKIP)."""
    model = model_path(source)
    if not os.path.exists(model):
        print("SKIP: model %s absent (scripts/get_model.sh fetches it)" % model)
        return None
    return model


def need_packages(*names):
    """Imports the test's PyPI packages, or fails naming them (scripts/test.sh installs them)."""
    import importlib
    try:
        return [importlib.import_module(n) for n in names]
    except ImportError as e:
        fail("%s: python3 -m pip install %s (scripts/test.sh does)" % (e, " ".join(names)))


def run_against(srv, run):
    """run(); on a failure the server's log tail is printed; the server is killed either way."""
    try:
        run()
    except SystemExit:
        print("server log (tail):\n" + srv.read_log(), flush=True)
        raise
    finally:
        srv.kill()
    print("PASS", flush=True)
    return 0
