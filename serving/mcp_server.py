"""The index as Model Context Protocol tools, for agents: the `mcp` extra (pip install
'corpusgraph[mcp]', the `mcp` package 2.x, whose server class is MCPServer; 1.x tutorials'
FastMCP is gone from it).

Tools, each returning the same model as its HTTP route, so their output schemas are the routes':
`query` (POST /v1/query), `context` (POST /v1/context), `search_entities` (GET /v1/entities?q=),
`get_entity`, `list_communities`, `get_community` and `get_unit` (the graph routes).

Who is asking, and what they may see, as over HTTP:
- streamable HTTP, mounted in `corpusgraph serve` at serve.mcp.path (serve.mcp.enabled): an ASGI
  guard in front of the MCP app authenticates every request with the service's own keys
  (serving/auth.py: Authorization: Bearer or X-API-Key, X-Access-Domains, the rate limit) and
  answers 401/403/429 before MCP sees it; the tool reads the caller from the request. Stateless
  and JSON (no server-side sessions), so any proxy passes it. This is a static API key, not the
  OAuth flow the MCP spec describes for HTTP.
- stdio (`corpusgraph mcp`): the caller is fixed at launch (the key the command was given).
A tool call with no caller fails closed. Every tool reads the caller's view of the index; an id
the view lacks fails with the HTTP route's 404 detail, word for word.
"""

# No `from __future__ import annotations`: MCP reads the tools' annotations at run time, and they
# name types local to build_mcp (bounded by the serve section).
import asyncio
import contextvars
import functools
import json
import time
from typing import Annotated, Any, Literal

from pydantic import Field

from corpusgraph.llm.base import deadline
from corpusgraph.query.engine import CONTEXT_METHODS, METHODS
from corpusgraph.query.store import IndexMissingError
from serving import views
from serving.auth import AuthError, Caller, authenticate
from serving.models import CommunityDetail, CommunityPage, EntityDetail, EntityHits, UnitDetail
from serving.routers.context import ServedContext, context_for, served_context
from serving.routers.query import ServedAnswer, ask_question, served_answer

__all__ = ["build_mcp", "mount_mcp", "McpGuard", "CALLER_KEY", "NOT_AUTHENTICATED"]

CALLER_KEY = "corpusgraph_caller"
NOT_AUTHENTICATED = "not authenticated: this MCP server has no caller for the request"
_INSTRUCTIONS = """Questions over a corpusgraph index (a knowledge graph built from documents).
Use `query` for an answer with citations (method auto picks basic, local, global or drift),
`context` for the ranked text units, entities and reports without an answer, `search_entities`
to find an entity by name, then `get_entity`, `get_community` and `get_unit` to read the graph."""

Method = Literal[METHODS]  # type: ignore[valid-type]
ContextMethod = Literal[CONTEXT_METHODS]  # type: ignore[valid-type]


class _Refused(Exception):
    pass


def build_mcp(state: Any, launch_caller: Caller | None = None):
    """The MCP server over an app's state (its engine holder, executor, settings, metrics and
    telemetry: serving.app.create_app). launch_caller: the caller of every call that does not come
    over HTTP (stdio); None: such calls fail closed."""
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    settings = state.settings
    page = settings.max_page_size
    server = MCPServer("corpusgraph", instructions=_INSTRUCTIONS)

    def caller_of(ctx: Context) -> Caller:
        request = ctx.request_context.request
        if request is not None:
            caller = request.scope.get("state", {}).get(CALLER_KEY)
        else:
            caller = launch_caller
        if not isinstance(caller, Caller):
            raise ToolError(NOT_AUTHENTICATED)
        return caller

    async def run(tool: str, ctx: Context, work) -> Any:
        """`work(caller, loaded)` on a worker thread, bounded by the request timeout; failures as
        the tool errors MCP clients read, worded as the HTTP routes' details."""
        outcome = "error"
        try:
            caller = caller_of(ctx)
            loaded = state.engine.current
            if loaded is None:
                raise ToolError(state.engine.not_ready_message())
            until = time.monotonic() + settings.request_timeout_s
            call = functools.partial(_bounded, until, work, caller, loaded)
            future = asyncio.get_running_loop().run_in_executor(state.executor, contextvars.copy_context().run, call)
            try:
                result = await asyncio.wait_for(future, settings.request_timeout_s)
            except asyncio.TimeoutError:
                raise ToolError(f"no answer within {settings.request_timeout_s:g} s (the service's "
                                "request_timeout_s)") from None
            except views.NotFound as exc:
                raise ToolError(str(exc)) from None
            except (IndexMissingError, ValueError) as exc:
                raise ToolError(str(exc)) from None
            outcome = "ok"
            return result
        finally:
            state.metrics.mcp_calls.labels(tool, outcome).inc()

    def view(caller: Caller, loaded):
        return loaded.engine.index.view(caller.domains).store

    Question = Annotated[str, Field(min_length=1, max_length=settings.max_question_chars)]
    TopK = Annotated[int | None, Field(ge=1, le=settings.max_top_k)]
    Level = Annotated[int | None, Field(ge=0, le=settings.max_level)]
    Id = Annotated[str, Field(min_length=1, max_length=256)]

    @server.tool()
    async def query(question: Question, ctx: Context, method: Method = "auto", level: Level = None,
                    top_k: TopK = None, history: list[dict[str, str]] | None = None) -> ServedAnswer:
        """Answer a question from the index with citations (text units and documents), tokens and
        cost. history: earlier turns, oldest first, as {"role": "user"|"assistant", "content"}."""
        def work(caller: Caller, loaded):
            answer = ask_question(state.telemetry, loaded.engine, caller, question, method, level, top_k,
                          (history or [])[-2 * settings.conversations.max_exchanges:] or None)
            state.metrics.observe_answer(answer)
            return served_answer(answer, loaded.version)

        return await run("query", ctx, work)

    @server.tool()
    async def context(question: Question, ctx: Context, method: ContextMethod = "local",
                      max_tokens: Annotated[int | None, Field(ge=200, le=settings.max_context_tokens)] = None,
                      top_k: TopK = None, level: Level = None) -> ServedContext:
        """The ranked context for a question without an answer: text units with their text and
        similarity, and for local the entities, relationships, claims and community reports."""
        def work(caller: Caller, loaded):
            ctx_ = context_for(state.telemetry, loaded.engine, caller, question, method, max_tokens=max_tokens,
                               top_k=top_k, level=level)
            return served_context(ctx_, loaded.version)

        return await run("context", ctx, work)

    @server.tool()
    async def search_entities(text: Annotated[str, Field(min_length=1, max_length=200)], ctx: Context,
                              limit: Annotated[int, Field(ge=1, le=page)] = 10) -> EntityHits:
        """Entities whose name (title or alias) is the text, starts with it, or has words starting
        with each of its words; best connected first."""
        return await run("search_entities", ctx,
                         lambda caller, loaded: views.entity_hits(view(caller, loaded), text, limit, loaded.version))

    @server.tool()
    async def get_entity(entity_id: Id, ctx: Context, limit: Annotated[int, Field(ge=1, le=page)] = 50) -> EntityDetail:
        """An entity, its relationships and neighbours, claims, communities and source units."""
        return await run("get_entity", ctx, lambda caller, loaded: views.entity_detail(
            view(caller, loaded), entity_id, limit, loaded.version))

    @server.tool()
    async def list_communities(ctx: Context, level: Level = None, limit: Annotated[int, Field(ge=1, le=page)] = 100,
                               offset: Annotated[int, Field(ge=0)] = 0) -> CommunityPage:
        """Communities by level, then by their report's rating."""
        return await run("list_communities", ctx, lambda caller, loaded: views.community_page(
            view(caller, loaded), level, limit, offset, loaded.version))

    @server.tool()
    async def get_community(community_id: Id, ctx: Context) -> CommunityDetail:
        """A community, its members, sub-communities and report."""
        return await run("get_community", ctx, lambda caller, loaded: views.community_detail(
            view(caller, loaded), community_id, page, loaded.version))

    @server.tool()
    async def get_unit(unit_id: Id, ctx: Context) -> UnitDetail:
        """A text unit (what a citation points at) and its document."""
        return await run("get_unit", ctx, lambda caller, loaded: views.unit_detail(
            view(caller, loaded), unit_id, loaded.version))

    return server


def _bounded(until: float, work, *args):
    with deadline(until):
        return work(*args)


class McpGuard:
    """ASGI: authenticates each HTTP request to the mounted MCP app with the service's keys; a
    refusal is the JSON problem the HTTP routes answer with."""

    def __init__(self, inner, state: Any) -> None:
        self.inner = inner
        self.state = state

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.inner(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or ()}
        auth = headers.get("authorization", "")
        bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
        try:
            caller = authenticate(self.state.keys, self.state.limiter, [bearer, headers.get("x-api-key")],
                                  headers.get("x-access-domains"))
        except AuthError as exc:
            body = json.dumps({"detail": exc.detail}).encode()
            raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            raw += [(k.lower().encode(), v.encode()) for k, v in exc.headers.items()]
            await send({"type": "http.response.start", "status": exc.status, "headers": raw})
            await send({"type": "http.response.body", "body": body})
            return
        scope.setdefault("state", {})[CALLER_KEY] = caller
        await self.inner(scope, receive, send)


def mount_mcp(app, path: str, allowed_hosts: list[str], allowed_origins: list[str]):
    """The MCP server's streamable HTTP app behind the guard at `path` (served at `path`/); the app's
    lifespan must run `app.state.mcp.session_manager.run()`."""
    from mcp.server.transport_security import TransportSecuritySettings

    server = build_mcp(app.state)
    loopback_hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    loopback_origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    security = TransportSecuritySettings(allowed_hosts=loopback_hosts + list(allowed_hosts),
                                         allowed_origins=loopback_origins + list(allowed_origins))
    inner = server.streamable_http_app(streamable_http_path="/", stateless_http=True, json_response=True,
                                       transport_security=security)
    app.mount(path, McpGuard(inner, app.state), name="mcp")
    app.state.mcp = server
    return server
