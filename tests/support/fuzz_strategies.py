"""Hypothesis strategies for model answers: what a model, a proxy or a cut connection can send.

Cheap to draw on purpose (each parser test draws 10,000): hypothesis draws a kind and a seed,
and a seeded `random.Random` builds the answer from it (hypothesis' own recursive strategies
cost ~10 ms an example here; this costs well under one). A failure still replays from its seed.
Kinds: arbitrary text and bytes; JSON with the parsers' keys holding any type, maybe cut short,
wrapped in prose or fences, doubled; odd numbers (NaN, 1e999, 5,000 digits); deep nesting;
huge strings and huge arrays. Not a test module.
"""

from __future__ import annotations

import json
import random

from hypothesis import strategies as st

__all__ = ["answers", "answer_batches", "KEYS", "make_answer"]

# Keys the parsers look for, so that wrong types reach the code behind them.
KEYS = ["entities", "relationships", "claims", "name", "type", "description", "source", "target", "strength",
        "subject", "object", "status", "start", "end", "title", "summary", "findings", "rating",
        "rating_explanation", "explanation", "points", "score", "reports", "answer", "follow_ups", "same",
        "1", "2", "3"]
WORDS = ["PERSON", "ORGANIZATION", "LOCATION", "EVENT", "SUSPECTED", "TRUE", "true", "yes", "no", "2026-01",
         "2026-13-45", "Report 3", "[2]", "Mara Voss", "Ilsa Brand", "", " ", "\x00", "\ud800", "\u202e", "😀",
         "NONE", "null"]
ODD_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1" * 5000, "1e-999", "-0", "0.5", "10",
               "99999999999999999999", "1.5e308"]


def _scalar(rng: random.Random):
    pick = rng.randrange(7)
    if pick == 0:
        return None
    if pick == 1:
        return rng.random() < 0.5
    if pick == 2:
        return rng.randint(-2**70, 2**70) if rng.random() < 0.2 else rng.randint(-20, 20)
    if pick == 3:
        return rng.choice([float("nan"), float("inf"), -float("inf"), rng.uniform(-1e6, 1e6), 0.0])
    if pick == 4:
        return "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(12)))
    return rng.choice(WORDS)


def _value(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth >= 4 or roll < 0.45:
        return _scalar(rng)
    if roll < 0.7:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {rng.choice(KEYS): _value(rng, depth + 1) for _ in range(rng.randrange(6))}


def _object(rng: random.Random) -> dict:
    return {rng.choice(KEYS): _value(rng, 1) for _ in range(rng.randrange(7))}


def _dumps(value) -> str:
    return json.dumps(value, allow_nan=True, ensure_ascii=False)


def _odd(rng: random.Random) -> str:
    key = rng.choice(KEYS)
    kind = rng.randrange(4)
    if kind == 0:
        return '{"%s": %s}' % (key, rng.choice(ODD_NUMBERS))
    if kind == 1:
        depth = rng.choice([50, 99, 101, 500, 5_000])  # 100,000 deep: a test of its own
        opener = rng.choice(["[", '{"a": ', '{"entities": ['])
        return '{"%s": ' % key + opener * depth + rng.choice(["", "1", "]" * depth])
    if kind == 2:
        return '{"%s": "%s"}' % (key, "x" * rng.randrange(5_000))
    return '{"points": [{"description": "d", "score": %s, "reports": [%s]}]}' % (
        rng.choice(ODD_NUMBERS), rng.choice(['"' + "7" * 5000 + '"', "1e999", "-3", "true", '"Report 2"']))


def make_answer(kind: int, seed: int) -> str | None:
    """The answer of `kind` (0-15) built from `seed`."""
    rng = random.Random(seed)
    if kind == 0:
        return None
    if kind == 1:
        return "".join(chr(rng.randrange(0x110000)) for _ in range(rng.randrange(200))).encode(
            "utf-8", "surrogatepass").decode("utf-8", "replace")
    if kind == 2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(200))).decode("latin-1")
    if kind == 3:  # a long array: one item many times (20,000 items: a test of its own)
        key = rng.choice(["entities", "relationships", "claims", "findings", "points", "follow_ups"])
        return _dumps({key: [_value(rng, 2)] * rng.choice([0, 1, 2, 5, 50, 300])})
    if kind == 4:
        return _odd(rng)
    text = _dumps(_object(rng) if kind < 14 else _value(rng))
    if rng.random() < 0.5:  # cut off, as at max_tokens or by a dropped connection
        text = text[: rng.randrange(len(text) + 1)]
    wrap = rng.randrange(4)
    if wrap == 1:
        text = "```json\n" + text + "\n```"
    elif wrap == 2:
        text = "Here is the JSON: " + text + " Hope this helps."
    elif wrap == 3:
        text = text + "," + text  # two objects, or a trailing comma
    return text


def answers():
    """One model answer's text (or None, as an errored call has)."""
    return st.builds(make_answer, st.integers(0, 15), st.integers(0, 2**32))


def _batch(seed: int, size: int) -> list[str | None]:
    rng = random.Random(seed)
    return [make_answer(rng.randrange(16), rng.randrange(2**32)) for _ in range(size)]


def answer_batches(size: int = 10):
    """`size` answers from one seed. Hypothesis spends ~1.4 ms of its own on each example here,
    so 10,000 answers cost 14 s one by one and 1.4 s in batches of ten; a failing batch still
    replays from its seed, and the test names the answer that failed."""
    return st.builds(_batch, st.integers(0, 2**32), st.just(size))
