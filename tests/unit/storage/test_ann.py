"""The vector index the embed stage writes for its size: exact below the threshold, IVF or HNSW
above it, with its recorded recall checked here against an exact search done in numpy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from corpusgraph.storage.ann import IndexParams
from corpusgraph.storage.vectors import VectorIndex, write_index

pytestmark = pytest.mark.unit


def clustered(n: int, dim: int = 24, centres: int = 40, seed: int = 0) -> np.ndarray:
    """Unit vectors around random centres: structure an inverted file can exploit, like text."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, dim))
    v = c[rng.integers(0, centres, n)] + 0.35 * rng.standard_normal((n, dim))
    v = v.astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def numpy_recall(index: VectorIndex, ids: list[str], vecs: np.ndarray, query_ids: list[str], k: int = 10) -> float:
    row = {i: r for r, i in enumerate(ids)}
    hits = 0
    for qid in query_ids:
        exact = np.argsort(-(vecs @ vecs[row[qid]]), kind="stable")[:k]
        got = {i for i, _ in index.search(vecs[row[qid]], k)[0]}
        hits += len(got & {ids[j] for j in exact})
    return hits / (k * len(query_ids))


@pytest.mark.parametrize("kind,setting", [("ivf", "nprobe"), ("hnsw", "ef_search")])
def test_approximate_index_records_a_recall_that_numpy_confirms(tmp_path, kind, setting):
    n = 3000
    ids = [f"e{i:05d}" for i in range(n)]
    vecs = clustered(n)
    params = IndexParams(index="auto", exact_max_vectors=1000, recall_sample=200, seed=3) if kind == "ivf" \
        else IndexParams(index="hnsw", hnsw_m=16, recall_sample=200, seed=3)
    write_index(tmp_path, "entity", ids, vecs, "m", params)
    info = json.loads((tmp_path / "entity.meta.json").read_text())["index"]
    assert info["type"] == kind and info["recall_measured"] is True and setting in info["params"]
    assert info["recall_at_10"] >= 0.95 and info["recall_queries"] == 200
    sample = info["recall_sample_ids"]
    assert len(sample) == 200 and len(set(sample)) == 200 and set(sample) <= set(ids)

    index = VectorIndex.load(tmp_path, "entity")
    assert index.info["type"] == kind
    # The recorded figure is what a search with the recorded setting really gives.
    assert numpy_recall(index, ids, vecs, sample) == pytest.approx(info["recall_at_10"], abs=0.005)
    hits = index.search(vecs[:5], k=3)
    assert [h[0][0] for h in hits] == ids[:5]  # results come back as ids, the row itself first
    assert all(s == pytest.approx(1.0, abs=1e-4) for s in (h[0][1] for h in hits))
    # Stored vectors read back from the approximate index too (IVF needs its direct map).
    np.testing.assert_allclose(index.vectors([ids[7], ids[2999]]), vecs[[7, 2999]], atol=1e-6)


def test_tuning_raises_nprobe_until_the_target_and_a_fixed_setting_is_kept(tmp_path):
    n = 3000
    ids = [f"u{i}" for i in range(n)]
    vecs = clustered(n, centres=200, seed=1)
    write_index(tmp_path, "text_unit", ids, vecs, "m", IndexParams(index="ivf", ivf_nlist=50, recall_target=0.99))
    info = json.loads((tmp_path / "text_unit.meta.json").read_text())["index"]
    tried = {int(k): v for k, v in info["recall_by_setting"].items()}
    chosen = info["params"]["nprobe"]
    assert sorted(tried) == [2**i for i in range(len(tried))] and chosen == max(tried)
    assert tried[chosen] >= 0.99 or chosen == 50  # the target, or every list searched
    assert all(r < 0.99 for p, r in tried.items() if p < chosen)  # the smallest that reaches it

    write_index(tmp_path, "text_unit", ids, vecs, "m", IndexParams(index="ivf", ivf_nlist=50, ivf_nprobe=3))
    info = json.loads((tmp_path / "text_unit.meta.json").read_text())["index"]
    assert info["params"] == {"nlist": 50, "trained_on": n, "nprobe": 3} and list(info["recall_by_setting"]) == ["3"]
    assert numpy_recall(VectorIndex.load(tmp_path, "text_unit"), ids, vecs, info["recall_sample_ids"]) == \
        pytest.approx(info["recall_at_10"], abs=0.005)


def test_small_kinds_stay_exact_and_old_files_still_load(tmp_path):
    ids = [f"r{i}" for i in range(50)]
    vecs = clustered(50)
    write_index(tmp_path, "community_report", ids, vecs, "m", IndexParams(index="auto", exact_max_vectors=1000))
    meta = json.loads((tmp_path / "community_report.meta.json").read_text())
    assert meta["index"]["type"] == "flat" and meta["index"]["recall_at_10"] == 1.0
    del meta["index"]  # a file written before the index was recorded
    (tmp_path / "community_report.meta.json").write_text(json.dumps(meta))
    index = VectorIndex.load(tmp_path, "community_report")
    assert index.info["type"] == "flat" and index.search(vecs[3], 1)[0][0][0] == "r3"
