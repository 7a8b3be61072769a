"""The query store's memory and load time against the row-dict form it replaced, on a built index.

The index is a run folder that `make bench-scale` left under work/scale (CORPUSGRAPH_BENCH_STORE_RUN,
default run-10000); the benchmark skips, saying so, when that run has not been made. Each form
is loaded in a fresh Python process, one after the other, and its resident memory is read
after the load (RSS growth over the process once its libraries are imported, after a garbage
collection and after Arrow's memory pool has returned the buffers it no longer uses):

- reference: the tables as the store held them before columns.py, each one read from Delta to
  Arrow, then to a dict of row dicts keyed by id (the documents' citation columns only, as the
  store reads them). The derived lookups and the retriever are left out of the reference, so it
  is a lower bound of what the form before took;
- product: `IndexStore` without its vectors (tables as Arrow columns, lookups as integer arrays),
  then the same process after `GraphRetriever(store)` (the walk graph, BM25, the title index);
  `arrow_mb` is what Arrow itself holds for the tables.

Reading a Delta table through delta-rs leaves ~90 MB resident that neither form holds (measured
on the 10k index: one table read and dropped), so at small sizes the two forms read alike; the
difference is in what grows with the corpus.

Writes tests/benchmarks/results/store_memory.json. Asserts only what the store must do: it
loads, and it holds the same ids as the reference.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys

import pytest

from tests.benchmarks.test_scale import ROOT
from tests.conftest import REPO

pytestmark = [pytest.mark.slow]

RESULTS = REPO / "tests" / "benchmarks" / "results" / "store_memory.json"
RUN = os.environ.get("CORPUSGRAPH_BENCH_STORE_RUN", "run-10000")
TABLES = {"documents": "doc_id", "text_units": "unit_id", "entities": "entity_id", "relationships": "rel_id",
          "communities": "community_id", "community_reports": "community_id"}


def _rss_mb() -> float:
    import gc

    import psutil

    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()  # Arrow's pool keeps freed buffers (read, cast) resident
    return psutil.Process().memory_info().rss / 2**20


def measure(form: str, warehouse: str, index_dir: str) -> dict:
    """One form's load in this (fresh) process: seconds, RSS growth, ids per table."""
    import time

    import deltalake  # noqa: F401  (imported before the baseline: its libraries are not the store's)
    import pyarrow as pa
    import pyarrow.compute  # noqa: F401

    from corpusgraph.query.store import _DOC_COLUMNS, IndexStore, _read_table
    from corpusgraph.query.retrieval import GraphRetriever

    before = _rss_mb()
    t0 = time.perf_counter()
    out: dict = {"form": form}
    if form == "row_dicts":
        kept = {}
        for name, key in TABLES.items():
            table = _read_table(warehouse, name, _DOC_COLUMNS if name == "documents" else None)
            kept[name] = {row[key]: row for row in table.to_pylist()}
            del table
        out["ids"] = {name: len(rows) for name, rows in kept.items()}
    else:
        store = IndexStore(warehouse, index_dir, load_vectors=False)
        out["ids"] = {"documents": len(store.docs), "text_units": len(store.units), "entities": len(store.entities),
                      "relationships": len(store.relationships), "communities": len(store.communities),
                      "community_reports": len(store.reports)}
        out["store_mb"] = round(_rss_mb() - before, 1)
        out["arrow_mb"] = round(pa.total_allocated_bytes() / 2**20, 1)  # the tables' columns
        out["store_s"] = round(time.perf_counter() - t0, 2)
        GraphRetriever(store)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    out["rss_mb"] = round(_rss_mb() - before, 1)
    return out


def _in_fresh_process(form: str, warehouse: str, index_dir: str) -> dict:
    code = ("import json, sys; from tests.benchmarks.test_store_memory import measure; "
            "print(json.dumps(measure(*sys.argv[1:])))")
    done = subprocess.run([sys.executable, "-c", code, form, warehouse, index_dir], cwd=REPO, check=True,
                          capture_output=True, text=True, timeout=3600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_store_memory_against_row_dicts():
    run = ROOT / RUN
    if not (run / "wh" / "entities").is_dir():
        pytest.skip(f"no index at {run}: build it with make bench-scale (CORPUSGRAPH_BENCH_SCALE_SIZES) first")
    warehouse, index_dir = str(run / "wh"), str(run / "idx")
    load_before = os.getloadavg()
    reference = _in_fresh_process("row_dicts", warehouse, index_dir)
    product = _in_fresh_process("columns", warehouse, index_dir)
    # Deleted documents' rows are dropped by the store (and their units), not by the reference.
    for name in ("entities", "relationships", "communities"):
        assert product["ids"][name] == reference["ids"][name], name
    assert product["ids"]["community_reports"] <= reference["ids"]["community_reports"]
    result = {
        "run": f"work/scale/{RUN}", "reference": reference, "product": product,
        "tables_ratio": round(reference["rss_mb"] / max(product["store_mb"], 1e-9), 2),
        "how": "each form loaded in a fresh process, one after the other; RSS growth after gc. reference: the "
               "tables as dicts of row dicts (the store before columns.py, without its lookups and retriever: a "
               "lower bound); product: IndexStore(load_vectors=False) (store_mb: tables and lookups) and then "
               "its retriever (rss_mb). tables_ratio: reference rss_mb / product store_mb",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    saved = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    saved[RUN] = result
    RESULTS.write_text(json.dumps(saved, indent=2) + "\n")
    print(json.dumps(result, indent=2))
