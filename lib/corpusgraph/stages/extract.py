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

Prompt building, packing and answer parsing are pure functions. `PackTask` bundles them for
the Ray workers (ray_runner.py): one request per pack row, one output row per pack holding its
units' extractions rows. A malformed answer becomes parse_error rows with the raw text; a failed
call becomes llm_error rows (retried on the next run); neither ever stops the stage.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

import pyarrow as pa

from ..config import ExtractSection
from ..llm.base import ChatRequest, ChatResult
from ..llm.repair import repair_json_object
from ..prompts import Prompt
from ..tables import spark_struct, table

__all__ = [
    "ExtractPrompts", "extraction_schema", "pack_schema", "build_request", "build_pack_request",
    "parse_extraction", "split_pack_answer", "pack_rows", "pack_requests", "needs_gleaning", "merge_gleaned",
    "ExtractTask", "PackTask", "pending_units", "glean_candidates", "packs_from",
]

TRUNCATED_NOTE = "answer cut off by the token limit"
GLEAN_STOP_NOTE = "gleaning found nothing new"
CLAIM_STATUSES = ("TRUE", "FALSE", "SUSPECTED")
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


def _as_prompts(prompt: Prompt | ExtractPrompts) -> ExtractPrompts:
    return prompt if isinstance(prompt, ExtractPrompts) else ExtractPrompts(prompt)


# -- schema and requests -----------------------------------------------------------------------


def extraction_schema(section: ExtractSection) -> dict[str, Any]:
    """JSON schema of one unit's answer. Every array has maxItems and every string maxLength:
    small models otherwise repeat until the token limit (STACK.md)."""
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


def build_pack_request(pack_id: str, texts: Sequence[str], prompt: Prompt | ExtractPrompts, section: ExtractSection,
                       temperature: float = 0.0, priors: Sequence[dict | None] | None = None) -> ChatRequest:
    """One call for a pack of texts. With `priors` (the rows so far) it is a gleaning call:
    the same system prompt and texts, then the continue prompt naming what was found."""
    prompts = _as_prompts(prompt)
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
        json_schema=pack_schema(section, len(texts)),
    )


def build_request(unit_id: str, text: str, prompt: Prompt | ExtractPrompts, section: ExtractSection,
                  temperature: float = 0.0) -> ChatRequest:
    """The request for one unit on its own (a pack of one)."""
    return build_pack_request(unit_id, [text], prompt, section, temperature)


# -- parsing -------------------------------------------------------------------------------------


def _clean(value: Any, limit: int) -> str:
    return " ".join(str(value or "").split())[:limit]


def _items(value: Any) -> list:
    """A list field of an answer; any other type (a number, a string, an object) holds no items."""
    return value if isinstance(value, list) else []


def _has(item: dict, keys: Iterable[str]) -> bool:
    return all(k in item for k in keys)


_WORDS = re.compile(r"\w+")


def grounded(name: str, text: str) -> bool:
    """Is the name written in the text? Case-insensitive, and word by word so spacing and
    punctuation may differ. In a packed call this is what keeps a name from one text out of
    another text's row (small models mix them up)."""
    folded = text.casefold()
    if name.casefold() in folded:
        return True
    words = set(_WORDS.findall(folded))
    return all(w in words for w in _WORDS.findall(name.casefold()))


def parse_unit(obj: Any, section: ExtractSection, text: str | None = None
               ) -> tuple[list[dict], list[dict], list[dict], list[str]]:
    """One unit's answer object -> (entities, relationships, claims, notes). An item missing a
    required key (a trailing item an answer cut off) is dropped: nothing is made up for it.
    With `text`, entities and relationship ends not written in it are dropped too."""
    obj = obj if isinstance(obj, dict) else {}
    dropped = 0
    allowed = {t.upper() for t in section.entity_types}
    notes: list[str] = []
    entities, seen = [], set()
    for e in _items(obj.get("entities")):
        if not isinstance(e, dict) or not _has(e, ("name", "type")):
            continue
        name, etype = _clean(e.get("name"), 80), _clean(e.get("type"), 40).upper()
        if not name:
            continue
        if etype not in allowed:
            notes.append(f"entity {name!r} has type {etype!r} outside the closed list; dropped")
            continue
        if (name.casefold(), etype) in seen:
            continue
        if text is not None and not grounded(name, text):
            dropped += 1
            continue
        seen.add((name.casefold(), etype))
        entities.append({"name": name, "type": etype, "description": _clean(e.get("description"), 300)})
    rels = []
    for r in _items(obj.get("relationships")):
        if not isinstance(r, dict) or not _has(r, ("source", "target", "strength")):
            continue
        src, tgt = _clean(r.get("source"), 80), _clean(r.get("target"), 80)
        if not src or not tgt or src.casefold() == tgt.casefold():
            continue
        if text is not None and not (grounded(src, text) and grounded(tgt, text)):
            dropped += 1
            continue
        try:
            strength = int(r["strength"])
        except (TypeError, ValueError, OverflowError):  # OverflowError: 1e999 parses as infinity
            continue
        rels.append({"source": src, "target": tgt, "description": _clean(r.get("description"), 300),
                     "strength": max(1, min(10, strength))})
    claims = parse_claims(obj.get("claims"), section) if section.claims else []
    if text is not None:
        kept = [c for c in claims if grounded(c["subject"], text)]
        dropped += len(claims) - len(kept)
        claims = kept
    if dropped:
        notes.append(f"{dropped} items named things not written in the text; dropped")
    return entities, rels, claims, notes


def parse_claims(items: Any, section: ExtractSection) -> list[dict]:
    """Claims with a subject, a type and a known status; dates kept only when they look like dates."""
    out = []
    for c in items if isinstance(items, list) else []:
        if not isinstance(c, dict) or not _has(c, ("subject", "type", "status")):
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


def pack_requests(rows: Sequence[dict], prompts: Prompt | ExtractPrompts, section: ExtractSection,
                  temperature: float = 0.0) -> list[ChatRequest]:
    """The first-pass requests the stage sends for these unit rows (unit_id, text, n_tokens),
    packed as `packs_from` packs them: for estimates and measurements of what a run will send."""
    ordered = sorted(rows, key=lambda r: (int(r.get("n_tokens") or 0), r["unit_id"]))
    return [build_pack_request(pack_id([u["unit_id"] for u in p], 0), [u["text"] for u in p], prompts, section,
                               temperature) for p in pack_rows(ordered, section)]


def pack_id(unit_ids: Sequence[str], round_: int) -> str:
    return hashlib.sha256(json.dumps([round_, *unit_ids]).encode()).hexdigest()[:20]


# -- gleaning ------------------------------------------------------------------------------------

# A capitalised word run, optionally joined by short connectors ("Bank of England").
_WORD = r"[A-Z](?:[\w'&-]|\.(?=\w))*"  # a dot only inside a word ("U.S"), never a sentence end
_NAME = re.compile(rf"\b{_WORD}(?:[ \t]+(?:(?:of|the|de|du|van|von|la|&)[ \t]+)?{_WORD})*")
_DETERMINER = re.compile(r"^(?:The|A|An|In|On|At|By|For|From|With|Its|His|Her|Their)\s+")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\"\n]\s*)$")


def named_spans(text: str) -> set[str]:
    """Capitalised names in a text, as a cheap stand-in for "named things": single words that
    only open a sentence ("The", "After") are left out, multi-word runs are kept."""
    spans = set()
    for m in _NAME.finditer(text):
        span = m.group(0).strip(" .'-")
        if " " not in span and _SENTENCE_START.search(text[: m.start()]):
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


# -- the tasks Ray runs ----------------------------------------------------------------------------


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

    def requests(self, packs: Sequence[dict]) -> list[ChatRequest]:
        return [build_pack_request(p["pack_id"], [u["text"] for u in p["units"]], self.prompts, self.section,
                                   self.temperature, [u["prior"] for u in p["units"]] if self.round else None)
                for p in packs]

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


class ExtractTask:
    """One unit per call over plain text_units rows (unit_id, text): the unpacked protocol,
    kept for callers that hand units straight to Ray (tests/benchmarks/test_llm_capacity.py)."""

    output_schema: pa.Schema = table("extractions").schema
    stage = "extract"

    def __init__(self, section: ExtractSection, prompt: Prompt | ExtractPrompts, prompt_hash: str, model: str,
                 run_id: str, temperature: float):
        self.pack = PackTask(section, _as_prompts(prompt), prompt_hash, model, run_id, temperature)

    def requests(self, rows: Sequence[dict]) -> list[ChatRequest]:
        return [build_request(r["unit_id"], r["text"], self.pack.prompts, self.pack.section, self.pack.temperature)
                for r in rows]

    def outputs(self, rows: Sequence[dict], results: Sequence[ChatResult]) -> list[dict]:
        now = datetime.now(timezone.utc)
        return [self.pack.unit_rows([r], res, now)[0] for r, res in zip(rows, results)]


# -- Spark transforms (no actions) -----------------------------------------------------------------


def pending_units(text_units, extractions, prompt_hash: str, model: str):
    """Units with no usable result for this prompt and model (llm_error rows are retried)."""
    from pyspark.sql import functions as F

    done = extractions.where(
        (F.col("prompt_hash") == prompt_hash) & (F.col("model") == model) & (F.col("status") != "llm_error")
    ).select("unit_id")
    return text_units.join(done, "unit_id", "left_anti").select("unit_id", "text", "n_tokens")


def glean_candidates(extractions, text_units, section: ExtractSection, prompt_hash: str, model: str, round_: int):
    """Rows due for gleaning round `round_`: this prompt and model, `round_ - 1` rounds done,
    and `needs_gleaning` says the result looks incomplete. Columns: unit_id, text, n_tokens,
    prior (the extractions row as a struct)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    mine = extractions.where((F.col("prompt_hash") == prompt_hash) & (F.col("model") == model)
                             & (F.col("status") == "ok") & (F.col("gleanings") == round_ - 1))
    joined = mine.join(text_units.select("unit_id", "text", "n_tokens"), "unit_id")
    prior = F.struct(*[F.col(c) for c in PRIOR_COLUMNS])

    @F.udf(BooleanType())
    def incomplete(text, row):
        return needs_gleaning(text or "", row.asDict(recursive=True), section)

    return joined.select("unit_id", "text", "n_tokens", prior.alias("prior")).where(incomplete("text", "prior"))


def packs_from(units, section: ExtractSection, round_: int, with_prior: bool):
    """Unit rows -> pack rows (pack_id, units[]), packed greedily within each partition (no
    shuffle; a pack never spans partitions). Ordered by length so similar units share calls."""
    names = ["unit_id", "text", "n_tokens"] + (["prior"] if with_prior else [])
    unit_type = pa.struct([f for f in _UNIT if f.name in names])
    schema = pa.schema([("pack_id", pa.string()), ("units", pa.list_(unit_type))])

    def pack_partition(batches):
        rows = [r for b in batches for r in b.to_pylist()]
        rows.sort(key=lambda r: (int(r.get("n_tokens") or 0), r["unit_id"]))
        packs = pack_rows(rows, section)
        if packs:
            yield pa.RecordBatch.from_pylist(
                [{"pack_id": pack_id([u["unit_id"] for u in p], round_), "units": [{k: u.get(k) for k in names} for u in p]}
                 for p in packs], schema=schema)

    return units.select(*names).mapInArrow(pack_partition, spark_struct(schema))
