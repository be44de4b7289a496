#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer directory (tokenizer.json + tokenizer_config.json) built from a
GGUF file's own vocabulary and merges, so that tools that count tokens with a HF tokenizer (aiperf)
work offline: the model hub is not reachable here, and aiperf's `builtin` tokenizer downloads its
tiktoken table on first use.

Only byte-level BPE vocabularies (tokenizer.ggml.model = gpt2, as SmolLM2, Qwen2/3, Llama 3) are
supported; the pre-tokenizer is plain byte-level, so counts can differ from the model's own split
by a token here and there on unusual text (enough for sizing prompts, not for exact ids).

  gguf_tokenizer.py MODEL.gguf OUT_DIR      (needs: pip install gguf tokenizers transformers)
"""
import sys


def field_strings(reader, name):
    f = reader.fields.get(name)
    if f is None:
        sys.exit(f"gguf_tokenizer: the GGUF has no {name}")
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def field_int(reader, name):
    f = reader.fields.get(name)
    return int(f.parts[f.data[0]][0]) if f is not None else None


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    import gguf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    reader = gguf.GGUFReader(sys.argv[1])
    kind = field_strings(reader, "tokenizer.ggml.model")
    if kind != ["gpt2"]:
        sys.exit(f"gguf_tokenizer: only byte-level BPE (gpt2) vocabularies are supported, not {kind}")
    tokens = field_strings(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field_strings(reader, "tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = {}
    for key, name in (("bos_token", "tokenizer.ggml.bos_token_id"), ("eos_token", "tokenizer.ggml.eos_token_id")):
        i = field_int(reader, name)
        if i is not None:
            special[key] = tokens[i]
    PreTrainedTokenizerFast(tokenizer_object=tok, **special).save_pretrained(sys.argv[2])
    print(f"gguf_tokenizer: {len(tokens)} tokens, {len(merges)} merges -> {sys.argv[2]}")


if __name__ == "__main__":
    main()
