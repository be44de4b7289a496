#!/usr/bin/env python3
"""A seeded corpus of JSON schemas of the kinds agents send (docs/structured_outputs.md, "Schemas";
bench/structured_validity.py serves them).

Each entry is {"name", "schema", "prompt", "expect"}: "expect" is "accept" for a schema built only of
what mpkv's schema check lets through (nested objects, arrays with minItems / maxItems, string /
integer / mixed enums, const, string patterns, the ten formats xgrammar generates, min / maxLength,
integer and number ranges with inclusive and exclusive bounds, integer multipleOf, required and
optional properties, anyOf (nullable fields, alternative objects), type lists, $defs with $ref,
prefixItems, booleans and nulls), and "refuse:<keyword>" for one with a feature it must refuse with a
400 (uniqueItems, oneOf, not, if/then, an unknown format, a pattern with a length limit, allOf of
two, a recursive $ref, multipleOf on a number, contains): the refusal must name that keyword.
The same seed gives the same corpus (random.Random(seed), no other input); `--dump FILE` writes it.

Usage: schema_corpus.py [--seed 34] [--n 240] [--dump FILE]
"""
import argparse
import hashlib
import json
import random

TOPICS = ["a customer order", "a weather report", "a calendar event", "a book", "a bug report", "a user profile",
          "a flight booking", "a recipe", "a product listing", "a support ticket", "a server status", "a movie review",
          "an invoice", "a job posting", "a sensor reading", "a chess move", "a shipment", "a bank transfer",
          "a hotel stay", "a git commit", "a playlist", "a restaurant", "a medical appointment", "a car"]
WORDS = ["id", "name", "title", "city", "country", "status", "kind", "label", "note", "owner", "email", "tags",
         "items", "count", "price", "score", "level", "date", "time", "url", "host", "code", "priority", "active",
         "size", "colour", "unit", "amount", "rating", "version", "address", "author", "summary", "steps", "created"]
ENUM_WORDS = [["low", "medium", "high"], ["red", "green", "blue"], ["open", "closed", "pending"],
              ["S", "M", "L", "XL"], ["north", "south", "east", "west"], ["draft", "published"],
              ["cash", "card", "transfer"], ["celsius", "fahrenheit"], ["yes", "no", "maybe"]]
PATTERNS = [r"^[A-Z]{3}-[0-9]{3}$", r"^[a-z]+(-[a-z]+)*$", r"^\+?[0-9]{7,12}$", r"^#[0-9a-fA-F]{6}$",
            r"^v[0-9]+\.[0-9]+\.[0-9]+$", r"^[A-Z][a-z]+$", r"^[0-9]{5}$", r"[a-z]{2,8}@example\.com"]
FORMATS = ["email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid", "uri"]


class Gen:
    def __init__(self, rng):
        self.r = rng

    def pick_names(self, k):
        return self.r.sample(WORDS, k)

    def string(self):
        r = self.r
        kind = r.choice(["free", "free", "len", "pattern", "format", "enum"])
        if kind == "free":
            return {"type": "string"}
        if kind == "len":
            lo = r.randint(0, 3)
            s = {"type": "string", "maxLength": r.randint(max(lo, 1), 20)}
            if lo:
                s["minLength"] = lo
            return s
        if kind == "pattern":
            return {"type": "string", "pattern": r.choice(PATTERNS)}
        if kind == "format":
            return {"type": "string", "format": r.choice(FORMATS)}
        return {"type": "string", "enum": list(r.choice(ENUM_WORDS))}

    def integer(self):
        r = self.r
        s = {"type": "integer"}
        kind = r.choice(["free", "range", "range", "exclusive", "multiple", "negative"])
        if kind == "range":
            lo = r.randint(0, 50)
            s.update(minimum=lo, maximum=lo + r.randint(1, 500))
        elif kind == "exclusive":
            lo = r.randint(-10, 10)
            s.update(exclusiveMinimum=lo, exclusiveMaximum=lo + r.randint(2, 100))
        elif kind == "multiple":
            s.update(multipleOf=r.choice([2, 5, 10, 25]), minimum=0, maximum=1000)
        elif kind == "negative":
            s.update(minimum=-r.randint(1, 1000), maximum=-r.randint(0, 0))
        return s

    def number(self):
        r = self.r
        s = {"type": "number"}
        kind = r.choice(["free", "range", "unit", "exclusive", "lower"])
        if kind == "range":
            lo = round(r.uniform(-100, 100), 1)
            s.update(minimum=lo, maximum=round(lo + r.uniform(1, 1000), 1))
        elif kind == "unit":
            s.update(minimum=0, maximum=1)
        elif kind == "exclusive":
            s.update(exclusiveMinimum=0, maximum=r.choice([5, 100, 1e6]))
        elif kind == "lower":
            s.update(minimum=r.choice([0, 0.5, -273.15]))
        return s

    def scalar(self):
        r = self.r
        kind = r.choice(["string", "string", "string", "integer", "integer", "number", "boolean", "enum_mixed",
                         "const", "nullable", "type_list"])
        if kind == "string":
            return self.string()
        if kind == "integer":
            return self.integer()
        if kind == "number":
            return self.number()
        if kind == "boolean":
            return {"type": "boolean"}
        if kind == "enum_mixed":
            return {"enum": r.choice([[1, 2, 3], ["a", 1, True, None], [0.5, 1.5], ["x", "y"]])}
        if kind == "const":
            return {"const": r.choice(["v1", 42, True, "fixed"])}
        if kind == "nullable":
            return {"anyOf": [self.string() if r.random() < 0.5 else self.integer(), {"type": "null"}]}
        return {"type": r.choice([["string", "null"], ["integer", "string"], ["number", "boolean"]])}

    def array(self, depth):
        r = self.r
        items = self.value(depth + 1) if r.random() < 0.5 else self.scalar()
        s = {"type": "array", "items": items}
        kind = r.choice(["bounded", "bounded", "min", "max", "free", "prefix"])
        if kind == "bounded":
            lo = r.randint(0, 2)
            s.update(minItems=lo, maxItems=lo + r.randint(0, 3))
        elif kind == "min":
            s["minItems"] = r.randint(1, 3)
        elif kind == "max":
            s["maxItems"] = r.randint(1, 4)
        elif kind == "prefix":
            s = {"type": "array", "prefixItems": [self.scalar() for _ in range(r.randint(1, 3))], "items": False}
        return s

    def obj(self, depth, n_min=1, n_max=5):
        r = self.r
        names = self.pick_names(r.randint(n_min, n_max))
        props = {n: self.value(depth + 1) for n in names}
        s = {"type": "object", "properties": props}
        req = [n for n in names if r.random() < 0.7]
        if req:
            s["required"] = req
        if r.random() < 0.6:
            s["additionalProperties"] = False
        if r.random() < 0.3:
            s["description"] = "%s fields" % r.choice(TOPICS)
        return s

    def value(self, depth):
        r = self.r
        if depth >= 3:
            return self.scalar()
        kind = r.choice(["scalar", "scalar", "scalar", "object", "array", "anyof"])
        if kind == "object":
            return self.obj(depth, 1, 3)
        if kind == "array":
            return self.array(depth)
        if kind == "anyof":
            return {"anyOf": [self.obj(depth + 1, 1, 2), self.obj(depth + 1, 1, 2)] if r.random() < 0.5
                    else [self.scalar(), self.scalar()]}
        return self.scalar()

    def root(self):
        r = self.r
        kind = r.choice(["object", "object", "object", "defs", "tool_args"])
        if kind == "defs":
            inner = self.obj(2, 1, 3)
            s = self.obj(1, 1, 3)
            s["$defs"] = {"Part": inner}
            s["properties"]["part"] = {"$ref": "#/$defs/Part"}
            s["properties"]["parts"] = {"type": "array", "items": {"$ref": "#/$defs/Part"}, "maxItems": 2}
            s.setdefault("required", []).append("part")
            return s
        if kind == "tool_args":  # a function's parameters, as tools send them
            s = self.obj(1, 1, 4)
            s["required"] = list(s["properties"])[:1]
            return s
        return self.obj(0, 1, 5)


# Each: (keyword the refusal must name, how to add it to a schema known to pass).
def _unique(s, r):
    s["properties"]["tags_u"] = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}


def _one_of(s, r):
    s["properties"]["choice_o"] = {"oneOf": [{"type": "string"}, {"type": "integer"}]}


def _not(s, r):
    s["properties"]["not_x"] = {"not": {"type": "null"}}


def _if(s, r):
    s["if"] = {"properties": {"a": {"const": 1}}}
    s["then"] = {"required": ["a"]}


def _format(s, r):
    s["properties"]["fmt_x"] = {"type": "string", "format": r.choice(["ipv5", "phone", "credit-card", "iri"])}


def _pattern_len(s, r):
    s["properties"]["pat_x"] = {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8}


def _all_of(s, r):
    s["properties"]["all_x"] = {"allOf": [{"type": "string"}, {"maxLength": 4}]}


def _recursive(s, r):
    s.setdefault("$defs", {})["Node"] = {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}
    s["properties"]["tree"] = {"$ref": "#/$defs/Node"}


def _multiple_number(s, r):
    s["properties"]["step_x"] = {"type": "number", "multipleOf": 0.5}


def _contains(s, r):
    s["properties"]["list_x"] = {"type": "array", "contains": {"type": "integer"}}


REFUSALS = [("uniqueItems", _unique), ("oneOf", _one_of), ("not", _not), ("if", _if), ("format", _format),
            ("pattern", _pattern_len), ("allOf", _all_of), ("recursive", _recursive), ("multipleOf", _multiple_number),
            ("contains", _contains)]


def corpus(seed=34, n=240, refuse_every=8):
    """n schemas; every refuse_every-th one carries a feature mpkv must refuse (cycling REFUSALS)."""
    rng = random.Random(seed)
    g = Gen(rng)
    out = []
    for i in range(n):
        s = g.root()
        topic = rng.choice(TOPICS)
        expect = "accept"
        if refuse_every and i % refuse_every == refuse_every - 1:
            keyword, add = REFUSALS[(i // refuse_every) % len(REFUSALS)]
            add(s, rng)
            expect = "refuse:" + keyword
        out.append({"name": "s%03d" % i, "schema": s, "expect": expect,
                    "prompt": "Reply with %s as JSON with the fields %s." % (topic, ", ".join(s["properties"]))})
    return out


def digest(entries):
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--n", type=int, default=240)
    ap.add_argument("--dump")
    args = ap.parse_args()
    entries = corpus(args.seed, args.n)
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump(entries, f, indent=1)
    n_acc = sum(e["expect"] == "accept" for e in entries)
    print("%d schemas (%d to accept, %d to refuse), sha256 %s" % (len(entries), n_acc, len(entries) - n_acc, digest(entries)))


if __name__ == "__main__":
    main()
