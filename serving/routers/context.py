"""POST /v1/context: the context a method would answer from, as data, with no answer
(corpusgraph.query.context): for an app that writes answers with its own model.

Basic and local make no model call; global ranks its level's reports with none, and runs its
rating and map calls only when the request says `map: true`; a conversation's follow-up costs
the one rewrite call. It runs on the app's worker threads under the request timeout, from the
caller's view of the index only.
"""

# No `from __future__ import annotations`: FastAPI resolves the local request model's annotations.
import asyncio
import contextvars
import dataclasses
import functools
import time
from typing import Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import Field, field_validator

from corpusgraph.config import ServeSection
from corpusgraph.llm.base import deadline
from corpusgraph.query.context import RetrievedContext
from corpusgraph.query.engine import CONTEXT_METHODS, QueryEngine
from corpusgraph.query.store import IndexMissingError
from serving.deps import Caller, get_engine, get_index_version, get_settings, require_api_key
from serving.routers.query import Problem, conversation_history, conversation_model

__all__ = ["build_router", "ServedContext", "context_for"]

ContextMethod = Literal[CONTEXT_METHODS]  # type: ignore[valid-type]


@dataclasses.dataclass
class ServedContext(RetrievedContext):
    """The engine's RetrievedContext and the index version it came from (also X-Index-Version)."""

    index_version: str | None = None
    conversation_id: str | None = None


def served_context(ctx: RetrievedContext, version: str | None, conversation_id: str | None = None) -> ServedContext:
    kept = {f.name: getattr(ctx, f.name) for f in dataclasses.fields(RetrievedContext)}
    return ServedContext(**kept, index_version=version, conversation_id=conversation_id)


def context_for(telemetry, engine: QueryEngine, caller: Caller, question: str, method: str, **kw: Any) -> RetrievedContext:
    """Blocking: the engine's context for the caller's view, traced when traces are on."""
    with telemetry.question("context", caller.name, method, question) as span:
        ctx = engine.context(question, method=method, domains=caller.domains, **kw)
        span.answered(ctx)
        return ctx


def build_router(settings: ServeSection) -> APIRouter:
    router = APIRouter(tags=["query"])

    class ContextRequest(conversation_model(settings)):  # type: ignore[misc]
        question: str = Field(..., min_length=1, max_length=settings.max_question_chars)
        method: ContextMethod = Field("local", description="basic, local or global; auto routes as /v1/query "
                                      "does (a DRIFT route gives local's context). drift has no such context.")
        max_tokens: int | None = Field(None, ge=200, le=settings.max_context_tokens,
                                       description="The context budget in tokens (default: query.max_context_tokens).")
        top_k: int | None = Field(None, ge=1, le=settings.max_top_k,
                                  description="Text units (basic) or seed entities (local) to retrieve.")
        level: int | None = Field(None, ge=0, le=settings.max_level, description="Global: the community level.")
        map: bool = Field(False, description="Global: run the rating and map calls and return their points (model "
                          "calls, with their cost); false: the level's reports, nearest the question first, none.")
        include_text: bool = Field(False, description="Also return the context as the answer prompt would hold it.")

        @field_validator("question")
        @classmethod
        def _not_blank(cls, value: str) -> str:
            if not value.strip():
                raise ValueError("the question is empty")
            return value

    @router.post(
        "/v1/context", response_model=ServedContext, summary="The ranked context for a question, without an answer",
        responses={
            400: {"model": Problem, "description": "The engine refused the request"},
            401: {"model": Problem, "description": "Missing or wrong API key (only when keys are set)"},
            403: {"model": Problem, "description": "X-Access-Domains names a domain the key may not read"},
            503: {"model": Problem, "description": "The index is still loading, or failed to load"},
            504: {"model": Problem, "description": "No context within the service's request_timeout_s"},
        },
    )
    async def context(
        body: ContextRequest,
        request: Request,
        caller: Caller = Depends(require_api_key),
        engine: QueryEngine = Depends(get_engine),
        settings: ServeSection = Depends(get_settings),
        version: str | None = Depends(get_index_version),
    ) -> ServedContext:
        """Units (text, document, similarity to the question, rank, the [U#] tag the answer prompt
        gives them), and for local search the entities, relationships, claims and reports around
        the question; for global the reports of the level; coverage as answers report it."""
        state = request.app.state
        history = conversation_history(request, caller, body)
        until = time.monotonic() + settings.request_timeout_s
        call = functools.partial(_bounded, until, context_for, state.telemetry, engine, caller, body.question,
                                 body.method, max_tokens=body.max_tokens, top_k=body.top_k, level=body.level,
                                 history=history, map=body.map)
        begin = time.perf_counter()
        work = asyncio.get_running_loop().run_in_executor(state.executor, contextvars.copy_context().run, call)
        try:
            ctx = await asyncio.wait_for(work, settings.request_timeout_s)
        except asyncio.TimeoutError:
            raise HTTPException(504, detail=f"no context within {settings.request_timeout_s:g} s (the service's "
                                "request_timeout_s)") from None
        except IndexMissingError as exc:
            raise HTTPException(503, detail=str(exc)) from exc
        except ValueError as exc:
            raise HTTPException(400, detail=str(exc)) from exc
        state.metrics.context_seconds.labels(ctx.method).observe(time.perf_counter() - begin)
        if not body.include_text:
            ctx.text = None
        return served_context(ctx, version, body.conversation_id)

    return router


def _bounded(until: float, fn, *args, **kw):
    with deadline(until):
        return fn(*args, **kw)
