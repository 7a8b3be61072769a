"""`corpusgraph mcp`: the index as Model Context Protocol tools (serving/mcp_server.py), for an agent
that starts it as a child process (stdio, the default) or reaches it over HTTP.

stdio: the protocol is this process's stdin and stdout, so everything else it says (logs,
warnings) goes to stderr. Its caller is fixed at launch: when the config has API keys, the command
must be given one (--api-key-env names the environment variable holding it, or --api-key-file a
file holding only it; an MCP client's server entry sets either), and the tools see what that key
may see, narrowed further by --domains as X-Access-Domains narrows a request. Without keys every
domain is open, as for `serve`, with a warning.

--transport http is `corpusgraph serve` with serve.mcp.enabled: the tools at /mcp/ beside the HTTP
API, authenticated per request with the same keys.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

__all__ = ["add_mcp_command", "launch_caller"]


def add_mcp_command(subparsers, config_loader: Callable[[argparse.Namespace], Any] | None = None):
    from corpusgraph.cli.common import add_config_options

    sp = subparsers.add_parser(
        "mcp", help="the index as MCP tools (stdio for an agent's child process, or HTTP)",
        description="Serve query, context, search_entities, get_entity, list_communities, get_community and get_unit "
        "as Model Context Protocol tools, under the service's API keys and access domains. Needs the `mcp` extra.")
    add_config_options(sp, "override a config value, e.g. --set query.top_k_units=8 (repeatable)")
    sp.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                    help="stdio (default): this process's stdin/stdout; http: `serve` with the MCP endpoint at /mcp/")
    sp.add_argument("--api-key-env", metavar="VAR", help="stdio: the environment variable holding the API key the "
                    "tools act for (required when the config has keys)")
    sp.add_argument("--api-key-file", metavar="PATH", help="stdio: a file holding only that API key (mode 600)")
    sp.add_argument("--domains", metavar="A,B", help="stdio: narrow the key to these access domains")
    sp.add_argument("--host", help="http: interface to listen on (serve.host)")
    sp.add_argument("--port", type=int, help="http: port (serve.port)")
    sp.set_defaults(func=lambda args: cmd_mcp(args, config_loader))
    return sp


def launch_caller(config, key: str | None, domains: str | None):
    """The caller every stdio tool call acts for. Raises SystemExit with the reason when the config
    has keys and `key` is none of them."""
    from serving.auth import AuthError, Caller, authenticate, narrow
    from serving.keys import ApiKeys

    keys = ApiKeys.for_service(config.serve)
    try:
        if not keys:
            if key:
                raise SystemExit("corpusgraph mcp: an API key was given but the config has none (serve.api_keys)")
            print("corpusgraph mcp: warning: the config has no API keys; the tools read every domain "
                  "(local use only)", file=sys.stderr)
            return narrow(Caller("anonymous", None), domains)
        if not key:
            raise SystemExit("corpusgraph mcp: the config has API keys (serve.api_keys), so the tools need one: "
                             "--api-key-env VAR (the variable holding it) or --api-key-file PATH")
        return authenticate(keys, None, [key], domains)
    except AuthError as exc:
        raise SystemExit(f"corpusgraph mcp: {exc.detail}") from None


def _key(args: argparse.Namespace) -> str | None:
    import os
    from pathlib import Path

    if args.api_key_env and args.api_key_file:
        raise SystemExit("corpusgraph mcp: give --api-key-env or --api-key-file, not both")
    if args.api_key_env:
        value = os.environ.get(args.api_key_env)  # the command line is the layer that reads the environment
        if not value:
            raise SystemExit(f"corpusgraph mcp: the environment variable {args.api_key_env} is not set")
        return value.strip()
    if args.api_key_file:
        from serving.keys import _check_private

        _check_private(args.api_key_file)
        return Path(args.api_key_file).read_text(encoding="utf-8").strip() or None
    return None


def cmd_mcp(args: argparse.Namespace, config_loader=None) -> int:
    from corpusgraph.cli.serve import _one_thread_per_request

    _one_thread_per_request()  # before anything loads numpy
    if config_loader is None:
        from corpusgraph.cli.common import config_from_args as config_loader
    config = config_loader(args)
    if args.transport == "http":
        from corpusgraph.cli.serve import run_service

        serve = config.serve.model_copy(update={"mcp": config.serve.mcp.model_copy(update={"enabled": True})})
        return run_service(config.model_copy(update={"serve": serve}), [], args.host, args.port, "info")
    import asyncio
    import logging

    # stdout is the protocol: every log line goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    caller = launch_caller(config, _key(args), args.domains)
    asyncio.run(_stdio(config, caller))
    return 0


async def _stdio(config, caller) -> None:
    from serving.app import create_app
    from serving.mcp_server import build_mcp

    app = create_app(config)
    # The app's lifespan loads the engine (and starts an embedded model server) and stops it after.
    async with app.router.lifespan_context(app):
        await asyncio_wait_ready(app)
        await build_mcp(app.state, launch_caller=caller).run_stdio_async()


async def asyncio_wait_ready(app) -> None:
    """Until the engine has loaded, or failed to (then the tools say why on every call)."""
    import asyncio

    holder = app.state.engine
    while holder.status == "loading":
        await asyncio.sleep(0.05)
