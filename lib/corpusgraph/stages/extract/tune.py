"""`corpusgraph prompt-tune`: domain entity types and few-shot examples drawn from the corpus.

A closed entity-type list that fits the corpus is what keeps the graph connected, and a model
follows examples from the corpus better than generic instructions. This samples N text units,
asks the configured LLM (through the LLM layer) to propose entity types, runs the real
extraction on a few samples with those types, keeps the answers that hold up (every entity
named as written in the text, relationships between listed entities), and writes an editable
prompt folder: extract.txt with the examples, the continue and claims prompts, and
entity_types.yaml, a config snippet that points `extract` at them.

Everything here but `tune` is pure; `tune` takes a chat model and unit rows, so the command
line decides where they come from (an existing text_units table, or ingest + chunk).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from corpusgraph.config import ExtractSection
from corpusgraph.llm.base import ChatModel, ChatRequest, ChatResult
from corpusgraph.llm.repair import repair_json_object
from corpusgraph.prompts import Prompt
from corpusgraph.stages.extract.llm import ExtractPrompts, build_request
from corpusgraph.stages.extract.parse import parse_extraction
from corpusgraph.tokens import truncate_tokens

__all__ = ["TuneResult", "sample_units", "types_request", "parse_types", "good_example", "tuned_template", "tune",
           "write_prompt_folder"]

_TYPE = re.compile(r"^[A-Z][A-Z_]{1,29}$")
TYPES_SYSTEM = (
    "You design the entity types of a knowledge graph. Read the sample texts and list the kinds of "
    "named things they mention, as short UPPERCASE type names (e.g. PERSON, ORGANIZATION, LOCATION, "
    "or a domain kind such as VESSEL or DRUG). Give between 3 and {max_types} types that cover most named "
    "things; no generic types like THING or CONCEPT."
)


@dataclass
class TuneResult:
    entity_types: list[str]
    examples: list[dict[str, Any]]  # {"text", "answer"}
    sampled: int
    notes: list[str] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0


def sample_units(rows: Sequence[dict], n: int, seed: int = 0) -> list[dict]:
    """A seeded sample of n units with some text, in a stable order (by unit_id first, so the
    sample does not depend on the order the table was read in)."""
    usable = sorted((r for r in rows if (r.get("text") or "").strip()), key=lambda r: r["unit_id"])
    return random.Random(seed).sample(usable, min(n, len(usable)))


def types_request(texts: Sequence[str], max_types: int, budget_tokens: int = 1500) -> ChatRequest:
    """One call: the sampled texts (cut to a token budget shared equally) -> proposed types."""
    per = max(40, budget_tokens // max(1, len(texts)))
    body = "\n\n".join(f"Sample {i + 1}:\n{truncate_tokens(t, per)}" for i, t in enumerate(texts))
    schema = {"type": "object", "properties": {"entity_types": {
        "type": "array", "maxItems": max_types, "items": {"type": "string", "minLength": 3, "maxLength": 30}}},
        "required": ["entity_types"]}
    return ChatRequest(id="prompt-tune-types",
                       messages=({"role": "system", "content": TYPES_SYSTEM.replace("{max_types}", str(max_types))},
                                 {"role": "user", "content": body}),
                       max_tokens=20 * max_types + 20, temperature=0.0, json_schema=schema)


def parse_types(result: ChatResult, max_types: int) -> tuple[list[str], str | None]:
    """Distinct, well-formed type names in the model's order; (types, why none) on failure."""
    if result.error:
        return [], f"the model call failed: {result.error}"
    obj = repair_json_object(result.text).obj
    if obj is None or not isinstance(obj.get("entity_types"), list):
        return [], f"no entity_types list in the answer: {(result.text or '')[:200]!r}"
    out: list[str] = []
    for t in obj["entity_types"]:
        name = re.sub(r"[^A-Z_]", "_", str(t).strip().upper()).strip("_")
        if _TYPE.match(name) and name not in out and name not in ("THING", "CONCEPT", "OTHER", "ENTITY"):
            out.append(name)
    return out[:max_types], None if out else "the answer named no usable type"


def good_example(text: str, row: dict) -> bool:
    """An extraction worth showing: ok, at least two entities, every entity name as written in
    the text, every relationship between listed entities and described."""
    if row.get("status") != "ok" or len(row.get("entities") or []) < 2:
        return False
    folded = text.casefold()
    names = {e["name"].casefold() for e in row["entities"]}
    if not all(n in folded for n in names):
        return False
    return all(r["source"].casefold() in names and r["target"].casefold() in names and r["description"]
               for r in row.get("relationships") or [])


def _example_answer(row: dict) -> dict:
    return {"entities": row["entities"], "relationships": row["relationships"]}


def _defuse(text: str) -> str:
    """Corpus text going into a template: a "{word}" there would read as a placeholder."""
    return re.sub(r"\{([a-z_][a-z0-9_]*)\}", r"{ \1 }", text)


def tuned_template(base: str, examples: Sequence[dict]) -> str:
    """The base extract prompt with the examples appended; they sit in the system prompt, so
    every call shares them as one cached prefix."""
    if not examples:
        return base
    parts = [base.rstrip("\n"), "", "Examples from this corpus (one text each):"]
    for i, ex in enumerate(examples, 1):
        parts += ["", f"Example {i}, Text 1:", _defuse(ex["text"]), "Answer:",
                  _defuse(json.dumps(ex["answer"], ensure_ascii=False))]
    return "\n".join(parts) + "\n"


def tune(chat: ChatModel, units: Sequence[dict], section: ExtractSection, base_prompt: Prompt, *, n: int = 8,
         max_types: int = 8, n_examples: int = 2, example_tokens: int = 250, seed: int = 0) -> TuneResult:
    """Sample, propose types, extract a few candidates and keep the good ones as examples."""
    sample = sample_units(units, n, seed)
    if not sample:
        raise ValueError("no text units to sample: index or ingest a corpus first")
    res = TuneResult(entity_types=[], examples=[], sampled=len(sample))
    answer = chat.complete([types_request([u["text"] for u in sample], max_types)])[0]
    res.tokens_in, res.tokens_out = answer.tokens_in, answer.tokens_out
    types, why = parse_types(answer, max_types)
    if len(types) < 2:
        res.notes.append(f"the model proposed {types or 'no types'} ({why or 'too few'}); kept the configured "
                         f"types {section.entity_types}: edit entity_types.yaml by hand")
        types = list(section.entity_types)
    res.entity_types = types
    tuned = section.model_copy(update={"entity_types": types, "claims": False})
    # Short samples make short examples: they cost tokens in every call.
    candidates = sorted(sample, key=lambda u: len(u["text"]))[: max(n_examples * 2, n_examples + 1)]
    texts = [truncate_tokens(u["text"], example_tokens) for u in candidates]
    reqs = [build_request(u["unit_id"], t, ExtractPrompts(base_prompt), tuned) for u, t in zip(candidates, texts)]
    for text, result in zip(texts, chat.complete(reqs)):
        res.tokens_in += result.tokens_in
        res.tokens_out += result.tokens_out
        row = parse_extraction(result, tuned)
        if good_example(text, row) and len(res.examples) < n_examples:
            res.examples.append({"text": text, "answer": _example_answer(row)})
    if not res.examples:
        res.notes.append(f"none of the {len(reqs)} trial extractions was good enough to show as an example "
                         "(ok, >= 2 entities named as in the text); extract.txt has no examples")
    return res


def write_prompt_folder(out_dir: str | Path, result: TuneResult, base_prompt: Prompt, prompts_dir: Path,
                        source: str, model: str) -> list[Path]:
    """Write extract.txt (with examples), extract_continue.txt, extract_claims.txt and
    entity_types.yaml into out_dir; returns the paths written. Existing files are replaced."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "extract.txt"]
    written[0].write_text(tuned_template(base_prompt.template, result.examples), encoding="utf-8")
    for name in ("extract_continue.txt", "extract_claims.txt"):
        src = prompts_dir / name
        if src.is_file():
            (out / name).write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
            written.append(out / name)
    lines = [
        f"# Proposed by `corpusgraph prompt-tune` from {result.sampled} sampled units of {source}",
        f"# with model {model}. Review the types: this list is closed, the extractor can use no others.",
        *[f"# note: {n}" for n in result.notes],
        "extract:",
        f"  entity_types: [{', '.join(result.entity_types)}]",
        f"  prompt: {out / 'extract.txt'}",
    ]
    if (out / "extract_continue.txt").exists():
        lines.append(f"  prompt_continue: {out / 'extract_continue.txt'}")
    if (out / "extract_claims.txt").exists():
        lines.append(f"  prompt_claims: {out / 'extract_claims.txt'}")
    snippet = out / "entity_types.yaml"
    snippet.write_text("\n".join(lines) + "\n", encoding="utf-8")
    written.append(snippet)
    return written
