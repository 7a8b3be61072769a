"""Gleaning: which extraction results look incomplete, and merging a further round into them.

A unit whose answer was cut off, whose entity or relationship list hit its maxItems, or whose
text holds capitalised names no entity covers gets another round (up to extract.glean_rounds);
the round's new items are merged into the row, and a round that adds nothing ends gleaning.
The rule is cheap and deterministic, so a rerun decides the same.
"""

from __future__ import annotations

import re
from typing import Sequence

from corpusgraph.config import ExtractSection
from corpusgraph.stages.extract.parse import TRUNCATED_NOTE

__all__ = ["GLEAN_STOP_NOTE", "named_spans", "uncovered_spans", "needs_gleaning", "merge_gleaned"]

GLEAN_STOP_NOTE = "gleaning found nothing new"

# A capitalised word run, optionally joined by short connectors ("Bank of England").
_WORD = r"[A-Z](?:[\w'&-]|\.(?=\w))*"  # a dot only inside a word ("U.S"), never a sentence end
_NAME = re.compile(rf"\b{_WORD}(?:[ \t]+(?:(?:of|the|de|du|van|von|la|&)[ \t]+)?{_WORD})*")
_DETERMINER = re.compile(r"^(?:The|A|An|In|On|At|By|For|From|With|Its|His|Her|Their)\s+")
_SENTENCE_END = frozenset('.!?:;"')


def _opens_sentence(text: str, i: int) -> bool:
    """Does text[i] start a sentence: nothing before it, or a line break or one of .!?:;" before
    it with only whitespace between? (Scans back from i: a regex over text[:i] for every name
    made this check quadratic in the text, most of the gleaning decision's time.)"""
    j = i - 1
    while j >= 0 and text[j].isspace():
        if text[j] == "\n":
            return True
        j -= 1
    return i == 0 if j < 0 else text[j] in _SENTENCE_END


def named_spans(text: str) -> set[str]:
    """Capitalised names in a text, as a cheap stand-in for "named things": single words that
    only open a sentence ("The", "After") are left out, multi-word runs are kept."""
    spans = set()
    for m in _NAME.finditer(text):
        span = m.group(0).strip(" .'-")
        if " " not in span and _opens_sentence(text, m.start()):
            continue
        span = _DETERMINER.sub("", span)
        if len(span) < 2:
            continue
        spans.add(span)
    return spans


def uncovered_spans(text: str, entities: Sequence[dict]) -> set[str]:
    names = [e["name"].casefold() for e in entities]
    return {s for s in named_spans(text)
            if not any(s.casefold() in n or n in s.casefold() for n in names if n)}


def needs_gleaning(text: str, row: dict, section: ExtractSection) -> bool:
    """Does a result look incomplete? Cheap and deterministic, so a rerun decides the same:
    the answer was cut off; or the entity or relationship list hit its maxItems in the last
    round; or at least glean_min_missing capitalised names in the text are covered by no
    entity. A round that found nothing new stops further rounds."""
    if row.get("status") != "ok":
        return False
    error = row.get("error") or ""
    if GLEAN_STOP_NOTE in error:
        return False
    if TRUNCATED_NOTE in error:
        return True
    ents, rels = row.get("entities") or [], row.get("relationships") or []
    rounds = int(row.get("gleanings") or 0) + 1
    if len(ents) >= section.max_entities * rounds:
        return True
    if section.max_relationships and len(rels) >= section.max_relationships * rounds:
        return True
    return len(uncovered_spans(text, ents)) >= section.glean_min_missing


def merge_gleaned(prior: dict, new: dict) -> tuple[dict, int]:
    """The prior row plus a round's new items (entities by name and type, relationships by
    their ends, claims by subject, type and description); returns (row, items added)."""
    def merge(old: list, fresh: list, key) -> list:
        keys = {key(x) for x in old}
        return list(old) + [x for x in fresh if key(x) not in keys and not keys.add(key(x))]

    ents = merge(prior.get("entities") or [], new.get("entities") or [], lambda e: (e["name"].casefold(), e["type"]))
    rels = merge(prior.get("relationships") or [], new.get("relationships") or [],
                 lambda r: tuple(sorted((r["source"].casefold(), r["target"].casefold()))))
    claims = merge(prior.get("claims") or [], new.get("claims") or [],
                   lambda c: (c["subject"].casefold(), c["type"], c["description"].casefold()))
    added = (len(ents) + len(rels) + len(claims)) - sum(len(prior.get(k) or []) for k in ("entities", "relationships", "claims"))
    return {**prior, "entities": ents, "relationships": rels, "claims": claims}, added
