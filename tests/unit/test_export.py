"""`corpusgraph export` on the two-domain world (query_fixtures): for every set of domains, with and
without per-domain reports, each format holds exactly what the service's view of those domains
holds (access.restrict, the service's own code, is the reference), and nothing of the vault
reaches a public export. The Spark tier (tests/spark/test_export.py) checks the formats against
the tables of a real index.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from corpusgraph.export import run_export
from corpusgraph.query.access import restrict
from corpusgraph.export.neo4j import ARRAY_DELIMITER, EDGE_FILES, NODE_FILES
from tests.conftest import REPO
from tests.support.query_fixtures import VAULT_SECRETS, build_two_domain_index

pytestmark = pytest.mark.unit

DOMAIN_SETS = (None, ("public",), ("vault",), ("public", "vault"))


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "per_domain"])
def world(request, tmp_path_factory):
    from corpusgraph.query.store import IndexStore

    root = tmp_path_factory.mktemp("export-world")
    wh, _ = build_two_domain_index(root, per_domain=request.param)
    return wh, IndexStore(wh, str(root / "faiss"), load_vectors=False), root


def _view(store, domains):
    return store if domains is None else restrict(store, domains)


def _unit_domain(store):
    return store.unit_domain  # every unit, deleted documents' too, to its document's domain


def _csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


@pytest.mark.parametrize("domains", DOMAIN_SETS, ids=lambda d: "all" if d is None else "+".join(d))
def test_graphml_holds_the_view(world, domains, tmp_path):
    import igraph

    wh, store, _ = world
    view = _view(store, domains)
    m = run_export(wh, tmp_path, "graphml", domains)
    g = igraph.Graph.Read_GraphML(m["file"])
    assert not g.is_directed()
    assert g.vcount() == len(view.entities) and g.ecount() == len(view.relationships)
    assert sorted(g.vs["id"]) == sorted(view.entities)
    levels = sorted({c["level"] for c in view.communities.values()})
    for v in g.vs:
        e = view.entities[v["id"]]
        assert (v["title"], v["label"], v["type"], v["description"]) == (
            e["title"], e["title"], e["type"], e["description"])
        assert int(v["degree"]) == e["degree"] and int(v["frequency"]) == e["frequency"]
        assert v["domains"].split(",") == sorted({store.unit_domain[u] for u in e["unit_ids"]})
        for level in levels:
            want = sorted(c for c, com in view.communities.items()
                          if com["level"] == level and v["id"] in com["entity_ids"])
            assert (v[f"community_L{level}"] or None) == (";".join(want) or None), (v["id"], level)
    names = g.vs["id"]
    got = {(r, frozenset((names[s], names[t])), w)
           for r, (s, t), w in zip(g.es["rel_id"], g.get_edgelist(), g.es["weight"])}
    assert got == {(k, frozenset((r["source_id"], r["target_id"])), r["weight"]) for k, r in view.relationships.items()}


@pytest.mark.parametrize("domains", DOMAIN_SETS, ids=lambda d: "all" if d is None else "+".join(d))
def test_neo4j_csvs_hold_the_view(world, domains, tmp_path):
    wh, store, _ = world
    view = _view(store, domains)
    m = run_export(wh, tmp_path, "neo4j", domains)
    files = {}
    for name, header in {**NODE_FILES, **EDGE_FILES}.items():
        got_header, rows = _csv(tmp_path / name)
        assert got_header == header
        files[name] = [dict(zip(header, r)) for r in rows]
    arr = lambda s: s.split(ARRAY_DELIMITER) if s else []  # noqa: E731

    ents = {r["entity_id:ID(Entity)"]: r for r in files["entities.csv"]}
    assert set(ents) == set(view.entities)
    for eid, r in ents.items():
        e = view.entities[eid]
        assert arr(r[":LABEL"]) == ["Entity", e["type"]]
        assert (r["title"], r["description"], int(r["degree:int"])) == (e["title"], e["description"], e["degree"])
        assert arr(r["domains:string[]"]) == sorted({store.unit_domain[u] for u in e["unit_ids"]})
    rels = {r["rel_id"]: r for r in files["related.csv"]}
    assert set(rels) == set(view.relationships)
    for rid, r in rels.items():
        want = view.relationships[rid]
        assert (r[":START_ID(Entity)"], r[":END_ID(Entity)"], r[":TYPE"], float(r["weight:double"])) == (
            want["source_id"], want["target_id"], "RELATED", want["weight"])
    coms = {r["community_id:ID(Community)"]: r for r in files["communities.csv"]}
    assert set(coms) == set(view.communities)
    for cid, r in coms.items():
        assert int(r["level:int"]) == view.communities[cid]["level"]
        assert (r["parent_id"] or None) == view.communities[cid]["parent_id"]
        assert (r["title"] or None) == (view.reports.get(cid) or {}).get("title")
    assert {(r[":START_ID(Entity)"], r[":END_ID(Community)"]) for r in files["in_community.csv"]} == {
        (e, c) for c, com in view.communities.items() for e in com["entity_ids"]}
    assert {(r[":START_ID(Community)"], r[":END_ID(Community)"]) for r in files["child_of.csv"]} == {
        (c, com["parent_id"]) for c, com in view.communities.items() if com["parent_id"]}
    assert {r["unit_id:ID(TextUnit)"] for r in files["text_units.csv"]} == set(view.units)
    assert {r["doc_id:ID(Document)"] for r in files["documents.csv"]} == set(view.docs)
    assert {(r[":START_ID(Entity)"], r[":END_ID(TextUnit)"]) for r in files["mentioned_in.csv"]} == {
        (e, u) for e, ent in view.entities.items() for u in ent["unit_ids"] if u in view.units}
    assert {(r[":START_ID(TextUnit)"], r[":END_ID(Document)"]) for r in files["part_of.csv"]} == {
        (u, unit["doc_id"]) for u, unit in view.units.items()}
    for r in files["text_units.csv"]:
        assert r["access_domain"] == store.unit_domain[r["unit_id:ID(TextUnit)"]]
    script = (tmp_path / "neo4j-import.sh").read_text()
    assert "neo4j-admin database import full" in script and m["command"].startswith("neo4j-admin database import full")
    for name in NODE_FILES:
        assert f"--nodes={tmp_path.resolve() / name}" in m["command"]
    for name in EDGE_FILES:
        assert f"--relationships={tmp_path.resolve() / name}" in m["command"]


@pytest.mark.parametrize("domains", DOMAIN_SETS[1:], ids=lambda d: "+".join(d))
def test_parquet_of_a_domain_set_holds_the_view(world, domains, tmp_path):
    wh, store, _ = world
    view = _view(store, domains)
    m = run_export(wh, tmp_path, "parquet", domains)
    ids = {name: {tuple(r.values())[0] for r in pq.read_table(tmp_path / f"{name}.parquet").to_pylist()}
           for name in m["tables"]}
    assert ids["documents"] == set(view.docs) and ids["text_units"] == set(view.units)
    assert ids["entities"] == set(view.entities) and ids["relationships"] == set(view.relationships)
    assert ids["claims"] == set(view.claims) and ids["communities"] == set(view.communities)
    assert ids["community_reports"] == set(view.reports)
    degree = {r["entity_id"]: r["degree"] for r in pq.read_table(tmp_path / "entities.parquet").to_pylist()}
    assert degree == {k: e["degree"] for k, e in view.entities.items()}
    parents = {r["community_id"]: r["parent_id"] for r in pq.read_table(tmp_path / "communities.parquet").to_pylist()}
    assert parents == {k: c["parent_id"] for k, c in view.communities.items()}
    assert "extractions" in m["left_out"] and "embeddings" in m["left_out"]  # no access rule: never exported


def test_parquet_of_everything_copies_every_table(world, tmp_path):
    from deltalake import DeltaTable

    from corpusgraph.tables import TABLES, table_path

    wh, _, _ = world
    m = run_export(wh, tmp_path, "parquet")
    for name in TABLES:
        try:
            want = DeltaTable(table_path(wh, name)).to_pyarrow_table()
        except Exception:  # a table the fixture did not write
            assert name not in m["tables"]
            continue
        got = pq.read_table(tmp_path / f"{name}.parquet")
        assert got.num_rows == want.num_rows == m["tables"][name]
        key = TABLES[name].key[0]
        assert sorted(got.to_pylist(), key=lambda r: r[key]) == sorted(want.to_pylist(), key=lambda r: r[key])


@pytest.mark.parametrize("fmt", ["graphml", "neo4j", "parquet"])
def test_a_public_export_holds_nothing_of_the_vault(world, fmt, tmp_path):
    wh, _, _ = world
    run_export(wh, tmp_path / "public", fmt, ["public"])
    run_export(wh, tmp_path / "vault", fmt, ["vault"])

    def text(folder):
        if fmt == "parquet":
            return json.dumps([pq.read_table(p).to_pylist() for p in sorted(folder.glob("*.parquet"))], default=str)
        return "\n".join(p.read_text() for p in sorted(folder.iterdir()) if p.name != "export.json")

    public, vault = text(tmp_path / "public").lower(), text(tmp_path / "vault").lower()
    assert [s for s in VAULT_SECRETS if s in public] == []
    assert [s for s in VAULT_SECRETS if s in vault]  # the search would have found them


def test_command_line_export(world, tmp_path):
    wh, _, _ = world
    out = tmp_path / "neo"
    proc = subprocess.run([sys.executable, "-m", "corpusgraph.cli.main", "export", "--format", "neo4j", "--out", str(out),
                           "--warehouse", wh, "--domains", "public,nowhere"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "neo4j-admin database import full neo4j" in proc.stdout
    assert "no document is in domain 'nowhere'" in proc.stdout
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["domains"] == ["nowhere", "public"] and manifest["files"]["entities.csv"] > 0
    bad = subprocess.run([sys.executable, "-m", "corpusgraph.cli.main", "export", "--format", "neo4j", "--out", str(out),
                          "--warehouse", str(tmp_path / "none")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "run `corpusgraph index` first" in bad.stderr
