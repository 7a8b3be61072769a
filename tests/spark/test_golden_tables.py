"""Golden whole-table tests: each stage's output on a small fixed corpus, compared row by row.

The fixture is `freight_fast_index` (tests/spark/conftest.py): the freight sample in two access
domains, indexed ingest to communities with no model (fast spaCy extraction; resolution by names
and scores without LLM adjudication or summaries). Ids are content hashes and Leiden is seeded, so
every table is a function of the corpus, the config and the code: any change to what a stage
writes shows here as a row that differs, with its key.

The golden files under tests/golden/freight_fast/ were written by this test on commit 8cad293, before
the issue 17 restructuring, and read over by hand: 44 documents and 44 units (the sample's documents
are short), no quarantined input, 232 entities whose titles are names in the text, 422
relationships, 105 communities in 3 levels whose parents exist. `CORPUSGRAPH_UPDATE_GOLDEN=1`
rewrites them: do that only for a change meant to alter the tables, and say so in its commit.

Left out of each row: what a run stamps and a rerun changes (ingest, extraction and run times,
run ids) and the machine's paths (source_uri keeps its file name). Long texts are kept as their
length and SHA-1, so the files stay readable.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import pytest

from corpusgraph.tables import table, table_path

pytestmark = pytest.mark.spark

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "freight_fast"
TABLES = ("documents", "quarantine", "text_units", "extractions", "entities", "entity_aliases",
          "resolve_pairs", "relationships", "claims", "communities")
VOLATILE = {"ingested_at", "seen_at", "extracted_at", "run_id"}
LONG = 200  # characters: a longer string is kept as its length and digest


def _value(v):
    if isinstance(v, str) and len(v) > LONG:
        return {"len": len(v), "sha1": hashlib.sha1(v.encode()).hexdigest()}
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 9)
    if isinstance(v, dict):
        return {k: _value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v


def _rows(warehouse: str, name: str) -> list[dict]:
    from deltalake import DeltaTable

    t = table(name)
    rows = DeltaTable(table_path(warehouse, name)).to_pyarrow_table().to_pylist()
    out = []
    for r in rows:
        r = {k: v for k, v in r.items() if k not in VOLATILE}
        if "source_uri" in r and r["source_uri"]:
            r["source_uri"] = r["source_uri"].rsplit("/", 1)[-1]
        out.append({k: _value(v) for k, v in r.items()})
    return sorted(out, key=lambda r: json.dumps([r.get(k) for k in t.key], default=str))


def _stage_rows(warehouse: str) -> dict:
    """runs.stage_counts of the build, without its seconds and bytes (they vary run to run)."""
    from deltalake import DeltaTable

    runs = DeltaTable(table_path(warehouse, "runs")).to_pyarrow_table().to_pylist()
    (run,) = runs
    counts = json.loads(run["stage_counts"])
    return {stage: {k: v for k, v in c.items() if k not in ("seconds", "driver_collected_bytes")}
            for stage, c in counts.items()}


def _check(name: str, got):
    path = GOLDEN / f"{name}.json"
    if os.environ.get("CORPUSGRAPH_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True, default=str) + "\n")
    want = json.loads(path.read_text())
    got = json.loads(json.dumps(got, sort_keys=True, default=str))  # same encoding as the file
    if isinstance(want, list):
        key = table(name).key
        by_key = lambda rows: {json.dumps([r.get(k) for k in key]): r for r in rows}  # noqa: E731
        w, g = by_key(want), by_key(got)
        assert sorted(g) == sorted(w), f"{name}: keys differ: missing {sorted(set(w) - set(g))[:5]}, extra {sorted(set(g) - set(w))[:5]}"
        diff = [k for k in w if w[k] != g[k]]
        assert not diff, f"{name}: {len(diff)} rows differ, first {diff[0]}: want {w[diff[0]]}, got {g[diff[0]]}"
        assert len(got) == len(want), f"{name}: {len(got)} rows, golden has {len(want)} (duplicate keys?)"
    else:
        assert got == want


@pytest.mark.parametrize("name", TABLES)
def test_table_equals_golden(freight_fast_index, name):
    _, wh = freight_fast_index
    _check(name, _rows(wh.root, name))


def test_stage_counts_equal_golden(freight_fast_index):
    _, wh = freight_fast_index
    _check("stage_counts", _stage_rows(wh.root))
