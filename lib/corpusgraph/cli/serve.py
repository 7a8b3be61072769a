"""`corpusgraph serve`: run the query service under uvicorn.

corpusgraph/cli/main.py adds the command with `add_serve_command(subparsers)`. The config is loaded
by the command line's loader (corpusgraph.cli.common, the one place that hands the process
environment to ${VAR} substitution), so nothing in `serving/` reads the environment. The
config's `serve` section holds the settings (keys too, as ${VAR}s); the options here override
it for one run.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # never executed: the command imports the app only when it runs
    from corpusgraph.config import Config, ServeKey

__all__ = ["add_serve_command", "apply_options", "run_service", "limit_malloc_arenas", "uvicorn_limits"]

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def add_serve_command(subparsers, config_loader: Callable[[argparse.Namespace], Any] | None = None):
    """Add `serve` to an argparse subparsers object; returns its parser.

    config_loader(args) -> Config; default: the command line's loader (--conf, --set, ${VAR}s
    from the environment, corpusgraph.cli.common).
    """
    from corpusgraph.cli.common import add_config_options

    sp = subparsers.add_parser(
        "serve", help="run the query service (FastAPI; OpenAPI at /docs)",
        description="Serve POST /v1/query, GET /v1/entities/{id}, GET /v1/communities, /healthz, /readyz and "
        "/metrics over the built index. Defaults come from the config's `serve` section.",
    )
    add_config_options(sp, "override a config value, e.g. --set query.top_k_units=8 (repeatable)")
    sp.add_argument("--host", help="interface to listen on (serve.host, 127.0.0.1; 0.0.0.0 only with API keys)")
    sp.add_argument("--port", type=int, help="port (serve.port, 8080)")
    sp.add_argument("--api-key", action="append", default=[], dest="api_keys", metavar="KEY",
                    help="accept this key for ALL domains (repeatable); a key on the command line shows in `ps`, "
                    "so prefer serve.api_keys or --api-key-file. No keys anywhere: no authentication, local use only")
    sp.add_argument("--api-key-file", metavar="PATH",
                    help="file of keys, one `KEY DOMAIN[,DOMAIN...]` (or `KEY *`) per line, besides serve.api_keys")
    sp.add_argument("--timeout", type=float, dest="request_timeout_s", metavar="SECONDS",
                    help="seconds a question may take before the caller gets 504")
    sp.add_argument("--max-concurrent", type=int, dest="max_concurrent_queries", metavar="N",
                    help="questions worked on at once; later ones wait their turn")
    sp.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                    help="uvicorn's log level (default info)")
    sp.set_defaults(func=lambda args: cmd_serve(args, config_loader))
    return sp


def apply_options(args: argparse.Namespace, config: Config) -> tuple[Config, list[ServeKey]]:
    """The config with the options that override its `serve` section applied (options win), and
    the API keys the options add to the section's."""
    from serving.keys import ALL_DOMAINS, ServeKey, read_key_file

    keys = [ServeKey(name=f"cli-{i}", key=k, domains=[ALL_DOMAINS]) for i, k in enumerate(args.api_keys, 1)]
    keys += read_key_file(args.api_key_file) if args.api_key_file else []
    chosen = {
        name: getattr(args, name)
        for name in ("request_timeout_s", "max_concurrent_queries")
        if getattr(args, name) is not None
    }
    if chosen:  # validated as the section is, so --timeout -1 is refused like serve.request_timeout_s: -1
        serve = type(config.serve).model_validate({**config.serve.model_dump(), **chosen})
        config = config.model_copy(update={"serve": serve})
    return config, keys


def _one_thread_per_request() -> None:
    """Pin numpy's BLAS and FAISS to one thread each, before either loads.

    The service answers many small requests at once; a BLAS pool per request oversubscribes the
    cores, and a question's MiniLM embedding then slows down many times over under load (the
    service load benchmark, tests/benchmarks/test_service_load.py, runs with one thread each).
    A value the operator set in the environment is kept.
    """
    import os

    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def limit_malloc_arenas(arenas: int) -> bool:
    """mallopt(M_ARENA_MAX, arenas) on glibc, before the service starts its threads; True when set.

    Every thread that allocates under contention gets a glibc arena of its own (up to 8 per
    core), and memory freed into one is kept there for that arena's next use, so a service with
    dozens of threads (uvicorn's, the query pool's, FAISS's, the HTTP clients') grows in steps
    long after its caches are full. A few shared arenas keep it flat at a small cost in lock
    contention. Not glibc (musl, macOS), or 0: nothing is changed.
    """
    import ctypes
    import ctypes.util

    if arenas <= 0:
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = getattr(libc, "mallopt", None)
    except OSError:
        return False
    M_ARENA_MAX = -8  # glibc malloc.h
    return bool(mallopt and mallopt(M_ARENA_MAX, arenas) == 1)


def cmd_serve(args: argparse.Namespace, config_loader=None) -> int:
    _one_thread_per_request()  # before anything loads numpy
    if config_loader is None:
        from corpusgraph.cli.common import config_from_args as config_loader
    config, keys = apply_options(args, config_loader(args))
    return run_service(config, keys, args.host, args.port, args.log_level)


def run_service(config: Config, keys: list[ServeKey], host: str | None, port: int | None, log_level: str) -> int:
    """The service for `config` under uvicorn until stopped (`serve`, and `mcp --transport http`)."""
    _one_thread_per_request()
    limit_malloc_arenas(config.serve.malloc_arenas)
    import uvicorn

    from serving.app import create_app

    host = host or config.serve.host
    port = config.serve.port if port is None else port
    app = create_app(config, extra_keys=keys)
    if not app.state.keys and host not in _LOOPBACK:
        print(f"corpusgraph serve: warning: listening on {host} with no API key; anyone who can "
              "reach this port can query every domain of the index (set serve.api_keys)", file=sys.stderr)
    # One worker: the app holds one engine (and maybe one model server) per process. The app
    # object, not an import string, so uvicorn cannot start a second copy of it.
    uvicorn.run(app, host=host, port=port, log_level=log_level,
                timeout_graceful_shutdown=10, **uvicorn_limits(config.serve))
    return 0


def uvicorn_limits(serve) -> dict[str, Any]:
    """uvicorn options cutting off slow or oversized clients, from the config's `serve` section."""
    from serving.slow_clients import with_header_deadline

    return {
        "http": with_header_deadline(serve.header_timeout_s),  # headers trickled in: connection closed
        "timeout_keep_alive": serve.keep_alive_s,  # an idle keep-alive connection: closed
        "h11_max_incomplete_event_size": serve.max_header_bytes,  # headers too large: 400
    }
