"""Resolution, part 4: the two LLM tasks, sent by runner/steps/resolve.py through the step's LLM pass on Ray.

AdjudicateTask asks, for each pair in the ambiguous band, whether the two names are one
entity: a schema-constrained {"same": bool, "reason": str} answer. SummariseTask merges the
descriptions of an entity whose joined descriptions are too long. Both are answered through
the shared LLM layer, so answers are cached (a re-run asks nothing again) and counted. A
malformed answer is a parse_error row with the raw text, a failed call an llm_error row; a
pair without a valid yes never merges, an entity without a summary keeps its joined
descriptions cut at the limit. Neither ever stops the stage.
"""

from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa

from corpusgraph.config import ResolveSection
from corpusgraph.llm.base import ChatRequest, ChatResult
from corpusgraph.prompts import Prompt

__all__ = ["adjudication_schema", "adjudication_inputs", "AdjudicateTask", "parse_verdict", "summary_schema",
           "SummariseTask", "parse_summary", "verdict_fingerprint", "stored_verdicts", "REUSABLE_STATUSES"]

# Verdicts that the same request would get again from the response cache; an llm_error is asked again.
REUSABLE_STATUSES = ("ok", "parse_error")

_DESC_CHARS = 300  # per side in an adjudication: enough to tell two things apart, cheap to read


def adjudication_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"same": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 160}},
        "required": ["same", "reason"],
    }


def adjudication_inputs(band_pairs, nodes_df):
    """Band pairs -> (a, b, score, a_name, a_type, a_desc, a_neighbours, b_...): what the model sees."""
    from pyspark.sql import functions as F

    def side(tag):
        return nodes_df.select(
            F.col("node_id").alias(tag), F.col("title").alias(f"{tag}_name"), F.col("type").alias(f"{tag}_type"),
            F.substring(F.concat_ws(" ", "descs"), 1, _DESC_CHARS).alias(f"{tag}_desc"),
            F.array_join(F.slice("neighbours", 1, 5), ", ").alias(f"{tag}_neighbours"))

    return band_pairs.select("a", "b", "score").join(side("a"), "a").join(side("b"), "b").select(
        "a", "b", "score", "a_name", "a_type", "a_desc", "a_neighbours", "b_name", "b_type", "b_desc", "b_neighbours")


def verdict_fingerprint(prompt: Prompt, section: ResolveSection, model: str, temperature: float) -> str:
    """Everything an adjudication answer depends on besides the two nodes (whose part is in their
    signatures, resolve.score.node_signatures): prompt, schema, model, temperature, limits."""
    return prompt.hash(adjudication_schema(), section.adjudicate_max_tokens, model, temperature, _DESC_CHARS)


def stored_verdicts(band_pairs, reused, fingerprint: str):
    """(a, b, same, status, error) of the band pairs whose stored verdict still holds: the pair was
    reused (same signatures) and its verdict has this fingerprint and a reusable status."""
    from pyspark.sql import functions as F

    ok = reused.where((F.col("verdict_fp") == fingerprint) & F.col("llm_status").isin(*REUSABLE_STATUSES))
    return band_pairs.select("a", "b").join(ok, ["a", "b"]).select(
        "a", "b", "same", F.col("llm_status").alias("status"), F.col("llm_error").alias("error"))


def _describe(row: dict, tag: str) -> str:
    parts = [f'Name: {row[f"{tag}_name"]}', f'Type: {row[f"{tag}_type"]}']
    if row.get(f"{tag}_desc"):
        parts.append(f'Description: {row[f"{tag}_desc"]}')
    if row.get(f"{tag}_neighbours"):
        parts.append(f'Related to: {row[f"{tag}_neighbours"]}')
    return "\n".join(parts)


def parse_verdict(result: ChatResult) -> dict[str, Any]:
    """A result -> (same, status, error, raw); `same` is null unless the answer holds a boolean."""
    from corpusgraph.llm.parse import parse_json_answer

    base = {"same": None, "raw": result.text, "error": None}
    if result.error:
        return {**base, "status": "llm_error", "error": result.error}
    obj, err = parse_json_answer(result.text or "")
    if obj is None:
        return {**base, "status": "parse_error", "error": err}
    same = obj.get("same")
    if isinstance(same, str) and same.strip().lower() in ("true", "false", "yes", "no"):
        same = same.strip().lower() in ("true", "yes")
    if not isinstance(same, bool):
        return {**base, "status": "parse_error", "error": f"'same' is not a boolean: {same!r}"}
    return {**base, "same": same, "status": "ok", "error": err}


class AdjudicateTask:
    """Ray worker task: band pairs -> verdict rows."""

    output_schema = pa.schema([("a", pa.string()), ("b", pa.string()), ("score", pa.float64()),
                               ("same", pa.bool_()), ("status", pa.string()), ("error", pa.string()),
                               ("raw", pa.string()), ("tokens_in", pa.int64()), ("tokens_out", pa.int64())])
    stage = "resolve"

    def __init__(self, section: ResolveSection, prompt: Prompt, temperature: float = 0.0):
        self.section, self.prompt, self.temperature = section, prompt, temperature

    def requests(self, rows: Sequence[dict]) -> list[ChatRequest]:
        system = self.prompt.render()
        return [
            ChatRequest(
                id=f'{r["a"]}|{r["b"]}',
                messages=({"role": "system", "content": system},
                          {"role": "user", "content": f'First:\n{_describe(r, "a")}\n\nSecond:\n{_describe(r, "b")}'}),
                max_tokens=self.section.adjudicate_max_tokens,
                temperature=self.temperature,
                json_schema=adjudication_schema(),
            )
            for r in rows
        ]

    def outputs(self, rows: Sequence[dict], results: Sequence[ChatResult]) -> list[dict]:
        return [{"a": r["a"], "b": r["b"], "score": r["score"], **parse_verdict(res),
                 "tokens_in": res.tokens_in, "tokens_out": res.tokens_out} for r, res in zip(rows, results)]


def summary_schema(section: ResolveSection) -> dict[str, Any]:
    """The summary's answer: one non-empty description. Its length is bounded by the request's
    answer tokens (resolve.summary_max_tokens) and cut by parse_summary to
    resolve.max_description_chars, not by a maxLength: llama.cpp's server turns a string's
    maxLength into a grammar rule repeated that many times: at the default 1,200 the bundled
    server failed to parse the grammar and exited (600 parsed; found by
    tests/e2e/test_installed_package.py, checked against llama-cpp-python 0.3.36)."""
    del section  # the bound is parse_summary's
    return {
        "type": "object",
        "properties": {"description": {"type": "string", "minLength": 1}},
        "required": ["description"],
    }


def parse_summary(result: ChatResult, section: ResolveSection) -> dict[str, Any]:
    from corpusgraph.llm.parse import parse_json_answer

    base = {"summary": None, "raw": result.text, "error": None}
    if result.error:
        return {**base, "status": "llm_error", "error": result.error}
    obj, err = parse_json_answer(result.text or "")
    text = " ".join(str((obj or {}).get("description") or "").split())[: section.max_description_chars]
    if obj is None or not text:
        return {**base, "status": "parse_error", "error": err or "no description in the answer"}
    return {**base, "summary": text, "status": "ok", "error": err}


class SummariseTask:
    """Ray worker task: (entity_id, title, type, text) -> summary rows."""

    output_schema = pa.schema([("entity_id", pa.string()), ("summary", pa.string()), ("status", pa.string()),
                               ("error", pa.string()), ("raw", pa.string()), ("tokens_in", pa.int64()),
                               ("tokens_out", pa.int64())])
    stage = "resolve"

    def __init__(self, section: ResolveSection, prompt: Prompt, temperature: float = 0.0):
        self.section, self.prompt, self.temperature = section, prompt, temperature

    def requests(self, rows: Sequence[dict]) -> list[ChatRequest]:
        return [
            ChatRequest(
                id=r["entity_id"],
                messages=({"role": "system", "content": self.prompt.render(
                    title=r["title"], type=r["type"], max_chars=self.section.max_description_chars)},
                          {"role": "user", "content": f'Descriptions:\n{r["text"]}'}),
                max_tokens=self.section.summary_max_tokens,
                temperature=self.temperature,
                json_schema=summary_schema(self.section),
            )
            for r in rows
        ]

    def outputs(self, rows: Sequence[dict], results: Sequence[ChatResult]) -> list[dict]:
        return [{"entity_id": r["entity_id"], **parse_summary(res, self.section),
                 "tokens_in": res.tokens_in, "tokens_out": res.tokens_out} for r, res in zip(rows, results)]
