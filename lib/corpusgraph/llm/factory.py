"""Build the configured chat model, and read a model's JSON answer defensively.

`parse_json_answer` is pure: stages call it on every answer and record its error message as a
row, so a malformed answer costs one unit of work, never the run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from corpusgraph.config import LLMSection
from corpusgraph.llm.cache import ResponseCache
from corpusgraph.llm.openai_http import OpenAIChatModel

__all__ = ["open_chat_model", "parse_json_answer"]

CACHE_FILE = "llm_cache.sqlite"


def open_chat_model(llm: LLMSection, cache_dir: str | Path, base_url: str | None = None) -> OpenAIChatModel:
    """The chat model for `llm`, with its response cache at <cache_dir>/llm_cache.sqlite.

    embedded: `base_url` is the running EmbeddedServer's; the server is started by the driver,
    not here, so every Ray actor talks to the one process over HTTP.
    openai: the endpoints (api_base or api_bases) and key come from the config section;
    `base_url` overrides them with that one endpoint.
    The concurrency, per-endpoint and tokens-per-minute limits hold per returned client, i.e.
    per process (per Ray actor).
    """
    cache = ResponseCache(Path(cache_dir) / CACHE_FILE)
    common = dict(
        model=llm.model,
        concurrency=llm.concurrency,
        timeout_s=llm.timeout_s,
        max_retries=llm.max_retries,
        cache=cache,
        max_in_flight_per_endpoint=llm.max_in_flight_per_endpoint,
        tokens_per_minute=llm.tokens_per_minute,
    )
    if llm.backend == "embedded":
        if not base_url:
            raise ValueError("llm.backend 'embedded' needs the base_url of a running EmbeddedServer")
        return OpenAIChatModel(base_url=base_url, api_key=None, schema_style="llama_cpp", **common)
    if llm.backend == "openai":
        urls = [base_url] if base_url else llm.endpoint_urls()
        if not urls:
            raise ValueError("llm.backend 'openai' needs llm.api_base or llm.api_bases (endpoints ending in /v1)")
        return OpenAIChatModel(base_url=urls, api_key=llm.api_key, schema_style="openai", **common)
    raise ValueError(f"unknown llm.backend {llm.backend!r}")


# -- parsing -------------------------------------------------------------------------------------

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
# A number or literal; anything else outside a string is junk that json.loads will name.
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_MAX_STARTS = 20  # candidate "{" positions tried; bounds the work on long prose


def parse_json_answer(text: str | None) -> tuple[dict | None, str | None]:
    """(object, None) for an answer holding a JSON object, else (None, reason).

    Tolerated: code fences, prose around the object, raw control characters inside strings,
    trailing commas, and an answer cut off by the token limit. A cut-off answer is closed at
    the last complete value: a half-written string or number is dropped rather than kept, since
    "Micro" for "Microsoft" or 12 for 1200 would look valid and be wrong, while a missing key
    is caught by the stage's own validation. Containers still open at the cut are kept (they
    may be partial, e.g. an entity without its description) and closed.
    """
    if text is None or not text.strip():
        return None, "empty answer"
    fenced = _FENCE.search(text)
    bodies = [fenced.group(1), text] if fenced else [text]
    first_error: str | None = None
    for body in bodies:
        if body.lstrip().startswith("["):
            # An array where an object was asked for: taking its first element would silently
            # drop the rest, so say what came back instead.
            return None, "expected a JSON object, got an array"
        starts = [m.start() for m in re.finditer(r"\{", body)][:_MAX_STARTS]
        for start in starts:
            obj, error = _parse_from(body, start)
            if obj is not None:
                return obj, None
            first_error = first_error or error
    return None, first_error or "no JSON object in answer"


def _parse_from(body: str, start: int) -> tuple[dict | None, str | None]:
    end, cut = _scan(body, start)
    if end is not None:
        candidate = body[start:end]
        obj, error = _loads(candidate)
        if obj is None:
            obj, _ = _loads(_TRAILING_COMMA.sub(r"\1", candidate))
        return (obj, None) if obj is not None else (None, error)
    if cut is None:
        return None, "answer is cut off before any complete value"
    pos, closers = cut
    obj, error = _loads(body[start:pos] + closers)
    if obj is None:
        return None, f"answer is cut off and could not be closed: {error}"
    return obj, None


def _loads(candidate: str) -> tuple[dict | None, str | None]:
    try:
        obj = json.loads(candidate, strict=False)  # strict=False: raw newlines inside strings
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg} at char {exc.pos}"
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
