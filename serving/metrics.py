"""Prometheus metrics of one app: requests by route and status, what answers cost, how long they
take by method (whole answers, streamed answers' first event and first token, contexts), how
streams end, conversation rewrites and MCP tool calls.

Each app has its own registry (not prometheus-client's global one), so several apps in one
process, as in the tests, count apart. Routes are labelled by their template
(`/v1/entities/{entity_id}`), never the raw path, so ids a caller sends cannot blow up the
number of series; nothing from the corpus becomes a label. A streamed answer's HTTP request is
timed to its response headers by `middleware` (the body is still being written then); its whole
time is in corpusgraph_query_seconds.
"""

from __future__ import annotations

import math
import time
from typing import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from corpusgraph.query.answer import Answer

__all__ = ["ServiceMetrics", "CONTENT_TYPE_LATEST"]

# Seconds: fast lookups (ms) up to global search on a CPU model (minutes).
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ServiceMetrics:
    def __init__(self, load_seconds: Callable[[], float | None]):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "corpusgraph_http_requests", "HTTP requests answered, by route template, method and status.",
            ["route", "method", "status"], registry=self.registry,
        )
        self.latency = Histogram(
            "corpusgraph_http_request_seconds", "Time to answer an HTTP request, by route template and method.",
            ["route", "method"], buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.answers = Counter(
            "corpusgraph_query_answers", "Answers given, by the method that answered and whether the model "
            "reported an error.", ["method", "outcome"], registry=self.registry,
        )
        self.tokens = Counter(
            "corpusgraph_query_tokens", "LLM tokens spent on answers, by method and direction (in, out).",
            ["method", "direction"], registry=self.registry,
        )
        self.usd = Counter(
            "corpusgraph_query_usd", "Dollars paid for answers (cache hits cost nothing), by method.",
            ["method"], registry=self.registry,
        )
        self.llm_calls = Counter(
            "corpusgraph_query_llm_calls", "LLM calls made for answers, by method.", ["method"],
            registry=self.registry,
        )
        self.query_seconds = Histogram(
            "corpusgraph_query_seconds", "Time to a whole answer (streamed or not), by method and outcome "
            "(ok, error: the answer reports a model error).", ["method", "outcome"], buckets=_LATENCY_BUCKETS,
            registry=self.registry)
        self.first_event = Histogram(
            "corpusgraph_query_first_event_seconds", "Streamed answers: time from the request to the first event "
            "(the method chosen), by method.", ["method"], buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.first_context = Histogram(
            "corpusgraph_query_first_context_seconds", "Streamed answers: time to the context event (the citations), "
            "by method.", ["method"], buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.first_token = Histogram(
            "corpusgraph_query_first_token_seconds", "Streamed answers: time to the first piece of the answer's text, "
            "by method.", ["method"], buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.streams = Counter(
            "corpusgraph_query_streams", "Streamed answers by how they ended: completed, error (an error event), "
            "timeout (request_timeout_s), disconnected (the client went away first).", ["method", "outcome"],
            registry=self.registry)
        self.context_seconds = Histogram(
            "corpusgraph_context_seconds", "POST /v1/context: time to the context, by method.", ["method"],
            buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.rewrites = Counter(
            "corpusgraph_conversation_rewrites", "Follow-up questions rewritten to stand alone: used, or failed "
            "(the question was kept as asked).", ["outcome"], registry=self.registry)
        self.mcp_calls = Counter(
            "corpusgraph_mcp_tool_calls", "MCP tool calls by tool and outcome (ok, error).", ["tool", "outcome"],
            registry=self.registry)
        load = Gauge("corpusgraph_index_load_seconds", "Seconds the index took to load at start-up (NaN until loaded).",
                     registry=self.registry)
        load.set_function(lambda: _or_nan(load_seconds()))

    def observe_answer(self, answer: Answer, seconds: float | None = None) -> None:
        outcome = "error" if answer.error else "ok"
        self.answers.labels(answer.method, outcome).inc()
        if seconds is not None:
            self.query_seconds.labels(answer.method, outcome).observe(seconds)
        rewrite = answer.details.get("rewrite") if isinstance(answer.details, dict) else None
        if rewrite:
            self.rewrites.labels("used" if rewrite.get("used") else "failed").inc()
        self.tokens.labels(answer.method, "in").inc(answer.tokens_in)
        self.tokens.labels(answer.method, "out").inc(answer.tokens_out)
        self.usd.labels(answer.method).inc(answer.usd)
        self.llm_calls.labels(answer.method).inc(answer.llm_calls)

    async def middleware(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        """Counts and times every request; one that raised counts as a 500."""
        begin = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = getattr(request.scope.get("route"), "path", None) or "unmatched"
            self.requests.labels(route, request.method, str(status)).inc()
            self.latency.labels(route, request.method).observe(time.perf_counter() - begin)

    def exposition(self) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else float(value)
