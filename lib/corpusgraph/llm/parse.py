"""Read a model's JSON answer defensively.

`parse_json_answer` is pure: stages call it on every answer and record its error message as a
row, so a malformed answer costs one unit of work, never the run.
"""

from __future__ import annotations

from corpusgraph.llm.repair import repair_json_object

__all__ = ["parse_json_answer"]


def parse_json_answer(text: str | None) -> tuple[dict | None, str | None]:
    """(object, None) for an answer holding a JSON object, else (None, reason).

    Tolerated (llm/repair.py does the work): code fences, prose around the object, raw control
    characters inside strings, trailing commas, and an answer cut off by the token limit. A
    cut-off answer is closed at the last complete value: a half-written string or number is
    dropped rather than kept, since "Micro" for "Microsoft" or 12 for 1200 would look valid and
    be wrong, while a missing key is caught by the stage's own validation. Containers still open
    at the cut are kept (they may be partial, e.g. an entity without its description) and closed.
    """
    repaired = repair_json_object(text)
    return repaired.obj, repaired.error
