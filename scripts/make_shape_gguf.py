#!/usr/bin/env python3
"""Writes GGUF files with the metadata and tensor shapes of real models and random Q8_0 weights
from a fixed seed (docs/models.md, "Real shapes, random weights"). Run through
scripts/make_shape_gguf.sh, which pins the gguf and numpy packages: the same bytes on every run.

The hyperparameters are the models' Hugging Face config.json values (docs/models.md lists them with
their sources); the keys and their order are those llama.cpp's converter writes for the
architecture (conversion/base.py TextModel.set_gguf_parameters, conversion/llama.py, qwen.py in the
pinned llama.cpp tree), the tokenizer.* keys are copied from llama.cpp's own vocabulary file of the
family (models/ggml-vocab-*.gguf), and Llama 3.x's rope_freqs.weight is computed by the converter's
llama3 rule.

Weights. Every matrix is Q8_0 (blocks of 32 int8 values q with one fp16 scale d, weight = d * q):
the int8 values are a discretised normal (256 equal-probability quantiles of N(0, 1), scaled so
the outermost is +-127) drawn from uniformly random bytes, and d sets the standard deviation. The
file's weights are thus exactly these Q8_0 values (no rounding from a float draw). Norm weights,
biases and rope factors are F32. Each tensor has its own generator, seeded from the shape's seed
and the tensor's name (SHA-256), so a tensor does not depend on the ones before it.

Scales (why the logits look like a trained model's rather than a flat distribution): with plain
N(0, sigma) embeddings a random network's logits over a 128K vocabulary are close to normal, the
best token only ~0.2 standard deviations above the runner-up. Each embedding row here gets its own
scale r_v = exp(0.5 N(0, 1)) (a few rows are several times longer, as frequent tokens' rows are),
which puts the top token about 11 standard deviations above the mean and about one standard
deviation above the runner-up (measured over random directions before choosing 0.5), and the
output norm's gain sets the logits' standard deviation to LOGIT_STD. The embedding itself is small
next to what the layers add, so the prediction depends on the context through attention and the
FFNs, not mostly on the current token.
"""
import argparse
import hashlib
import math
import os
import statistics
import sys

import numpy as np
import gguf

# Hugging Face config.json of each model (docs/models.md cites the copies read).
SHAPES = {
    "llama-3.2-1b": dict(arch="llama", name="Llama-3.2-1B-Instruct (random weights)", vocab="llama-bpe",
                         n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, head_dim=64, config_head_dim=True,
                         n_ff=8192, n_vocab=128256, n_ctx=131072, rope_theta=500000.0, rms_eps=1e-5, tied=True,
                         llama3_rope=dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_context=8192)),
    "qwen2.5-1.5b": dict(arch="qwen2", name="Qwen2.5-1.5B-Instruct (random weights)", vocab="qwen2",
                         n_embd=1536, n_layer=28, n_head=12, n_head_kv=2, head_dim=128, config_head_dim=False,
                         n_ff=8960, n_vocab=151936, n_ctx=32768, rope_theta=1000000.0, rms_eps=1e-6, tied=True,
                         qkv_bias=True),
    "qwen3-1.7b": dict(arch="qwen3", name="Qwen3-1.7B (random weights)", vocab="qwen2",
                       n_embd=2048, n_layer=28, n_head=16, n_head_kv=8, head_dim=128, config_head_dim=True,
                       n_ff=6144, n_vocab=151936, n_ctx=40960, rope_theta=1000000.0, rms_eps=1e-6, tied=True,
                       qk_norm=True),
    "llama-3.1-8b": dict(arch="llama", name="Llama-3.1-8B-Instruct (random weights)", vocab="llama-bpe",
                         n_embd=4096, n_layer=32, n_head=32, n_head_kv=8, head_dim=128, config_head_dim=False,
                         n_ff=14336, n_vocab=128256, n_ctx=131072, rope_theta=500000.0, rms_eps=1e-5, tied=False,
                         llama3_rope=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_context=8192)),
}

SEED = 20261203
EMBD_STD = 0.02        # embedding entries before the per-row scale
ROW_SCALE_SIGMA = 0.5  # log-normal spread of the embedding rows' lengths
LOGIT_STD = 2.5        # standard deviation of the logits over the vocabulary
Q_GAIN = 1.5           # queries slightly longer than keys: attention scores with a std of about 1.5
BRANCH_GAIN = 0.5      # attention output and FFN down projections: each layer adds ~0.5 per entry
QKV_BIAS_STD = 0.3
NORM_JITTER = 0.1      # norm weights 1 + NORM_JITTER * N(0, 1)

QK = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_0][0]  # 32 weights per block


def int8_normal_table():
    """256 equal-probability quantiles of N(0, 1), scaled so the outermost is +-127; its std."""
    nd = statistics.NormalDist()
    z = np.array([nd.inv_cdf((i + 0.5) / 256) for i in range(256)])
    q = np.round(z / z[-1] * 127).astype(np.int8)
    return q, float(q.astype(np.float64).std())


TABLE, TABLE_STD = int8_normal_table()


def rng_for(seed, name):
    h = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(h[:16], "little")))


def q8_0_bytes(rng, rows, cols, row_std):
    """[rows, cols] Q8_0 weights with std row_std[r] in row r -> bytes [rows, cols / 32 * 34]."""
    nb = cols // QK
    q = TABLE[np.frombuffer(rng.bytes(rows * cols), dtype=np.uint8)].reshape(rows, nb, QK)
    d = (np.asarray(row_std, dtype=np.float64) / TABLE_STD).astype(np.float16)
    out = np.empty((rows, nb, 2 + QK), dtype=np.uint8)
    out[:, :, :2] = np.broadcast_to(d.reshape(rows, 1, 1).view(np.uint8).reshape(rows, 1, 2), (rows, nb, 2))
    out[:, :, 2:] = q.view(np.uint8)
    return out.reshape(rows, nb * (2 + QK))


def llama3_rope_factors(head_dim, base, factor, low_freq_factor, high_freq_factor, original_context):
    """The converter's llama3 rule (conversion/llama.py LlamaModel.generate_extra_tensors): per pair,
    1 for wavelengths under original_context / high_freq_factor, factor above original_context /
    low_freq_factor, and a smooth interpolation between."""
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wavelen = original_context / low_freq_factor
    high_wavelen = original_context / high_freq_factor
    out = []
    for f in freqs.astype(np.float64):
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


class Tensor:
    """One tensor of the file: its GGUF name, numpy shape (rows, cols: ggml ne reversed) and a
    function making its data (Q8_0 bytes or F32 values)."""

    def __init__(self, name, shape, q8, make):
        self.name, self.shape, self.q8, self.make = name, shape, q8, make

    def nbytes(self):
        if self.q8:
            return self.shape[0] * self.shape[1] // QK * (2 + QK)
        return 4 * int(np.prod(self.shape))


def tensors(s, seed):
    n, hd, ff, V = s["n_embd"], s["head_dim"], s["n_ff"], s["n_vocab"]
    nq, nkv = s["n_head"] * hd, s["n_head_kv"] * hd

    def matrix(name, rows, cols, std):
        return Tensor(name, (rows, cols), True, lambda: q8_0_bytes(rng_for(seed, name), rows, cols, np.full(rows, std)))

    def norm(name, size, gain=1.0):
        return Tensor(name, (size,), False,
                      lambda: (gain * (1 + NORM_JITTER * rng_for(seed, name).standard_normal(size))).astype(np.float32))

    def bias(name, size):
        return Tensor(name, (size,), False,
                      lambda: (QKV_BIAS_STD * rng_for(seed, name).standard_normal(size)).astype(np.float32))

    def embedding(name):
        def make():
            rng = rng_for(seed, name)
            r = np.exp(ROW_SCALE_SIGMA * rng.standard_normal(V))
            return q8_0_bytes(rng, V, n, EMBD_STD * r)
        return Tensor(name, (V, n), True, make)

    # logits = gain * <rmsnorm(h), e_v>: std over v = gain * sqrt(n) * EMBD_STD * rms(r), rms(r) = exp(sigma^2)
    out_gain = LOGIT_STD / (math.sqrt(n) * EMBD_STD * math.exp(ROW_SCALE_SIGMA ** 2))
    out = []
    if "llama3_rope" in s:
        rf = s["llama3_rope"]
        out.append(Tensor("rope_freqs.weight", (hd // 2,), False,
                          lambda: llama3_rope_factors(hd, s["rope_theta"], rf["factor"], rf["low_freq_factor"],
                                                      rf["high_freq_factor"], rf["original_context"])))
    out.append(embedding("token_embd.weight"))
    for i in range(s["n_layer"]):
        b = f"blk.{i}."
        out.append(norm(b + "attn_norm.weight", n))
        out.append(matrix(b + "attn_q.weight", nq, n, Q_GAIN / math.sqrt(n)))
        out.append(matrix(b + "attn_k.weight", nkv, n, 1 / math.sqrt(n)))
        out.append(matrix(b + "attn_v.weight", nkv, n, 1 / math.sqrt(n)))
        if s.get("qkv_bias"):
            out += [bias(b + "attn_q.bias", nq), bias(b + "attn_k.bias", nkv), bias(b + "attn_v.bias", nkv)]
        if s.get("qk_norm"):
            out += [norm(b + "attn_q_norm.weight", hd, Q_GAIN), norm(b + "attn_k_norm.weight", hd)]
        out.append(matrix(b + "attn_output.weight", n, nq, BRANCH_GAIN / math.sqrt(nq)))
        out.append(norm(b + "ffn_norm.weight", n))
        out.append(matrix(b + "ffn_gate.weight", ff, n, 1 / math.sqrt(n)))
        out.append(matrix(b + "ffn_up.weight", ff, n, 1 / math.sqrt(n)))
        out.append(matrix(b + "ffn_down.weight", n, ff, BRANCH_GAIN / math.sqrt(ff)))
    out.append(norm("output_norm.weight", n, out_gain))
    if not s["tied"]:
        out.append(embedding("output.weight"))
    return out


def add_metadata(w, s, vocab_path):
    """The keys llama.cpp's converter writes for this architecture, in its order."""
    w.add_type("model")
    w.add_name(s["name"])
    w.add_block_count(s["n_layer"])
    w.add_context_length(s["n_ctx"])
    w.add_embedding_length(s["n_embd"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_rope_freq_base(s["rope_theta"])
    w.add_layer_norm_rms_eps(s["rms_eps"])
    if s["config_head_dim"]:  # written only when config.json has head_dim
        w.add_key_length(s["head_dim"])
        w.add_value_length(s["head_dim"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    if s["arch"] == "llama":  # LlamaModel.set_gguf_parameters
        w.add_vocab_size(s["n_vocab"])
        w.add_rope_dimension_count(s["head_dim"])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    copy_tokenizer(w, vocab_path, s["n_vocab"])


def copy_tokenizer(w, vocab_path, n_vocab):
    r = gguf.GGUFReader(vocab_path)
    n_tokens = len(r.fields["tokenizer.ggml.tokens"].data)
    if n_tokens != n_vocab:
        sys.exit(f"make_shape_gguf: {vocab_path} has {n_tokens} tokens, the shape {n_vocab}")
    for key, field in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        main = field.types[0]
        if main == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, field.contents(), main, sub_type=field.types[1])
        else:
            w.add_key_value(key, field.contents(), main)


def write(shape, vocab_dir, path, seed):
    s = SHAPES[shape]
    ts = tensors(s, seed)
    tmp = path + ".tmp"
    w = gguf.GGUFWriter(tmp, s["arch"])
    add_metadata(w, s, os.path.join(vocab_dir, f"ggml-vocab-{s['vocab']}.gguf"))
    for t in ts:
        if t.q8:
            byte_shape = (t.shape[0], t.shape[1] // QK * (2 + QK))
            w.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), t.nbytes(), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor_info(t.name, t.shape, np.dtype(np.float32), t.nbytes())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in ts:
        data = t.make()
        assert data.nbytes == t.nbytes(), t.name
        w.write_tensor_data(data)
    w.close()
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shape", choices=sorted(SHAPES))
    p.add_argument("--vocab-dir", required=True, help="folder holding llama.cpp's ggml-vocab-*.gguf")
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--seed", type=int, default=SEED)
    a = p.parse_args()
    write(a.shape, a.vocab_dir, a.out, a.seed)


if __name__ == "__main__":
    main()
