"""`corpusgraph export`: the index for the tools people explore graphs with.

    corpusgraph export --format graphml|neo4j|parquet --out DIR [--domains a,b]

- graphml (graphml.py): entities, relationships, communities as per-level node attributes;
  igraph, Gephi, NetworkX read it.
- neo4j (neo4j.py): node and relationship CSVs in neo4j-admin's header syntax and the
  `neo4j-admin database import full` command line that loads them (printed, and written to
  DIR/neo4j-import.sh).
- parquet (parquet.py): the tables as plain Parquet.

Every table is streamed from Delta in record batches (source.py) and every file written as it is
read; nothing is collected whole. `--domains` exports only what keys of those domains may see
through the service, by the service's own rules (query/access.py). DIR/export.json records what
was written, from which table versions, and anything left out.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterable

__all__ = ["run_export", "FORMATS"]

FORMATS = ("graphml", "neo4j", "parquet")
MANIFEST = "export.json"


def run_export(warehouse: str, out_dir: str | Path, fmt: str, domains: Iterable[str] | None = None, *,
               neo4j_database: str = "neo4j", batch_rows: int | None = None, s3=None) -> dict:
    """Export the warehouse's current tables to out_dir in `fmt`; returns the manifest (also written).
    s3: corpusgraph.config.S3Section for a warehouse on S3 (None: the environment's settings)."""
    from corpusgraph.export.source import BATCH_ROWS, Source, View

    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    domains = None if domains is None else frozenset(domains)
    if domains is not None and not domains:
        raise ValueError("--domains names no domain")
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    source = Source(warehouse, batch_rows or BATCH_ROWS, s3)
    view = None if fmt == "parquet" and domains is None else View(source, domains)
    if fmt == "graphml":
        from corpusgraph.export.graphml import write_graphml

        result = write_graphml(view, out)
    elif fmt == "neo4j":
        from corpusgraph.export.neo4j import write_neo4j

        result = write_neo4j(view, out, neo4j_database)
    else:
        from corpusgraph.export.parquet import write_parquet

        result = write_parquet(source, view, out)
    manifest = {
        "format": fmt, "warehouse": str(warehouse), "domains": None if domains is None else sorted(domains),
        "table_versions": source.versions(), **result,
        "left_out_dangling": dict(view.dangling) if view is not None else {},
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if view is not None and domains is not None:
        manifest["domains_without_documents"] = sorted(domains - view.known_domains)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
