"""OpenTelemetry traces of the service, exported over OTLP/HTTP when `serve.telemetry.otlp_endpoint`
is set, and off otherwise (then the SDK is never imported and nothing is timed).

Spans, each a child of the one above it:
- the HTTP server span, from FastAPI's own instrumentation (fastapi.tiangolo.com/advanced/
  opentelemetry), given this app's tracer provider;
- `corpusgraph.query` (or `.context`, `.mcp.<tool>`): one question, with the method, the route
  reason, the caller's key *name*, the index version, LLM calls, tokens, dollars, the units and
  documents read, and whether it was streamed; the question's text only with `record_question`;
- `chat <model>`: one per model call (rating, map, reduce, the rewrite of a follow-up), named and
  attributed after OpenTelemetry's GenAI conventions (gen_ai.operation.name, gen_ai.request.model,
  gen_ai.usage.input_tokens, gen_ai.usage.output_tokens, gen_ai.response.finish_reasons;
  semantic-conventions docs/gen-ai/gen-ai-spans.md, a "Development" status spec, so names may
  move), plus corpusgraph.stage, corpusgraph.cache_hit and corpusgraph.usage_estimated. Its times
  are the call's own, reported by the query meter as each result comes (query/tracing.py).

The provider is this app's, never the process's global one: several apps in one process (the
tests) keep their traces apart, and FastAPI is told explicitly not to use a global provider when
traces are off.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from corpusgraph.config import TelemetrySection
from corpusgraph.llm.base import ChatRequest, ChatResult
from corpusgraph.query.tracing import recording

__all__ = ["Telemetry"]


class _NoSpan:
    def answered(self, answer: Any) -> None:
        pass

    def set(self, **attributes: Any) -> None:
        pass


class _Span:
    def __init__(self, span) -> None:
        self.span = span

    def set(self, **attributes: Any) -> None:
        for key, value in attributes.items():
            if value is not None:
                self.span.set_attribute(key, value)

    def answered(self, answer: Any) -> None:
        """What an Answer or a RetrievedContext says about its cost and reach (never its text)."""
        coverage = getattr(answer, "coverage", None) or {}
        self.set(**{"corpusgraph.method": answer.method, "corpusgraph.route_reason": answer.route_reason,
                    "corpusgraph.llm_calls": answer.llm_calls, "gen_ai.usage.input_tokens": answer.tokens_in,
                    "gen_ai.usage.output_tokens": answer.tokens_out, "corpusgraph.usd": float(answer.usd),
                    "corpusgraph.coverage.units": _number(coverage.get("units", coverage.get("units_under"))),
                    "corpusgraph.coverage.documents": _number(coverage.get("documents",
                                                                           coverage.get("documents_under"))),
                    "corpusgraph.rewritten": getattr(answer, "standalone_question", None) is not None})
        error = getattr(answer, "error", None)
        if error:
            from opentelemetry.trace import Status, StatusCode

            self.span.set_status(Status(StatusCode.ERROR, "the model failed"))
            self.span.set_attribute("error.type", "model_error")


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) else None


class _Calls:
    """query.tracing.CallRecorder over an OpenTelemetry tracer: a `chat <model>` span per call."""

    def __init__(self, tracer) -> None:
        self.tracer = tracer

    def record_call(self, model: str, stage: str, request: ChatRequest, result: ChatResult, start_ns: int,
                    end_ns: int) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                      "gen_ai.request.max_tokens": request.max_tokens,
                      "gen_ai.usage.input_tokens": result.tokens_in, "gen_ai.usage.output_tokens": result.tokens_out,
                      "corpusgraph.stage": stage, "corpusgraph.cache_hit": bool(result.cached),
                      "corpusgraph.usage_estimated": bool(getattr(result, "usage_estimated", False))}
        if result.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = [result.finish_reason]
        ttft = getattr(result, "ttft_s", None)
        if ttft is not None:
            attributes["corpusgraph.ttft_s"] = float(ttft)
        span = self.tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes,
                                      start_time=start_ns)
        if result.error:
            # The error's kind, not its text: a server's message may quote the prompt.
            span.set_attribute("error.type", "cancelled" if result.error.startswith("cancelled") else "llm_error")
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=max(end_ns, start_ns))


class Telemetry:
    """The app's tracing: a provider and tracer when configured (or given an exporter, in tests),
    else nothing."""

    def __init__(self, section: TelemetrySection, exporter: Any = None) -> None:
        self.section = section
        self.provider = None
        self.tracer = None
        self.calls: _Calls | None = None
        if section.otlp_endpoint is None and exporter is None:
            return
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        self.provider = TracerProvider(resource=Resource.create({"service.name": section.service_name}),
                                       sampler=ParentBased(TraceIdRatioBased(section.sample_ratio)))
        if exporter is not None:  # a test's in-memory exporter: spans there as they end
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        if section.otlp_endpoint is not None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            headers = {k: v.get_secret_value() for k, v in section.headers.items()}
            self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=section.otlp_endpoint,
                                                                                 headers=headers)))
        self.tracer = self.provider.get_tracer("corpusgraph")
        self.calls = _Calls(self.tracer)

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    def fastapi_config(self) -> dict[str, Any]:
        """FastAPI(telemetry=...): HTTP server spans on this app's provider, or none at all."""
        if self.provider is None:
            return {"tracing": False, "metrics": False, "logs": False, "auto_configure": False}
        return {"tracer_provider": self.provider, "metrics": False, "logs": False, "operation_spans": False,
                "auto_configure": False}

    @contextmanager
    def question(self, kind: str, caller: str, method: str, question: str, **attributes: Any) -> Iterator[Any]:
        """A span around one question (kind: query, context, mcp.<tool>), current for the model
        calls made inside it, which become its children."""
        if self.tracer is None:
            yield _NoSpan()
            return
        attrs = {"corpusgraph.caller": caller, "corpusgraph.method_asked": method,
                 **{f"corpusgraph.{k}": v for k, v in attributes.items() if v is not None}}
        if self.section.record_question:
            attrs["corpusgraph.question"] = question
        # An exception's text may name files or quote the index: its type is recorded, not its message.
        with self.tracer.start_as_current_span(f"corpusgraph.{kind}", attributes=attrs, record_exception=False,
                                               set_status_on_exception=True) as span, recording(self.calls):
            yield _Span(span)

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.force_flush()
            self.provider.shutdown()
