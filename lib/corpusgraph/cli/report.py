"""`corpusgraph report --out DIR`: the argparse wiring of the HTML page of an index (report/html.py)."""

from __future__ import annotations

from corpusgraph.report.html import write_report

__all__ = ["register"]


def cmd_report(args) -> int:
    from corpusgraph.cli.common import config_from_args

    cfg = config_from_args(args)
    page = write_report(cfg.storage.warehouse, args.out, cfg.storage.s3)
    print(f"wrote {page} ({page.stat().st_size / 1e6:.1f} MB, plotly.js inside: opens offline)")
    return 0


def register(sub) -> None:
    """Add `corpusgraph report` to the command line's subparsers."""
    from corpusgraph.cli.common import add_config_options

    sp = sub.add_parser("report", help="a static HTML page of the index: run times and costs, estimate against "
                        "actual, entity types, degrees, the community hierarchy, quarantine reasons")
    add_config_options(sp, "override a config value, e.g. --set storage.warehouse=work/warehouse (repeatable)")
    sp.add_argument("--out", required=True, help="folder to write index.html into (created if missing)")
    sp.set_defaults(func=cmd_report)
