#!/usr/bin/env python3
"""llama.cpp, through llama-cpp-python, as mpkv's peer: golden logits, perplexity and speed.

Each subcommand mirrors an mpkv command's protocol exactly, so the two can be run side by side:
  golden  top logits at every position of a fixed 128-token text, or of fixed token ids (no
          tokenizer involved), f16 KV cache -> JSON for tests/golden/test_golden_logits.cpp;
          --greedy-prompt adds llama.cpp's greedy continuation of a fixed prompt
  ppl     perplexity with llama.cpp's protocol, as `mpkv ppl` (windows of -c, second half scored)
  bench   prefill / decode tok/s with the same token ids as `mpkv bench`
  batch   aggregate decode tok/s of N sequences decoded together (llama_batch, one seq_id per
          sequence), as `mpkv bench --parallel N`
  quantize  llama.cpp's quantizer (llama_model_quantize, as llama-quantize) -> a Q4_K_M GGUF
  eval    perplexity, KL against llama.cpp's own f16 cache and top-1 agreement per KV type, on the
          same windows and scored positions as `mpkv eval` -> JSON rows for its table and plots

Install the peer with scripts/install_peer.sh (pip install llama-cpp-python, compiled from source).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np


def load(model, n_ctx, threads, logits_all, kv_type="f16", flash_attn=False):
    import llama_cpp

    types = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0,
             "q5_0": llama_cpp.GGML_TYPE_Q5_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0}
    return llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=min(n_ctx, 2048), n_ubatch=min(n_ctx, 512),
                           n_threads=threads, n_threads_batch=threads, logits_all=logits_all,
                           type_k=types[kv_type], type_v=types[kv_type], flash_attn=flash_attn,
                           verbose=False, seed=0)


def cmd_golden(a):
    import llama_cpp

    llm = load(a.model, max(512, a.n_tokens), a.threads, True)
    if a.text:
        text = open(a.text, encoding="utf-8").read()
        toks = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)[: a.n_tokens]
        if len(toks) < a.n_tokens:
            sys.exit(f"golden: text has only {len(toks)} tokens")
    else:
        toks = repeated_ids(a, llm.token_bos())
    llm.reset()
    llm.eval(toks)
    scores = np.array(llm.scores[: len(toks)], dtype=np.float64)
    rows = []
    for i in range(len(toks)):
        top = np.argsort(-scores[i])[: a.top_k]
        rows.append({"ids": [int(t) for t in top], "logits": [round(float(scores[i, t]), 5) for t in top]})
    greedy = greedy_continuation(llm, a.greedy_prompt, a.greedy_n) if a.greedy_prompt else None
    out = {
        "what": "llama.cpp logits (top-k per position) for golden_tokens, f16 KV cache, one batch",
        "command": " ".join(["bench/peer_llamacpp.py"] + sys.argv[1:]),
        "llama_cpp_python": llama_cpp.__version__,
        "model_file": os.path.basename(a.model),
        "model_sha256_prefix": sha256_prefix(a.model),
        "tokens": [int(t) for t in toks],
        "top_k": a.top_k,
        "positions": rows,
    }
    if greedy:
        out["greedy"] = greedy
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    os.replace(tmp, a.out)
    print(f"golden: {len(toks)} positions, top {a.top_k} -> {a.out}")


def greedy_continuation(llm, prompt, n):
    """llama.cpp's greedy continuation of `prompt` (tokenized with the model's own add_bos, special
    tokens parsed): the prompt's ids, the n generated ids and, at each step, the margin between the
    best and the second-best logit (how close a tie was)."""
    ids = llm.tokenize(prompt.encode("utf-8"), add_bos=bool(llm._model.add_bos_token()), special=True)
    llm.reset()
    llm.eval(ids)
    out, margins = [], []
    for _ in range(n):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        best2 = np.argsort(-row)[:2]
        out.append(int(best2[0]))
        margins.append(round(float(row[best2[0]] - row[best2[1]]), 5))
        llm.eval([out[-1]])
    return {"prompt": prompt, "prompt_ids": [int(t) for t in ids], "tokens": out, "margins": margins}


def repeated_ids(a, bos):
    """BOS, then a block of --period ids drawn uniformly from [--id-low, --id-high) (numpy seed
    --seed), repeated up to --n-tokens: the repeats make the model confident (it copies), so the
    top-1 comparison has many positions to check."""
    rng = np.random.RandomState(a.seed)
    block = [int(t) for t in rng.randint(a.id_low, a.id_high, size=a.period)]
    return [int(bos)] + [block[i % a.period] for i in range(a.n_tokens - 1)]


def sha256_prefix(path):
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def log_softmax_nll(logits, target):
    m = float(np.max(logits))
    return math.log(float(np.sum(np.exp(logits.astype(np.float64) - m)))) + m - float(logits[target])


def cmd_ppl(a):
    text = open(a.file, encoding="utf-8").read()
    llm = load(a.model, a.ctx, a.threads, True, a.kv_type, a.flash_attn)
    # As llama.cpp's perplexity tool and `mpkv ppl`: tokenize with the model's add_bos, and when it adds BOS,
    # BOS replaces the first token of every window (Gemma 3 adds BOS; SmolLM2 does not, so nothing changes).
    add_bos = bool(llm._model.add_bos_token())
    bos = llm.token_bos()
    toks = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=False)
    n_chunks = len(toks) // a.ctx
    if a.chunks > 0:
        n_chunks = min(n_chunks, a.chunks)
    first = a.ctx // 2
    nll = []
    t0 = time.time()
    for c in range(n_chunks):
        chunk = list(toks[c * a.ctx:(c + 1) * a.ctx])
        if add_bos and bos >= 0:
            chunk[0] = bos
        llm.reset()
        llm.eval(chunk)
        sc = np.array(llm.scores[: a.ctx], dtype=np.float64)
        for i in range(first, a.ctx - 1):
            nll.append(log_softmax_nll(sc[i], chunk[i + 1]))
        print(f"\rppl [{c + 1}/{n_chunks}] {math.exp(sum(nll) / len(nll)):.4f}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    nll = np.array(nll)
    mean = float(nll.mean())
    ppl = math.exp(mean)
    var = float((nll ** 2).mean() - mean * mean)
    err = ppl * math.sqrt(var / (len(nll) - 1)) if var > 0 else 0.0
    res = {"engine": "llama.cpp", "kv": a.kv_type, "n_ctx": a.ctx, "chunks": n_chunks, "tokens_in_file": len(toks),
           "scored": len(nll), "ppl": ppl, "ppl_stderr": err, "mean_nll": mean, "seconds": time.time() - t0}
    print(f"PPL = {ppl:.4f} +/- {err:.4f}  (llama.cpp kv {a.kv_type}, {n_chunks} windows x {a.ctx}, {len(nll)} scored)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


def bench_tokens(n, n_vocab):
    """The same xorshift64 sequence as `mpkv bench` (tools/cmd_bench.cpp)."""
    x = 0x9E3779B97F4A7C15
    mask = (1 << 64) - 1
    out = []
    for _ in range(n):
        x ^= (x << 13) & mask
        x ^= x >> 7
        x ^= (x << 17) & mask
        out.append(x % min(n_vocab, 32000))
    return out


def cmd_bench(a):
    import llama_cpp

    max_ctx = max([a.prompt] + [d + a.n_gen for d in a.depth])
    llm = load(a.model, max_ctx + 16, a.threads, False, a.kv_type, a.flash_attn)
    ids = bench_tokens(max_ctx, llm.n_vocab())
    print(f"llama.cpp bench (llama-cpp-python {llama_cpp.__version__}): {a.threads} threads, kv {a.kv_type}, "
          f"flash_attn {a.flash_attn}, median of {a.reps}")
    res = {"engine": "llama.cpp", "threads": a.threads, "kv": a.kv_type, "flash_attn": a.flash_attn}
    pf = []
    for _ in range(a.reps):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids[: a.prompt])
        pf.append(a.prompt / (time.perf_counter() - t0))
    pf.sort()
    print(f"prefill {a.prompt:5d} tokens      {pf[len(pf) // 2]:8.1f} tok/s")
    res["prefill"] = {"tokens": a.prompt, "tok_s": pf[len(pf) // 2]}
    res["decode"] = []
    for depth in a.depth:  # as `mpkv bench -d`: fill `depth` tokens, then time n_gen single-token steps
        dv, cpu = [], []  # tokens per wall second; per CPU-second of the process (as `mpkv bench`)
        for _ in range(a.reps):
            llm.reset()
            if depth:
                llm.eval(ids[:depth])
            t0, c0 = time.perf_counter(), time.process_time()
            for i in range(a.n_gen):
                llm.eval([ids[depth + i]])
            dv.append(a.n_gen / (time.perf_counter() - t0))
            cpu.append(a.n_gen / (time.process_time() - c0))
        med, cmed = sorted(dv)[len(dv) // 2], sorted(cpu)[len(cpu) // 2]
        print(f"decode {a.n_gen:4d} @ depth {depth:5d} {med:8.1f} tok/s ({cmed:.1f} tok per CPU-second)")
        res["decode"].append({"context": depth, "depth": depth, "tok_s": med, "tok_s_runs": dv,
                              "cpu_tok_s": cmed, "cpu_tok_s_runs": cpu})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


class LowLevel:
    """llama.cpp through llama-cpp-python's C API: one model, one context of n_seq sequences, each
    in its own KV stream (kv_unified off, as mpkv's sequences each have their own pages), and a
    llama_batch that holds up to n_batch tokens of up to n_seq sequence ids."""

    def __init__(self, model, n_seq, seq_ctx, threads, kv_type, flash_attn, n_batch):
        import ctypes
        import llama_cpp as L

        self.L = L
        L.llama_backend_init()
        self._quiet = L.llama_log_callback(lambda level, text, user: None)  # kept alive: llama.cpp holds the pointer
        L.llama_log_set(self._quiet, ctypes.c_void_p())
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(model.encode(), mp)
        if not self.model:
            sys.exit(f"batch: cannot load {model}")
        types = {"f16": L.GGML_TYPE_F16, "q8_0": L.GGML_TYPE_Q8_0, "q5_0": L.GGML_TYPE_Q5_0, "q4_0": L.GGML_TYPE_Q4_0}
        cp = L.llama_context_default_params()
        cp.n_seq_max = n_seq
        cp.kv_unified = False
        cp.n_ctx = n_seq * seq_ctx  # split evenly among the sequences' streams
        cp.n_batch = cp.n_ubatch = n_batch
        cp.n_threads = cp.n_threads_batch = threads
        cp.type_k = cp.type_v = types[kv_type]
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            sys.exit(f"batch: cannot make a context of {n_seq} x {seq_ctx} tokens")
        self.mem = L.llama_get_memory(self.ctx)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.n_batch = n_batch
        self.batch = L.llama_batch_init(n_batch, 0, n_seq)

    def decode(self, tokens):
        """tokens: [(id, pos, seq_id)], every one with logits, in one llama_decode."""
        b = self.batch
        b.n_tokens = len(tokens)
        for i, (t, p, s) in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, p, 1, True
            b.seq_id[i][0] = s
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            sys.exit(f"batch: llama_decode returned {rc}")

    def fill(self, seq, ids):
        """Prefills ids at positions 0.. into seq, in chunks of n_batch."""
        for p0 in range(0, len(ids), self.n_batch):
            self.decode([(t, p0 + i, seq) for i, t in enumerate(ids[p0:p0 + self.n_batch])])

    def close(self):
        self.L.llama_batch_free(self.batch)
        self.L.llama_free(self.ctx)
        self.L.llama_model_free(self.model)


def cmd_batch(a):
    """For each depth: sequence 0 is prefilled with the depth's tokens once and copied to the others
    (llama_memory_seq_cp; the copy crosses KV streams, so every sequence owns its cells); then for each
    width N, N sequences decode n_gen steps, one token each per llama_decode, and the steps' tokens
    are removed again (llama_memory_seq_rm) before the next repetition."""
    import llama_cpp

    max_w = max(a.widths)
    seq_ctx = max(a.depth) + a.n_gen + 16
    ll = LowLevel(a.model, max_w, seq_ctx, a.threads, a.kv_type, a.flash_attn, max(max_w, 512))
    ids = bench_tokens(seq_ctx, ll.n_vocab)
    print(f"llama.cpp batch (llama-cpp-python {llama_cpp.__version__}): {a.threads} threads, kv {a.kv_type}, "
          f"flash_attn {a.flash_attn}, {max_w} KV streams, median of {a.reps}")
    res = {"engine": "llama.cpp", "llama_cpp_python": llama_cpp.__version__, "threads": a.threads, "kv": a.kv_type,
           "flash_attn": a.flash_attn, "n_gen": a.n_gen, "decode": []}
    for depth in a.depth:
        ll.L.llama_memory_clear(ll.mem, True)
        t0 = time.perf_counter()
        ll.fill(0, ids[:depth])
        for s in range(1, max_w):
            ll.L.llama_memory_seq_cp(ll.mem, 0, s, -1, -1)
        print(f"filled {max_w} sequences to depth {depth} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        for w in a.widths:
            dv, cpu = [], []  # tokens per wall second; per CPU-second of the process (as `mpkv bench`)
            for _ in range(a.reps):
                t0, c0 = time.perf_counter(), time.process_time()
                for i in range(a.n_gen):
                    ll.decode([(ids[depth + i], depth + i, s) for s in range(w)])
                dv.append(a.n_gen * w / (time.perf_counter() - t0))
                cpu.append(a.n_gen * w / (time.process_time() - c0))
                for s in range(w):
                    ll.L.llama_memory_seq_rm(ll.mem, s, depth, -1)
            med, cmed = sorted(dv)[len(dv) // 2], sorted(cpu)[len(cpu) // 2]
            print(f"decode {a.n_gen:4d} @ depth {depth:5d} {med:8.1f} tok/s ({w} sequences; {cmed:.1f} tok per CPU-second)",
                  flush=True)
            res["decode"].append({"context": depth, "depth": depth, "sequences": w, "tok_s": med, "tok_s_runs": dv,
                                  "cpu_tok_s": cmed, "cpu_tok_s_runs": cpu})
    ll.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


def cmd_quantize(a):
    """llama.cpp's own quantizer (llama_model_quantize, the function llama-quantize calls) with its
    default parameters, requantizing allowed (the input may itself be quantized: it is dequantized
    to f32 first)."""
    import llama_cpp as L

    ftypes = {"Q4_K_M": L.LLAMA_FTYPE_MOSTLY_Q4_K_M, "Q8_0": L.LLAMA_FTYPE_MOSTLY_Q8_0}
    params = L.llama_model_quantize_default_params()
    params.ftype = ftypes[a.type]
    params.allow_requantize = True
    params.nthread = a.threads
    tmp = a.out + ".tmp"
    rc = L.llama_model_quantize(a.model.encode(), tmp.encode(), params)
    if rc != 0:
        sys.exit(f"quantize: llama_model_quantize returned {rc}")
    os.replace(tmp, a.out)
    print(f"quantize: {a.model} -> {a.out} ({a.type})")


# Stored bits per element of each llama.cpp KV type: 32-element blocks with one fp16 scale.
KV_BITS = {"f16": 16.0, "q8_0": 8.5, "q5_0": 5.5, "q4_0": 4.5}
FLOOR = "f16-no-flash-attn"


def log_softmax_rows(scores):
    """scores: [n, n_vocab] float32 logits -> [n, n_vocab] float64 natural-log softmax."""
    x = scores.astype(np.float64)
    x -= x.max(axis=1, keepdims=True)
    x -= np.log(np.exp(x).sum(axis=1, keepdims=True))
    return x


def scored_log_softmax(llm, window, first, last, rows=256):
    """Decodes `window` from an empty cache in batches of llm.n_batch (as Llama.eval does) and yields
    (position, float64 log-softmax rows) for positions [first, last), `rows` at a time, plus the
    seconds spent in llama.cpp's decode. Llama.eval would keep n_ctx x n_vocab float32 logits in
    Llama.scores: 8.6 GB for Gemma 3's 262144-entry vocabulary at 8K, twice that with the float64
    copy; here at most one batch of logits (llama.cpp's own buffer) and `rows` float64 rows live."""
    n_vocab = llm.n_vocab()
    llm.reset()
    llm._ctx.kv_cache_seq_rm(-1, 0, -1)
    decode_s = 0.0
    for i in range(0, len(window), llm.n_batch):
        batch = window[i:i + llm.n_batch]
        llm._batch.set_batch(batch=batch, n_past=i, logits_all=True)
        t0 = time.time()
        llm._ctx.decode(llm._batch)
        decode_s += time.time() - t0
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(len(batch), n_vocab))
        lo, hi = max(i, first), min(i + len(batch), last)
        for r in range(lo, hi, rows):
            yield r, log_softmax_rows(logits[r - i:min(hi, r + rows) - i]), decode_s
            decode_s = 0.0
    if decode_s:
        yield last, np.zeros((0, n_vocab)), decode_s


def nearest_rank(values, q):
    """Nearest-rank percentile: the ceil(q/100 * n)-th smallest value."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    return float(v[max(1, math.ceil(q / 100.0 * len(v))) - 1])


def cmd_eval(a):
    import llama_cpp

    if a.kv_types[0] != "f16":
        sys.exit("eval: --kv-types must start with f16 (the reference for KL and top-1)")
    text = open(a.file, encoding="utf-8").read()
    # Same tokens as `mpkv eval` / `mpkv ppl`: the model's add_bos decides, and when it adds BOS the first
    # token of every window is replaced by BOS (src/eval/perplexity.cpp). SmolLM2 does not add BOS.
    tok_llm = load(a.model, 64, a.threads, False)
    add_bos = bool(tok_llm._model.add_bos_token())
    bos = tok_llm.token_bos()
    toks = tok_llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=False)
    del tok_llm
    n_ctx = a.ctx
    if len(toks) < a.windows * n_ctx:
        sys.exit(f"eval: {len(toks)} tokens in {a.file}, fewer than {a.windows} windows of {n_ctx}")
    first, last = n_ctx // 2, n_ctx - 1  # scored positions i in [first, last): predict token i+1
    acc = {t: {"nll": [], "kl": [], "top1": [], "seconds": 0.0} for t in a.kv_types + [FLOOR]}
    for w in range(a.windows):
        window = list(toks[w * n_ctx:(w + 1) * n_ctx])
        if add_bos and bos >= 0:
            window[0] = bos
        targets = np.array(window[first + 1:last + 1])
        ref_ls = ref_top = None
        # With --flash-attn, one extra run of f16 without it: llama.cpp's own numerical noise floor for KL / top-1.
        for t, fa in [(t, a.flash_attn) for t in a.kv_types] + ([(FLOOR, False)] if a.flash_attn else []):
            llm = load(a.model, n_ctx, a.threads, True, "f16" if t == FLOOR else t, fa)
            is_ref = ref_ls is None  # f16: the reference, kept (float32) for this window's other types
            if is_ref:
                ref_ls = np.empty((last - first, llm.n_vocab()), dtype=np.float32)
                ref_top = np.empty(last - first, dtype=np.int64)
            nll, kl = np.empty(last - first), np.zeros(last - first)
            top, dt = np.empty(last - first, dtype=np.int64), 0.0
            for pos, ls, secs in scored_log_softmax(llm, window, first, last):
                dt += secs
                j = slice(pos - first, pos - first + len(ls))
                nll[j] = -ls[np.arange(len(ls)), targets[j]]
                top[j] = ls.argmax(axis=1)
                if is_ref:  # KL of the reference with itself stays 0
                    ref_ls[j], ref_top[j] = ls, top[j]
                    continue
                ref = ref_ls[j].astype(np.float64)
                kl[j] = (np.exp(ref) * (ref - ls)).sum(axis=1)
            del llm
            r = acc[t]
            r["nll"].extend(nll.tolist())
            r["kl"].extend(kl.tolist())
            r["top1"].extend((top == ref_top).tolist())
            r["seconds"] += dt
            print(f"eval window {w + 1}/{a.windows} kv {t}{'' if fa else ' (no flash attn)'}: {dt:.1f} s, ppl {math.exp(float(nll.mean())):.4f}, "
                  f"kl {float(kl.mean()):.3e}, top1 {float((top == ref_top).mean()):.4f}", file=sys.stderr, flush=True)
        del ref_ls
    def summary(t):
        r = acc[t]
        nll = np.array(r["nll"])
        mean = float(nll.mean())
        ppl = math.exp(mean)
        var = float((nll ** 2).mean() - mean * mean)
        err = ppl * math.sqrt(var / (len(nll) - 1)) if var > 0 else 0.0
        return {"kv_type": t, "bits": KV_BITS.get(t, 16.0), "ppl": ppl, "ppl_stderr": err, "mean_nll": mean,
                "kl_mean": float(np.mean(r["kl"])), "kl_p99": nearest_rank(r["kl"], 99),
                "top1": float(np.mean(r["top1"])), "seconds": r["seconds"]}

    rows = [summary(t) for t in a.kv_types]
    floor = summary(FLOOR) if a.flash_attn else None
    scored = len(acc[a.kv_types[0]]["nll"])
    out = {
        "what": "llama.cpp KV types on the same windows and scored positions as `mpkv eval`: PPL, KL(p_f16 || p_type) "
                "against llama.cpp's own f16 cache (natural log, float64), top-1 agreement with f16; seconds = "
                "llama.cpp evaluation time summed over windows",
        "command": " ".join(["bench/peer_llamacpp.py"] + sys.argv[1:]),
        "llama_cpp_python": llama_cpp.__version__,
        "model_file": os.path.basename(a.model),
        "file": a.file,
        "n_ctx": n_ctx,
        "windows": a.windows,
        "tokens_used": a.windows * n_ctx,
        "tokens_in_file": len(toks),
        "scored": scored,
        "threads": a.threads,
        "flash_attn": a.flash_attn,
        "protocol": "llama.cpp batch evaluation: each token's K/V are stored quantized before attention reads them "
                    "(per-token blocks of 32, no window), so it equals token-by-token decode up to numerics",
        "rows": rows,
        "numerics_floor": None if floor is None else dict(
            floor, what="f16 cache WITHOUT flash attention against the f16 reference (with it): differences "
                        "from llama.cpp's arithmetic alone, the floor below which a KV type's KL is noise"),
    }
    print(f"llama.cpp (llama-cpp-python {llama_cpp.__version__}), {a.windows} windows x {n_ctx} tokens, "
          f"{scored} scored, flash_attn {a.flash_attn}")
    print()
    print("| kv type | bits | PPL | +/- | KL mean | KL p99 | top-1 | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows + ([dict(floor, kv_type="f16, no flash attn (numerics floor)")] if floor else []):
        print(f"| {r['kv_type']} | {r['bits']:g} | {r['ppl']:.4f} | {r['ppl_stderr']:.4f} | {r['kl_mean']:.3e} | "
              f"{r['kl_p99']:.3e} | {r['top1']:.4f} | {r['seconds']:.1f} |")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=2)
        os.replace(tmp, a.json)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("golden")
    g.add_argument("-m", "--model", required=True)
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="tokenize this file with llama.cpp's tokenizer")
    src.add_argument("--repeated-ids", action="store_true", help="BOS + a repeated block of random ids")
    g.add_argument("--period", type=int, default=160)
    g.add_argument("--id-low", type=int, default=300)
    g.add_argument("--id-high", type=int, default=20000)
    g.add_argument("--seed", type=int, default=13)
    g.add_argument("--n-tokens", type=int, default=128)
    g.add_argument("--top-k", type=int, default=20)
    g.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    g.add_argument("--greedy-prompt", help="also store llama.cpp's greedy continuation of this text")
    g.add_argument("--greedy-n", type=int, default=32)
    g.add_argument("-o", "--out", required=True)
    g.set_defaults(fn=cmd_golden)
    qz = sub.add_parser("quantize")
    qz.add_argument("-m", "--model", required=True)
    qz.add_argument("--type", required=True, choices=["Q4_K_M", "Q8_0"])
    qz.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    qz.add_argument("-o", "--out", required=True)
    qz.set_defaults(fn=cmd_quantize)
    q = sub.add_parser("ppl")
    q.add_argument("-m", "--model", required=True)
    q.add_argument("-f", "--file", required=True)
    q.add_argument("-c", "--ctx", type=int, default=512)
    q.add_argument("--chunks", type=int, default=-1)
    q.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    q.add_argument("--kv-type", default="f16", choices=["f16", "q8_0", "q5_0", "q4_0"])
    q.add_argument("--flash-attn", action="store_true")
    q.add_argument("--json")
    q.set_defaults(fn=cmd_ppl)
    b = sub.add_parser("bench")
    b.add_argument("-m", "--model", required=True)
    b.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    b.add_argument("-p", "--prompt", type=int, default=512)
    b.add_argument("-n", "--n-gen", type=int, default=32)
    b.add_argument("-d", "--depth", type=lambda s: [int(x) for x in s.split(",")], default=[128, 4096])
    b.add_argument("-r", "--reps", type=int, default=3)
    b.add_argument("--kv-type", default="f16", choices=["f16", "q8_0", "q5_0", "q4_0"])
    b.add_argument("--flash-attn", action="store_true")
    b.add_argument("--json")
    b.set_defaults(fn=cmd_bench)
    bb = sub.add_parser("batch")
    bb.add_argument("-m", "--model", required=True)
    bb.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    bb.add_argument("-n", "--n-gen", type=int, default=16)
    bb.add_argument("-d", "--depth", type=lambda s: [int(x) for x in s.split(",")], default=[1024])
    bb.add_argument("--widths", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8, 16])
    bb.add_argument("-r", "--reps", type=int, default=3)
    bb.add_argument("--kv-type", default="f16", choices=["f16", "q8_0", "q5_0", "q4_0"])
    bb.add_argument("--flash-attn", action="store_true")
    bb.add_argument("--json")
    bb.set_defaults(fn=cmd_batch)
    e = sub.add_parser("eval")
    e.add_argument("-m", "--model", required=True)
    e.add_argument("-f", "--file", required=True)
    e.add_argument("-c", "--ctx", type=int, default=2048)
    e.add_argument("--windows", type=int, default=2)
    e.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    e.add_argument("--kv-types", nargs="+", default=["f16", "q8_0", "q5_0", "q4_0"], choices=list(KV_BITS))
    e.add_argument("--flash-attn", action="store_true")
    e.add_argument("--json")
    e.set_defaults(fn=cmd_eval)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
