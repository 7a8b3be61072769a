"""`corpusgraph serve`: run the query service under uvicorn.

corpusgraph/cli.py adds the command with `add_serve_command(subparsers)`. The config is loaded
by the CLI's own loader (the one place that hands the process environment to ${VAR}
substitution), so nothing in `serving/` reads the environment.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # never executed: the command imports the app only when it runs
    from serving.settings import ServiceSettings

__all__ = ["add_serve_command", "settings_from_args"]

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def add_serve_command(subparsers, config_loader: Callable[[argparse.Namespace], Any] | None = None):
    """Add `serve` to an argparse subparsers object; returns its parser.

    config_loader(args) -> Config; default: corpusgraph.cli's loader (--conf, --set, ${VAR}s
    from the environment), imported when the command runs to keep the two modules acyclic.
    """
    sp = subparsers.add_parser(
        "serve", help="run the query service (FastAPI; OpenAPI at /docs)",
        description="Serve POST /v1/query, GET /healthz and GET /readyz over the built index.",
    )
    sp.add_argument("--conf", default="conf/local.yaml", help="config file (default: conf/local.yaml)")
    sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config value, e.g. --set query.top_k_units=8 (repeatable)")
    sp.add_argument("--host", default="127.0.0.1",
                    help="interface to listen on (default 127.0.0.1; use 0.0.0.0 only with API keys)")
    sp.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    sp.add_argument("--api-key", action="append", default=[], dest="api_keys", metavar="KEY",
                    help="accept this key (repeatable); note a key on the command line shows in `ps`, "
                    "so prefer --api-key-file. No keys: no authentication, for local use only")
    sp.add_argument("--api-key-file", metavar="PATH", help="file with one accepted key per line")
    sp.add_argument("--timeout", type=float, dest="request_timeout_s", metavar="SECONDS",
                    help="seconds a question may take before the caller gets 504")
    sp.add_argument("--max-concurrent", type=int, dest="max_concurrent_queries", metavar="N",
                    help="questions worked on at once; later ones wait their turn")
    sp.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    sp.set_defaults(func=lambda args: cmd_serve(args, config_loader))
    return sp


def _read_keys(path: str) -> list[str]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def settings_from_args(args: argparse.Namespace, config) -> ServiceSettings:
    """The ServiceSettings the parsed arguments ask for; unset options keep the settings' defaults."""
    from serving.settings import ServiceSettings

    keys = list(args.api_keys) + (_read_keys(args.api_key_file) if args.api_key_file else [])
    chosen = {
        name: getattr(args, name)
        for name in ("request_timeout_s", "max_concurrent_queries")
        if getattr(args, name) is not None
    }
    return ServiceSettings(config=config, api_keys=keys, **chosen)


def cmd_serve(args: argparse.Namespace, config_loader=None) -> int:
    import uvicorn

    from serving.app import create_app

    if config_loader is None:
        from corpusgraph.cli import _config as config_loader
    settings = settings_from_args(args, config_loader(args))
    if not settings.api_keys and args.host not in _LOOPBACK:
        print(f"corpusgraph serve: warning: listening on {args.host} with no API key; anyone who can "
              "reach this port can query the index (pass --api-key-file)", file=sys.stderr)
    # One worker: the app holds one engine (and maybe one model server) per process. The app
    # object, not an import string, so uvicorn cannot start a second copy of it.
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level,
                timeout_graceful_shutdown=10)
    return 0
