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

__all__ = ["register", "run_export", "FORMATS"]

FORMATS = ("graphml", "neo4j", "parquet")
MANIFEST = "export.json"


def run_export(warehouse: str, out_dir: str | Path, fmt: str, domains: Iterable[str] | None = None, *,
               neo4j_database: str = "neo4j", batch_rows: int | None = None, s3=None) -> dict:
    """Export the warehouse's current tables to out_dir in `fmt`; returns the manifest (also written).
    s3: corpusgraph.storage.S3Settings for a warehouse on S3 (None: the environment's settings)."""
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


def _describe(m: dict) -> list[str]:
    lines = []
    if m["format"] == "graphml":
        lines.append(f"wrote {m['file']}: {m['nodes']} nodes, {m['edges']} edges, community levels "
                     f"{', '.join(map(str, m['levels'])) or 'none'}")
    elif m["format"] == "neo4j":
        lines += [f"wrote {name}: {rows} rows" for name, rows in m["files"].items()]
        lines.append(f"load it into an empty database with ({m['script']}):")
        lines.append(m["command"])
    else:
        lines += [f"wrote {name}.parquet: {rows} rows" for name, rows in m["tables"].items()]
        if m["left_out"]:
            lines.append(f"left out: {', '.join(m['left_out'])}")
    for kind, n in m["left_out_dangling"].items():
        lines.append(f"left out {n} {kind} naming an entity or document not in the export")
    for d in m.get("domains_without_documents", ()):
        lines.append(f"note: no document is in domain {d!r}")
    lines.append(f"{m['seconds']} s; manifest in {MANIFEST}")
    return lines


def cmd_export(args) -> int:
    from corpusgraph.cli_common import config_from_args

    # --warehouse needs no config; one there still says how to reach a store on S3.
    cfg = config_from_args(args) if not args.warehouse or Path(args.conf).is_file() else None
    warehouse = args.warehouse or cfg.storage.warehouse
    s3 = cfg.storage.s3.settings() if cfg is not None else None
    domains = None
    if args.domains is not None:
        domains = [d.strip() for d in args.domains.split(",") if d.strip()]
    manifest = run_export(warehouse, args.out, args.format, domains, neo4j_database=args.neo4j_database, s3=s3)
    print("\n".join(_describe(manifest)))
    return 0


def register(sub) -> None:
    """Add the `export` subcommand to the CLI's subparsers."""
    from corpusgraph.cli_common import add_config_options

    sp = sub.add_parser("export", help="write the graph as GraphML, Neo4j import CSVs or plain Parquet")
    add_config_options(sp, "override a config value (repeatable)")
    sp.add_argument("--format", required=True, choices=FORMATS, help="graphml, neo4j or parquet")
    sp.add_argument("--out", required=True, help="folder to write into (created if missing)")
    sp.add_argument("--domains", metavar="A,B",
                    help="export only what keys of these access domains may see (the service's rules)")
    sp.add_argument("--warehouse", help="read this warehouse instead of the config's storage.warehouse")
    sp.add_argument("--neo4j-database", default="neo4j",
                    help="database name in the neo4j-admin command line (default: neo4j)")
    sp.set_defaults(func=cmd_export)
