"""POST /v1/query: one question in, one `Answer` out, with its citations; streamed as server-sent
events with `"stream": true` (serving/stream.py); a follow-up question of a conversation with
`history` or `conversation_id` (query/conversation.py, serving/conversations.py).

The request model is built per app from the config's serve section, so the limits a deployment sets
(question length, top_k, history) are enforced as 422s by validation and shown in the OpenAPI schema.
The engine's `ask` is blocking (FAISS, numpy, HTTP to the model); it runs on the app's worker
threads so the event loop keeps serving /readyz and other callers meanwhile.
"""

# No `from __future__ import annotations` here: FastAPI resolves a route's string annotations
# in module globals, and QueryRequest is local to build_router.
import asyncio
import contextvars
import dataclasses
import functools
import time
from typing import Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corpusgraph.config import ServeSection
from corpusgraph.query.answer import Answer
from corpusgraph.query.engine import METHODS, QueryEngine
from corpusgraph.query.store import IndexMissingError
from serving.deps import Caller, get_engine, get_index_version, get_settings, require_api_key
from serving.stream import stream_answer

__all__ = ["build_router", "Problem", "ServedAnswer", "served_answer", "ask_question", "conversation_model",
           "conversation_history"]

# A tuple subscript spreads into the literal's values, so the engine's METHODS stay the one list.
Method = Literal[METHODS]  # type: ignore[valid-type]
CONVERSATION_ID = r"^[A-Za-z0-9_-]{1,128}$"


class Problem(BaseModel):
    detail: str


@dataclasses.dataclass
class ServedAnswer(Answer):
    """The engine's Answer and the index version that gave it (also in `X-Index-Version`)."""

    index_version: str | None = None
    conversation_id: str | None = None


def served_answer(answer: Answer, version: str | None, conversation_id: str | None = None) -> ServedAnswer:
    kept = {f.name: getattr(answer, f.name) for f in dataclasses.fields(Answer)}
    return ServedAnswer(**kept, index_version=version, conversation_id=conversation_id)


def conversation_model(settings: ServeSection) -> type[BaseModel]:
    """A request base with `history` and `conversation_id` (the query and context requests),
    bounded by the serve section."""
    conv = settings.conversations
    turn_chars = max(settings.max_question_chars, conv.max_answer_chars)

    class Turn(BaseModel):
        model_config = ConfigDict(extra="forbid")

        role: Literal["user", "assistant"]
        content: str = Field(..., min_length=1, max_length=turn_chars)

    class WithHistory(BaseModel):
        # Unknown fields are refused: a misspelt "mehtod" would otherwise silently mean "auto".
        model_config = ConfigDict(extra="forbid")

        history: list[Turn] | None = Field(
            None, max_length=2 * conv.max_exchanges,
            description="The conversation so far, oldest first; the question is rewritten by the model to stand "
            "alone before retrieval (the answer's standalone_question). Or send conversation_id.")
        conversation_id: str | None = Field(
            None, pattern=CONVERSATION_ID,
            description="The service keeps this conversation's last exchanges (per API key and domain set, in "
            "this process) and rewrites a follow-up question with them. Not with `history`.")

        @model_validator(mode="after")
        def _one_history(self):
            if self.history and self.conversation_id is not None:
                raise ValueError("send `history` or `conversation_id`, not both")
            return self

    return WithHistory


def conversation_history(request: Request, caller: Caller, body) -> list[dict] | None:
    """The turns a request's question follows: its own `history`, or the kept conversation's."""
    if body.conversation_id is None:
        return [t.model_dump() for t in body.history] if body.history else None
    if not request.app.state.settings.conversations.enabled:
        raise HTTPException(422, detail="this service keeps no conversations (serve.conversations.enabled is "
                            "false); send the turns in `history` instead")
    return request.app.state.conversations.history(caller.name, caller.domains, body.conversation_id)


def build_router(settings: ServeSection) -> APIRouter:
    router = APIRouter(tags=["query"])
    timeout_detail = (f"no answer within {settings.request_timeout_s:g} s (the service's request_timeout_s); "
                      "the model may be busy: retry later, or ask with method basic or local, which make one LLM call")

    class QueryRequest(conversation_model(settings)):  # type: ignore[misc]
        question: str = Field(..., min_length=1, max_length=settings.max_question_chars,
                              description="The question, in plain language.")
        method: Method = Field("auto", description="auto lets a rule-based router choose and say why.")
        level: int | None = Field(None, ge=0, le=settings.max_level,
                                  description="Community level for global search (the cost dial); "
                                  "default from the config.")
        top_k: int | None = Field(None, ge=1, le=settings.max_top_k,
                                  description="Text units (basic) or seed entities (local) to retrieve; "
                                  "default from the config.")
        stream: bool = Field(False, description="Answer as server-sent events (text/event-stream): start, "
                             "context (the citations), progress, token (the answer as it is written), then done "
                             "(this same answer) or error.")

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
            200: {"content": {"text/event-stream": {"schema": {"type": "string"}}},
                  "description": "The answer; with stream: true, server-sent events ending in `done` (this answer) "
                  "or `error`."},
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
    ):
        """The answer, the method used (and why, for auto), citations down to text units and
        documents, tokens and dollars, from only what the key's access domains allow. A model
        failure is reported in `error`, with whatever the method could still say: the same Answer
        the CLI prints."""
        state = request.app.state
        history = conversation_history(request, caller, body)
        # The model calls stop at the same instant the caller stops waiting: a 504'd question
        # must not keep its worker thread and model slots busy retrying in the background.
        until = time.monotonic() + settings.request_timeout_s
        ask = functools.partial(ask_question, state.telemetry, engine, caller, body.question, body.method, body.level,
                                body.top_k, history, body.stream)

        def finish(answer: Answer) -> dict:
            _remember(state, caller, body.conversation_id, answer)
            return dataclasses.asdict(served_answer(answer, version, body.conversation_id))

        if body.stream:
            return stream_answer(state.executor, lambda sink: ask(events=sink), timeout_s=settings.request_timeout_s,
                                 keepalive_s=settings.stream_keepalive_s, metrics=state.metrics, finish=finish,
                                 start_extra={"index_version": version, "conversation_id": body.conversation_id},
                                 timeout_detail=timeout_detail)
        begin = time.perf_counter()
        call = functools.partial(_within, until, ask)
        work = asyncio.get_running_loop().run_in_executor(state.executor, contextvars.copy_context().run, call)
        try:
            answer = await asyncio.wait_for(work, settings.request_timeout_s)
        except asyncio.TimeoutError:
            # A question still queued is cancelled; one already running stops at its next model call.
            raise HTTPException(504, detail=timeout_detail) from None
        except IndexMissingError as exc:
            raise HTTPException(503, detail=str(exc)) from exc
        except ValueError as exc:  # the engine's own checks, e.g. a level it cannot use
            raise HTTPException(400, detail=str(exc)) from exc
        state.metrics.observe_answer(answer, time.perf_counter() - begin)
        _remember(state, caller, body.conversation_id, answer)
        return served_answer(answer, version, body.conversation_id)

    return router


def _remember(state, caller: Caller, conversation_id: str | None, answer: Answer) -> None:
    """A conversation keeps an exchange once it was answered (not when the model failed)."""
    if conversation_id is not None and not answer.error:
        state.conversations.add(caller.name, caller.domains, conversation_id, answer.question, answer.answer)


def _within(until: float, ask) -> Answer:
    from corpusgraph.llm.base import deadline

    with deadline(until):
        return ask()


def ask_question(telemetry, engine: QueryEngine, caller: Caller, question: str, method: str, level: int | None,
         top_k: int | None, history: list[dict] | None, stream: bool = False, events=None) -> Answer:
    """Blocking, on a worker thread: the caller's view (built on first use, so inside the
    timeout), then the engine's answer over it, traced when traces are on."""
    with telemetry.question("query", caller.name, method, question, stream=stream) as span:
        # Only what the request uses is passed on: an engine stand-in need not know the rest.
        more = {k: v for k, v in (("history", history), ("events", events)) if v}
        answer = engine.ask(question, method=method, level=level, top_k=top_k, domains=caller.domains, **more)
        span.answered(answer)
        return answer
