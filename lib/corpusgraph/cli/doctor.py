"""`corpusgraph doctor`: the configured endpoints checked with one tiny request of each kind a run
makes (runner/doctor.py); a line per kind, accepted or the provider's message and its fix."""

from __future__ import annotations

__all__ = ["register", "cmd_doctor"]


def cmd_doctor(args) -> int:
    from pathlib import Path

    from corpusgraph.cli.common import config_from_args
    from corpusgraph.llm.chat_endpoint import ChatEndpoint
    from corpusgraph.runner.doctor import KINDS, format_checks, run_checks, window_warnings

    cfg = config_from_args(args)
    kinds = [k.strip() for k in args.kinds.split(",")] if args.kinds else \
        [k for k in KINDS if k != "judge" and (k != "extract" or cfg.extract.method == "llm")]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown kinds {unknown}; known: {', '.join(KINDS)}")
    with ChatEndpoint(cfg.llm, Path(cfg.storage.cache_dir) / "embedded-server-doctor.log") as endpoint:
        checks = run_checks(cfg, kinds, endpoint.url)
    print(format_checks(checks))
    for warning in window_warnings(cfg):
        print(f"warning  {warning}")
    refused = [c.kind for c in checks if not c.ok]
    print(f"{len(checks) - len(refused)} of {len(checks)} kinds accepted"
          + (f"; refused: {', '.join(refused)}" if refused else ""))
    return 5 if refused else 0


def register(sub) -> None:
    """Add `corpusgraph doctor` to the command line's subparsers."""
    from corpusgraph.cli.common import add_config_options

    sp = sub.add_parser("doctor", help="check the configured endpoints: one tiny request of each kind a run makes, "
                        "accepted or the provider's message and the setting that fixes it")
    add_config_options(sp)
    sp.add_argument("--kinds", help="comma-separated subset of: " + ", ".join(
        ("extract", "adjudicate", "summary", "report", "answer", "map", "rate", "judge", "embed")))
    sp.set_defaults(func=cmd_doctor)
