"""Spark-tier fixtures shared by several modules."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO

SAMPLE = REPO / "lib" / "corpusgraph" / "samples" / "freight" / "docs"


def _two_domain_copy(folder):
    """The sample as one JSON-lines file, documents alternately in domains "ops" and "hq"."""
    records = []
    for path in sorted(SAMPLE.iterdir()):
        if path.suffix == ".jsonl":
            records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        else:
            records.append({"id": path.name, "title": path.stem, "text": path.read_text()})
    folder.mkdir()
    with open(folder / "freight.jsonl", "w") as f:
        for i, r in enumerate(records):
            f.write(json.dumps({**r, "domain": "ops" if i % 2 == 0 else "hq"}) + "\n")


@pytest.fixture(scope="session")
def freight_fast_run(spark, tmp_path_factory):
    """The freight sample in two access domains, indexed ingest to communities with no model at all
    (fast spaCy extraction, resolution without LLM adjudication or summaries): deterministic, so the
    export tests, the golden-table tests and the fast-extraction test read one build. The run's
    context, its results included. Read-only: a test that writes to it would change what the
    others see."""
    from corpusgraph.config import load_config
    from corpusgraph.runner.pipeline import run_index
    from corpusgraph.runner.run import RunContext

    root = tmp_path_factory.mktemp("freight-fast-index")
    _two_domain_copy(root / "in")
    cfg = load_config(REPO / "conf" / "local.yaml", {
        "storage.warehouse": str(root / "wh"), "storage.index_dir": str(root / "idx"),
        "storage.cache_dir": str(root / "cache"), "ingest.inputs": f"[{root / 'in'}]",
        "extract.method": "fast", "resolve.llm_adjudication": "false", "resolve.summarise_descriptions": "false",
    })
    ctx = RunContext(cfg, spark)
    run_index(ctx, ["ingest", "chunk", "extract", "resolve", "communities"])
    return ctx


@pytest.fixture(scope="session")
def freight_fast_index(freight_fast_run):
    """freight_fast_run as (config, warehouse)."""
    return freight_fast_run.cfg, freight_fast_run.wh
