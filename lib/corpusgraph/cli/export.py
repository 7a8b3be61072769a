"""`corpusgraph export`: the argparse wiring of the exporters (export/)."""

from __future__ import annotations

from pathlib import Path

from corpusgraph.export import FORMATS, MANIFEST, run_export

__all__ = ["register"]


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
    from corpusgraph.cli.common import DEFAULT_CONFS, config_from_args

    # --warehouse needs no config; one there still says how to reach a store on S3.
    present = Path(args.conf).is_file() if args.conf else any(Path(name).is_file() for name in DEFAULT_CONFS)
    cfg = config_from_args(args) if not args.warehouse or present else None
    warehouse = args.warehouse or cfg.storage.warehouse
    s3 = cfg.storage.s3 if cfg is not None else None
    domains = None
    if args.domains is not None:
        domains = [d.strip() for d in args.domains.split(",") if d.strip()]
    manifest = run_export(warehouse, args.out, args.format, domains, neo4j_database=args.neo4j_database, s3=s3)
    print("\n".join(_describe(manifest)))
    return 0


def register(sub) -> None:
    """Add the `export` subcommand to the CLI's subparsers."""
    from corpusgraph.cli.common import add_config_options

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
