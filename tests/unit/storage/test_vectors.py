"""FAISS files: round trip, exact search, edge cases and the errors a user sees."""

from __future__ import annotations

import json

import numpy as np
import pytest

from corpusgraph.storage.vectors import VectorIndex, available_kinds, write_index

pytestmark = pytest.mark.unit


def unit_rows(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_round_trip(tmp_path):
    ids = [f"unit-{i}" for i in range(50)]
    vecs = unit_rows(50)
    path = write_index(tmp_path, "text_units", ids, vecs, model="all-MiniLM-L6-v2")
    assert path == tmp_path / "text_units.faiss" and path.is_file()
    meta = json.loads((tmp_path / "text_units.meta.json").read_text())
    assert meta["ids"] == ids and meta["count"] == 50 and meta["dim"] == 16
    assert meta["model"] == "all-MiniLM-L6-v2"

    index = VectorIndex.load(tmp_path, "text_units")
    assert len(index) == 50 and index.ids == ids and index.model == "all-MiniLM-L6-v2"
    assert index.dim == 16
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temp left


def test_top1_of_a_stored_vector_is_itself(tmp_path):
    ids = [f"e{i}" for i in range(40)]
    vecs = unit_rows(40, seed=1)
    write_index(tmp_path, "entities", ids, vecs, model="m")
    index = VectorIndex.load(tmp_path, "entities")
    hits = index.search(vecs, k=3)
    assert [h[0][0] for h in hits] == ids
    assert all(h[0][1] == pytest.approx(1.0, abs=1e-5) for h in hits)
    # Scores are cosines, best first, and match a brute-force computation.
    q = vecs[7]
    expected = np.argsort(-(vecs @ q))[:3]
    got = index.search(q, k=3)[0]  # a 1-D vector is one query
    assert [i for i, _ in got] == [ids[j] for j in expected]
    assert [s for _, s in got] == pytest.approx([float(vecs[j] @ q) for j in expected], abs=1e-5)


def test_k_larger_than_count_returns_what_exists(tmp_path):
    write_index(tmp_path, "reports", ["a", "b", "c"], unit_rows(3, seed=2), model="m")
    index = VectorIndex.load(tmp_path, "reports")
    hits = index.search(unit_rows(2, seed=3), k=10)
    assert len(hits) == 2
    for row in hits:
        assert sorted(i for i, _ in row) == ["a", "b", "c"]  # no "-1" padding rows
        scores = [s for _, s in row]
        assert scores == sorted(scores, reverse=True)


def test_empty_index(tmp_path):
    write_index(tmp_path, "claims", [], np.empty((0, 8), dtype=np.float32), model="m")
    index = VectorIndex.load(tmp_path, "claims")
    assert len(index) == 0 and index.dim == 8
    assert index.search(unit_rows(2, dim=8), k=5) == [[], []]


def test_missing_file_names_it_and_the_command(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        VectorIndex.load(tmp_path, "entities")
    assert "entities.faiss" in str(err.value) and "corpusgraph index" in str(err.value)
    write_index(tmp_path, "entities", ["a"], unit_rows(1), model="m")
    (tmp_path / "entities.meta.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"entities\.meta\.json"):
        VectorIndex.load(tmp_path, "entities")


def test_available_kinds_needs_both_files(tmp_path):
    assert available_kinds(tmp_path / "absent") == []
    write_index(tmp_path, "text_units", ["a"], unit_rows(1), model="m")
    write_index(tmp_path, "entities", ["a"], unit_rows(1), model="m")
    (tmp_path / "orphan.faiss").write_bytes(b"")
    assert available_kinds(tmp_path) == ["entities", "text_units"]


def test_rewrite_replaces_and_mismatch_is_refused(tmp_path):
    write_index(tmp_path, "k", ["a", "b"], unit_rows(2), model="m1")
    write_index(tmp_path, "k", ["x", "y", "z"], unit_rows(3), model="m2")
    index = VectorIndex.load(tmp_path, "k")
    assert index.ids == ["x", "y", "z"] and index.model == "m2"
    meta_path = tmp_path / "k.meta.json"
    meta = json.loads(meta_path.read_text())
    meta["count"], meta["ids"] = 2, ["x", "y"]  # as if a reader raced a rewrite
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="does not match"):
        VectorIndex.load(tmp_path, "k")


@pytest.mark.parametrize(
    "ids, vecs, kind",
    [
        (["a", "b"], unit_rows(3), "k"),  # count mismatch
        (["a", "a"], unit_rows(2), "k"),  # duplicate ids
        (["a"], 2 * unit_rows(1), "k"),  # not normalised
        (["a"], unit_rows(1), "../escape"),  # kind becomes a file name
        (["a"], unit_rows(1)[0], "k"),  # not 2-D
    ],
)
def test_bad_input_is_refused(tmp_path, ids, vecs, kind):
    with pytest.raises(ValueError):
        write_index(tmp_path, kind, ids, vecs, model="m")
    assert not list(tmp_path.iterdir())


def test_query_dimension_is_checked(tmp_path):
    write_index(tmp_path, "k", ["a"], unit_rows(1, dim=16), model="m")
    index = VectorIndex.load(tmp_path, "k")
    with pytest.raises(ValueError, match="16"):
        index.search(unit_rows(1, dim=8), k=1)
    with pytest.raises(ValueError):
        index.search(unit_rows(1, dim=16), k=0)


@pytest.mark.parametrize("factory", ["Flat", "IVF8,Flat"])
def test_stored_vectors_are_read_back_by_id(factory):
    import faiss

    x = np.random.default_rng(1).standard_normal((400, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = faiss.index_factory(8, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    v = VectorIndex("text_unit", index, [f"u{i}" for i in range(400)], "m")
    assert np.allclose(v.vectors(["u7", "u399", "u7"]), x[[7, 399, 7]])
    assert v.vectors([]).shape == (0, 8)
    with pytest.raises(KeyError):
        v.vectors(["nope"])


def test_written_files_follow_the_umask_not_mkstemps_0600(tmp_path):
    """A service running as another user than the index job must be able to read the files."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        write_index(tmp_path, "entity", ["a", "b"], np.eye(2, 4, dtype=np.float32), model="m")
    finally:
        os.umask(old)
    for name in ("entity.faiss", "entity.meta.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
