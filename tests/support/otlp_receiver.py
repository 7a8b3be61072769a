"""An OTLP/HTTP traces receiver for tests: POST /v1/traces with a protobuf ExportTraceServiceRequest
(the OpenTelemetry protocol's binary encoding), decoded with opentelemetry-proto and kept as plain
dicts: name, span id, parent span id, trace id, attributes. Not a test module.

    with AppThread(receiver_app(spans)) as server:   # spans: a list it appends to
        endpoint = server.base_url + "/traces"        # http://127.0.0.1:<port>/v1/traces
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

__all__ = ["receiver_app"]


def _value(v) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def receiver_app(spans: list[dict]) -> web.Application:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTraceServiceRequest,
                                                                          ExportTraceServiceResponse)

    async def traces(request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        for resource in message.resource_spans:
            service = {a.key: _value(a.value) for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for span in scope.spans:
                    spans.append({"name": span.name, "span_id": span.span_id.hex(),
                                  "parent_span_id": span.parent_span_id.hex(), "trace_id": span.trace_id.hex(),
                                  "attributes": {a.key: _value(a.value) for a in span.attributes},
                                  "resource": service, "start": span.start_time_unix_nano,
                                  "end": span.end_time_unix_nano})
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    return app
