"""extract: text_units -> extractions, schema-constrained LLM calls over packs of units.

Tokens are the bill, so short units are packed: one call carries up to `units_per_call` texts
(at most `pack_tokens` of them), numbered, under one short system prompt that is identical for
every call (a prefix llama.cpp and vLLM cache), and the schema asks for one object per text
keyed by its number. Each unit still gets its own extractions row, with the call's tokens
apportioned among its units. A pack of one asks for the unit's object itself.

Gleaning: after the first pass, a unit whose result looks incomplete (`needs_gleaning`: the
answer was cut off, a list hit its maxItems, or capitalised names in the text are not covered)
gets up to `glean_rounds` more rounds that name what was found and ask only for what was
missed; new items are merged into the row and `gleanings` counts the rounds done. A round that
adds nothing ends gleaning for that unit.

Prompt building, packing and answer parsing (stages/extract/parse.py; the gleaning rule in
stages/extract/glean.py) are pure functions. `PackTask` bundles them for
the Ray workers (runner/passes/llm.py): one request per pack row, one output row per pack holding its
units' extractions rows. A malformed answer becomes parse_error rows with the raw text; a failed
call becomes llm_error rows (retried on the next run); neither ever stops the stage.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import pyarrow as pa

from corpusgraph.config import ExtractSection
from corpusgraph.llm.base import ChatRequest, ChatResult
from corpusgraph.prompts import Prompt, load_prompt
from corpusgraph.stages.extract.fast import fast_identity
from corpusgraph.stages.extract.glean import GLEAN_STOP_NOTE, merge_gleaned, needs_gleaning
from corpusgraph.stages.extract.parse import CLAIM_STATUSES, TRUNCATED_NOTE, split_pack_answer
from corpusgraph.tables import spark_struct, table

__all__ = [
    "ExtractPrompts", "extract_identity", "extraction_schema", "pack_schema", "build_request", "build_pack_request",
    "pack_rows", "pack_requests", "PackTask", "pack_batch", "pending_units", "glean_candidates", "packs_from",
]
_EXTRACTION = pa.struct(list(table("extractions").schema))
# What a gleaning round needs of the row so far (no timestamps: they cross Spark/Arrow badly).
PRIOR_COLUMNS = ("status", "entities", "relationships", "claims", "tokens_in", "tokens_out", "gleanings", "error", "raw")
_PRIOR = pa.struct([table("extractions").schema.field(c) for c in PRIOR_COLUMNS])
_UNIT = [pa.field("unit_id", pa.string()), pa.field("text", pa.string()), pa.field("n_tokens", pa.int32()),
         pa.field("prior", _PRIOR)]


@dataclass(frozen=True)
class ExtractPrompts:
    """Every prompt file the LLM extraction uses; `hash` is the prompt_hash of its rows."""

    extract: Prompt
    cont: Prompt | None = None  # gleaning; None when glean_rounds is 0
    claims: Prompt | None = None  # None when claims are off

    def system(self, section: ExtractSection) -> str:
        claims = ""
        if self.claims is not None and section.claims:
            claims = self.claims.render(max_claims=section.max_claims).strip() + "\n"
        return self.extract.render(
            entity_types=", ".join(section.entity_types), max_entities=section.max_entities,
            max_relationships=section.max_relationships, claims=claims,
        ).replace("\n\n\n", "\n\n")

    def hash(self, section: ExtractSection) -> str:
        """Covers every prompt text used and every setting that changes the answers, so changing
        any of them re-extracts (and nothing else does)."""
        settings = {
            k: getattr(section, k) for k in (
                "entity_types", "max_entities", "max_relationships", "max_tokens", "units_per_call",
                "pack_tokens", "glean_rounds", "glean_min_missing", "claims", "max_claims")
        }
        used = [self.cont.template if self.cont and section.glean_rounds else None,
                self.claims.template if self.claims and section.claims else None]
        return self.extract.hash(extraction_schema(section), settings, used)


def extract_identity(section: ExtractSection, prompt_path: Callable[[str], Path], model: str
                     ) -> tuple[ExtractPrompts | None, str, str]:
    """(prompts, prompt_hash, model): what an extraction row is keyed on besides its unit.
    prompt_path: a prompt file's path from its config value (Config.prompt_path). The fast method
    has no prompt: its rows are keyed on its settings and spaCy model."""
    if section.method == "fast":
        return (None, *fast_identity(section))
    prompts = ExtractPrompts(
        load_prompt(prompt_path(section.prompt)),
        load_prompt(prompt_path(section.prompt_continue)) if section.glean_rounds else None,
        load_prompt(prompt_path(section.prompt_claims)) if section.claims else None,
    )
    return prompts, prompts.hash(section), model


# -- schema and requests -----------------------------------------------------------------------


def extraction_schema(section: ExtractSection) -> dict[str, Any]:
    """JSON schema of one unit's answer. Every array has maxItems and every string maxLength:
    small models otherwise repeat until the token limit."""
    name = {"type": "string", "minLength": 1, "maxLength": 80}
    text = {"type": "string", "maxLength": 120}
    entity = {"type": "object", "properties": {"name": name, "type": {"type": "string", "enum": list(section.entity_types)},
                                               "description": text},
              "required": ["name", "type", "description"]}
    rel = {"type": "object", "properties": {"source": name, "target": name, "description": text,
                                            "strength": {"type": "integer", "minimum": 1, "maximum": 10}},
           "required": ["source", "target", "description", "strength"]}
    props: dict[str, Any] = {
        "entities": {"type": "array", "items": entity, "maxItems": section.max_entities},
        "relationships": {"type": "array", "items": rel, "maxItems": section.max_relationships},
    }
    if section.claims:
        date = {"type": "string", "maxLength": 10}
        claim = {"type": "object", "properties": {
            "subject": name, "object": {"type": "string", "maxLength": 80},
            "type": {"type": "string", "minLength": 1, "maxLength": 40},
            "status": {"type": "string", "enum": list(CLAIM_STATUSES)}, "description": text,
            "start": date, "end": date},
            "required": ["subject", "object", "type", "status", "description", "start", "end"]}
        props["claims"] = {"type": "array", "items": claim, "maxItems": section.max_claims}
    return {"type": "object", "properties": props, "required": list(props)}


def pack_schema(section: ExtractSection, n: int) -> dict[str, Any]:
    """One unit: its own schema. Several: an object keyed "1".."n", one unit object each, all
    required, so constrained decoding answers every text in order."""
    unit = extraction_schema(section)
    if n == 1:
        return unit
    keys = [str(i + 1) for i in range(n)]
    return {"type": "object", "properties": {k: unit for k in keys}, "required": keys}


def user_message(texts: Sequence[str]) -> str:
    return "\n\n".join(f"Text {i + 1}:\n{t}" for i, t in enumerate(texts))


def _found_list(priors: Sequence[dict | None]) -> str:
    lines = []
    for i, prior in enumerate(priors):
        ents = (prior or {}).get("entities") or []
        names = ", ".join(f"{e['name']} ({e['type']})" for e in ents) or "nothing"
        lines.append(f"Text {i + 1}: {names}")
    return "\n".join(lines)


def build_pack_request(pack_id: str, texts: Sequence[str], prompts: ExtractPrompts, section: ExtractSection,
                       temperature: float = 0.0, priors: Sequence[dict | None] | None = None,
                       schema: dict[str, Any] | None = None) -> ChatRequest:
    """One call for a pack of texts. With `priors` (the rows so far) it is a gleaning call:
    the same system prompt and texts, then the continue prompt naming what was found.
    schema: pack_schema(section, len(texts)), when the caller keeps one per pack size."""
    user = user_message(texts)
    if priors is not None:
        if prompts.cont is None:
            raise ValueError("a gleaning request needs the continue prompt (extract.prompt_continue)")
        user += "\n\n" + prompts.cont.render(found=_found_list(priors))
    return ChatRequest(
        id=pack_id,
        messages=({"role": "system", "content": prompts.system(section)}, {"role": "user", "content": user}),
        max_tokens=section.max_tokens * len(texts),
        temperature=temperature,
        json_schema=pack_schema(section, len(texts)) if schema is None else schema,
    )


def build_request(unit_id: str, text: str, prompts: ExtractPrompts, section: ExtractSection,
                  temperature: float = 0.0) -> ChatRequest:
    """The request for one unit on its own (a pack of one)."""
    return build_pack_request(unit_id, [text], prompts, section, temperature)


# -- packing -------------------------------------------------------------------------------------


def pack_rows(rows: Sequence[dict], section: ExtractSection) -> list[list[dict]]:
    """Greedy packing in the given order: a pack closes when the next unit would pass
    pack_tokens or units_per_call; a unit over pack_tokens goes alone."""
    packs: list[list[dict]] = []
    cur: list[dict] = []
    used = 0
    for r in rows:
        n = int(r.get("n_tokens") or 0)
        if cur and (used + n > section.pack_tokens or len(cur) >= section.units_per_call):
            packs.append(cur)
            cur, used = [], 0
        cur.append(r)
        used += n
    if cur:
        packs.append(cur)
    return packs


def pack_requests(rows: Sequence[dict], prompts: ExtractPrompts, section: ExtractSection,
                  temperature: float = 0.0) -> list[ChatRequest]:
    """The first-pass requests the stage sends for these unit rows (unit_id, text, n_tokens),
    packed as `packs_from` packs them: for estimates and measurements of what a run will send."""
    ordered = sorted(rows, key=lambda r: (int(r.get("n_tokens") or 0), r["unit_id"]))
    return [build_pack_request(pack_id([u["unit_id"] for u in p], 0), [u["text"] for u in p], prompts, section,
                               temperature) for p in pack_rows(ordered, section)]


def pack_id(unit_ids: Sequence[str], round_: int) -> str:
    return hashlib.sha256(json.dumps([round_, *unit_ids]).encode()).hexdigest()[:20]


# -- the tasks Ray runs ----------------------------------------------------------------------------


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split an integer total in proportion to weights; the parts sum to the total exactly."""
    if not weights:
        return []
    w = [max(0.0, float(x)) for x in weights]
    s = sum(w) or float(len(w))
    w = w if sum(w) else [1.0] * len(w)
    raw = [total * x / s for x in w]
    parts = [int(r) for r in raw]
    order = sorted(range(len(w)), key=lambda i: raw[i] - parts[i], reverse=True)
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


class PackTask:
    """What a Ray LLM worker needs to run one extraction round over pack rows.

    A pack row: pack_id, units (list of {unit_id, text, n_tokens, prior}); `prior` is the row
    so far in a gleaning round (round_ >= 1), else null. Output: one row per pack, `rows`
    holding its units' extractions rows.
    """

    stage = "extract"

    def __init__(self, section: ExtractSection, prompts: ExtractPrompts, prompt_hash: str, model: str, run_id: str,
                 temperature: float, round_: int = 0):
        self.section, self.prompts, self.prompt_hash = section, prompts, prompt_hash
        self.model, self.run_id, self.temperature, self.round = model, run_id, temperature, round_
        self.output_schema = pa.schema([("pack_id", pa.string()), ("rows", pa.list_(_EXTRACTION))])
        self._schemas: dict[int, dict[str, Any]] = {}  # pack size -> its answer schema, built once

    def requests(self, packs: Sequence[dict]) -> list[ChatRequest]:
        out = []
        for p in packs:
            n = len(p["units"])
            schema = self._schemas.get(n)
            if schema is None:
                schema = self._schemas[n] = pack_schema(self.section, n)
            out.append(build_pack_request(p["pack_id"], [u["text"] for u in p["units"]], self.prompts, self.section,
                                          self.temperature, [u["prior"] for u in p["units"]] if self.round else None,
                                          schema=schema))
        return out

    def outputs(self, packs: Sequence[dict], results: Sequence[ChatResult]) -> list[dict]:
        now = datetime.now(timezone.utc)
        return [{"pack_id": p["pack_id"], "rows": self.unit_rows(p["units"], res, now)} for p, res in zip(packs, results)]

    def unit_rows(self, units: Sequence[dict], res: ChatResult, now: datetime) -> list[dict]:
        answers = split_pack_answer(res, len(units), self.section, [u["text"] for u in units])
        tin = apportion(res.tokens_in, [int(u.get("n_tokens") or 0) + 1 for u in units])
        tout = apportion(res.tokens_out, [len(a["raw"] or "") + 1 for a in answers])
        rows = []
        for u, ans, ti, to in zip(units, answers, tin, tout):
            row = {"unit_id": u["unit_id"], "prompt_hash": self.prompt_hash, "model": self.model, **ans,
                   "tokens_in": ti, "tokens_out": to, "gleanings": 0, "run_id": self.run_id, "extracted_at": now}
            prior = u.get("prior") if self.round else None
            if prior is not None:
                row = self._glean_row(prior, row)
            rows.append(row)
        return rows

    def _glean_row(self, prior: dict, new: dict) -> dict:
        """A gleaning round's row: the prior row with the new items merged in, tokens summed. A
        failed round keeps the prior items as they were and ends gleaning for the unit."""
        notes = [n for n in (prior.get("error") or "").split("; ") if n and n != TRUNCATED_NOTE]
        base = {**new, "tokens_in": (prior.get("tokens_in") or 0) + new["tokens_in"],
                "tokens_out": (prior.get("tokens_out") or 0) + new["tokens_out"], "gleanings": self.round,
                "status": prior.get("status") or "ok", "raw": prior.get("raw")}
        if new["status"] != "ok":
            notes.append(f"{GLEAN_STOP_NOTE} (round {self.round} {new['status']}: {new['error']})")
            kept = {k: prior.get(k) or [] for k in ("entities", "relationships", "claims")}
            return {**base, **kept, "error": "; ".join(notes)}
        merged, added = merge_gleaned(prior, new)
        if added == 0:
            notes.append(GLEAN_STOP_NOTE)
        if TRUNCATED_NOTE in (new.get("error") or ""):
            notes.append(TRUNCATED_NOTE)
        lists = {k: merged[k] for k in ("entities", "relationships", "claims")}
        return {**base, **lists, "error": "; ".join(dict.fromkeys(notes)) or None}


# -- Spark transforms (no actions) -----------------------------------------------------------------


def pending_units(text_units, extractions, prompt_hash: str, model: str):
    """Units with no usable result for this prompt and model (llm_error rows are retried)."""
    from pyspark.sql import functions as F

    done = extractions.where(
        (F.col("prompt_hash") == prompt_hash) & (F.col("model") == model) & (F.col("status") != "llm_error")
    ).select("unit_id")
    return text_units.join(done, "unit_id", "left_anti").select("unit_id", "text", "n_tokens")


def glean_candidates(extractions, text_units, section: ExtractSection, prompt_hash: str, model: str, round_: int):
    """Rows that may be due for gleaning round `round_`: this prompt and model, `round_ - 1`
    rounds done. Columns: unit_id, text, n_tokens, prior (the extractions row as a struct).
    Which of them `needs_gleaning` is decided where they are packed (packs_from's
    `needs_gleaning`), in the same pass over the rows: a row-at-a-time Python filter here sent
    every row and its prior through Python once more."""
    from pyspark.sql import functions as F

    mine = extractions.where((F.col("prompt_hash") == prompt_hash) & (F.col("model") == model)
                             & (F.col("status") == "ok") & (F.col("gleanings") == round_ - 1))
    joined = mine.join(text_units.select("unit_id", "text", "n_tokens"), "unit_id")
    prior = F.struct(*[F.col(c) for c in PRIOR_COLUMNS])
    return joined.select("unit_id", "text", "n_tokens", prior.alias("prior"))


def _packs_schema(names: Sequence[str]) -> pa.Schema:
    unit_type = pa.struct([f for f in _UNIT if f.name in names])
    return pa.schema([("pack_id", pa.string()), ("units", pa.list_(unit_type))])


def pack_batch(rows: Sequence[dict], section: ExtractSection, round_: int,
               names: Sequence[str] = ("unit_id", "text", "n_tokens")) -> pa.RecordBatch | None:
    """Unit rows -> one Arrow batch of pack rows (pack_id, units[] holding `names`), the input
    PackTask reads; packed greedily in length order, so similar units share calls. None: no rows."""
    rows = sorted(rows, key=lambda r: (int(r.get("n_tokens") or 0), r["unit_id"]))
    packs = pack_rows(rows, section)
    if not packs:
        return None
    return pa.RecordBatch.from_pylist(
        [{"pack_id": pack_id([u["unit_id"] for u in p], round_), "units": [{k: u.get(k) for k in names} for u in p]}
         for p in packs], schema=_packs_schema(names))


def packs_from(units, section: ExtractSection, round_: int, with_prior: bool, only_incomplete: bool = False):
    """Unit rows -> pack rows (pack_id, units[]), packed greedily within each partition (no
    shuffle; a pack never spans partitions) by `pack_batch`. only_incomplete (gleaning, rows from
    glean_candidates): only the rows whose prior `needs_gleaning` are packed."""
    names = ["unit_id", "text", "n_tokens"] + (["prior"] if with_prior else [])

    def keep(row: dict) -> bool:
        return not only_incomplete or needs_gleaning(row["text"] or "", row["prior"] or {}, section)

    def pack_partition(batches):
        batch = pack_batch([r for b in batches for r in b.to_pylist() if keep(r)], section, round_, names)
        if batch is not None:
            yield batch

    return units.select(*names).mapInArrow(pack_partition, spark_struct(_packs_schema(names)))
