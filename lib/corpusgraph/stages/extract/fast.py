"""extract (fast method): text_units -> extractions with spaCy and no LLM call.

graphrag's "fast" indexing idea: named entities from an NLP model instead of an LLM, and
relationships from co-occurrence. Here:

- spaCy's entity labels map onto the configured closed type list (`extract.fast_type_map`); a
  label whose type is not in `extract.entity_types` is dropped, so the closed list still rules.
  With `extract.fast_noun_phrase_type` set, noun phrases that are not named entities become
  entities of that generic type.
- Two entities in the same sentence are related; the strength is the number of sentences of
  the unit that name both (capped at 10), the description is the first such sentence.
- An entity's description is the first sentence of the unit that names it: "as stated in this
  text", like the LLM method's.

The rows are ordinary `extractions` rows (model "fast:spacy:<package>-<version>", prompt_hash a
hash of the settings), so resolve, communities and embed read them unchanged. The pure part
works on (text, label, sentence) triples and is tested without spaCy; the Spark part maps it
over the pending units with mapInArrow, loading the spaCy model once per Python worker.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import combinations
from typing import Iterable, Iterator, Sequence

import pyarrow as pa

from corpusgraph.config import ExtractSection
from corpusgraph.tables import table
from corpusgraph.text import clean_name, normalise_name

__all__ = [
    "NOUN_PHRASE",
    "Mention",
    "clean_name",
    "typed_mentions",
    "extraction_from_mentions",
    "fast_identity",
    "spans_of",
    "extract_texts",
    "fast_extract_batches",
    "extract_units",
]

# The label given to spaCy noun chunks in the (text, label, sentence) triples.
NOUN_PHRASE = "NOUN_PHRASE"
_MAX_STRENGTH = 10
# A sentence naming more entities than this (a list, a table row) relates only its first ones:
# pairs grow with the square, and a list says little about how its items relate.
_MAX_PER_SENTENCE = 12


@dataclass(frozen=True)
class Mention:
    name: str
    type: str
    sentence: int


def typed_mentions(spans: Iterable[tuple[str, str, int]], section: ExtractSection) -> list[Mention]:
    """(text, spaCy label or NOUN_PHRASE, sentence index) -> mentions of the closed types.

    A noun phrase that covers the same name as a named entity adds nothing (the named entity
    keeps its specific type); the first type seen for a name in a unit wins.
    """
    allowed = {t.upper() for t in section.entity_types}
    named: list[Mention] = []
    phrases: list[Mention] = []
    for text, label, sentence in spans:
        if label == NOUN_PHRASE:
            etype = section.fast_noun_phrase_type
        else:
            etype = section.fast_type_map.get(label)
        if not etype or etype.upper() not in allowed:
            continue
        name = clean_name(text)
        if not name:
            continue
        (phrases if label == NOUN_PHRASE else named).append(Mention(name, etype.upper(), int(sentence)))
    named_keys = {normalise_name(m.name) for m in named}
    return named + [m for m in phrases if normalise_name(m.name) not in named_keys]


def _clip(sentence: str, limit: int) -> str:
    return " ".join(sentence.split())[:limit]


def extraction_from_mentions(
    mentions: Sequence[Mention], sentences: Sequence[str], section: ExtractSection
) -> dict[str, list[dict]]:
    """Entities (one per name, first type and first sentence) and co-occurrence relationships."""
    limit = section.fast_max_description_chars
    first: dict[str, Mention] = {}
    by_sentence: dict[int, list[str]] = {}
    for m in mentions:
        key = normalise_name(m.name)
        if not key:
            continue
        first.setdefault(key, m)
        keys = by_sentence.setdefault(m.sentence, [])
        if key not in keys:
            keys.append(key)

    def sentence_text(i: int) -> str:
        return _clip(sentences[i], limit) if 0 <= i < len(sentences) else ""

    entities = [
        {"name": m.name, "type": m.type, "description": sentence_text(m.sentence)} for m in first.values()
    ]
    counts: dict[tuple[str, str], int] = {}
    where: dict[tuple[str, str], int] = {}
    for i in sorted(by_sentence):
        for a, b in combinations(by_sentence[i][:_MAX_PER_SENTENCE], 2):
            pair = (a, b) if a < b else (b, a)
            counts[pair] = counts.get(pair, 0) + 1
            where.setdefault(pair, i)
    relationships = [
        {
            "source": first[a].name,
            "target": first[b].name,
            "description": sentence_text(where[(a, b)]),
            "strength": min(_MAX_STRENGTH, n),
        }
        for (a, b), n in counts.items()
    ]
    return {"entities": entities, "relationships": relationships}


def model_version(section: ExtractSection) -> str:
    """The installed version of the spaCy model package (without loading the model)."""
    from importlib import metadata

    try:
        return metadata.version(section.fast_model.replace("_", "-"))
    except metadata.PackageNotFoundError:
        return "unknown"


def fast_identity(section: ExtractSection) -> tuple[str, str]:
    """(prompt_hash, model) of the fast method: its rows are keyed on its settings and the
    spaCy model, so changing either re-extracts, exactly as a new prompt does for the LLM."""
    settings = {
        "method": "fast",
        "entity_types": sorted(t.upper() for t in section.entity_types),
        "type_map": dict(sorted(section.fast_type_map.items())),
        "noun_phrase_type": section.fast_noun_phrase_type,
        "description_chars": section.fast_max_description_chars,
        "per_sentence": _MAX_PER_SENTENCE,
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8")).hexdigest()[:16]
    return digest, f"fast:spacy:{section.fast_model}-{model_version(section)}"


@functools.lru_cache(maxsize=2)
def _nlp(model: str):
    """The spaCy pipeline, loaded once per process (a Spark Python worker is reused across tasks)."""
    import spacy

    # Lemmas are not used; dropping the lemmatizer saves a fifth of the time per text.
    return spacy.load(model, exclude=["lemmatizer"])


def spans_of(doc, with_noun_phrases: bool) -> tuple[list[tuple[str, str, int]], list[str]]:
    """A spaCy Doc -> (text, label, sentence index) triples, and the sentence texts."""
    sents = list(doc.sents)
    index = {s.start: i for i, s in enumerate(sents)}
    starts = sorted(index)

    def sentence_of(token_i: int) -> int:
        lo, hi = 0, len(starts) - 1
        while lo < hi:  # the last sentence start at or before the token
            mid = (lo + hi + 1) // 2
            if starts[mid] <= token_i:
                lo = mid
            else:
                hi = mid - 1
        return index[starts[lo]] if starts else 0

    spans = [(e.text, e.label_, sentence_of(e.start)) for e in doc.ents]
    if with_noun_phrases:
        spans += [(c.text, NOUN_PHRASE, sentence_of(c.start)) for c in doc.noun_chunks]
    return spans, [s.text for s in sents]


def extract_texts(texts: Sequence[str], section: ExtractSection) -> list[dict[str, list[dict]]]:
    """Entities and relationships of each text, through the spaCy pipeline (batched)."""
    nlp = _nlp(section.fast_model)
    with_np = bool(section.fast_noun_phrase_type)
    out = []
    for doc in nlp.pipe(texts, batch_size=32):
        spans, sentences = spans_of(doc, with_np)
        out.append(extraction_from_mentions(typed_mentions(spans, section), sentences, section))
    return out


def _rows(unit_ids: Sequence[str], texts: Sequence[str], section: ExtractSection, prompt_hash: str, model: str,
          run_id: str) -> list[dict]:
    now = datetime.now(timezone.utc)
    rows = []
    for unit_id, text, found in zip(unit_ids, texts, extract_texts([t or "" for t in texts], section)):
        rows.append({
            "unit_id": unit_id, "prompt_hash": prompt_hash, "model": model, "status": "ok",
            "entities": found["entities"], "relationships": found["relationships"], "claims": [],
            "tokens_in": 0, "tokens_out": 0, "gleanings": 0, "error": None, "raw": None,
            "run_id": run_id, "extracted_at": now,
        })
    return rows


def fast_extract_batches(batches: Iterator[pa.RecordBatch], section: ExtractSection, prompt_hash: str, model: str,
                         run_id: str) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: (unit_id, text) batches -> extractions batches."""
    schema = table("extractions").schema
    for batch in batches:
        cols = batch.to_pydict()
        rows = _rows(cols["unit_id"], cols["text"], section, prompt_hash, model, run_id)
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=schema)


def extract_units(pending, section: ExtractSection, run_id: str):
    """DataFrame of (unit_id, text) -> DataFrame of extractions rows (lazy; no action)."""
    from corpusgraph.tables import spark_schema

    prompt_hash, model = fast_identity(section)
    return pending.select("unit_id", "text").mapInArrow(
        lambda it: fast_extract_batches(it, section, prompt_hash, model, run_id), spark_schema("extractions")
    )
