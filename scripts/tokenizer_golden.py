#!/usr/bin/env python3
"""Writes llama.cpp's token ids for a model's tokenizer as a golden JSON file for
tests/golden/test_tokenizer_golden.cpp (run through scripts/make_tokenizer_golden.sh).

The file holds:
  - wikitext: for the whole WikiText-2 test file, per (add_bos, parse_special) variant, the number of
    ids, the FNV-1a 64 hash of all ids (little-endian int32 bytes) and the hash of every block of
    `block` ids, so a mismatch can be located to its first differing block;
  - cases: awkward strings (hex-encoded bytes, since some are not UTF-8) with their full id lists;
  - random: concatenations of awkward pieces drawn with a fixed seed, stored as cases too.
Ids come from llama_cpp.Llama(model, vocab_only=True).tokenize(bytes, add_bos, special).
"""
import argparse
import hashlib
import json
import random

import llama_cpp

BLOCK = 256

# (name, text bytes): every kind of input the tokenizer treats specially.
AWKWARD = [
    ("plain", b"The capital of France is Paris."),
    ("leading_space", b" leading space"),
    ("leading_spaces", b"   three leading spaces"),
    ("trailing_spaces", b"trailing   "),
    ("only_space", b" "),
    ("only_spaces", b"     "),
    ("whitespace_runs", b"a  b   c    d\t\te \t f"),
    ("long_space_run", b"x" + b" " * 40 + b"y"),
    ("newlines", b"line one\nline two\n\nline four\n\n\n\nend\n"),
    ("crlf", b"windows\r\nline\r\n"),
    ("tabs", b"\tindented\n\t\tmore\t"),
    ("digits", b"12345 3.14159 2024-01-01 1,000,000 0x1F 007"),
    ("emoji", "smile \U0001F642 family \U0001F469\u200D\U0001F469\u200D\U0001F467 flag \U0001F1EB\U0001F1F7".encode()),
    ("cjk", "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0 \ud55c\uad6d\uc5b4 \u4e2d\u6587".encode()),
    ("accents", "na\u00efve caf\u00e9 \u2014 \u201cquotes\u201d \uff46\uff55\uff4c\uff4c nbsp\u00a0here".encode()),
    ("combining", "e\u0301 a\u0308 \u0915\u094d\u0937".encode()),
    ("rare_chars", "\u2581 literal lower-one-eighth \u2585 \U0001D54F \U000E0041".encode()),
    ("invalid_utf8_lone", b"a\xffb\xfec"),
    ("invalid_utf8_truncated", b"abc \xe4\xb8"),
    ("invalid_utf8_continuation", b"x\x80\x81y \xbf"),
    ("invalid_utf8_lead_swallows", b"\xf0ab c"),
    ("invalid_utf8_overlong", b"\xc0\xaf and \xed\xa0\x80"),
    ("nul_and_controls", b"a\x00b\x01c\x7f"),
    ("byte_token_text", b"<0x41> <0x0A>"),
    ("special_bos_eos", b"<bos>text<eos>"),
    ("special_turns", b"<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n"),
    ("special_unk_mask", b"<unk> <mask> <pad>"),
    ("special_unused", b"<unused0><unused99> x"),
    ("eos_like_user_defined", b"a</s>b"),
    ("html_user_defined", b"<table><tr><td>cell</td></tr></table>"),
    ("special_then_space", b"<start_of_turn> spaced"),
    ("special_partial", b"<start_of_turn <end_of_turn"),
    ("wikitext_style", b" = Valkyria Chronicles III = \n \n Senj\xc5\x8d no Valkyria 3 : <unk> Chronicles @-@ ( Japanese"),
    ("code", b"def f(x):\n    return x ** 2  # square\n"),
    ("empty", b""),
]

# Pieces of the random strings (fixed seed, so the file is reproducible).
PIECES = [b"a", b"Zq", b" ", b"  ", b"\n", b"\n\n", b"\t", b"\r\n", b"7", b"2024", b"'s", b"-", b".",
          "h\u00e9".encode(), "\u4e16".encode(), "\U0001F642".encode(), "\u00a0".encode(), "\u2581".encode(),
          b"<start_of_turn>", b"<end_of_turn>", b"<bos>", b"</s>", b"<table>", b"\xff", b"\xe4\xb8", b"\x80",
          b"the", b" world", b"ing"]


def fnv1a_ids(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        for b in (i & 0xffffffff).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True)
    p.add_argument("--text", required=True, help="WikiText-2 test.txt")
    p.add_argument("--n-random", type=int, default=200)
    p.add_argument("-o", "--out", required=True)
    a = p.parse_args()

    llm = llama_cpp.Llama(model_path=a.model, vocab_only=True, verbose=False)

    def tok(data, add_bos, special):
        return llm.tokenize(data, add_bos=add_bos, special=special)

    with open(a.model, "rb") as f:
        model_sha = hashlib.sha256(f.read()).hexdigest()
    text = open(a.text, "rb").read()

    wikitext = []
    for add_bos, special in ((True, False), (False, True)):
        ids = tok(text, add_bos, special)
        wikitext.append({
            "add_bos": add_bos, "parse_special": special, "n_ids": len(ids), "fnv1a": "%016x" % fnv1a_ids(ids),
            "block_fnv1a": ["%016x" % fnv1a_ids(ids[i:i + BLOCK]) for i in range(0, len(ids), BLOCK)],
        })
        print("wikitext add_bos=%s parse_special=%s: %d ids" % (add_bos, special, len(ids)))

    cases = []
    for name, data in AWKWARD:
        for add_bos, special in ((False, True), (False, False), (True, False)):
            cases.append({"name": name, "text_hex": data.hex(), "add_bos": add_bos, "parse_special": special,
                          "ids": tok(data, add_bos, special)})
    rng = random.Random(1234)
    for k in range(a.n_random):
        data = b"".join(rng.choice(PIECES) for _ in range(rng.randint(1, 30)))
        special = k % 2 == 0
        cases.append({"name": "random_%d" % k, "text_hex": data.hex(), "add_bos": False, "parse_special": special,
                      "ids": tok(data, False, special)})

    out = {
        "source": "llama-cpp-python %s: Llama(model, vocab_only=True).tokenize(text, add_bos, special); "
                  "written by scripts/make_tokenizer_golden.sh" % llama_cpp.__version__,
        "model_sha256": model_sha,
        "text": "../shared/data/wikitext-2/test.txt",
        "text_sha256": hashlib.sha256(text).hexdigest(),
        "block": BLOCK,
        "wikitext": wikitext,
        "cases": cases,
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote %s: %d cases" % (a.out, len(cases)))


if __name__ == "__main__":
    main()
