"""`create_app(config) -> FastAPI`: the query service, set by the config's `serve` section.

The lifespan opens the query engine once per process, on a worker thread, and the app answers
from that one engine until shutdown, when what the engine holds (an embedded model server) is
released. Questions run on a small pool of worker threads owned by the app, sized by
`max_concurrent_queries`, so a burst of slow questions cannot take every thread of the process.

One process serves one index with one engine; to use more cores, run more processes behind a
balancer (each loads its own copy of the index).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import AsyncIterator, Iterable

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware

from corpusgraph.lazy import installed_version
from corpusgraph.config import Config, ServeKey, ServeSection
from corpusgraph.query.engine import MAX_QUESTION_CHARS
from serving.conversations import Conversations
from serving.engine import EngineFactory, EngineHolder, default_engine_factory
from serving.keys import ApiKeys
from serving.limits import BodyLimit, RateLimiter, internal_error, validation_error
from serving.metrics import ServiceMetrics
from serving.routers import admin, context, graph, health, query
from serving.telemetry import Telemetry

__all__ = ["create_app"]

log = logging.getLogger(__name__)

_DESCRIPTION = """Questions over a corpusgraph index: `basic` (vector search over text units),
`local` (an entity's graph neighbourhood), `global` (map-reduce over community reports), or
`auto`, which picks one and says why. Every answer cites text units and documents and reports
its tokens and cost.

Authentication: when the service is started with API keys, every `/v1` route needs one, as
`Authorization: Bearer <key>` or `X-API-Key: <key>`. Without keys it is open: for local use only.

Access domains: every document belongs to one domain and every key is bound to a set of them. A
key sees only what was built entirely from documents in its domains: units and documents of
those domains; entities, relationships and claims whose every source unit is one; communities
(and their reports) whose members, relationships and units all are. A community mixing domains
is hidden whole, report and all, from keys that cannot read every domain in it, so global search
for such a key maps over fewer reports. What a key cannot see answers 404 exactly as an id that
does not exist. `X-Access-Domains: a,b` narrows one request further (403 for a domain the key lacks).

Streaming: `POST /v1/query` with `"stream": true` answers as server-sent events (start, context,
progress, token, then done or error). Retrieval only: `POST /v1/context`. Follow-up questions:
`history` or `conversation_id`. The web page is at `/ui/`; MCP, when enabled, at `/mcp/`.

`/healthz`, `/readyz` and `/metrics` need no key and show nothing from the corpus.
"""


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    serve: ServeSection = app.state.settings
    holder: EngineHolder = app.state.engine
    app.state.executor = ThreadPoolExecutor(serve.max_concurrent_queries, thread_name_prefix="corpusgraph-query")
    # Loading runs beside the server rather than before it, so probes see 503 while it runs.
    loader = asyncio.create_task(asyncio.to_thread(holder.load, app.state.engine_factory, app.state.config))
    poller = asyncio.create_task(_poll(holder, serve.reload_poll_s, loader)) if serve.reload_poll_s > 0 else None
    mcp = getattr(app.state, "mcp", None)
    try:
        if mcp is not None:  # the MCP transport's task group lives as long as the app
            async with mcp.session_manager.run():
                yield
        else:
            yield
    finally:
        if poller is not None:
            poller.cancel()
        # A load still in progress cannot be interrupted (it is a thread); wait for it, so that
        # a model server it started is stopped below rather than left running.
        await loader
        # Questions still queued are dropped; a running one keeps its thread until it returns.
        app.state.executor.shutdown(wait=False, cancel_futures=True)
        await asyncio.to_thread(holder.close)
        await asyncio.to_thread(app.state.telemetry.shutdown)


async def _poll(holder: EngineHolder, every_s: float, loaded: asyncio.Task) -> None:
    """Every `every_s` (reload_poll_s), swap in the index's newest version if there is one and
    no run is writing it (EngineHolder.reload says nothing changed otherwise)."""
    from serving.versions import IndexChanging

    await asyncio.shield(loaded)
    while True:
        await asyncio.sleep(every_s)
        try:
            await asyncio.to_thread(holder.reload)
        except IndexChanging as exc:
            log.info("index reload postponed: %s", exc)
        except Exception:  # the version being served stays; the next poll tries again
            log.exception("index reload failed")


def _run_in_progress(warehouse: str) -> str | None:
    from corpusgraph.storage.runlock import running

    return running(warehouse)


def create_app(config: Config, engine_factory: EngineFactory | None = None, *,
               extra_keys: Iterable[ServeKey] = (), span_exporter=None) -> FastAPI:
    """The service over the index `config` describes, with the limits of its `serve` section.

    engine_factory(config) returns a QueryEngine, or a context manager yielding one (released
    at shutdown). It is called once, after start-up; the default opens the index and model the
    config names, starting the embedded model server when `llm.backend` is "embedded".
    extra_keys: API keys besides the serve section's (the `serve` command's --api-key and
    --api-key-file). span_exporter: an OpenTelemetry span exporter the traces also go to (tests),
    besides serve.telemetry's OTLP endpoint.
    """
    serve = config.serve
    if serve.max_question_chars > MAX_QUESTION_CHARS:
        raise ValueError(f"serve.max_question_chars is {serve.max_question_chars}; the query engine takes "
                         f"at most {MAX_QUESTION_CHARS}")
    keys = ApiKeys.for_service(serve, extra_keys)
    telemetry = Telemetry(serve.telemetry, span_exporter)
    app = FastAPI(title="corpusgraph", version=installed_version(), description=_DESCRIPTION, lifespan=_lifespan,
                  telemetry=telemetry.fastapi_config())
    app.state.telemetry = telemetry
    app.state.conversations = Conversations(serve.conversations)
    app.state.config = config
    app.state.settings = serve
    app.state.keys = keys
    app.state.engine_factory = engine_factory or default_engine_factory
    app.state.engine = EngineHolder(busy=_run_in_progress, views=keys.domain_sets())
    app.state.metrics = ServiceMetrics(lambda: app.state.engine.load_seconds)
    app.state.limiter = RateLimiter(serve.rate_limit_per_s, serve.rate_limit_burst)
    # Innermost first: the body limit runs before any route, inside the metrics (which count
    # its 413s); CORS, when configured, wraps everything, errors included.
    app.add_middleware(BodyLimit, max_bytes=serve.max_body_bytes, timeout_s=serve.body_timeout_s)
    app.middleware("http")(app.state.metrics.middleware)
    if serve.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(serve.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "X-API-Key", "X-Access-Domains", "Content-Type"])
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, internal_error)
    app.include_router(health.router)
    app.include_router(query.build_router(serve))
    app.include_router(context.build_router(serve))
    app.include_router(graph.build_router(serve))
    app.include_router(admin.router)
    if serve.mcp.enabled:
        from serving.mcp_server import mount_mcp

        mount_mcp(app, serve.mcp.path, serve.mcp.allowed_hosts, serve.mcp.allowed_origins)
    if serve.ui.enabled:
        from serving.ui import mount_ui

        mount_ui(app, serve.ui.path)
    if not keys:
        log.warning("no API keys configured: anyone who can reach this service can query it (local use only)")
    return app
