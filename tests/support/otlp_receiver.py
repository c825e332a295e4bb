"""A local OTLP/HTTP trace receiver for tests: decodes what an exporter sends with the real protobuf
definitions (opentelemetry-proto) and keeps every raw byte it got, so a test can look for a secret
in all of it."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.upstream import ServerThread


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {pair.key: value_of(pair.value) for pair in pairs}


@dataclass
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]]
    status_code: int
    status_message: str
    resource: dict[str, Any]
    scope_schema_url: str


@dataclass
class Receiver:
    """What arrived at /v1/traces: raw request bodies (and headers) and the decoded spans."""

    raw: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    spans: list[ReceivedSpan] = field(default_factory=list)
    hang: bool = False  # answer nothing while set (a collector that accepts and stalls); clear it to release
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/traces", self._traces)
        return app

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        while self.hang:
            await asyncio.sleep(0.05)
        decoded = ExportTraceServiceRequest.FromString(body)
        with self._lock:
            self.raw.append(body)
            self.headers.append(dict(request.headers))
            for resource_spans in decoded.resource_spans:
                resource = attributes_of(resource_spans.resource.attributes)
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append(ReceivedSpan(
                            span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(), span.name, span.kind,
                            span.start_time_unix_nano, span.end_time_unix_nano, attributes_of(span.attributes),
                            [(e.name, e.time_unix_nano, attributes_of(e.attributes)) for e in span.events],
                            span.status.code, span.status.message, resource, scope.schema_url))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        by_trace: dict[str, list[ReceivedSpan]] = {}
        for span in self.spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        return by_trace


def receiving(receiver: Receiver | None = None) -> tuple[Receiver, ServerThread]:
    """A receiver and its (not yet started) server thread: `with server:` runs it."""
    receiver = receiver or Receiver()
    return receiver, ServerThread(receiver.app())
