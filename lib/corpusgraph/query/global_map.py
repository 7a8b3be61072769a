"""Global search's map step: the reports as the model reads them, packed into chunks, and the
rated points the map answers return (query/global_search.py runs it; global_select.py rates).

Report numbers are global across the chunks of one batch, so a map answer's report ids are
unambiguous; a point whose report ids are unusable is credited to its whole chunk.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from corpusgraph.config import QuerySection
from corpusgraph.llm.base import ChatRequest, ChatResult
from corpusgraph.query.answer import fill_prompt
from corpusgraph.query.store import IndexStore
from corpusgraph.tokens import count_tokens, truncate_tokens

__all__ = [
    "Point",
    "MapRead",
    "map_schema",
    "rate_schema",
    "parse_rating",
    "report_text",
    "report_block",
    "chunk_reports",
    "parse_points",
    "map_requests",
    "read_points",
    "MAX_POINTS",
]

MAX_POINTS = 5  # per map answer; small models repeat themselves without a maxItems
_DIGITS = re.compile(r"\d+")
_MAX_NUMBER_DIGITS = 9  # report numbers run from 1 per batch; a longer digit run is no report's


@dataclass
class Point:
    description: str
    score: float
    community_ids: list[str]


def map_schema(max_points: int = MAX_POINTS) -> dict:
    """JSON schema for a map answer (constrains decoding where the backend supports it)."""
    point = {
        "type": "object",
        "properties": {
            "description": {"type": "string"},
            "score": {"type": "integer", "minimum": 0, "maximum": 100},
            "reports": {"type": "array", "items": {"type": "integer"}, "maxItems": 5},
        },
        "required": ["description", "score", "reports"],
    }
    return {
        "type": "object",
        "properties": {"points": {"type": "array", "items": point, "maxItems": max_points}},
        "required": ["points"],
    }


def rate_schema() -> dict:
    """JSON schema for a relevance rating: one integer 0-5."""
    return {
        "type": "object",
        "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 5}},
        "required": ["score"],
    }


def parse_rating(text: str | None) -> int | None:
    """The 0-5 score of a rating answer, or None when it is not a JSON object with a number."""
    from corpusgraph.llm.parse import parse_json_answer

    obj, _ = parse_json_answer(text)
    if not isinstance(obj, dict):
        return None
    try:
        return int(min(max(float(obj.get("score")), 0.0), 5.0))
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer past float's range
        return None



def report_text(store: IndexStore, community_id: str) -> str:
    """A report as the model reads it: title, summary, then one line per finding."""
    rep = store.reports[community_id]
    lines = [rep["title"] or community_id, (rep["summary"] or "").strip()]
    for finding in rep["findings"]:
        if finding and finding.get("summary"):
            explanation = (finding.get("explanation") or "").strip()
            lines.append(f"- {finding['summary']}" + (f": {explanation}" if explanation else ""))
    return "\n".join(lines)


def report_block(store: IndexStore, number: int, community_id: str) -> str:
    return f"Report {number}: " + report_text(store, community_id)


def chunk_reports(store: IndexStore, community_ids: list[str], budget: int) -> list[list[tuple[int, str, str]]]:
    """Greedy chunks of (number, community id, block), each chunk's text within `budget` tokens.

    Numbers are global across chunks so a map answer's report ids are unambiguous; a report too
    long for a chunk on its own is cut to the budget rather than left out.
    """
    chunks: list[list[tuple[int, str, str]]] = []
    current: list[tuple[int, str, str]] = []
    used = 0
    for number, cid in enumerate(community_ids, 1):
        block = report_block(store, number, cid)
        cost = count_tokens(block + "\n\n")
        if cost > budget:
            block = truncate_tokens(block, budget - count_tokens("\n\n"))
            cost = count_tokens(block + "\n\n")
        if current and used + cost > budget:
            chunks.append(current)
            current, used = [], 0
        current.append((number, cid, block))
        used += cost
    if current:
        chunks.append(current)
    return chunks


def _report_ids(raw: object, chunk: dict[int, str]) -> list[str]:
    """Report numbers as the model wrote them (3, "3", "Report 3", "[3]") mapped to communities
    of this chunk; when none is usable the point is credited to the whole chunk. A digit run too
    long to be a report number is dropped before int(), which refuses runs past 4,300 digits."""
    items = raw if isinstance(raw, list) else [raw]
    runs = (d.lstrip("0") or "0"
            for item in items if isinstance(item, (int, str)) for d in _DIGITS.findall(str(item)))
    numbers = [int(d) for d in runs if len(d) <= _MAX_NUMBER_DIGITS]
    ids = list(dict.fromkeys(chunk[n] for n in numbers if n in chunk))
    return ids or list(chunk.values())


def parse_points(text: str | None, chunk: dict[int, str]) -> list[Point] | None:
    """Points of one map answer, or None when the answer is not a JSON object with a list of
    points. Single points without a description or a finite numeric score are dropped."""
    from corpusgraph.llm.parse import parse_json_answer

    obj, _ = parse_json_answer(text)
    if not isinstance(obj, dict) or not isinstance(obj.get("points"), list):
        return None
    points = []
    for item in obj["points"][:MAX_POINTS]:
        if not isinstance(item, dict):
            continue
        description = item.get("description")
        try:
            score = float(item.get("score"))
        except (TypeError, ValueError, OverflowError):  # OverflowError: an integer past float's range
            continue
        if not math.isfinite(score):  # NaN would survive the clamp below and poison the reduce's sort
            continue
        score = min(max(score, 0.0), 100.0)
        if not isinstance(description, str) or not description.strip():
            continue
        points.append(Point(description.strip(), score, _report_ids(item.get("reports"), chunk)))
    return points


Chunk = list[tuple[int, str, str]]


def map_requests(
    store: IndexStore, community_ids: list[str], section: QuerySection, map_prompt: str, question: str, prefix: str = "map"
) -> tuple[list[Chunk], list[ChatRequest], int]:
    """(chunks, one map request per chunk, tokens of report text sent) for these reports, in order."""
    chunks = chunk_reports(store, community_ids, section.max_context_tokens)
    requests, tokens = [], 0
    for i, chunk in enumerate(chunks):
        reports = "\n\n".join(block for _, _, block in chunk)
        tokens += count_tokens(reports)
        prompt = fill_prompt(map_prompt, reports=reports, question=question, max_points=MAX_POINTS)
        requests.append(ChatRequest(id=f"{prefix}-{i}", messages=({"role": "user", "content": prompt},),
                                    max_tokens=section.max_tokens, json_schema=map_schema()))
    return chunks, requests, tokens


@dataclass
class MapRead:
    """What a set of map answers gave: the points worth reducing and the counts coverage shows."""

    points: list[Point]
    failed: int = 0  # answers that failed, did not parse, or never came back
    first_error: str | None = None
    returned: int = 0  # every point parsed
    zero_score: int = 0  # points scored 0: "nothing relevant here"
    unselected: int = 0  # points only about reports that selection pruned (mapped early, see global_select)

    def merge(self, other: "MapRead") -> "MapRead":
        return MapRead(self.points + other.points, self.failed + other.failed, self.first_error or other.first_error,
                       self.returned + other.returned, self.zero_score + other.zero_score,
                       self.unselected + other.unselected)


def read_points(chunks: list[Chunk], results: list[ChatResult], keep: set[str] | None = None) -> MapRead:
    """Points scored above 0 from map answers, in chunk order. With `keep`, a point is credited
    only to the reports of `keep` it names, and dropped (counted as unselected) if none."""
    read = MapRead(points=[])
    for chunk, result in zip(chunks, results):
        parsed = None if result.error else parse_points(result.text, {n: cid for n, cid, _ in chunk})
        if parsed is None:
            read.failed += 1
            read.first_error = read.first_error or result.error or "map answer was not JSON with a list of points"
            continue
        read.returned += len(parsed)
        for point in parsed:
            if point.score <= 0:
                read.zero_score += 1
                continue
            if keep is not None:
                point.community_ids = [c for c in point.community_ids if c in keep]
                if not point.community_ids:
                    read.unselected += 1
                    continue
            read.points.append(point)
    read.failed += max(len(chunks) - len(results), 0)  # a backend that dropped results
    return read
