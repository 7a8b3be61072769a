"""Small warehouses for the report tests, written with delta-rs (no Spark): real Delta tables with
the declared schemas, rows chosen so every figure has known sums."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=timezone.utc)
TYPES = ("PERSON", "ORGANIZATION", "LOCATION")
# A title with markup and a script end tag: it must show as written and break nothing.
ODD_TITLE = "Dock <b>leads</b> & </script> at Antwerp"


def write(warehouse: Path, name: str, rows: list[dict]) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    from corpusgraph.tables import table, table_path

    write_deltalake(table_path(str(warehouse), name), pa.Table.from_pylist(rows, schema=table(name).schema),
                    mode="overwrite")


def _community(cid, level, parent, members):
    return {"community_id": cid, "level": level, "parent_id": parent, "entity_ids": members, "rel_ids": [],
            "unit_ids": [], "size": len(members), "graph_version": "g", "modularity": 0.4}


def _report(cid, level, title):
    return {"community_id": cid, "level": level, "title": title, "summary": "", "findings": [], "rating": 1.0,
            "rating_explanation": "", "built_from": "", "status": "ok", "error": None, "model": "m",
            "tokens_in": 1, "tokens_out": 1}


def small_warehouse(root: Path, *, estimate: bool = False, quarantine: bool = False) -> Path:
    """Two index runs, LLM rows for extract and reports, 12 entities (degrees 0-3), a two-level
    hierarchy with three reports, and optionally an estimate run and quarantine rows."""
    wh = root / "wh"
    runs = [
        {"run_id": "index-20260501T090000-aaaaaa", "kind": "index", "config_hash": "h", "started": T0,
         "finished": T0 + timedelta(seconds=90), "status": "partial",
         "stage_counts": json.dumps({"ingest": {"documents": 3, "seconds": 4.0}, "extract": {"units": 5, "seconds": 40.0},
                                     "reports": {"reports": 3, "seconds": 30.0}})},
        # Started in the same minute as the first: still a bar of its own.
        {"run_id": "index-20260501T090030-bbbbbb", "kind": "index", "config_hash": "h",
         "started": T0 + timedelta(seconds=30), "finished": T0 + timedelta(seconds=50), "status": "ok",
         "stage_counts": json.dumps({"ingest": {"documents": 3, "seconds": 2.0}, "extract": {"units": 5, "seconds": 8.0}})},
    ]
    if estimate:
        est = {"documents": 3, "units": 5, "wall_s": 120.0, "prices_as_of": "2026-05", "usd": {"configured (m)": 0.5},
               "stages": [{"stage": "extract", "calls": 6, "tokens_in": 6000, "tokens_out": 1000, "basis": "counted prompts",
                           "llm": True},
                          {"stage": "resolve", "calls": 0, "tokens_in": 0, "tokens_out": 0, "basis": "none", "llm": True},
                          {"stage": "reports", "calls": 4, "tokens_in": 2400, "tokens_out": 600, "basis": "rates", "llm": True},
                          {"stage": "embed", "calls": 1, "tokens_in": 900, "tokens_out": 0, "basis": "local", "llm": False}]}
        runs.append({"run_id": "estimate-20260430T080000-cccccc", "kind": "estimate", "config_hash": "h",
                     "started": T0 - timedelta(days=1), "finished": T0 - timedelta(days=1) + timedelta(seconds=20),
                     "status": "ok", "stage_counts": json.dumps(est)})
    write(wh, "runs", runs)
    write(wh, "llm_calls", [
        {"run_id": runs[0]["run_id"], "stage": "extract", "calls": 4, "tokens_in": 5000, "tokens_out": 900,
         "cache_hits": 0, "errors": 1, "usd": 0.25, "seconds": 40.0},
        {"run_id": runs[0]["run_id"], "stage": "reports", "calls": 3, "tokens_in": 2000, "tokens_out": 500,
         "cache_hits": 0, "errors": 0, "usd": 0.125, "seconds": 30.0},
        {"run_id": runs[1]["run_id"], "stage": "extract", "calls": 1, "tokens_in": 1100, "tokens_out": 200,
         "cache_hits": 1, "errors": 0, "usd": 0.0625, "seconds": 8.0},
    ])
    write(wh, "entities", [{"entity_id": f"e{i}", "title": f"E{i}", "type": TYPES[i % 3], "description": "",
                            "aliases": [], "unit_ids": ["u"], "frequency": 1, "degree": i % 4} for i in range(12)])
    write(wh, "communities", [
        _community("c0", 0, None, [f"e{i}" for i in range(6)]), _community("c1", 0, None, [f"e{i}" for i in range(6, 12)]),
        _community("c0.0", 1, "c0", ["e0", "e1", "e2"]), _community("c0.1", 1, "c0", ["e3", "e4", "e5"]),
    ])
    write(wh, "community_reports", [_report("c0", 0, ODD_TITLE), _report("c1", 0, "Orsolya Foods and the Gdansk hub"),
                                    _report("c0.0", 1, "Night shift at the Antwerp hub and its dock leads")])
    write(wh, "quarantine", [{"source_uri": f"file:///in/{n}", "reason": r, "detail": d, "seen_at": T0}
                             for n, r, d in (("a.txt", "empty", "zero bytes"), ("b.bin", "binary", "NUL bytes"),
                                             ("c.txt", "empty", "zero bytes"))] if quarantine else [])
    return wh
