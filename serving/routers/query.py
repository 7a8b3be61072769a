"""POST /v1/query: one question in, one `Answer` out, with its citations.

The request model is built per app from the config's serve section, so the limits a deployment sets
(question length, top_k) are enforced as 422s by validation and shown in the OpenAPI schema.
The engine's `ask` is blocking (FAISS, numpy, HTTP to the model); it runs on the app's worker
threads so the event loop keeps serving /readyz and other callers meanwhile.
"""

# No `from __future__ import annotations` here: FastAPI resolves a route's string annotations
# in module globals, and QueryRequest is local to build_router.
import asyncio
import dataclasses
import functools
import time
from typing import Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from corpusgraph.config import ServeSection
from corpusgraph.query.answer import Answer
from corpusgraph.query.engine import METHODS, QueryEngine
from corpusgraph.query.store import IndexMissingError
from serving.deps import Caller, get_engine, get_index_version, get_settings, require_api_key

__all__ = ["build_router", "Problem", "ServedAnswer"]

# A tuple subscript spreads into the literal's values, so the engine's METHODS stay the one list.
Method = Literal[METHODS]  # type: ignore[valid-type]


class Problem(BaseModel):
    detail: str


@dataclasses.dataclass
class ServedAnswer(Answer):
    """The engine's Answer and the index version that gave it (also in `X-Index-Version`)."""

    index_version: str | None = None


def _served(answer: Answer, version: str | None) -> ServedAnswer:
    kept = {f.name: getattr(answer, f.name) for f in dataclasses.fields(Answer)}
    return ServedAnswer(**kept, index_version=version)


def build_router(settings: ServeSection) -> APIRouter:
    router = APIRouter(tags=["query"])

    class QueryRequest(BaseModel):
        # Unknown fields are refused: a misspelt "mehtod" would otherwise silently mean "auto".
        model_config = ConfigDict(extra="forbid")

        question: str = Field(..., min_length=1, max_length=settings.max_question_chars,
                              description="The question, in plain language.")
        method: Method = Field("auto", description="auto lets a rule-based router choose and say why.")
        level: int | None = Field(None, ge=0, le=settings.max_level,
                                  description="Community level for global search (the cost dial); "
                                  "default from the config.")
        top_k: int | None = Field(None, ge=1, le=settings.max_top_k,
                                  description="Text units (basic) or seed entities (local) to retrieve; "
                                  "default from the config.")

        @field_validator("question")
        @classmethod
        def _not_blank(cls, value: str) -> str:
            if not value.strip():
                raise ValueError("the question is empty")
            return value

    @router.post(
        "/v1/query",
        response_model=ServedAnswer,
        summary="Answer a question with citations",
        responses={
            400: {"model": Problem, "description": "The engine refused the question"},
            401: {"model": Problem, "description": "Missing or wrong API key (only when keys are set)"},
            403: {"model": Problem, "description": "X-Access-Domains names a domain the key may not read"},
            503: {"model": Problem, "description": "The index is still loading, or failed to load"},
            504: {"model": Problem, "description": "No answer within the service's request_timeout_s"},
        },
    )
    async def query(
        body: QueryRequest,
        request: Request,
        caller: Caller = Depends(require_api_key),
        engine: QueryEngine = Depends(get_engine),
        settings: ServeSection = Depends(get_settings),
        version: str | None = Depends(get_index_version),
    ) -> ServedAnswer:
        """The answer, the method used (and why, for auto), citations down to text units and
        documents, tokens and dollars, from only what the key's access domains allow. A model
        failure is reported in `error`, with whatever the method could still say: the same Answer
        the CLI prints."""
        # The model calls stop at the same instant the caller stops waiting: a 504'd question
        # must not keep its worker thread and model slots busy retrying in the background.
        until = time.monotonic() + settings.request_timeout_s
        call = functools.partial(_ask, engine, caller.domains, body.question, body.method, body.level, body.top_k,
                                 until)
        work = asyncio.get_running_loop().run_in_executor(request.app.state.executor, call)
        try:
            answer = await asyncio.wait_for(work, settings.request_timeout_s)
        except asyncio.TimeoutError:
            # A question still queued is cancelled; one already running cannot be stopped
            # (it is a thread) and finishes in the background, its answer dropped.
            raise HTTPException(
                504,
                detail=f"no answer within {settings.request_timeout_s:g} s (the service's request_timeout_s); "
                "the model may be busy: retry later, or ask with method basic or local, which make one LLM call",
            ) from None
        except IndexMissingError as exc:
            raise HTTPException(503, detail=str(exc)) from exc
        except ValueError as exc:  # the engine's own checks, e.g. a level it cannot use
            raise HTTPException(400, detail=str(exc)) from exc
        request.app.state.metrics.observe_answer(answer)
        return _served(answer, version)

    return router


def _ask(engine: QueryEngine, domains, question: str, method: str, level: int | None, top_k: int | None,
         until: float | None = None) -> Answer:
    """Blocking, on a worker thread: the caller's view (built on first use, so inside the
    timeout), then the engine's answer over it, its model calls bounded by `until`."""
    from corpusgraph.llm.base import deadline

    with deadline(until):
        return engine.ask(question, method=method, level=level, top_k=top_k, domains=domains)
