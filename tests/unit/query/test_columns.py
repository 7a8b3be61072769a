"""The columnar tables of the query store (query/columns.py) and the lookups built on them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from corpusgraph.query.columns import CsrMap, Rows
from corpusgraph.query.lexical import Bm25
from corpusgraph.query.store import IndexStore

pytestmark = pytest.mark.unit


def _rows() -> Rows:
    table = pa.table({"entity_id": ["a", "b", "a"], "title": ["Old", None, "New"],
                      "aliases": [["x"], None, None], "degree": [1, None, 3]})
    return Rows(table, "entity_id", {"aliases": []})


def test_rows_read_as_a_mapping_with_nulls_filled_and_the_last_repeat_kept():
    rows = _rows()
    assert len(rows) == 2 and list(rows) == ["b", "a"] and "a" in rows and "z" not in rows
    assert rows["a"] == {"entity_id": "a", "title": "New", "aliases": [], "degree": 3}
    assert rows["b"]["aliases"] == [] and rows["b"]["title"] is None
    assert rows.get("z", "none") == "none"
    with pytest.raises(KeyError):
        rows["z"]
    assert [r["entity_id"] for r in rows.values()] == ["b", "a"]
    assert dict(rows.items())["a"]["title"] == "New"


def test_a_row_read_is_a_copy_and_the_column_paths_agree_with_it():
    rows = _rows()
    row = rows["b"]
    row["aliases"].append("changed")
    row["title"] = "changed"
    assert rows["b"]["aliases"] == [] and rows["b"]["title"] is None
    assert rows.value("a", "title") == "New" and rows.value("b", "aliases") == [] and rows.value("z", "title") is None
    assert rows.numpy("degree", 0, np.int64).tolist() == [0, 3]
    assert rows.positions_of(["a", "q", "b"]).tolist() == [1, -1, 0]


def test_csr_map_keeps_the_pairs_order_per_key_and_leaves_out_keys_without_values():
    keys = Rows(pa.table({"k": ["k0", "k1", "k2"]}), "k")
    values = Rows(pa.table({"v": ["v0", "v1", "v2", "v3"]}), "v")
    m = CsrMap(keys, np.array([2, 0, 2, -1, 0]), np.array([3, 1, 0, 2, -1]), values)
    assert m["k2"] == ["v3", "v0"] and m["k0"] == ["v1"]
    assert "k1" not in m and m.get("k1", ()) == () and m.count("k1") == 0
    assert sorted(m) == ["k0", "k2"] and len(m) == 2
    with pytest.raises(KeyError):
        m["k1"]


def test_store_lookups_follow_the_tables_order():
    store = IndexStore.from_rows(
        docs={"d1": {"title": "One", "access_domain": "pub"}},
        units={"u1": {"doc_id": "d1", "text": "t"}},
        entities={"e1": {"title": "E1"}, "e2": {"title": "E2"}, "e3": {"title": "E3"}},
        relationships={"r1": {"source_id": "e2", "target_id": "e1"}, "r2": {"source_id": "e1", "target_id": "e3"},
                       "r3": {"source_id": "e1", "target_id": "e1"}, "r4": {"source_id": "e1", "target_id": "gone"}},
        communities={"c1": {"level": 0, "entity_ids": ["e3", "e1"]}, "c2": {"level": 1, "entity_ids": ["e1"]}},
    )
    assert store.adjacency["e1"] == ["r1", "r2", "r3", "r4"]  # as target, source, loop once, an unknown end
    assert store.adjacency["e3"] == ["r2"] and "gone" not in store.adjacency
    assert store.entity_communities["e1"] == ["c1", "c2"]
    assert store.degree("e1") == 4 and store.other_end("r1", "e1") == "e2"
    assert store.relationships["r1"]["weight"] == 1.0  # a missing weight counts as one mention
    assert store.unit_domain["u1"] == "pub"
    assert store.names["e2"] == ["e2"]


def test_bm25_scores_do_not_depend_on_the_batch_size():
    texts = ["copper mines near the hollow", "glass lanterns", "", "copper copper sales", "lanterns for ships"]
    whole, batched = Bm25(texts), Bm25(iter(texts), len(texts), batch=2)
    for query in ("copper lanterns", "ships", "nothing here"):
        assert np.array_equal(whole.scores(query), batched.scores(query))
    assert whole.scores("copper")[3] > whole.scores("copper")[0] > 0 == whole.scores("copper")[1]
