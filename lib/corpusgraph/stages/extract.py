"""extract: text_units -> extractions, one schema-constrained LLM call per unit.

Prompt building and answer parsing are pure functions. `ExtractTask` bundles them for the
Ray workers (ray_runner.py): it turns a batch of unit rows into requests and the results into
`extractions` rows. A malformed answer becomes a parse_error row with the raw text; a failed
call becomes an llm_error row (retried on the next run); neither ever stops the stage.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Sequence

import pyarrow as pa

from ..config import ExtractSection
from ..llm.base import ChatRequest, ChatResult
from ..prompts import Prompt
from ..tables import table

__all__ = ["extraction_schema", "build_request", "parse_extraction", "ExtractTask", "pending_units"]


def extraction_schema(section: ExtractSection) -> dict[str, Any]:
    """JSON schema of one answer. Every array has maxItems and every string maxLength: small
    models otherwise repeat until the token limit (STACK.md)."""
    entity = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 80},
            "type": {"type": "string", "enum": list(section.entity_types)},
            "description": {"type": "string", "maxLength": 120},
        },
        "required": ["name", "type", "description"],
    }
    rel = {
        "type": "object",
        "properties": {
            "source": {"type": "string", "minLength": 1, "maxLength": 80},
            "target": {"type": "string", "minLength": 1, "maxLength": 80},
            "description": {"type": "string", "maxLength": 120},
            "strength": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["source", "target", "description", "strength"],
    }
    return {
        "type": "object",
        "properties": {
            "entities": {"type": "array", "items": entity, "maxItems": section.max_entities},
            "relationships": {"type": "array", "items": rel, "maxItems": section.max_relationships},
        },
        "required": ["entities", "relationships"],
    }


def build_request(unit_id: str, text: str, prompt: Prompt, section: ExtractSection, temperature: float = 0.0) -> ChatRequest:
    system = prompt.render(
        entity_types=", ".join(section.entity_types),
        max_entities=section.max_entities,
        max_relationships=section.max_relationships,
    )
    return ChatRequest(
        id=unit_id,
        messages=({"role": "system", "content": system}, {"role": "user", "content": f"Text:\n{text}"}),
        max_tokens=section.max_tokens,
        temperature=temperature,
        json_schema=extraction_schema(section),
    )


def _clean(value: Any, limit: int) -> str:
    return " ".join(str(value or "").split())[:limit]


def parse_extraction(result: ChatResult, section: ExtractSection) -> dict[str, Any]:
    """A result -> the answer columns of an extractions row (status, mentions, error, raw)."""
    from ..llm.factory import parse_json_answer

    base = {"entities": [], "relationships": [], "claims": [], "raw": result.text, "error": None}
    if result.error:
        return {**base, "status": "llm_error", "error": result.error}
    obj, err = parse_json_answer(result.text or "")
    if obj is None:
        return {**base, "status": "parse_error", "error": err}
    allowed = {t.upper() for t in section.entity_types}
    notes = []
    entities, seen = [], set()
    for e in obj.get("entities") or []:
        if not isinstance(e, dict):
            continue
        name, etype = _clean(e.get("name"), 80), _clean(e.get("type"), 40).upper()
        if not name:
            continue
        if etype not in allowed:
            notes.append(f"entity {name!r} has type {etype!r} outside the closed list; dropped")
            continue
        if (name.casefold(), etype) in seen:
            continue
        seen.add((name.casefold(), etype))
        entities.append({"name": name, "type": etype, "description": _clean(e.get("description"), 300)})
    rels = []
    for r in obj.get("relationships") or []:
        if not isinstance(r, dict):
            continue
        src, tgt = _clean(r.get("source"), 80), _clean(r.get("target"), 80)
        if not src or not tgt or src.casefold() == tgt.casefold():
            continue
        try:
            strength = int(r.get("strength") or 1)
        except (TypeError, ValueError):
            strength = 1
        rels.append(
            {"source": src, "target": tgt, "description": _clean(r.get("description"), 300),
             "strength": max(1, min(10, strength))}
        )
    if err:  # the parser repaired a truncated answer: keep what was complete, say so
        notes.append(err)
    return {**base, "status": "ok", "entities": entities, "relationships": rels,
            "error": "; ".join(notes) or None}


class ExtractTask:
    """What a Ray LLM worker needs to run extraction over a batch of text_units rows."""

    output_schema: pa.Schema = table("extractions").schema
    stage = "extract"

    def __init__(self, section: ExtractSection, prompt: Prompt, prompt_hash: str, model: str, run_id: str, temperature: float):
        self.section, self.prompt, self.prompt_hash = section, prompt, prompt_hash
        self.model, self.run_id, self.temperature = model, run_id, temperature

    def requests(self, rows: Sequence[dict]) -> list[ChatRequest]:
        return [build_request(r["unit_id"], r["text"], self.prompt, self.section, self.temperature) for r in rows]

    def outputs(self, rows: Sequence[dict], results: Sequence[ChatResult]) -> list[dict]:
        now = datetime.now(timezone.utc)
        out = []
        for row, res in zip(rows, results):
            out.append(
                {
                    "unit_id": row["unit_id"],
                    "prompt_hash": self.prompt_hash,
                    "model": self.model,
                    **parse_extraction(res, self.section),
                    "tokens_in": res.tokens_in,
                    "tokens_out": res.tokens_out,
                    "gleanings": 0,
                    "run_id": self.run_id,
                    "extracted_at": now,
                }
            )
        return out


def pending_units(text_units, extractions, prompt_hash: str, model: str):
    """Units with no usable result for this prompt and model (llm_error rows are retried)."""
    from pyspark.sql import functions as F

    done = extractions.where(
        (F.col("prompt_hash") == prompt_hash) & (F.col("model") == model) & (F.col("status") != "llm_error")
    ).select("unit_id")
    return text_units.join(done, "unit_id", "left_anti").select("unit_id", "text")
