"""Reading an extraction answer: a pack's JSON answer -> one row's answer columns per unit.

Small models cut answers off, mix up the texts of a pack and invent names; the parser keeps
what is whole and grounded in its own text, drops the rest with a note, and never raises: a
malformed answer becomes a parse_error row with the raw text, a failed call an llm_error row.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from corpusgraph.config import ExtractSection
from corpusgraph.llm.base import ChatResult
from corpusgraph.llm.repair import repair_json_object

__all__ = ["TRUNCATED_NOTE", "CLAIM_STATUSES", "grounded", "parse_unit", "parse_claims", "split_pack_answer",
           "parse_extraction"]

TRUNCATED_NOTE = "answer cut off by the token limit"
CLAIM_STATUSES = ("TRUE", "FALSE", "SUSPECTED")


def _clean(value: Any, limit: int) -> str:
    return " ".join(str(value or "").split())[:limit]


def _items(value: Any) -> list:
    """A list field of an answer; any other type (a number, a string, an object) holds no items."""
    return value if isinstance(value, list) else []


def _has(item: dict, keys: frozenset[str]) -> bool:
    return item.keys() >= keys


_ENTITY_KEYS, _REL_KEYS = frozenset(("name", "type")), frozenset(("source", "target", "strength"))
_CLAIM_KEYS = frozenset(("subject", "type", "status"))
_WORDS = re.compile(r"\w+")


class _Grounding:
    """grounded() for many names against one text: the text casefolded once, its word set made
    on first need (an extraction answer checks ~30 names per unit)."""

    def __init__(self, text: str) -> None:
        self.folded = text.casefold()
        self.words: set[str] | None = None

    def __call__(self, name: str) -> bool:
        folded = name.casefold()
        if folded in self.folded:
            return True
        if self.words is None:
            self.words = set(_WORDS.findall(self.folded))
        return all(w in self.words for w in _WORDS.findall(folded))


def grounded(name: str, text: str) -> bool:
    """Is the name written in the text? Case-insensitive, and word by word so spacing and
    punctuation may differ. In a packed call this is what keeps a name from one text out of
    another text's row (small models mix them up)."""
    return _Grounding(text)(name)


def parse_unit(obj: Any, section: ExtractSection, text: str | None = None
               ) -> tuple[list[dict], list[dict], list[dict], list[str]]:
    """One unit's answer object -> (entities, relationships, claims, notes). An item missing a
    required key (a trailing item an answer cut off) is dropped: nothing is made up for it.
    With `text`, entities and relationship ends not written in it are dropped too."""
    obj = obj if isinstance(obj, dict) else {}
    dropped = 0
    allowed = {t.upper() for t in section.entity_types}
    notes: list[str] = []
    ground = _Grounding(text) if text is not None else None
    entities, seen = [], set()
    # The schema's maxItems bounds these lists where the endpoint honours it; a provider whose
    # strict mode refuses maxItems (llm/profiles.py) gets the bound here instead.
    for e in _items(obj.get("entities")):
        if len(entities) >= section.max_entities:
            break
        if not isinstance(e, dict) or not _has(e, _ENTITY_KEYS):
            continue
        name, etype = _clean(e.get("name"), 80), _clean(e.get("type"), 40).upper()
        if not name:
            continue
        if etype not in allowed:
            notes.append(f"entity {name!r} has type {etype!r} outside the closed list; dropped")
            continue
        if (name.casefold(), etype) in seen:
            continue
        if ground is not None and not ground(name):
            dropped += 1
            continue
        seen.add((name.casefold(), etype))
        entities.append({"name": name, "type": etype, "description": _clean(e.get("description"), 300)})
    rels = []
    for r in _items(obj.get("relationships")):
        if len(rels) >= section.max_relationships:
            break
        if not isinstance(r, dict) or not _has(r, _REL_KEYS):
            continue
        src, tgt = _clean(r.get("source"), 80), _clean(r.get("target"), 80)
        if not src or not tgt or src.casefold() == tgt.casefold():
            continue
        if ground is not None and not (ground(src) and ground(tgt)):
            dropped += 1
            continue
        try:
            strength = int(r["strength"])
        except (TypeError, ValueError, OverflowError):  # OverflowError: 1e999 parses as infinity
            continue
        rels.append({"source": src, "target": tgt, "description": _clean(r.get("description"), 300),
                     "strength": max(1, min(10, strength))})
    claims = parse_claims(obj.get("claims"), section) if section.claims else []
    if ground is not None:
        kept = [c for c in claims if ground(c["subject"])]
        dropped += len(claims) - len(kept)
        claims = kept
    if dropped:
        notes.append(f"{dropped} items named things not written in the text; dropped")
    return entities, rels, claims, notes


def parse_claims(items: Any, section: ExtractSection) -> list[dict]:
    """Claims with a subject, a type and a known status; dates kept only when they look like dates."""
    out = []
    for c in items if isinstance(items, list) else []:
        if not isinstance(c, dict) or not _has(c, _CLAIM_KEYS):
            continue
        subject, ctype, status = _clean(c.get("subject"), 80), _clean(c.get("type"), 40).upper(), _clean(c.get("status"), 12).upper()
        if not subject or not ctype or status not in CLAIM_STATUSES:
            continue
        obj = _clean(c.get("object"), 80)
        out.append({"subject": subject, "object": None if obj.upper() in ("", "NONE") else obj, "type": ctype,
                    "status": status, "description": _clean(c.get("description"), 300),
                    "start": _date(c.get("start")), "end": _date(c.get("end"))})
    return out[: section.max_claims]


_DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


def _date(value: Any) -> str | None:
    v = _clean(value, 10)
    return v if _DATE.match(v) else None


def split_pack_answer(result: ChatResult, n: int, section: ExtractSection,
                      texts: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """A pack's result -> the answer columns of its n units' rows, in order (status,
    entities, relationships, claims, error, raw). A text the answer never reached (it was cut
    off first) gets an empty ok row noted as truncated, which the gleaning rule picks up.
    With `texts`, names not written in their own unit's text are dropped (see `grounded`)."""
    base = {"entities": [], "relationships": [], "claims": [], "raw": result.text, "error": None}
    if result.error:
        return [{**base, "status": "llm_error", "error": result.error} for _ in range(n)]
    repaired = repair_json_object(result.text or "")
    if repaired.obj is None:
        return [{**base, "status": "parse_error", "error": repaired.error} for _ in range(n)]
    truncated = repaired.truncated or result.finish_reason == "length"
    objs = [repaired.obj] if n == 1 else [repaired.obj.get(str(i + 1)) for i in range(n)]
    rows = []
    for i, obj in enumerate(objs):
        ents, rels, claims, notes = parse_unit(obj, section, texts[i] if texts is not None else None)
        if obj is None and not truncated:
            notes.append(f"the answer has no object for text {i + 1}")
        # Units after the cut are the ones it hurt; with one unit, that unit.
        if truncated and (n == 1 or obj is None or i == _last_present(objs)):
            notes.append(TRUNCATED_NOTE)
        raw = json.dumps(obj, ensure_ascii=False) if n > 1 and obj is not None else result.text
        rows.append({**base, "status": "ok", "entities": ents, "relationships": rels, "claims": claims,
                     "raw": raw, "error": "; ".join(notes) or None})
    return rows


def _last_present(objs: Sequence[Any]) -> int:
    present = [i for i, o in enumerate(objs) if o is not None]
    return present[-1] if present else -1


def parse_extraction(result: ChatResult, section: ExtractSection) -> dict[str, Any]:
    """A one-unit result -> the answer columns of its extractions row."""
    return split_pack_answer(result, 1, section)[0]
