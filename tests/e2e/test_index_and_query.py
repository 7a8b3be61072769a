"""The whole path on the real stack: Spark + Delta, Ray, the embedded model server, FAISS,
and queries read through delta-rs. Small inputs keep it to a few minutes on 2 cores."""

from __future__ import annotations

import pytest

from corpusgraph.config import load_config
from corpusgraph.runner.pipeline import format_summary, run_index
from corpusgraph.runner.run import RunContext
from corpusgraph.tables import TABLES, table_path
from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.llm, pytest.mark.spark, pytest.mark.ray]

DOCS = {
    "valencia-note.md": "# Valencia weekly note\nReefer trailer R-77 was moved from the Valencia hub to the "
    "Milan hub on 3 March 2026. Brightwater Haulage missed two early pickups at Valencia this week.",
    "milan-staff.txt": "Milan hub staff list\nGiulia Sarti is the dock lead at the Milan hub of Halvard & Quist. "
    "Brightwater Haulage collected late at Milan twice in March, delaying Fenmore Foods loads.",
    "fenmore.md": "# Fenmore Foods complaint\nFenmore Foods reported that its chilled shipment HQ-52910 spoiled on "
    "trailer R-77 after the reefer unit failed in the heat. Fenmore Foods asked Halvard & Quist for a refund.",
}


@pytest.fixture(scope="module")
def indexed(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    inputs = root / "in"
    inputs.mkdir()
    for name, text in DOCS.items():
        (inputs / name).write_text(text)
    (inputs / "broken.txt").write_bytes(b"\x00\x00\x01 not text")
    cfg = load_config(REPO / "conf" / "local.yaml", {
        "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
        "storage.cache_dir": str(root / "cache"), "ingest.inputs": f"[{inputs}]",
    })
    first = RunContext(cfg, spark)
    run_index(first)
    second = RunContext(cfg, spark)
    run_index(second)
    return cfg, first, second


def test_every_table_is_delta_readable_by_spark_and_delta_rs(indexed, spark):
    from deltalake import DeltaTable

    cfg, _, _ = indexed
    for name, t in TABLES.items():
        path = table_path(cfg.storage.warehouse, name)
        assert spark.read.format("delta").load(path).columns == t.schema.names
        assert DeltaTable(path).schema().to_arrow().names == t.schema.names
    rows = {n: DeltaTable(table_path(cfg.storage.warehouse, n)).to_pyarrow_table().num_rows for n in TABLES}
    for name in ("documents", "text_units", "extractions", "entities", "communities", "embeddings", "runs"):
        assert rows[name] > 0, f"{name} is empty"
    assert rows["documents"] == 3


def test_refused_input_is_in_quarantine_with_its_reason(indexed):
    from deltalake import DeltaTable

    cfg, first, _ = indexed
    q = DeltaTable(table_path(cfg.storage.warehouse, "quarantine")).to_pyarrow_table().to_pylist()
    assert [(r["source_uri"].rsplit("/", 1)[-1], r["reason"]) for r in q] == [("broken.txt", "binary")]
    assert first.results["ingest"].rows["quarantined"] == 1


def test_first_run_paid_for_extraction_and_second_run_paid_nothing(indexed):
    cfg, first, second = indexed
    ex1 = first.results["extract"]
    # Short units share calls (extract.units_per_call); gleaning rounds add calls for some units.
    assert ex1.usage.calls == ex1.rows["calls"] > 0 and ex1.rows["sent"] == ex1.rows["units"] > 0
    assert ex1.usage.tokens_in > 0 and ex1.usage.tokens_out > 0
    for stage in ("extract", "reports"):
        assert second.results[stage].usage.calls == 0, stage
        assert second.results[stage].rows["sent"] == 0, stage
    # Each gleaning call resumed from its unit's saved prompt state on the embedded server
    # (llm.prompt_cache_mb; llm/llama_serve.py), which writes a line for each such call.
    gleaned = sum(n for k, n in ex1.rows.items() if k.startswith("gleaned_round"))
    log = (first.cache_dir / "embedded-server.log").read_text(errors="replace")
    assert gleaned > 0 and log.count("Llama._create_completion: cache hit") >= gleaned
    summary = format_summary(second, 1.0)
    assert "No LLM call was paid for in this run" in summary
    assert "already have an extraction" in " ".join(second.results["extract"].notes)
    # The run and its accounting are recorded in Delta.
    from deltalake import DeltaTable

    calls = DeltaTable(table_path(cfg.storage.warehouse, "llm_calls")).to_pyarrow_table().to_pylist()
    by_run = {(c["run_id"], c["stage"]): c for c in calls}
    assert by_run[(first.run_id, "extract")]["calls"] == ex1.usage.calls
    assert by_run[(second.run_id, "extract")]["calls"] == 0
    runs = {r["run_id"]: r["status"] for r in DeltaTable(table_path(cfg.storage.warehouse, "runs")).to_pyarrow_table().to_pylist()}
    assert runs[first.run_id] == runs[second.run_id] == "ok"


@pytest.fixture(scope="module")
def engine(indexed):
    from corpusgraph.llm.server import EmbeddedServer
    from corpusgraph.query.open import open_query_engine

    cfg, _, _ = indexed
    with EmbeddedServer(log_path=f"{cfg.storage.cache_dir}/query-server.log", model_alias=cfg.llm.model) as server:
        yield open_query_engine(cfg, server.base_url)


def _doc_ids(cfg):
    from deltalake import DeltaTable

    return {r["doc_id"] for r in DeltaTable(table_path(cfg.storage.warehouse, "documents")).to_pyarrow_table().to_pylist()}


@pytest.mark.parametrize("method,question", [
    ("local", "Who is the dock lead at the hub where trailer R-77 was moved?"),
    ("global", "What are the recurring causes of delays across hubs?"),
])
def test_questions_are_answered_with_citations(indexed, engine, method, question):
    cfg, _, _ = indexed
    answer = engine.ask(question, method=method)
    assert answer.method == method and answer.error is None
    assert answer.answer.strip()
    assert answer.citations, "an answer without citations"
    docs = _doc_ids(cfg)
    assert all(c.doc_id in docs and c.unit_id for c in answer.citations)
    assert answer.tokens_in > 0 and answer.llm_calls >= 1
