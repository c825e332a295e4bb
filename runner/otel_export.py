"""OpenTelemetry export: judged episodes as spans, over OTLP/HTTP (protobuf), to any collector.

Where it sits: the runner layer. It reads what the layers below write and judge (trace lines
through formats, verdicts from the evaluator, the proxy's names for stdio servers) and is fed by
the runner's own loops (`run`, `sweep`, replay, the monitor) after each episode is judged and logged, so it
never runs on the proxy's hot path and needs nothing from the CLI; the CLI only decides whether
to export, where, and prints the summary (`faultproxy export-otel` feeds it a finished run).

Never slows or breaks a run: spans go to the SDK's batch processor (a bounded queue, a thread of
its own); a collector that is down or slow costs at most EXPORT_TIMEOUT_S per batch on that
thread, and after a failed batch the next COOL_DOWN_S of batches are dropped at once rather than
retried; closing waits at most FLUSH_TIMEOUT_S. Spans that never reached the collector are
counted (`ExportSummary.dropped`); no verdict, log line or exit status depends on the export.

    export = OtelExport(endpoint, redactor=redactor)
    export.export_logged(run_dir, record)      # after the record is logged
    summary = export.close()                   # "otlp: 12 spans to ..., 0 dropped"
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import structlog
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from faultproxy.formats import __version__
from faultproxy.formats.errors import UsageError
from faultproxy.formats.redact import Redactor
from faultproxy.formats.rundir import trace_file
from faultproxy.formats.trace import read_trace
from faultproxy.runner import otel_names as N
from faultproxy.runner.otel_spans import SpanPlan, episode_spans

log = structlog.get_logger("faultproxy.otel")

EXPORT_TIMEOUT_S = 5.0  # one batch, retries included
FLUSH_TIMEOUT_S = 5.0  # what closing may add at the end of a run
COOL_DOWN_S = 30.0  # after a failed batch, drop batches this long instead of waiting on the collector
QUEUE_SPANS = 4096
BATCH_SPANS = 256
TRACES_PATH = "/v1/traces"
_SDK_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry.sdk._shared_internal")
ENDPOINT_ENV = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def traces_url(url: str, what: str = "--otlp") -> str:
    """The collector's traces endpoint for a URL given as OTEL_EXPORTER_OTLP_ENDPOINT is: a base
    (http://localhost:4318, .../api/public/otel) gets /v1/traces; one ending in it is kept."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{what} {url}: must be an http(s)://HOST[:PORT][/PATH] URL of an OTLP/HTTP collector")
    return url if parts.path.rstrip("/").endswith(TRACES_PATH) else url.rstrip("/") + TRACES_PATH


def resolve_endpoint(url: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """Where to export: --otlp URL, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (as is), else
    OTEL_EXPORTER_OTLP_ENDPOINT (+ /v1/traces); None when none is set or OTEL_SDK_DISABLED=true."""
    environ = os.environ if environ is None else environ
    if url:
        return traces_url(url)
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    traces, base = (environ.get(name, "").strip() for name in ENDPOINT_ENV)
    if traces:
        traces_url(traces, ENDPOINT_ENV[0])  # checked, kept as given (the SDK's rule)
        return traces
    return traces_url(base, ENDPOINT_ENV[1]) if base else None


@dataclass(frozen=True)
class ExportSummary:
    endpoint: str
    episodes: int
    spans: int
    delivered: int
    unexported: int = 0  # episodes whose spans could not be built (a damaged trace)

    @property
    def dropped(self) -> int:
        """Spans the collector never accepted: queue full, refused, unreachable, or still in
        flight when the flush time ran out."""
        return self.spans - self.delivered

    def line(self) -> str:
        unexported = f", {self.unexported} episodes not exported (see the log)" if self.unexported else ""
        return (f"otlp: {self.spans} spans of {self.episodes} episodes to {self.endpoint}, "
                f"{self.dropped} dropped{unexported}")


class _CountingExporter(SpanExporter):
    """The OTLP exporter, counting what it was handed and what the collector accepted; after a
    failed batch it fails the next ones at once for COOL_DOWN_S, so a dead collector costs one
    timeout per cool-down instead of one per batch."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.handed = self.delivered = 0
        self.closed = False  # past the flush deadline: fail every batch at once
        self._failed_at: float | None = None
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            self.handed += len(spans)
        if self.closed or (self._failed_at is not None and time.monotonic() - self._failed_at < COOL_DOWN_S):
            return SpanExportResult.FAILURE
        result = self.inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self._failed_at = None
            with self._lock:
                self.delivered += len(spans)
        else:
            if self._failed_at is None:
                log.warning("otlp_export_failed", spans=len(spans), cool_down_s=COOL_DOWN_S)
            self._failed_at = time.monotonic()
        return result

    def shutdown(self) -> None:
        """The SDK's shutdown; OtelExport.close stops the inner exporter itself, once."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class OtelExport:
    """Spans of judged episodes, batched to one OTLP/HTTP collector (see the module docstring).

    `attributes` go on every episode's root span (the scenario, the agent's command, the mode);
    `content` adds the conventions' opt-in message content; `wait_for_room` makes a producer
    that is not a live run (export-otel) wait for queue room instead of dropping spans.
    """

    def __init__(self, endpoint: str, *, redactor: Redactor | None = None, content: bool = False,
                 attributes: Mapping[str, Any] | None = None, wait_for_room: bool = False,
                 headers: Mapping[str, str] | None = None) -> None:
        self.endpoint = endpoint
        self.shown = (redactor or Redactor()).url(endpoint)  # what summaries and logs name: no userinfo, no keys
        self.redactor = redactor or Redactor()
        self.content, self.wait_for_room = content, wait_for_room
        self.attributes = dict(attributes or {})
        # The SDK's own lines (a failed batch, each span a full queue drops) would repeat ours many
        # times over; the summary says what was lost.
        for name in _SDK_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        self._exporter = _CountingExporter(OTLPSpanExporter(endpoint=endpoint, headers=headers,
                                                            timeout=EXPORT_TIMEOUT_S))
        processor = BatchSpanProcessor(self._exporter, max_queue_size=QUEUE_SPANS,
                                             max_export_batch_size=BATCH_SPANS, schedule_delay_millis=500)
        resource = Resource.create({N.SERVICE_NAME_KEY: N.SERVICE_NAME, N.SERVICE_VERSION: __version__})
        self._provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self._provider.add_span_processor(processor)
        self._tracer = self._provider.get_tracer("faultproxy", __version__, schema_url=N.SCHEMA_URL)
        self._lock = threading.Lock()
        self.episodes = self.spans = self.unexported = 0
        self._closed: ExportSummary | None = None

    def export_episode(self, record: Mapping[str, Any], trace_lines: Iterable[Mapping[str, Any]],
                       attributes: Mapping[str, Any] | None = None) -> int:
        """Queue one judged episode's spans (its log line and trace); the number of spans. Never
        raises: an episode that cannot be exported is logged and counted, and the run goes on."""
        try:
            return self._export(record, trace_lines, attributes)
        except Exception as error:  # noqa: BLE001 - export must never fail a run (module docstring)
            log.warning("otlp_episode_not_exported", episode=record.get("key"), error=repr(error))
            with self._lock:
                self.unexported += 1
            return 0

    def export_logged(self, run_dir: Path, record: Mapping[str, Any],
                      attributes: Mapping[str, Any] | None = None) -> int:
        """export_episode for an episode of a run directory, its trace read from flows/."""
        return self.export_episode(record, _logged_trace(Path(run_dir), record), attributes)

    def _export(self, record: Mapping[str, Any], trace_lines: Iterable[Mapping[str, Any]],
                attributes: Mapping[str, Any] | None) -> int:
        plan = episode_spans(record, trace_lines, self.redactor, self.content, {**self.attributes, **(attributes or {})})
        if self.wait_for_room:
            self._wait_for_room(plan.count())
        self._emit(plan, _context_of(plan.parent))
        with self._lock:
            self.episodes += 1
            self.spans += plan.count()
        return plan.count()

    def close(self) -> ExportSummary:
        """Flush for at most FLUSH_TIMEOUT_S, stop, and say how many spans arrived."""
        if self._closed is None:
            # The SDK's shutdown drains the whole queue with no deadline: give it its own thread and
            # FLUSH_TIMEOUT_S, then refuse what is left (it counts as dropped) and stop any retry.
            flusher = threading.Thread(target=self._provider.shutdown, name="faultproxy-otlp-flush", daemon=True)
            flusher.start()
            flusher.join(FLUSH_TIMEOUT_S)
            self._exporter.closed = True
            self._exporter.inner.shutdown()
            self._closed = ExportSummary(self.shown, self.episodes, self.spans, self._exporter.delivered,
                                         self.unexported)
            log.info("otlp_export", endpoint=self.shown, episodes=self.episodes, spans=self.spans,
                     dropped=self._closed.dropped)
        return self._closed

    def _emit(self, plan: SpanPlan, context: Context) -> None:
        kind = SpanKind.CLIENT if plan.client else SpanKind.INTERNAL
        span = self._tracer.start_span(plan.name, context=context, kind=kind, attributes=plan.attributes,
                                       start_time=_ns(plan.start))
        for name, at, attributes in plan.events:
            span.add_event(name, attributes, timestamp=_ns(at))
        if plan.error:
            span.set_status(Status(StatusCode.ERROR, plan.error))
        inner = trace.set_span_in_context(span, context)
        for child in plan.children:
            self._emit(child, inner)
        span.end(end_time=_ns(plan.end))

    def _wait_for_room(self, spans: int) -> None:
        """Wait (at most a batch's timeout) until the queue can take `spans` more."""
        deadline = time.monotonic() + EXPORT_TIMEOUT_S
        while self.spans - self._exporter.handed + spans > QUEUE_SPANS and time.monotonic() < deadline:
            time.sleep(0.02)


def _logged_trace(run_dir: Path, record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The trace lines of a logged episode, read lazily (inside export_episode's guard)."""
    path = trace_file(run_dir, record)
    if path is not None:
        yield from read_trace(path)


def _context_of(parent: tuple[int, int] | None) -> Context:
    """Where an episode's root starts: the agent's own trace when it sent one, else a new trace."""
    if parent is None:
        return Context()
    remote = SpanContext(parent[0], parent[1], is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(remote), Context())


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)
