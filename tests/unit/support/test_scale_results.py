"""How the scale benchmark files its entries in scale.json (tests/benchmarks/test_scale.py), and
how the local-context figures join them (test_service_scale.py): pure bookkeeping, no Spark."""

from __future__ import annotations

import json

import pytest

from tests.support import synthetic_corpus
from tests.benchmarks import test_scale as T
from tests.benchmarks import test_service_scale as S

pytestmark = pytest.mark.unit


def entry(documents: int, stages: dict, world: int | None = None, **kw) -> dict:
    out = {"documents": documents, "seed": 0, "resumed": False, "finished": True, "stages": stages,
           "total_seconds": sum(s["seconds"] for s in stages.values()), "not_run": [], "not_run_reason": None,
           "resolution": None, "loadavg_before": [1.0, 1.0, 1.0], "loadavg_after": [2.0, 2.0, 2.0], **kw}
    if world:
        out["world_entities"] = world
    return out


@pytest.fixture
def results(tmp_path, monkeypatch):
    path = tmp_path / "scale.json"
    path.write_text(json.dumps({
        "sizes": [entry(10, {"ingest": {"seconds": 1.0}}), entry(100, {"ingest": {"seconds": 20.0}},
                                                                  estimate={"seconds": 5.0})],
        "local_context": {"entities": 51}, "local_context_p50_ms": 25.0, "findings": {"a": 1},
        "reruns_2026_12_02_evening": {"b": 2}, "update": {"c": 3}}))
    monkeypatch.setattr(T, "RESULTS", path)
    return path


def test_an_entity_dense_run_is_filed_apart_from_the_sizes_and_their_linearity(results):
    out = T.write_results(entry(100, {"ingest": {"seconds": 400.0}}, world=1000))
    assert [s["documents"] for s in out["sizes"]] == [10, 100]
    assert out["sizes"][1]["stages"]["ingest"]["seconds"] == 20.0  # the standard 100 is untouched
    assert [(s["documents"], s["world_entities"]) for s in out["entity_dense"]] == [(100, 1000)]
    assert out["linearity_seconds_per_doc_ratio"] == {"100_vs_10": {"ingest": 2.0}}
    # Keys this benchmark does not write are kept as they were.
    assert (out["local_context"], out["local_context_p50_ms"], out["findings"], out["reruns_2026_12_02_evening"],
            out["update"]) == ({"entities": 51}, 25.0, {"a": 1}, {"b": 2}, {"c": 3})
    assert json.loads(results.read_text()) == out


def test_a_resumed_dense_run_merges_into_its_own_entry_and_a_standard_rerun_keeps_its_estimate(results):
    T.write_results(entry(100, {"ingest": {"seconds": 4.0}, "chunk": {"seconds": 6.0}}, world=1000, finished=False))
    out = T.write_results(entry(100, {"resolve": {"seconds": 9.0}}, world=1000, resumed=True))
    dense = out["entity_dense"][0]
    assert list(dense["stages"]) == ["ingest", "chunk", "resolve"] and dense["resumed_stages"] == ["resolve"]
    out = T.write_results(entry(100, {"ingest": {"seconds": 30.0}}))
    assert out["sizes"][1]["stages"]["ingest"]["seconds"] == 30.0 and out["sizes"][1]["estimate"] == {"seconds": 5.0}
    assert len(out["entity_dense"]) == 1 and len(out["sizes"]) == 2


def test_local_context_figures_land_in_scale_json_with_the_target_judged(results):
    figures = {"local_context_p50_ms": 31.0, "local_context_p99_ms": 170.0, "entities": 1_050_000,
               "relationships": 7, "local_questions": 300, "store_load_s": 2.0, "store_rss_mb": 9.0,
               "vector_indexes": {"entity": {"index": {"type": "hnsw", "recall_at_10": 0.96}}, "text_unit": None}}
    S.record_local_context(figures)
    out = json.loads(results.read_text())
    assert (out["local_context_p50_ms"], out["local_context_p99_ms"], out["entities"], out["ann_recall_at_10"]) == \
        (31.0, 170.0, 1_050_000, 0.96)
    assert out["local_context"]["target_met"] == {"entities": True, "p50": True, "p99": False,
                                                  "ann_recall_at_10": True}
    assert out["findings"] == {"a": 1} and [s["documents"] for s in out["sizes"]] == [10, 100]
    figures["vector_indexes"]["entity"] = {"index": {"type": "flat", "recall_at_10": 1.0}}
    figures["entities"] = 51_000
    S.record_local_context(figures)
    out = json.loads(results.read_text())
    assert out["ann_recall_at_10"] is None  # exact search: nothing to recall against
    assert out["local_context"]["target_met"]["entities"] is False


def test_a_corpus_of_another_world_size_is_generated_again_not_reused(tmp_path):
    first = synthetic_corpus.ensure(tmp_path, 40, 0, n_entities=300)
    again = synthetic_corpus.ensure(tmp_path, 40, 0, n_entities=300)
    assert again["seconds"] == first["seconds"]  # reused: the same manifest
    other = synthetic_corpus.ensure(tmp_path, 40, 0, n_entities=600)
    assert other["n_entities"] == 600 and other["entities"] > first["entities"]


def test_an_exact_resolve_run_is_filed_apart_and_never_replaces_the_similarity_entry(results):
    out = T.write_results(entry(100, {"resolve": {"seconds": 3.0}}, resolve_method="exact"))
    assert out["sizes"][1]["stages"] == {"ingest": {"seconds": 20.0}}  # the similarity 100 is untouched
    assert [(s["documents"], s["resolve_method"]) for s in out["entity_dense"]] == [(100, "exact")]
    out = T.write_results(entry(100, {"resolve": {"seconds": 4.0}}, resolve_method="exact"))
    assert len(out["entity_dense"]) == 1 and out["entity_dense"][0]["stages"]["resolve"]["seconds"] == 4.0


def test_a_seeded_warehouse_shares_data_files_but_not_the_table_logs(tmp_path):
    source = tmp_path / "run-1"
    for name in T.UPSTREAM_TABLES:
        (source / "wh" / name / "_delta_log").mkdir(parents=True)
        (source / "wh" / name / "part-0.parquet").write_bytes(b"rows")
        (source / "wh" / name / "_delta_log" / "00000.json").write_text("{}")
    (source / "wh" / "entities" / "_delta_log").mkdir(parents=True)  # a downstream table stays behind
    target = tmp_path / "run-1-exact"
    T.seed_warehouse(source, target)
    assert sorted(p.name for p in (target / "wh").iterdir()) == sorted(T.UPSTREAM_TABLES)
    a, b = source / "wh" / "extractions", target / "wh" / "extractions"
    assert (a / "part-0.parquet").stat().st_ino == (b / "part-0.parquet").stat().st_ino
    (b / "_delta_log" / "00000.json").write_text('{"commit": 1}')
    assert (a / "_delta_log" / "00000.json").read_text() == "{}"
    with pytest.raises(RuntimeError, match="not a Delta table"):
        T.seed_warehouse(tmp_path / "nowhere", tmp_path / "other")
