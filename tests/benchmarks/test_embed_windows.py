"""Units and embedder agree (issue 46): lihua's 600-token units embedded by the bundled MiniLM cut
at its 256-piece window against read in windows and pooled (llm/minilm.py, embeddings.windows),
and what each does to dense, hybrid and local recall@1/2/5 on lihua's dev questions.

Both sets of vectors are computed here from the index's own unit texts (title and text as the
embed stage joins them), on the index the retrieval benchmark built (work/bench-cache/retrieval);
writes tests/benchmarks/results/embed_windows.json. Run it under the heavy lock.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from tests.benchmarks.test_retrieval import CACHE, SHARED_DATA, _read_jsonl, config_for, product_rankings, recalls
from tests.conftest import REPO

pytestmark = [pytest.mark.slow]

RESULTS = REPO / "tests" / "benchmarks" / "results" / "embed_windows.json"
NAME = "lihua"


def _unit_texts(store, ids: list[str]) -> list[str]:
    """Each unit as the embed stage embeds it (stages/embed.unit_texts): the title, a newline and
    the text, unless the title is blank or already the text's first line."""
    out = []
    for u in ids:
        row = store.units[u]
        title = ((store.docs.get(row["doc_id"]) or {}).get("title") or "").strip()
        text = row["text"] or ""
        first = text.lstrip().lstrip("#").strip().split("\n", 1)[0].rstrip()
        out.append(text if not title or first == title else f"{title}\n{text}")
    return out


@pytest.mark.skipif(not (CACHE / NAME / "built.json").is_file(), reason="run test_retrieval.py first (it builds the index)")
def test_long_units_read_in_windows_against_cut():
    import faiss

    from corpusgraph.llm.minilm import MiniLMEmbedder
    from corpusgraph.query.retrieval import GraphRetriever
    from corpusgraph.query.store import IndexStore, StoreTables
    from corpusgraph.storage.vectors import VectorIndex

    cfg = config_for(NAME, CACHE / NAME)
    store = IndexStore(cfg.storage.warehouse, cfg.storage.index_dir, load_vectors=False)
    questions = [q for q in _read_jsonl(SHARED_DATA / NAME / "dev.jsonl") if q["evidence_doc_ids"]]
    source_id = {d: (row.get("source_uri") or "").rsplit("#", 1)[-1] for d, row in store.docs.items()}
    unit_doc = {u: source_id[row["doc_id"]] for u, row in store.units.items()}
    cut, whole = MiniLMEmbedder(), MiniLMEmbedder(windows=True)
    qvecs = cut.embed([q["question"] for q in questions])
    ids = list(store.vectors("text_unit").ids)
    texts = _unit_texts(store, ids)
    pieces = [len(e.ids) for e in whole._load()[0].encode_batch(texts)]
    t0 = time.perf_counter()
    vectors = {"cut": cut.embed(texts)}
    cut_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    vectors["windows"] = whole.embed(texts)
    windows_s = time.perf_counter() - t0
    out = {"corpus": NAME, "units": len(ids), "units_over_256_pieces": sum(p > 256 for p in pieces),
           "mean_pieces": round(float(np.mean(pieces)), 1), "embed_seconds": {"cut": round(cut_s, 1),
                                                                              "windows": round(windows_s, 1)}}
    for label, vecs in vectors.items():
        flat = faiss.IndexFlatIP(vecs.shape[1])
        flat.add(vecs)
        index = VectorIndex("text_unit", flat, ids, cut.model)
        view = IndexStore(store.warehouse, store.index_dir, load_vectors=False, tables=StoreTables(
            docs=store.docs, units=store.units, unit_domain=store.unit_domain, entities=store.entities,
            relationships=store.relationships, claims=store.claims, communities=store.communities,
            reports=store.reports, vectors=lambda kind, index=index: index if kind == "text_unit" else store.vectors(kind)))
        rankings, _ = product_rankings(view, GraphRetriever(view), cfg.query, questions, qvecs, unit_doc)
        rec = recalls(rankings, questions)
        out[label] = {k: {f"recall@{n}": rec[k][f"recall@{n}"] for n in (1, 2, 5)} for k in rec}
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    assert out["units_over_256_pieces"] > 0
