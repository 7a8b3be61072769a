"""reports: communities -> community_reports, one LLM report per community, bottom-up.

Levels run deepest first, so a parent can use its children's reports: when a community's raw
context (entities and relationships) exceeds the token budget, child reports replace raw
context, biggest child first. Each report records `built_from`, a hash of its exact input;
a community whose input did not change is not reported again.

With `reports.per_domain`, a community whose members' text comes from several access domains
also gets one report per domain (community_domain_reports), written only from that domain:
its entities (those named in the domain's units), relationships (both ends such entities, some
evidence in the domain) and source units. An entity or relationship whose evidence spans
domains is shown by name only: its description was merged from every domain's text, and a
restricted caller must never read another domain's words through it; that name is the form
the domain's own text uses (its title may be another domain's spelling). No child reports either:
they are whole-community reports.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import replace
from typing import Any, Iterator, Sequence

import pyarrow as pa

from corpusgraph.config import ReportsSection
from corpusgraph.llm.base import ChatRequest, ChatResult
from corpusgraph.prompts import Prompt
from corpusgraph.tables import spark_struct, table
from corpusgraph.tokens import count_tokens, truncate_tokens

__all__ = ["report_schema", "build_context", "build_domain_context", "domain_names", "parse_report", "ReportTask", "DomainReportTask",
           "level_inputs", "domain_level_inputs", "CONTEXT_SCHEMA", "DOMAIN_CONTEXT_SCHEMA"]

CONTEXT_SCHEMA = pa.schema([("community_id", pa.string()), ("level", pa.int32()), ("context", pa.string()),
                            ("built_from", pa.string())])
DOMAIN_CONTEXT_SCHEMA = pa.schema([("community_id", pa.string()), ("domain", pa.string()), ("level", pa.int32()),
                                   ("context", pa.string()), ("built_from", pa.string())])
# Share of a per-domain report's budget its entity and relationship lines may take; the source
# units fill the rest (an entity shown by name only says little on its own).
_DOMAIN_GRAPH_SHARE = 0.5


def report_schema(section: ReportsSection) -> dict[str, Any]:
    finding = {
        "type": "object",
        "properties": {"summary": {"type": "string", "maxLength": 160}, "explanation": {"type": "string", "maxLength": 250}},
        "required": ["summary", "explanation"],
    }
    return {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 120},
            "summary": {"type": "string", "maxLength": 400},
            "findings": {"type": "array", "items": finding, "maxItems": section.max_findings},
            "rating": {"type": "number", "minimum": 0, "maximum": 10},
            "rating_explanation": {"type": "string", "maxLength": 300},
        },
        "required": ["title", "summary", "findings", "rating", "rating_explanation"],
    }


def _lines(header: str, rows: list[str]) -> str:
    return header + "\n" + "\n".join(rows) if rows else ""


def build_context(entities: Sequence[dict], rels: Sequence[dict], children: Sequence[dict], budget: int) -> str:
    """The text a report is written from, within `budget` tokens.

    entities: {title, type, description, degree}; rels: {source, target, description, weight};
    children: {title, summary, size} of sub-community reports.
    """
    ents = sorted(entities, key=lambda e: (-(e.get("degree") or 0), e["title"]))
    rs = sorted(rels, key=lambda r: (-(r.get("weight") or 0), r["source"], r["target"]))
    ent_lines = [f"- {e['title']} ({e['type']}): {e.get('description') or ''}" for e in ents]
    rel_lines = [f"- {r['source']} -> {r['target']} [weight {r.get('weight', 0):g}]: {r.get('description') or ''}" for r in rs]
    raw = "\n\n".join(p for p in (_lines("Entities:", ent_lines), _lines("Relationships:", rel_lines)) if p)
    if count_tokens(raw) <= budget or not children:
        return truncate_tokens(raw, budget)
    # Too big: sub-community reports stand in for raw context, biggest first.
    kids = sorted(children, key=lambda c: (-(c.get("size") or 0), c["title"]))
    parts, used = [], 0
    for c in kids:
        line = f"- {c['title']}: {c.get('summary') or ''}"
        cost = count_tokens(line) + 1
        if used + cost > budget * 0.7:
            break
        parts.append(line)
        used += cost
    text = _lines("Sub-community reports:", parts)
    rest = "\n\n".join(p for p in (_lines("Entities:", ent_lines), _lines("Relationships:", rel_lines)) if p)
    return truncate_tokens(text + "\n\n" + rest, budget)


def build_domain_context(entities: Sequence[dict], rels: Sequence[dict], units: Sequence[dict], budget: int) -> str:
    """One domain's report context: entities and relationships (a None description is left out:
    the row's evidence spans domains), then that domain's source units, within `budget` tokens.

    units: {unit_id, text}, taken in unit id order while they fit.
    """
    graph = build_context(entities, rels, [], int(budget * _DOMAIN_GRAPH_SHARE)) if entities or rels else ""
    graph = "\n".join(line[:-2] if line.endswith(": ") else line for line in graph.split("\n"))  # no empty descriptions
    room = budget - count_tokens(graph) - 4
    lines: list[str] = []
    for unit in sorted(units, key=lambda u: u["unit_id"]):
        line = "- " + " ".join((unit.get("text") or "").split())
        cost = count_tokens(line) + 1
        if cost > room:
            if room > 32:  # a useful part of one more unit
                lines.append(truncate_tokens(line, room))
            break
        lines.append(line)
        room -= cost
    text = "\n\n".join(p for p in (graph, _lines("Source texts:", lines)) if p)
    return truncate_tokens(text, budget)


def _hash(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


def _context_batches(batches: Iterator[pa.RecordBatch], budget: int, fingerprint: str) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        out = []
        for row in batch.to_pylist():
            ctx = build_context(row["ents"] or [], row["rels"] or [], row["kids"] or [], budget)
            out.append({"community_id": row["community_id"], "level": row["level"], "context": ctx,
                        "built_from": _hash(fingerprint, ctx)})
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=CONTEXT_SCHEMA)


def level_inputs(communities, entities, relationships, reports, level: int, section: ReportsSection, fingerprint: str):
    """Communities of one level with their report context and built_from hash.

    fingerprint: prompt and model identity, so a new prompt or model rebuilds every report.
    """
    from pyspark.sql import functions as F

    from corpusgraph.tables import spark_schema  # noqa: F401

    comm = communities.where((F.col("level") == level) & (F.col("size") >= section.min_size))
    ent_rows = comm.select("community_id", F.explode("entity_ids").alias("entity_id")).join(
        entities.select("entity_id", "title", "type", "description", "degree"), "entity_id"
    ).groupBy("community_id").agg(
        F.collect_list(F.struct("title", "type", "description", "degree")).alias("ents")
    )
    titles = entities.select("entity_id", "title")
    rel_rows = (
        comm.select("community_id", F.explode("rel_ids").alias("rel_id"))
        .join(relationships, "rel_id")
        .join(titles.withColumnRenamed("entity_id", "source_id").withColumnRenamed("title", "source"), "source_id")
        .join(titles.withColumnRenamed("entity_id", "target_id").withColumnRenamed("title", "target"), "target_id")
        .groupBy("community_id")
        .agg(F.collect_list(F.struct("source", "target", "description", "weight")).alias("rels"))
    )
    kids = (
        communities.select(F.col("parent_id").alias("community_id"), F.col("community_id").alias("child_id"), "size")
        .join(reports.where(F.col("status") == "ok").select(F.col("community_id").alias("child_id"), "title", "summary"),
              "child_id")
        .groupBy("community_id")
        .agg(F.collect_list(F.struct("title", "summary", "size")).alias("kids"))
    )
    joined = comm.select("community_id", "level").join(ent_rows, "community_id", "left").join(
        rel_rows, "community_id", "left").join(kids, "community_id", "left")
    return joined.mapInArrow(lambda it: _context_batches(it, section.max_input_tokens, fingerprint),
                             spark_struct(CONTEXT_SCHEMA))


def domain_names(entities: Sequence[dict], texts: Sequence[str]) -> dict[str, str]:
    """entity id -> the name a domain's report may call it by. A single-domain entity keeps its
    title; one whose evidence spans domains takes the form of its name (title or alias) found most
    often in the domain's `texts`, since its title may be another domain's spelling; none found:
    left out."""
    low = "\n".join(texts).lower()
    names = {}
    for e in entities:
        if not e.get("mixed"):
            names[e["entity_id"]] = e["title"]
            continue
        forms = list(dict.fromkeys([e["title"]] + list(e.get("aliases") or [])))
        # Whole words: "Usis Tech" is not written where the text says "Usis Technologies".
        counts = [(len(re.findall(r"(?<!\w)" + re.escape(f.lower()) + r"(?!\w)", low)), -i, f)
                  for i, f in enumerate(forms) if f]
        best = max(counts, default=(0, 0, None))
        if best[0] > 0:
            names[e["entity_id"]] = best[2]
    return names


def _domain_context_batches(batches: Iterator[pa.RecordBatch], budget: int, fingerprint: str) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        out = []
        for row in batch.to_pylist():
            units = row["units"] or []
            names = domain_names(row["ents"] or [], [u.get("text") or "" for u in units])
            ents = [{**e, "title": names[e["entity_id"]]} for e in row["ents"] or [] if e["entity_id"] in names]
            rels = [{**r, "source": names[r["source_id"]], "target": names[r["target_id"]]} for r in row["rels"] or []
                    if r["source_id"] in names and r["target_id"] in names]
            ctx = build_domain_context(ents, rels, units, budget)
            out.append({"community_id": row["community_id"], "domain": row["domain"], "level": row["level"],
                        "context": ctx, "built_from": _hash(fingerprint, row["domain"], ctx)})
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=DOMAIN_CONTEXT_SCHEMA)


def domain_level_inputs(communities, entities, relationships, text_units, documents, level: int,
                        section: ReportsSection, fingerprint: str):
    """(community, domain) pairs of one level's communities whose members' units span several
    domains, each with the context of that domain alone (module doc) and its built_from hash."""
    from pyspark.sql import functions as F

    comm = communities.where((F.col("level") == level) & (F.col("size") >= section.min_size))
    unit_domain = text_units.select("unit_id", "doc_id", "text").join(
        documents.where(~F.coalesce(F.col("deleted"), F.lit(False))).select("doc_id", F.col("access_domain").alias("domain")),
        "doc_id")

    def domains_of(df, key: str):  # key -> the set of domains its units lie in
        return (df.select(key, F.explode("unit_ids").alias("unit_id")).join(unit_domain.select("unit_id", "domain"), "unit_id")
                .groupBy(key).agg(F.array_sort(F.collect_set("domain")).alias("domains")))

    ent_dom = domains_of(entities, "entity_id")
    members = comm.select("community_id", F.explode("entity_ids").alias("entity_id")).join(ent_dom, "entity_id")
    pairs = members.select("community_id", F.explode("domains").alias("domain")).distinct()
    mixed = pairs.groupBy("community_id").count().where(F.col("count") >= 2).select("community_id")
    pairs = pairs.join(mixed, "community_id")
    keys = ["community_id", "domain"]
    ents = (
        members.join(pairs, "community_id").where(F.array_contains("domains", F.col("domain")))
        .join(entities.select("entity_id", "title", "aliases", "type", "description", "degree"), "entity_id")
        .withColumn("mixed", F.size("domains") > 1)
        .withColumn("description", F.when(~F.col("mixed"), F.col("description")))
    )
    ent_rows = ents.groupBy(*keys).agg(F.collect_list(
        F.struct("entity_id", "title", "aliases", "type", "description", "degree", "mixed")).alias("ents"))
    ends = ents.select("community_id", "domain", "entity_id")
    rel_rows = (
        comm.select("community_id", F.explode("rel_ids").alias("rel_id"))
        .join(domains_of(relationships, "rel_id"), "rel_id")
        .join(pairs, "community_id").where(F.array_contains("domains", F.col("domain")))
        .join(relationships.select("rel_id", "source_id", "target_id", F.col("description").alias("rel_description"),
                                   "weight"), "rel_id")
        .join(ends.withColumnRenamed("entity_id", "source_id"), keys + ["source_id"], "left_semi")
        .join(ends.withColumnRenamed("entity_id", "target_id"), keys + ["target_id"], "left_semi")
        .withColumn("description", F.when(F.size("domains") == 1, F.col("rel_description")))
        .groupBy(*keys).agg(F.collect_list(F.struct("source_id", "target_id", "description", "weight")).alias("rels"))
    )
    unit_rows = (
        comm.select("community_id", F.explode("unit_ids").alias("unit_id")).join(unit_domain, "unit_id")
        .join(pairs, keys)
        .groupBy(*keys).agg(F.collect_list(F.struct("unit_id", "text")).alias("units"))
    )
    joined = (pairs.join(comm.select("community_id", "level"), "community_id").join(ent_rows, keys, "left")
              .join(rel_rows, keys, "left").join(unit_rows, keys, "left"))
    return joined.mapInArrow(lambda it: _domain_context_batches(it, section.max_input_tokens, fingerprint),
                             spark_struct(DOMAIN_CONTEXT_SCHEMA))


def parse_report(result: ChatResult, section: ReportsSection) -> dict[str, Any]:
    from corpusgraph.llm.parse import parse_json_answer

    empty = {"title": None, "summary": None, "findings": [], "rating": None, "rating_explanation": None}
    if result.error:
        return {**empty, "status": "llm_error", "error": result.error}
    obj, err = parse_json_answer(result.text or "")
    if obj is None or not str(obj.get("title") or "").strip():
        return {**empty, "status": "parse_error", "error": err or "answer has no title"}
    raw = obj.get("findings")  # anything but a list (an object, a number, true) counts as no findings
    findings = [
        {"summary": str(f.get("summary") or "")[:200], "explanation": str(f.get("explanation") or "")[:400]}
        for f in (raw if isinstance(raw, list) else [])[: section.max_findings] if isinstance(f, dict)
    ]
    try:
        rating = float(obj.get("rating"))
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer past float's range
        rating = None
    if rating is not None:  # NaN is not a rating (the clamp made it 10.0); infinities are dropped alike
        rating = max(0.0, min(10.0, rating)) if math.isfinite(rating) else None
    return {"title": str(obj["title"]).strip()[:120], "summary": str(obj.get("summary") or "")[:600],
            "findings": findings, "rating": rating, "rating_explanation": str(obj.get("rating_explanation") or "")[:300],
            "status": "ok", "error": err}


class ReportTask:
    output_schema: pa.Schema = table("community_reports").schema
    stage = "reports"

    def __init__(self, section: ReportsSection, prompt: Prompt, model: str, temperature: float):
        self.section, self.prompt, self.model, self.temperature = section, prompt, model, temperature

    def requests(self, rows: Sequence[dict]) -> list[ChatRequest]:
        schema = report_schema(self.section)
        return [
            ChatRequest(
                id=r["community_id"],
                messages=({"role": "user", "content": self.prompt.render(context=r["context"],
                                                                         max_findings=self.section.max_findings)},),
                max_tokens=self.section.max_tokens,
                temperature=self.temperature,
                json_schema=schema,
            )
            for r in rows
        ]

    def outputs(self, rows: Sequence[dict], results: Sequence[ChatResult]) -> list[dict]:
        return [
            {"community_id": r["community_id"], "level": r["level"], **parse_report(res, self.section),
             "built_from": r["built_from"], "model": self.model, "tokens_in": res.tokens_in, "tokens_out": res.tokens_out}
            for r, res in zip(rows, results)
        ]


class DomainReportTask(ReportTask):
    """ReportTask for one domain's report of a community: the same prompt and schema, rows keyed
    by (community_id, domain)."""

    output_schema: pa.Schema = table("community_domain_reports").schema

    def requests(self, rows: Sequence[dict]) -> list[ChatRequest]:
        return [replace(req, id=f"{r['community_id']}@{r['domain']}") for req, r in zip(super().requests(rows), rows)]

    def outputs(self, rows: Sequence[dict], results: Sequence[ChatResult]) -> list[dict]:
        return [{**out, "domain": r["domain"]} for out, r in zip(super().outputs(rows, results), rows)]
