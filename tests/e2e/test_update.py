"""Incremental update on the real stack (Spark + Delta, Ray, HTTP client, response cache) against a
deterministic scripted OpenAI-compatible server whose answers follow the text, so the graph
changes when documents do.

After an index, an update that adds documents and one that deletes and edits some, the entity,
alias, relationship, claim and resolve_pairs tables equal those of a full rebuild of the final
corpus (same response cache; the rebuild runs ingest to communities, the stages whose tables are
compared), while each update's resolve scored only the candidate pairs that
touch a name the added or removed units mention and reused the stored rest; communities either were re-detected (then they equal the rebuild's) or kept, in
which case their modularity on the final graph is within 2 x update.redetect_drift of the
rebuild's (the stated tolerance).
"""

from __future__ import annotations

import hashlib
import json

import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.pipeline import run_index
from corpusgraph.runner.pipeline import run_update
from corpusgraph.runner.run import RunContext
from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.ray]

DOCS = {
    "a.md": "Brightwater Haulage moved trailer R-77 from Valencia to Milan. Giulia Sarti runs the Milan dock.",
    "b.md": "Orsolya Foods complained to Halvard Quist about spoiled cheese. Orsolya Foods ships from Gdansk.",
    "c.txt": "Kestrel Logistics opened a depot in Leipzig. Kestrel Logistics hired Anton Weber in Leipzig.",
    "d.txt": "Fenmore Foods uses Brightwater Haulage at Valencia. Fenmore Foods lost a load near Milan.",
}
ADDED = {
    # "Fenmore Foods Group" shares blocks with d.txt's "Fenmore Foods": a candidate pair the update scores.
    "e.md": "Nordlicht Shipping signed with Halvard Quist in Hamburg. Fenmore Foods Group sails to Rotterdam.",
    "f.md": "Vistula Carriers joined Kestrel Logistics at Katowice. Vistula Carriers runs trucks to Leipzig.",
}
EDITED_C = "Kestrel Logistics closed its Leipzig depot. Anton Weber moved to Dresden with Kestrel Logistics."


def _cfg(root, inputs, cache, url, **extra):
    return load_config(REPO / "conf" / "local.yaml", {
        "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
        "storage.cache_dir": str(cache), "ingest.inputs": f"[{inputs}]",
        "llm.backend": "openai", "llm.api_base": url, "llm.model": "scripted", "llm.concurrency": "8",
        "chunk.size_tokens": "40", "chunk.overlap_tokens": "8",
        # Every candidate pair below auto_threshold goes to the (scripted) adjudicator, so verdict reuse runs too.
        "resolve.band_low": "0.0", **extra,
    })


@pytest.fixture(scope="module")
def sequence(spark, tmp_path_factory, scripted_url):
    root = tmp_path_factory.mktemp("update")
    inputs, cache = root / "in", root / "cache"
    inputs.mkdir()
    for name, text in DOCS.items():
        (inputs / name).write_text(text)
    first = RunContext(_cfg(root, inputs, cache, scripted_url), spark)
    run_index(first)
    for name, text in ADDED.items():
        (inputs / name).write_text(text)
    # Keep the partition whatever the drift, so the keep-and-extend path runs here.
    add = RunContext(_cfg(root, inputs, cache, scripted_url, **{"update.redetect_drift": "1000"}), spark, kind="update")
    run_update(add)
    (inputs / "b.md").unlink()
    (inputs / "c.txt").write_text(EDITED_C)
    change = RunContext(_cfg(root, inputs, cache, scripted_url), spark, kind="update")
    run_update(change)
    full = RunContext(_cfg(root / "rebuild", inputs, cache, scripted_url), spark)
    run_index(full, ["ingest", "chunk", "extract", "resolve", "communities"])  # what the tests compare
    return first, add, change, full


def _rows(ctx, name, key):
    return sorted((r.asDict(recursive=True) for r in ctx.wh.read(name).collect()), key=lambda r: r[key])


def test_updates_extract_only_new_units(sequence):
    first, add, change, _ = sequence
    assert add.results["chunk"].rows["docs_added"] == 2 and add.results["chunk"].rows["units_removed"] == 0
    new_units = add.results["chunk"].rows["units_added"]
    assert add.results["extract"].rows["sent"] == new_units > 0
    # Short units are packed, several to a call: at least one call, never more than one per unit
    # and gleaning round.
    assert 1 <= add.results["extract"].usage.calls <= new_units * (1 + add.cfg.extract.glean_rounds)
    c = change.results["chunk"].rows
    assert (c["docs_added"], c["docs_changed"], c["docs_deleted"]) == (0, 1, 1)
    assert change.results["extract"].rows["sent"] == c["units_added"] > 0
    assert c["units_removed"] > 0
    # Adding two documents to four re-reports only some communities, and costs less than the first build.
    first_tokens = sum(r.usage.tokens_in + r.usage.tokens_out for r in first.results.values() if r.usage)
    assert add.results["cost"].rows["tokens"] < first_tokens


def test_graph_tables_equal_a_full_rebuild(sequence):
    _, _, change, full = sequence
    for name, key in (("entities", "entity_id"), ("entity_aliases", "mention_key"),
                      ("relationships", "rel_id"), ("claims", "claim_id")):
        assert _rows(change, name, key) == _rows(full, name, key), name
    titles = {r["title"] for r in _rows(change, "entities", "entity_id")}
    assert "Orsolya Foods" not in titles  # only the deleted document named it
    assert {"Nordlicht Shipping", "Dresden"} <= titles  # added and edited documents did


def _pair_rows(ctx):
    return sorted((r["a"], r["b"], r["sig_a"], r["sig_b"], r["score"], r["merge"], r["reason"], r["llm_status"])
                  for r in ctx.wh.read("resolve_pairs").collect())


# The names the scripted server extracts from each document (its capitalised phrases, sentence by
# sentence; chunk.size_tokens 40 keeps every document in one unit), as resolve normalises them:
# lower case, punctuation and legal suffixes dropped ("Group" is not a legal suffix).
NAMES = {
    "b.md": {"orsolya foods", "halvard quist", "gdansk"},
    "c.txt": {"kestrel logistics", "leipzig", "anton weber"},
    "c.txt edited": {"kestrel logistics", "leipzig", "anton weber", "dresden"},
    "e.md": {"nordlicht shipping", "halvard quist", "hamburg", "fenmore foods group", "rotterdam"},
    "f.md": {"vistula carriers", "kestrel logistics", "katowice", "leipzig"},
}


def _nodes(*docs):
    """Node ids of the documents' names: a node's id is the first 32 hex digits of the SHA-256 of
    its normalised name."""
    return {hashlib.sha256(key.encode()).hexdigest()[:32] for d in docs for key in NAMES[d]}


def _handoff_pairs(ctx, part):
    return {(r["a"], r["b"]) for r in ctx.spark.read.parquet(ctx.handoff("resolve", part)).select("a", "b").collect()}


def test_updates_resolve_only_pairs_touching_changed_documents(sequence):
    first, add, change, full = sequence
    r0, r1, r2 = (c.results["resolve"].rows for c in (first, add, change))
    assert r0["pairs_reused"] == 0 and r0["pairs_scored"] == r0["pairs"] > 0
    # Add: the two new documents name a set of nodes; only pairs touching one were scored.
    touched = _nodes("e.md", "f.md")
    scored_now, current = _handoff_pairs(add, "scored-now"), _handoff_pairs(add, "pairs")
    assert len(scored_now) == r1["pairs_scored"] > 0 and r1["pairs_scored"] + r1["pairs_reused"] == r1["pairs"]
    assert all(a in touched or b in touched for a, b in scored_now)
    away = {(a, b) for a, b in current if a not in touched and b not in touched}
    assert away and r1["pairs_reused"] >= len(away)  # nothing away from the new documents was scored again
    # band_low 0: every pair under auto_threshold is adjudicated once; an update asks only about new pairs.
    assert r0["adjudicated"] > 0 and r1["adjudications_reused"] > 0 and r1["adjudicated"] <= r1["pairs_scored"]
    # Delete b.md and edit c.txt: only pairs touching names of the removed or added units were scored.
    touched = _nodes("b.md", "c.txt", "c.txt edited")
    assert all(a in touched or b in touched for a, b in _handoff_pairs(change, "scored-now"))
    assert r2["pairs_reused"] > 0 and r2["pairs_dropped"] > 0 and r2["adjudicated"] <= r2["pairs_scored"]
    # Reused decisions are the rebuild's decisions.
    assert _pair_rows(change) == _pair_rows(full)


def test_communities_redetected_or_within_tolerance(sequence):
    _, add, change, full = sequence
    assert add.results["communities"].rows["redetected"] == 0  # threshold 1000: kept and extended
    ents = {r["entity_id"] for r in _rows(change, "entities", "entity_id")}
    mine = _rows(change, "communities", "community_id")
    theirs = _rows(full, "communities", "community_id")
    level0 = [e for c in mine if c["level"] == 0 for e in c["entity_ids"]]
    assert sorted(level0) == sorted(ents)  # every entity in exactly one top-level community
    res = change.results["communities"].rows
    if res["redetected"]:
        assert mine == theirs
    else:
        q_full = next(c["modularity"] for c in theirs if c["level"] == 0)
        tol = 2 * change.cfg.update.redetect_drift
        assert res["modularity_extended"] >= q_full * (1 - tol), (res, q_full)
    # Every reportable community has an up-to-date report.
    reports = {r["community_id"]: r for r in _rows(change, "community_reports", "community_id")}
    for c in mine:
        if c["size"] >= change.cfg.reports.min_size:
            assert reports[c["community_id"]]["status"] == "ok"
    assert set(reports) <= {c["community_id"] for c in mine}


def test_runs_record_what_was_redone_and_the_full_rebuild_estimate(sequence):
    _, add, change, _ = sequence
    runs = {r["run_id"]: r for r in _rows(change, "runs", "run_id")}
    for ctx in (add, change):
        row = runs[ctx.run_id]
        assert row["kind"] == "update" and row["status"] == "ok"
        counts = json.loads(row["stage_counts"])
        assert counts["cost"]["units_extracted"] == ctx.results["extract"].rows["sent"]
        assert counts["cost"]["communities_reported"] == ctx.results["reports"].rows["sent"]
        assert counts["cost"]["full_rebuild_tokens"] > counts["cost"]["tokens"]
        assert counts["communities"]["redetected"] in (0, 1)
