"""Query-time answers for the scripted server, read off the words of the request: a benchmark
harness that stands in for a model where a benchmark needs every global question of a set
answered fast and repeatably (the podcast coverage benchmark), never a product default.

- A relevance rating ("Report: ... Question: ...", schema {"score": 0-5}) scores the number of
  the question's content words that the report contains, capped at 5: a report that shares no
  content word with the question rates 0 and dynamic selection prunes it.
- A global map answer ("Report 1: ...", "Report 2: ...", schema {"points": [...]}) makes one point
  per report that shares a content word with the question: its first finding line, scored 20 per
  shared word (at most 100), citing that report; reports sharing nothing give no point.

A content word is a lower-cased word of four letters or more outside a short stop list, with a
plural or verb ending cut (so "leaders" meets "leader", "discussions" meets "discussion"). The
rater reads what a model reads and nothing else: no ground truth, no index.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")
_STOP = frozenset("""
what which when where whom whose that this these those there their them they then than with
within without from into onto upon about above below over under between among across through
have has had having does did doing done been being were will would could should shall might
must more most some such each every other others another also only just very much many same
your yours ours from what's across often ever most least like make makes made into
""".split())
_ENDINGS = ("ings", "ing", "ies", "ied", "es", "ed", "s")


def stem(word: str) -> str:
    w = word.lower().strip("'-")
    for end in _ENDINGS:
        if w.endswith(end) and len(w) - len(end) >= 4:
            return w[: -len(end)]
    return w


def content_words(text: str) -> set[str]:
    return {stem(w) for w in _WORD.findall(text) if w.lower() not in _STOP}


def _question(user: str) -> str:
    m = re.search(r"(?m)^Question:\s*(.+)$", user)
    return m.group(1).strip() if m else ""


def rating(user: str) -> dict:
    """{"score": 0-5}: the question's content words found in the report."""
    report = user.split("Report:", 1)[-1].split("\nQuestion:", 1)[0]
    return {"score": min(5, len(content_words(_question(user)) & content_words(report)))}


def map_points(user: str, max_points: int) -> dict:
    """{"points": [...]}: one point per numbered report that shares a content word."""
    wanted = content_words(_question(user))
    body = user.split("\nQuestion:", 1)[0]
    points = []
    for m in re.finditer(r"(?ms)^Report (\d+): (.*?)(?=^Report \d+: |\Z)", body):
        number, text = int(m.group(1)), m.group(2)
        shared = wanted & content_words(text)
        if not shared:
            continue
        lines = [ln[2:] for ln in text.splitlines() if ln.startswith("- ")] or [text.splitlines()[0]]
        points.append({"description": lines[0][:200], "score": min(100, 20 * len(shared)), "reports": [number]})
    points.sort(key=lambda p: -p["score"])
    return {"points": points[:max_points]}


def answer(user: str, schema: dict) -> dict | None:
    """The answer to a rating or a map request, or None for any other request."""
    props = schema.get("properties") or {}
    if set(props) == {"score"}:
        return rating(user)
    if set(props) == {"points"}:
        return map_points(user, int(props["points"].get("maxItems") or 5))
    return None
