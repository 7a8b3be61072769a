"""Safe repair of a model's JSON answer: find the object, close an answer cut at max_tokens.

Small models wrap JSON in code fences or prose, and any model stops mid-answer at its token
limit. `repair_json_object` recovers the object where that is safe and never invents content:

- code fences and prose around the object are dropped;
- trailing commas are removed;
- an answer cut off is closed at its last complete value: a half-written string or number is
  dropped (with its key), never kept ("Micro" for "Microsoft", 12 for 1200 would look valid and be
  wrong); the containers still open at the cut are closed. A trailing object inside an array
  that the cut left open is kept only with its complete fields; whether that is enough is the
  caller's call, made against its schema's required keys (the stages drop such items).

`truncated` tells the caller the answer was cut, so a stage can treat what it got as incomplete
(extraction then gleans that unit) rather than as the model's whole answer.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Repaired", "repair_json_object"]

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
# A number or literal; anything else outside a string is junk that json.loads will name.
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_MAX_STARTS = 20  # candidate "{" positions tried; bounds the work on long prose
# Deeper nesting than any answer schema has: refused, since closing a cut at depth d costs d
# and Python's json recursion gives out near 1,000 (an answer of 100k "[" took minutes here).
MAX_DEPTH = 100


class _TooDeep(Exception):
    pass


@dataclass(frozen=True)
class Repaired:
    obj: dict | None  # the object, or None when none could be recovered
    error: str | None  # why not, when obj is None
    truncated: bool = False  # the answer was cut off and closed here


def repair_json_object(text: str | None) -> Repaired:
    """The JSON object an answer holds, repaired where that is safe (see the module doc)."""
    if text is None or not text.strip():
        return Repaired(None, "empty answer")
    whole = _whole_object(text)
    if whole is not None:
        return Repaired(whole, None)
    fenced = _FENCE.search(text)
    bodies = [fenced.group(1), text] if fenced else [text]
    first_error: str | None = None
    for body in bodies:
        if body.lstrip().startswith("["):
            # An array where an object was asked for: taking its first element would silently
            # drop the rest, so say what came back instead.
            return Repaired(None, "expected a JSON object, got an array")
        starts = [m.start() for m in itertools.islice(re.finditer(r"\{", body), _MAX_STARTS)]
        for start in starts:
            try:
                result = _parse_from(body, start)
            except _TooDeep:  # the starts after this one lie inside the same deep nesting
                return Repaired(None, f"JSON nested deeper than {MAX_DEPTH} levels")
            if result.obj is not None:
                return result
            first_error = first_error or result.error
    return Repaired(None, first_error or "no JSON object in answer")


def _whole_object(text: str) -> dict | None:
    """The object when the whole answer is one valid JSON object within MAX_DEPTH, else None.

    The common case, read by the C decoder alone: the character walk below (pure Python, most of
    an extraction answer's parse time) would find the same object, since a valid object's closing
    brace is its last character. Anything else (prose, fences, a cut, too deep) takes the walk."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        return None
    obj, _ = _loads(body)
    if obj is None:
        return None
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:  # depth as the walk counts it: the outer object is 1
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return None
        children = value.values() if isinstance(value, dict) else value
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return obj


def _parse_from(body: str, start: int) -> Repaired:
    end, cut = _scan(body, start)  # _TooDeep past MAX_DEPTH
    if end is not None:
        candidate = body[start:end]
        obj, error = _loads(candidate)
        if obj is None:
            obj, _ = _loads(_TRAILING_COMMA.sub(r"\1", candidate))
        return Repaired(obj, None) if obj is not None else Repaired(None, error)
    if cut is None:
        return Repaired(None, "answer is cut off before any complete value")
    pos, closers = cut
    obj, error = _loads(_TRAILING_COMMA.sub(r"\1", body[start:pos] + closers))
    if obj is None:
        return Repaired(None, f"answer is cut off and could not be closed: {error}")
    return Repaired(obj, None, truncated=True)


def _loads(candidate: str) -> tuple[dict | None, str | None]:
    try:
        obj = json.loads(candidate, strict=False)  # strict=False: raw newlines inside strings
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg} at char {exc.pos}"
    except (ValueError, RecursionError) as exc:  # e.g. an integer of over 4,300 digits
        return None, f"invalid JSON: {str(exc)[:120]}"
    if not isinstance(obj, dict):
        return None, f"expected a JSON object, got {type(obj).__name__}"
    return obj, None


def _closers(stack: list[str]) -> str:
    return "".join("}" if c == "{" else "]" for c in reversed(stack))


def _string_end(s: str, i: int) -> int | None:
    """Index just past the string that opens at s[i], or None if the text ends inside it."""
    j = i + 1
    n = len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == '"':
            return j + 1
        j += 1
    return None


def _scan(s: str, i: int) -> tuple[int | None, tuple[int, str] | None]:
    """Walk the JSON that opens at s[i].

    Returns (end, None) when the outermost object closes (end is exclusive), else
    (None, (cut, closers)): the last position after which closing the open containers gives
    valid JSON, i.e. just after an opening bracket or a complete value (never after a key).
    """
    stack: list[str] = []
    expect_key = False  # inside an object, the next string is a key
    cut: tuple[int, str] | None = None
    n = len(s)
    while i < n:
        c = s[i]
        if c in " \t\r\n":
            i += 1
        elif c in "{[":
            stack.append(c)
            if len(stack) > MAX_DEPTH:
                raise _TooDeep
            i += 1
            expect_key = c == "{"
            cut = (i, _closers(stack))
        elif c in "}]":
            if not stack:
                return None, cut
            stack.pop()
            i += 1
            if not stack:
                return i, None
            expect_key = False
            cut = (i, _closers(stack))
        elif c == ",":
            expect_key = bool(stack) and stack[-1] == "{"
            i += 1
        elif c == ":":
            expect_key = False
            i += 1
        elif c == '"':
            j = _string_end(s, i)
            if j is None:
                return None, cut  # cut inside a string: drop the half-written string
            is_key = expect_key and stack[-1] == "{"
            i = j
            if not is_key:
                cut = (i, _closers(stack))
        else:
            m = _SCALAR.match(s, i)
            if m is None:
                i += 1  # junk: leave it to json.loads to report
                continue
            i = m.end()
            if i >= n:
                return None, cut  # "12" at the very end may have been 1200: not complete
            cut = (i, _closers(stack))
    return None, cut
