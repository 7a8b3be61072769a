"""FAISS files built from the `embeddings` table, and top-k search over them.

One index per kind (text units, entities, community reports, ...): `<kind>.faiss` holds the
vectors in row order and `<kind>.meta.json` the ids of those rows, the embedding model, the
dimension, the count, and `index`: which FAISS index it is (flat, ivf, hnsw), its parameters and
its recall@10 against exact search as measured when it was built (ann.py chooses and measures).
Vectors are L2-normalised and the metric is inner product, so scores are cosine similarities.
Exact search is the default up to embeddings.exact_max_vectors (measured build and search
times: tests/benchmarks/results/service_load.json, query_latency.json); larger kinds get an
approximate index, searched with the nprobe / efSearch recorded beside it.

The service loads these files once at start-up; `corpusgraph index` writes them. The folder
(storage.index_dir) may be a URI on an object store: the embed step writes each kind locally and
uploads it (`publish_index`), the service copies each kind to a temporary folder and loads it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Sequence

import faiss
import numpy as np

from corpusgraph.config import S3Section
from corpusgraph.storage.ann import IndexParams, apply_search_params, build_index
from corpusgraph.storage.locations import download, is_local, join, list_files, local_path, upload

__all__ = ["VectorIndex", "available_kinds", "write_index", "publish_index"]

_KIND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")  # it becomes a file name
_NORM_TOLERANCE = 1e-3  # float32 vectors from a normalising embedder are well inside this


def _paths(index_dir: Path, kind: str) -> tuple[Path, Path]:
    if not _KIND.match(kind):
        raise ValueError(f"kind {kind!r} must be letters, digits, '_' or '-'")
    return index_dir / f"{kind}.faiss", index_dir / f"{kind}.meta.json"


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it; set straight back
    os.umask(mask)
    return mask


def _atomic_write(path: Path, data: bytes) -> None:
    # Temp file in the same directory, so os.replace is a rename on one filesystem: a
    # reader sees either the old file or the new one, never a partial write.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file 0600 and the rename keeps that: an index written by one user (an
        # index job, CI) would be unreadable to a service running as another. Give it the mode an
        # ordinary open() would, under the process's umask.
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_index(
    index_dir: str | os.PathLike[str], kind: str, ids: Sequence[str], vectors: np.ndarray, model: str,
    params: IndexParams | None = None,
) -> Path:
    """Write `<index_dir>/<kind>.faiss` and `<kind>.meta.json`; returns the .faiss path.

    `vectors` is (len(ids), dim) and must already be L2-normalised (an `Embedder`'s output):
    a vector that is not is refused rather than silently rescaled, since it usually means
    rows from another model or a corrupt table. `params` chooses the index type (default: exact).
    """
    index_dir = Path(index_dir)
    faiss_path, meta_path = _paths(index_dir, kind)
    vecs = np.ascontiguousarray(vectors, dtype=np.float32)
    if vecs.ndim != 2:
        raise ValueError(f"vectors must be 2-D (n, dim), got shape {vecs.shape}")
    ids = [str(i) for i in ids]
    if len(ids) != vecs.shape[0]:
        raise ValueError(f"{len(ids)} ids for {vecs.shape[0]} vectors")
    if len(set(ids)) != len(ids):
        raise ValueError("ids must be unique: a search hit must name one row")
    if vecs.shape[1] < 1:
        raise ValueError("vectors must have at least one dimension")
    if len(ids):
        if not np.all(np.isfinite(vecs)):
            raise ValueError("vectors contain NaN or infinity")
        for start in range(0, len(ids), 65_536):  # in blocks: no full-size temporary at millions of rows
            norms = np.linalg.norm(vecs[start : start + 65_536], axis=1)
            bad = np.flatnonzero(np.abs(norms - 1.0) > _NORM_TOLERANCE)
            if bad.size:
                row = start + int(bad[0])
                raise ValueError(f"vectors must be L2-normalised; row {row} ({ids[row]!r}) has norm "
                                 f"{norms[bad[0]]:.4f}")

    index, info, sample = build_index(vecs, params or IndexParams())
    if sample.size:
        info["recall_sample_ids"] = [ids[r] for r in sample]
    meta = {"kind": kind, "model": model, "dim": int(vecs.shape[1]), "count": len(ids), "ids": ids, "index": info}
    index_dir.mkdir(parents=True, exist_ok=True)
    # Vectors first, then the meta that describes them. Each file is replaced atomically;
    # a reader racing the pair can still see a new .faiss with the old meta for a moment,
    # and VectorIndex.load refuses that mismatch (count and dim must agree) loudly.
    _atomic_write(faiss_path, faiss.serialize_index(index).tobytes())
    _atomic_write(meta_path, json.dumps(meta, ensure_ascii=False).encode("utf-8"))
    return faiss_path


def available_kinds(index_dir: str | os.PathLike[str], s3: S3Section | None = None) -> list[str]:
    """Kinds with both files present under `index_dir` (a folder or a URI), sorted; [] if it does
    not exist. s3: how to reach an s3:// or s3a:// index_dir (None: from the environment)."""
    names = set(list_files(str(index_dir), s3))
    kinds = [n[: -len(".faiss")] for n in names if n.endswith(".faiss")]
    return sorted(k for k in kinds if _KIND.match(k) and f"{k}.meta.json" in names)


def publish_index(local_dir: str | os.PathLike[str], index_dir: str, kind: str, s3: S3Section | None = None) -> None:
    """Copy one kind's files, written by write_index under local_dir, to index_dir (a URI): the
    vectors first, then the meta that describes them, as write_index orders them."""
    for path in _paths(Path(local_dir), kind):
        upload(path, join(index_dir, path.name), s3)


class VectorIndex:
    """One loaded kind: exact cosine top-k over its rows, answered with row ids."""

    def __init__(self, kind: str, index: faiss.Index, ids: list[str], model: str, info: dict | None = None):
        if index.ntotal != len(ids):
            raise ValueError(f"{kind}: index has {index.ntotal} rows but {len(ids)} ids")
        self.kind = kind
        self._index = index
        self._ids = ids
        self.model = model
        self.dim = int(index.d)
        # What the embed stage built and measured (type, params, recall_at_10); files written
        # before the index was recorded are exact.
        self.info = dict(info or {"type": "flat", "params": {}, "recall_at_10": 1.0})
        apply_search_params(index, self.info.get("params") or {})
        self._rows: dict[str, int] | None = None  # id -> row, built by the first `vectors` call

    @classmethod
    def load(cls, index_dir: str | os.PathLike[str], kind: str, s3: S3Section | None = None) -> "VectorIndex":
        """One kind from `index_dir`: a local folder, or a URI whose two files are copied to a
        temporary local folder first (FAISS reads files), which is removed once they are loaded."""
        if is_local(str(index_dir)):
            return cls._load_files(Path(local_path(str(index_dir))), kind, str(index_dir))
        with tempfile.TemporaryDirectory(prefix="corpusgraph-faiss-") as tmp:
            for remote, local in zip(_paths(Path("."), kind), _paths(Path(tmp), kind)):
                try:
                    download(join(str(index_dir), remote.name), local, s3)
                except FileNotFoundError:
                    pass  # _load_files names the missing file and how to make it
            return cls._load_files(Path(tmp), kind, str(index_dir))

    @classmethod
    def _load_files(cls, folder: Path, kind: str, where: str) -> "VectorIndex":
        faiss_path, meta_path = _paths(folder, kind)
        for p in (faiss_path, meta_path):
            if not p.is_file():
                raise FileNotFoundError(
                    f"vector index file {p.name} is missing under {where}; run `corpusgraph index` to build the "
                    f"{kind!r} index (it writes {faiss_path.name} and {meta_path.name})"
                )
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        index = faiss.read_index(str(faiss_path))
        if int(meta["dim"]) != index.d or int(meta["count"]) != index.ntotal:
            raise ValueError(
                f"{faiss_path.name} ({index.ntotal} x {index.d}) under {where} does not match {meta_path.name} "
                f"({meta['count']} x {meta['dim']}); rebuild with `corpusgraph index`"
            )
        return cls(kind, index, list(meta["ids"]), str(meta["model"]), meta.get("index"))

    @property
    def ids(self) -> list[str]:
        return list(self._ids)  # a copy: the row order is this index's contract

    def __len__(self) -> int:
        return len(self._ids)

    def __repr__(self) -> str:
        return (f"VectorIndex(kind={self.kind!r}, model={self.model!r}, dim={self.dim}, count={len(self)}, "
                f"type={self.info.get('type')!r})")

    def _row_map(self) -> dict[str, int]:
        """id -> row, built on first use (with an IVF index's direct map, which reading rows back needs)."""
        if self._rows is None:
            ivf = faiss.try_extract_index_ivf(self._index)
            if ivf is not None:
                ivf.make_direct_map()
            self._rows = {i: r for r, i in enumerate(self._ids)}
        return self._rows

    def vectors(self, ids: Sequence[str]) -> np.ndarray:
        """The stored (normalised) vectors of `ids`, one row each; KeyError for an unknown id."""
        rows = self._row_map()
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        for k, i in enumerate(ids):
            out[k] = self._index.reconstruct(rows[i])
        return out

    def similarities(self, query_vector: np.ndarray, ids: Sequence[str]) -> list[float | None]:
        """The cosine of one (normalised) query vector with each of `ids`' stored vectors, in order;
        None for an id this index does not hold."""
        if not ids or len(self) == 0:
            return [None] * len(ids)
        rows = self._row_map()
        held = [i for i in ids if i in rows]
        if not held:
            return [None] * len(ids)
        q = np.asarray(query_vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise ValueError(f"query vector must have {self.dim} dimensions, got {q.shape[0]}")
        scores = dict(zip(held, (self.vectors(held) @ q).tolist()))
        return [scores.get(i) for i in ids]

    def search(self, query_vectors: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        """Top-k (id, cosine) per query row, best first; fewer than k when k > len(self).

        A 1-D vector counts as one query. Queries should come from the same model
        (`self.model`) and be L2-normalised, as `Embedder.embed` returns them.
        """
        if k < 1:
            raise ValueError("k must be >= 1")
        q = np.ascontiguousarray(query_vectors, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        if q.ndim == 2 and len(self) == 0:  # an empty kind: its recorded dim may be a placeholder
            return [[] for _ in range(q.shape[0])]
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise ValueError(f"query vectors must be (n, {self.dim}), got shape {q.shape}")
        if q.shape[0] == 0 or len(self) == 0:
            return [[] for _ in range(q.shape[0])]
        scores, rows = self._index.search(q, min(k, len(self)))
        # FAISS pads missing hits with row -1; keep only real rows.
        return [
            [(self._ids[r], float(s)) for r, s in zip(row_ids, row_scores) if r >= 0]
            for row_ids, row_scores in zip(rows, scores)
        ]
