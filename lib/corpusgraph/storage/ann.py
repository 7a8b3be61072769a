"""Which FAISS index a kind's vectors get, how it is built, and how good it measured.

Exact (`IndexFlatIP`) up to a size, approximate above it: IVF-flat by default (k-means
trained on a seeded sample, then every vector assigned to its nearest list), or HNSW when asked
(HNSW links every vector into its graph one at a time and builds far slower; IVF trains on a
sample and assigns in one matrix product). The search-time setting
(IVF `nprobe`, HNSW `efSearch`) is either the configured one or the smallest power of two whose
recall@10 against exact search, measured on a seeded sample of the stored vectors used as
queries, reaches the target. What was chosen and measured is returned for the meta file, so
the service searches with the setting the pipeline measured.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import faiss
import numpy as np

__all__ = ["IndexParams", "build_index", "exact_top_k", "recall_at_k", "apply_search_params"]

K = 10  # recall is measured at 10: what local and basic search ask the entity and unit indexes for
_BLOCK = 65_536  # rows of the base scored at once by the exact search (bounds its temporary)


@dataclass(frozen=True)
class IndexParams:
    """The embed stage's index settings (EmbeddingSection's, as plain values)."""

    index: str = "flat"  # auto | flat | ivf | hnsw
    exact_max_vectors: int = 200_000
    ivf_nlist: int | None = None
    ivf_nprobe: int | None = None
    hnsw_m: int = 32
    hnsw_ef_construction: int = 80
    hnsw_ef_search: int | None = None
    recall_target: float = 0.95
    train_sample: int = 100_000
    recall_sample: int = 500
    seed: int = 0

    @classmethod
    def from_section(cls, sec: Any) -> "IndexParams":
        return cls(index=sec.index, exact_max_vectors=sec.exact_max_vectors, ivf_nlist=sec.ivf_nlist,
                   ivf_nprobe=sec.ivf_nprobe, hnsw_m=sec.hnsw_m, hnsw_ef_construction=sec.hnsw_ef_construction,
                   hnsw_ef_search=sec.hnsw_ef_search, recall_target=sec.ann_recall_target,
                   train_sample=sec.ann_train_sample, recall_sample=sec.recall_sample, seed=sec.seed)

    def kind_for(self, n: int) -> str:
        if self.index != "auto":
            return self.index
        return "flat" if n <= self.exact_max_vectors else "ivf"


def exact_top_k(base: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Row numbers of the k largest inner products of each query with `base`, best first."""
    k = min(k, base.shape[0])
    best_s = np.full((queries.shape[0], 0), -np.inf, dtype=np.float32)
    best_r = np.zeros((queries.shape[0], 0), dtype=np.int64)
    for start in range(0, base.shape[0], _BLOCK):
        scores = queries @ base[start : start + _BLOCK].T
        s = np.concatenate([best_s, scores], axis=1)
        r = np.concatenate([best_r, np.broadcast_to(np.arange(start, start + scores.shape[1]), scores.shape)], axis=1)
        top = np.argpartition(-s, k - 1, axis=1)[:, :k] if s.shape[1] > k else np.argsort(-s, axis=1)
        best_s, best_r = np.take_along_axis(s, top, 1), np.take_along_axis(r, top, 1)
    order = np.argsort(-best_s, axis=1, kind="stable")
    return np.take_along_axis(best_r, order, 1)


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean share of each query's exact top-k that the approximate top-k found (-1: no hit)."""
    if exact.size == 0:
        return 1.0
    hits = sum(len(set(f[f >= 0].tolist()) & set(e.tolist())) for f, e in zip(found, exact))
    return hits / exact.size


def apply_search_params(index: faiss.Index, params: dict[str, Any]) -> None:
    """Set nprobe (IVF) or efSearch (HNSW) on a loaded index."""
    if "nprobe" in params:
        faiss.extract_index_ivf(index).nprobe = int(params["nprobe"])
    if "ef_search" in params:
        faiss.downcast_index(index).hnsw.efSearch = int(params["ef_search"])


def build_index(vecs: np.ndarray, params: IndexParams) -> tuple[faiss.Index, dict[str, Any], np.ndarray]:
    """(index holding `vecs` in row order, the record of what was built, the rows whose vectors
    were the recall queries) for unit vectors."""
    t0 = time.perf_counter()
    n, dim = vecs.shape
    kind = params.kind_for(n)
    if kind == "flat" or n == 0:
        index = faiss.IndexFlatIP(dim)
        index.add(vecs)
        return index, {"type": "flat", "params": {}, "recall_at_10": 1.0, "recall_measured": False,
                       "build_seconds": round(time.perf_counter() - t0, 3)}, np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng(params.seed)
    if kind == "ivf":
        n_train = min(n, params.train_sample)
        nlist = params.ivf_nlist or max(1, int(round(np.sqrt(n))))
        nlist = max(1, min(nlist, n_train // 39 or 1))  # FAISS wants >= 39 training points per list
        train = vecs[np.sort(rng.choice(n, n_train, replace=False))] if n_train < n else vecs
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = params.seed
        index.train(np.ascontiguousarray(train))
        del train
        index.add(vecs)
        setting, fixed, start, cap = "nprobe", params.ivf_nprobe, 1, nlist
        built = {"nlist": nlist, "trained_on": n_train}
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params.hnsw_ef_construction
        index.add(vecs)
        setting, fixed, start, cap = "ef_search", params.hnsw_ef_search, 16, 4096
        built = {"m": params.hnsw_m, "ef_construction": params.hnsw_ef_construction}
    else:
        raise ValueError(f"unknown index type {kind!r}; expected auto, flat, ivf or hnsw")
    build_s = time.perf_counter() - t0
    # Recall on stored vectors used as queries, against exact search over all of them.
    sample = np.sort(rng.choice(n, min(n, params.recall_sample), replace=False))
    queries = np.ascontiguousarray(vecs[sample])
    k = min(K, n)
    exact = exact_top_k(vecs, queries, k)
    value = fixed if fixed is not None else start
    tried: dict[int, float] = {}
    while True:
        apply_search_params(index, {setting: value})
        _, found = index.search(queries, k)
        tried[value] = recall_at_k(found, exact)
        if fixed is not None or tried[value] >= params.recall_target or value >= cap:
            break
        value = min(cap, value * 2)
    info = {
        "type": kind,
        "params": {**built, setting: value},
        "recall_at_10": round(tried[value], 4),
        "recall_measured": True,
        "recall_target": params.recall_target,
        "recall_queries": int(sample.size),
        "recall_by_setting": {str(v): round(r, 4) for v, r in tried.items()},
        "build_seconds": round(build_s, 3),
        "tune_seconds": round(time.perf_counter() - t0 - build_s, 3),
        "settings": asdict(params),
    }
    return index, info, sample
