"""`corpusgraph export` on a real index, checked against its Delta tables as Spark reads them.

The index: the freight sample with every document given one of two access domains (a JSON-lines
copy, "ops" and "hq" alternately), built once per test session with the fast extraction method
(spaCy, no LLM) and no model at all (`freight_fast_index` in tests/spark/conftest.py): ingest to
communities, without reports (they would start Ray and a model server for a join that
tests/unit/export/test_export.py checks on its index's reports) or embeddings (no export reads them). Each
format, unrestricted and for --domains ops, is compared with counts and attributes computed here
from the tables read by Spark.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict

import pyarrow.parquet as pq
import pytest

from corpusgraph.export import run_export
from corpusgraph.export.neo4j import ARRAY_DELIMITER

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def index(freight_fast_index):
    cfg, wh = freight_fast_index
    read = {n: wh.read(n) for n in ("documents", "text_units", "entities", "relationships", "communities")}
    tables = {n: [r.asDict(recursive=True) for r in df.collect()] for n, df in read.items()}  # small: the test's oracle
    unit_domain = {}
    doc_domain = {d["doc_id"]: d["access_domain"] for d in tables["documents"]}
    for u in tables["text_units"]:
        unit_domain[u["unit_id"]] = doc_domain[u["doc_id"]]
    assert set(doc_domain.values()) == {"ops", "hq"}
    assert tables["entities"] and tables["relationships"] and tables["communities"]
    return cfg.storage.warehouse, tables, unit_domain


def _membership(tables):
    out = defaultdict(dict)
    for c in tables["communities"]:
        for e in c["entity_ids"]:
            out[e][c["level"]] = c["community_id"]
    return out


def _ops_only(tables, unit_domain):
    """What an "ops" key may see, from the tables (access rules as documented in query/access.py)."""
    ok = lambda units: bool(units) and all(unit_domain[u] == "ops" for u in units)  # noqa: E731
    ents = {e["entity_id"] for e in tables["entities"] if ok(e["unit_ids"])}
    rels = {r["rel_id"] for r in tables["relationships"]
            if r["source_id"] in ents and r["target_id"] in ents and ok(r["unit_ids"])}
    return ents, rels


def test_graphml_reads_back_in_igraph_with_the_tables_nodes_edges_and_communities(index, tmp_path):
    import igraph

    wh, tables, unit_domain = index
    m = run_export(wh, tmp_path, "graphml")
    g = igraph.Graph.Read_GraphML(m["file"])
    assert g.vcount() == len(tables["entities"]) and g.ecount() == len(tables["relationships"])
    members = _membership(tables)
    levels = sorted({c["level"] for c in tables["communities"]})
    by_id = {e["entity_id"]: e for e in tables["entities"]}
    for v in g.vs:
        e = by_id[v["id"]]
        assert (v["title"], v["type"], v["description"], int(v["degree"])) == (
            e["title"], e["type"], e["description"], e["degree"])
        assert v["domains"] == ",".join(sorted({unit_domain[u] for u in e["unit_ids"]}))
        for level in levels:
            assert (v[f"community_L{level}"] or None) == members[v["id"]].get(level)
    names = g.vs["id"]
    assert sorted((names[s], names[t]) for s, t in g.get_edgelist()) == sorted(
        (r["source_id"], r["target_id"]) for r in tables["relationships"])
    assert sorted(g.es["weight"]) == sorted(r["weight"] for r in tables["relationships"])


def test_neo4j_csvs_match_the_tables(index, tmp_path):
    wh, tables, unit_domain = index
    m = run_export(wh, tmp_path, "neo4j")

    def rows(name):
        with open(tmp_path / name, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))

    ents = {r["entity_id:ID(Entity)"]: r for r in rows("entities.csv")}
    assert set(ents) == {e["entity_id"] for e in tables["entities"]}
    for e in tables["entities"]:
        r = ents[e["entity_id"]]
        assert (r["title"], r["type"], r["description"]) == (e["title"], e["type"], e["description"])
        assert r["domains:string[]"].split(ARRAY_DELIMITER) == sorted({unit_domain[u] for u in e["unit_ids"]})
    assert len(rows("related.csv")) == len(tables["relationships"])
    assert {r["community_id:ID(Community)"] for r in rows("communities.csv")} == {
        c["community_id"] for c in tables["communities"]}
    levels = {r["community_id:ID(Community)"]: int(r["level:int"]) for r in rows("communities.csv")}
    assert levels == {c["community_id"]: c["level"] for c in tables["communities"]}
    assert len(rows("child_of.csv")) == sum(1 for c in tables["communities"] if c["parent_id"])
    assert len(rows("in_community.csv")) == sum(len(c["entity_ids"]) for c in tables["communities"])
    live = {u["unit_id"] for u in tables["text_units"]}  # no document deleted here
    assert len(rows("text_units.csv")) == len(live) and len(rows("documents.csv")) == len(tables["documents"])
    assert len(rows("mentioned_in.csv")) == sum(len(set(e["unit_ids"]) & live) for e in tables["entities"])
    assert m["command"].startswith("neo4j-admin database import full neo4j ")


def test_parquet_copies_every_table(index, tmp_path):
    wh, tables, _ = index
    m = run_export(wh, tmp_path, "parquet")
    for name, want in tables.items():
        got = pq.read_table(tmp_path / f"{name}.parquet").to_pylist()
        assert m["tables"][name] == len(got) == len(want), name
    key = lambda r: r["entity_id"]  # noqa: E731
    got = sorted(pq.read_table(tmp_path / "entities.parquet").to_pylist(), key=key)
    assert got == sorted(tables["entities"], key=key)


@pytest.mark.parametrize("fmt", ["graphml", "neo4j", "parquet"])
def test_an_ops_export_lacks_what_hq_text_built(index, fmt, tmp_path):
    wh, tables, unit_domain = index
    ents, rels = _ops_only(tables, unit_domain)
    hq_units = {u for u, d in unit_domain.items() if d == "hq"}
    hq_entities = {e["entity_id"] for e in tables["entities"] if set(e["unit_ids"]) & hq_units}
    assert ents and hq_entities and not ents & hq_entities  # the fixture mixes: there is something to hide
    m = run_export(wh, tmp_path, fmt, ["ops"])
    if fmt == "graphml":
        import igraph

        g = igraph.Graph.Read_GraphML(m["file"])
        assert set(g.vs["id"]) == ents and set(g.es["rel_id"]) == rels
        assert set(g.vs["domains"]) == {"ops"}
        return
    if fmt == "neo4j":
        def ids(name, col):
            with open(tmp_path / name, newline="", encoding="utf-8") as f:
                return {r[col] for r in csv.DictReader(f)}

        got_ents, got_units = ids("entities.csv", "entity_id:ID(Entity)"), ids("text_units.csv", "unit_id:ID(TextUnit)")
        got_rels = ids("related.csv", "rel_id")
    else:
        def ids(name, col):
            return {r[col] for r in pq.read_table(tmp_path / f"{name}.parquet", columns=[col]).to_pylist()}

        got_ents, got_units = ids("entities", "entity_id"), ids("text_units", "unit_id")
        got_rels = ids("relationships", "rel_id")
    assert got_ents == ents and got_rels == rels
    assert got_units == {u for u, d in unit_domain.items() if d == "ops"} and not got_units & hq_units
