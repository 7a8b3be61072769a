"""Extraction rows and resolve contexts for the resolve tests and benchmarks."""

from __future__ import annotations

from datetime import datetime, timezone

from tests.conftest import REPO

AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def extraction(unit_id, entities, rels, phash="P", model="M"):
    """An `extractions` row: entities as (name, type, description), relationships as (source,
    target, strength)."""
    return {
        "unit_id": unit_id, "prompt_hash": phash, "model": model, "status": "ok",
        "entities": [{"name": n, "type": t, "description": d} for n, t, d in entities],
        "relationships": [{"source": s, "target": t, "description": f"{s} - {t}", "strength": w} for s, t, w in rels],
        "claims": [], "tokens_in": 1, "tokens_out": 1, "gleanings": 0, "error": None, "raw": "{}",
        "run_id": "r", "extracted_at": AT,
    }


def unit_frames(spark, units, phash="P", model="M"):
    """(extractions, text_units) frames holding `units` [(unit, entities, relationships)]."""
    from corpusgraph.tables import spark_schema

    ex = spark.createDataFrame([extraction(u, e, r, phash, model) for u, e, r in units], spark_schema("extractions"))
    tu = spark.createDataFrame([(u, "d", 0, "", 0, 0, 0) for u, _, _ in units],
                               "unit_id string, doc_id string, ordinal int, text string, n_tokens int, "
                               "char_start int, char_end int")
    return ex, tu


def fresh_context(spark, tmp_path, **overrides):
    """A RunContext on a fresh, empty warehouse under tmp_path: conf/local.yaml with no LLM in
    resolve unless `overrides` turn it on."""
    from corpusgraph.config import load_config
    from corpusgraph.runner.run import RunContext

    base = {"storage.warehouse": str(tmp_path / "wh"), "storage.index_dir": str(tmp_path / "idx"),
            "storage.cache_dir": str(tmp_path / "cache"), "resolve.llm_adjudication": "false",
            "resolve.summarise_descriptions": "false"}
    cfg = load_config(REPO / "conf" / "local.yaml", {**base, **overrides})
    ctx = RunContext(cfg, spark)
    ctx.wh.ensure_all()
    return ctx


def context(spark, tmp_path, units, **overrides):
    """The real step's context on a fresh warehouse holding `units` as extractions of the
    configured extraction's identity."""
    from corpusgraph.stages.extract.llm import extract_identity

    ctx = fresh_context(spark, tmp_path, **overrides)
    _, phash, model = extract_identity(ctx.cfg.extract, ctx.cfg.prompt_path, ctx.cfg.llm.model)
    ex, tu = unit_frames(spark, units, phash, model)
    ctx.wh.overwrite("extractions", ex)
    ctx.wh.overwrite("text_units", tu)
    return ctx
