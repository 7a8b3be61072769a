"""Golden tests of the Spark stages on small fixtures, through the real steps and Delta tables."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.run import RunContext
from tests.conftest import REPO

pytestmark = pytest.mark.spark


def _ctx(spark, tmp_path, inputs):
    cfg = load_config(
        REPO / "conf" / "local.yaml",
        {"storage.warehouse": str(tmp_path / "wh"), "storage.index_dir": str(tmp_path / "idx"),
         "storage.cache_dir": str(tmp_path / "cache"), "ingest.max_bytes": "2000",
         "chunk.size_tokens": "40", "chunk.overlap_tokens": "8"},
    )
    cfg.ingest.inputs = [str(p) for p in inputs]
    ctx = RunContext(cfg, spark)
    ctx.wh.ensure_all()
    return ctx


def _write_inputs(folder):
    folder.mkdir()
    (folder / "a.md").write_text("# Hub note\nThe Lisbon hub reported late pickups by Castor Haulage. " * 4)
    (folder / "b.txt").write_text("Castor Haulage\nCastor Haulage runs the night shift at the Porto hub.")
    (folder / "dup.txt").write_text("Castor Haulage\nCastor Haulage runs the night shift at the Porto hub.")
    (folder / "empty.md").write_text("")
    (folder / "bin.txt").write_bytes(b"\x00\x01binary\x00")
    (folder / "latin.txt").write_bytes("d\u00e9j\u00e0 vu".encode("latin-1"))
    (folder / "huge.txt").write_text("word " * 1000)  # 5,000 bytes > max_bytes 2,000
    (folder / "r.jsonl").write_text(
        json.dumps({"id": "r1", "title": "Budget", "text": "The finance team froze hiring.", "domain": "finance"})
        + "\n{broken\n"
    )


def test_ingest_and_chunk_write_documents_quarantine_and_units(spark, tmp_path):
    from corpusgraph.runner.pipeline import run_stage

    _write_inputs(tmp_path / "in")
    ctx = _ctx(spark, tmp_path, [tmp_path / "in"])
    res = run_stage(ctx, "ingest")
    q = {r["source_uri"].rsplit("/", 1)[-1]: r["reason"] for r in ctx.wh.read("quarantine").collect()}
    assert res.rows == {"documents": 3, "duplicates_collapsed": 1, "quarantined": 5}
    assert q == {"empty.md": "empty", "bin.txt": "binary", "latin.txt": "not_utf8", "huge.txt": "oversized",
                 "r.jsonl#L2": "bad_json"}
    docs = {r["source_uri"].rsplit("/", 1)[-1]: r for r in ctx.wh.read("documents").collect()}
    assert set(docs) == {"a.md", "b.txt", "r.jsonl#r1"}  # dup.txt collapsed onto b.txt
    assert docs["r.jsonl#r1"]["access_domain"] == "finance" and docs["a.md"]["access_domain"] == "operations"

    run_stage(ctx, "chunk")
    units = ctx.wh.read("text_units").collect()
    by_doc = {}
    for u in units:
        by_doc.setdefault(u["doc_id"], []).append(u)
        assert docs_text(docs, u["doc_id"])[u["char_start"]:u["char_end"]] == u["text"]
    assert len(by_doc[docs["a.md"]["doc_id"]]) > 1  # the long note is split into windows
    assert sorted(u["ordinal"] for u in by_doc[docs["a.md"]["doc_id"]]) == list(range(len(by_doc[docs["a.md"]["doc_id"]])))

    # A second ingest of the same inputs changes nothing; removing a file soft-deletes its document.
    run_stage(ctx, "ingest")
    assert ctx.wh.read("documents").count() == 3
    (tmp_path / "in" / "a.md").unlink()
    run_stage(ctx, "ingest")
    deleted = {r["source_uri"].rsplit("/", 1)[-1] for r in ctx.wh.read("documents").where("deleted").collect()}
    assert deleted == {"a.md"}
    run_stage(ctx, "chunk")
    assert docs["a.md"]["doc_id"] not in {r["doc_id"] for r in ctx.wh.read("text_units").collect()}


def docs_text(docs, doc_id):
    return next(d["text"] for d in docs.values() if d["doc_id"] == doc_id)


def _extraction(unit_id, entities, rels):
    return {
        "unit_id": unit_id, "prompt_hash": "P", "model": "M", "status": "ok",
        "entities": [{"name": n, "type": t, "description": d} for n, t, d in entities],
        "relationships": [{"source": s, "target": t, "description": d, "strength": w} for s, t, d, w in rels],
        "claims": [], "tokens_in": 10, "tokens_out": 5, "gleanings": 0, "error": None, "raw": "{}",
        "run_id": "r", "extracted_at": datetime(2026, 1, 1, tzinfo=timezone.utc),
    }


def test_resolve_merges_normalised_names_and_accumulates_weights(spark, warehouse):
    from corpusgraph.config import ResolveSection
    from corpusgraph.stages.resolve import mentions as R
    from corpusgraph.tables import spark_schema

    units = spark.createDataFrame([(u,) for u in ["u1", "u2", "u3"]], "unit_id string")
    rows = [
        _extraction("u1", [("Contoso Ltd", "ORGANIZATION", "A forwarder."), ("Lisbon", "LOCATION", "A hub.")],
                    [("Contoso Ltd", "Lisbon", "runs a hub in", 4)]),
        _extraction("u2", [("contoso", "ORGANIZATION", "Late pickups."), ("LISBON", "LOCATION", "Port city.")],
                    [("Lisbon", "contoso", "hosts", 3), ("contoso", "Ana Reis", "employs", 2)]),
        _extraction("gone", [("Ghost", "PERSON", "x")], []),  # unit no longer exists
    ]
    ex = spark.createDataFrame(rows, spark_schema("extractions"))
    sec = ResolveSection()
    live = R.live_extractions(ex, units, "P", "M")
    rels = R.relationships(live, sec)
    ents = R.entities(R.grouped(R.mentions(live, sec)), rels, sec)
    by_title = {r["title"]: r for r in ents.collect()}
    # "Ghost" came from a dead unit; ties between spellings resolve to the smallest, repeatably.
    assert set(by_title) == {"Contoso Ltd", "LISBON", "Ana Reis"}
    contoso = by_title["Contoso Ltd"]
    assert contoso["aliases"] == ["Contoso Ltd", "contoso"] and contoso["unit_ids"] == ["u1", "u2"]
    assert contoso["frequency"] == 2 and contoso["degree"] == 2 and contoso["type"] == "ORGANIZATION"
    assert by_title["Ana Reis"]["type"] == "UNKNOWN"  # named only as an endpoint: kept, not dropped
    weights = {(r["source_id"], r["target_id"]): r["weight"] for r in rels.collect()}
    pair = tuple(sorted([contoso["entity_id"], by_title["LISBON"]["entity_id"]]))
    assert weights[pair] == 7.0  # 4 + 3, direction ignored
    aliases = R.entity_aliases(R.mentions(live, sec)).collect()
    assert {a["mention"] for a in aliases if a["entity_id"] == contoso["entity_id"]} == {"contoso ltd", "contoso"}
    assert all(a["method"] == "exact" and a["score"] == 1.0 for a in aliases)
    # The outputs match the declared table contracts.
    warehouse.overwrite("entities", ents)
    warehouse.overwrite("relationships", rels)
    assert warehouse.read("entities").count() == 3


def test_communities_are_hierarchical_and_cover_every_entity(spark, warehouse, tmp_path):
    from corpusgraph.runner.pipeline import run_stage
    from corpusgraph.tables import spark_schema

    # Two groups of 12 joined by one edge; each group is two 6-cliques tied by 18 edges. With
    # max_cluster_size 8, level 0 finds the groups and level 1 splits each into its cliques.
    ents, rels = [], []
    for c in range(2):
        ids = [f"e{c}_{i:02d}" for i in range(12)]
        ents += [(i, i.upper(), "ORGANIZATION", "d", [], [f"u{c}"], 1, 0) for i in ids]
        halves = [ids[:6], ids[6:]]
        for half in halves:
            rels += [(f"r_{a}_{b}", a, b, "", 1.0, [f"u{c}"]) for n, a in enumerate(half) for b in half[n + 1:]]
        rels += [(f"t_{a}_{b}", a, b, "", 1.0, [f"u{c}"]) for i, a in enumerate(halves[0])
                 for j, b in enumerate(halves[1]) if (i + j) % 2 == 0]
    rels.append(("bridge", "e0_00", "e1_00", "", 1.0, ["u0"]))
    warehouse.overwrite("entities", spark.createDataFrame(ents, spark_schema("entities")))
    warehouse.overwrite("relationships", spark.createDataFrame(rels, spark_schema("relationships")))
    cfg = load_config(REPO / "conf" / "local.yaml", {"communities.max_cluster_size": "8",
                                                     "storage.cache_dir": str(tmp_path / "c")})
    ctx = RunContext(cfg, spark)
    ctx.wh = warehouse
    res = run_stage(ctx, "communities")
    comms = warehouse.read("communities").collect()
    level0 = [c for c in comms if c["level"] == 0]
    assert sorted(len(c["entity_ids"]) for c in level0) == [12, 12]
    assert res.rows["levels"] >= 2
    by_id = {c["community_id"]: c for c in comms}
    for c in comms:
        if c["parent_id"]:
            assert set(c["entity_ids"]) <= set(by_id[c["parent_id"]]["entity_ids"])
        assert c["size"] == len(c["entity_ids"])
    assert all(len(c["rel_ids"]) == 15 + 15 + 18 for c in level0)  # the bridge belongs to neither
    assert sorted(len(c["entity_ids"]) for c in comms if c["level"] == 1) == [6, 6, 6, 6]
    # Same graph, same seed: the same community ids.
    run_stage(ctx, "communities")
    assert {c["community_id"] for c in warehouse.read("communities").collect()} == set(by_id)


def test_gleaning_packs_only_the_rows_whose_prior_looks_incomplete(spark):
    """glean_candidates + packs_from(only_incomplete): the packs that needs_gleaning, applied to
    each row and then packed, gives (the rule is applied inside the packing pass)."""
    from corpusgraph.config import ExtractSection
    from corpusgraph.stages.extract.glean import needs_gleaning
    from corpusgraph.stages.extract.llm import PRIOR_COLUMNS, glean_candidates, pack_batch, packs_from
    from corpusgraph.tables import spark_schema

    sec = ExtractSection(max_entities=2, max_relationships=2, glean_min_missing=2, units_per_call=3)
    ent = lambda n: {"name": n, "type": "ORGANIZATION", "description": "d"}  # noqa: E731
    texts = {
        "u1": "Castor Haulage met Orion Freight and Vega Lines in Porto.",  # two names uncovered
        "u2": "Castor Haulage runs the night shift.",  # covered
        "u3": "Castor Haulage, Orion Freight.",  # entity list at maxItems
        "u4": "Nothing here.",  # a stop note: no further rounds
        "u5": "Vega Lines and Orion Freight and Castor Haulage and Lyra Ports.",  # other prompt: not mine
    }
    rows = {"u1": [ent("Castor Haulage")], "u2": [ent("Castor Haulage")],
            "u3": [ent("Castor Haulage"), ent("Orion Freight")], "u4": [], "u5": []}
    now = datetime.now(timezone.utc)
    extractions = spark.createDataFrame([
        {"unit_id": u, "prompt_hash": "p" if u != "u5" else "other", "model": "m", "status": "ok",
         "entities": rows[u], "relationships": [], "claims": [], "tokens_in": 1, "tokens_out": 1, "gleanings": 0,
         "error": "gleaning found nothing new" if u == "u4" else None, "raw": "{}", "run_id": "r",
         "extracted_at": now} for u in texts], schema=spark_schema("extractions"))
    units = spark.createDataFrame([(u, t, len(t.split())) for u, t in texts.items()], "unit_id string, text string, n_tokens int")
    candidates = glean_candidates(extractions, units, sec, "p", "m", 1).coalesce(1)
    packs = [r.asDict(recursive=True) for r in packs_from(candidates, sec, 1, with_prior=True,
                                                           only_incomplete=True).collect()]
    # The reference: the rule row by row, then the same packing.
    every = [r.asDict(recursive=True) for r in candidates.collect()]
    due = [r for r in every if needs_gleaning(r["text"], r["prior"], sec)]
    expected = pack_batch(due, sec, 1, ["unit_id", "text", "n_tokens", "prior"]).to_pylist()
    assert sorted(r["unit_id"] for r in every) == ["u1", "u2", "u3", "u4"]
    assert sorted(u["unit_id"] for p in packs for u in p["units"]) == ["u1", "u3"]
    assert [p["pack_id"] for p in packs] == [p["pack_id"] for p in expected]
    assert [[u["prior"]["entities"] for u in p["units"]] for p in packs] == \
        [[u["prior"]["entities"] for u in p["units"]] for p in expected]
    assert set(PRIOR_COLUMNS) <= set(packs[0]["units"][0]["prior"])
