#!/usr/bin/env python3
"""scripts/make_tasks.py: deterministic (two runs write the same bytes, and those bytes hash to
the values pinned below, so a change to the generators shows up as a failing test that must be
re-pinned on purpose), and right: every passkey / kv answer is in its prompt at its depth, and
every arithmetic answer equals the problem worked out here independently of the generator.
Exit 77 (skipped) when ../shared/data/wikitext-2/test.txt is absent."""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIKI = os.path.join(ROOT, "..", "shared", "data", "wikitext-2", "test.txt")
ARGS = ["--items", "22", "--lengths", "512,1024"]
# sha256 of each file made by ARGS (pinned from a run of the generator; see the docstring).
PINNED = {
    "arith.jsonl": "b2fa60ba53562e6d903be14855d8221e56c48128ba2c93aba68d7e7010438857",
    "kv_1024.jsonl": "c3af100dca9f1df227ec8252734ae288646758ac4ba729fd8ee8b77047441b01",
    "kv_512.jsonl": "8c5b6b645cdbb686654dc5f3b26efc600bc09a6052806214595879305c9d3182",
    "passkey_1024.jsonl": "34efd8ed5edeff22c2bac11197534d84ac9196e27ce2c8da0fbc33d95b348563",
    "passkey_512.jsonl": "f0e85ec5f45496d025c5823667ce4ac749f787378cbec679a0b93852e5fc8728",
}


def make(out):
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_tasks.py"), "--out", out] + ARGS,
                   check=True, stdout=subprocess.DEVNULL)
    return {f: hashlib.sha256(open(os.path.join(out, f), "rb").read()).hexdigest() for f in sorted(os.listdir(out))}


def solve(question):
    """The arithmetic answer from the question text alone."""
    m = re.fullmatch(r"What is ([0-9 +-]+)\?", question)
    if m:
        toks = m.group(1).split()
        total = int(toks[0])
        for op, v in zip(toks[1::2], toks[2::2]):
            total = total + int(v) if op == "+" else total - int(v)
        return total
    m = re.fullmatch(r"(\w+) has (\d+) (\w+)\. \1 gets (\d+) more \3 and then gives away (\d+)\. .*", question)
    if m:
        return int(m.group(2)) + int(m.group(4)) - int(m.group(5))
    m = re.fullmatch(r"A bag holds (\d+) (\w+)\. (\w+) buys (\d+) bags and finds (\d+) more \2\. .*", question)
    assert m, question
    return int(m.group(1)) * int(m.group(4)) + int(m.group(5))


def check_items(out):
    for name in os.listdir(out):
        items = [json.loads(l) for l in open(os.path.join(out, name))]
        assert len(items) == 22, name
        assert len({it["id"] for it in items}) == 22, name
        for it in items:
            p, a = it["prompt"], it["answer"]
            if it["task"] == "passkey":
                needle = f"The pass key is {a}. Remember it. {a} is the pass key."
                assert p.count(needle) == 1 and p.endswith("The pass key is"), it["id"]
                body = p[p.index("\n\n") + 2:p.rindex("\n\n")]
                at = body.index(needle) / max(1, len(body) - len(needle))
                assert abs(at - it["depth"]) < 0.1, (it["id"], at, it["depth"])  # sentence granularity
            elif it["task"] == "kv":
                key = re.search(r'the value of key "([0-9a-f]{8})" is$', p).group(1)
                obj = json.loads(p[p.index("{"):p.rindex("}") + 1])
                assert str(obj[key]) == a, it["id"]
                at = list(obj).index(key) / (len(obj) - 1)
                assert abs(at - it["depth"]) < 0.06, (it["id"], at, it["depth"])
            else:
                q = p.rsplit("Q: ", 1)[1].rsplit("\nA:", 1)[0]
                assert str(solve(q)) == a, (q, a)
                assert it["rule"] == "final_number" and it["max_tokens"] == 512


def main():
    if not os.path.exists(WIKI):
        print("test_make_tasks: skipped, no ../shared/data/wikitext-2/test.txt")
        return 77
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        h1, h2 = make(d1), make(d2)
        assert h1 == h2, "two runs differ"
        check_items(d1)
        if PINNED:
            assert h1 == PINNED, f"generator output changed: {json.dumps(h1, indent=1)}"
        else:
            print(json.dumps(h1, indent=1))
            return 1
    print("test_make_tasks: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
