"""The exporter process behind otel/export.py: it builds each handed episode's spans and
sends them over OTLP/HTTP, so span building, protobuf encoding and HTTP never share the
interpreter (and its lock) with the run's embedded proxy.

    python -m faultproxy.otel.sender            # started by OtelExport; stdin and stdout are its pipes

stdin carries pickled frames from the parent only (never a file: the redactor's secret values
travel in the first frame): the sender's settings, then ("episode", record, trace, attributes),
then ("close", deadline). A reading thread takes frames as they come into a bounded queue, so a
close (or the end of stdin: the parent is gone) is seen at once however far behind building is;
building stops at the deadline and what is left counts as lost. stdout carries JSON lines back:
{"ready": pid} once it can export, {"event": ...} warnings for the parent to log, and one
{"summary": ...} before the process exits.
Redaction happens here, before anything is sent (otel/spans.py).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from faultproxy.formats import __version__
from faultproxy.formats.rundir import trace_file
from faultproxy.formats.trace import read_trace
from faultproxy.otel import names as N
from faultproxy.otel.export import (
    COOL_DOWN_S,
    EXPORT_TIMEOUT_S,
    FLUSH_TIMEOUT_S,
    QUEUE_EPISODES,
    SenderSettings,
    TraceSource,
)
from faultproxy.otel.spans import SpanPlan, episode_spans

QUEUE_SPANS = 4096
BATCH_SPANS = 256
_SDK_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry.sdk._shared_internal")


class Reporter:
    """JSON lines to the parent (its stdout pipe); a parent that is gone is not an error."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._lock = threading.Lock()

    def __call__(self, message: Mapping[str, Any]) -> None:
        with self._lock:
            try:
                self.out.write(json.dumps(message, default=str) + "\n")
                self.out.flush()
            except (OSError, ValueError):
                pass

    def warning(self, event: str, **fields: Any) -> None:
        self({"event": event, **fields})


class _CountingExporter(SpanExporter):
    """The OTLP exporter, counting what it was handed and what the collector accepted; after a
    failed batch it fails the next ones at once for COOL_DOWN_S, so a dead collector costs one
    timeout per cool-down instead of one per batch."""

    def __init__(self, inner: SpanExporter, report: Reporter) -> None:
        self.inner, self.report = inner, report
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
                self.report.warning("otlp_export_failed", spans=len(spans), cool_down_s=COOL_DOWN_S)
            self._failed_at = time.monotonic()
        return result

    def shutdown(self) -> None:
        """The SDK's shutdown; SpanSender.close stops the inner exporter itself, once."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class SpanSender:
    """Episodes' span trees through the SDK's batch processor (a bounded queue of QUEUE_SPANS, a
    thread of its own) to one collector; counts episodes, spans and what was delivered."""

    def __init__(self, settings: SenderSettings, report: Reporter) -> None:
        self.settings, self.report = settings, report
        # The SDK's own lines (a failed batch, each span a full queue drops) would repeat ours many
        # times over; the summary says what was lost.
        for name in _SDK_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        self._exporter = _CountingExporter(OTLPSpanExporter(endpoint=settings.endpoint, headers=settings.headers,
                                                            timeout=EXPORT_TIMEOUT_S), report)
        processor = BatchSpanProcessor(self._exporter, max_queue_size=QUEUE_SPANS,
                                       max_export_batch_size=BATCH_SPANS, schedule_delay_millis=500)
        resource = Resource.create({N.SERVICE_NAME_KEY: N.SERVICE_NAME, N.SERVICE_VERSION: __version__})
        self._provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self._provider.add_span_processor(processor)
        self._tracer = self._provider.get_tracer("faultproxy", __version__, schema_url=N.SCHEMA_URL)
        self.episodes = self.spans = self.unexported = 0

    def export(self, record: Mapping[str, Any], source: TraceSource, attributes: Mapping[str, Any]) -> None:
        """Build and queue one episode's spans. Never raises: an episode that cannot be exported
        is reported and counted, and the sender goes on."""
        try:
            settings = self.settings
            plan = episode_spans(record, _trace_lines(record, source), settings.redactor, settings.content,
                                 {**settings.attributes, **attributes})
            if settings.wait_for_room:
                self._wait_for_room(plan.count())
            self._emit(plan, _context_of(plan.parent))
            self.episodes += 1
            self.spans += plan.count()
        except Exception as error:  # noqa: BLE001 - export must never fail a run (otel/export.py)
            self.report.warning("otlp_episode_not_exported", episode=record.get("key"), error=repr(error))
            self.unexported += 1

    def close(self, deadline: float) -> dict[str, int]:
        """Flush until `deadline` (wall clock) at the latest, stop; the counts."""
        # The SDK's shutdown drains the whole queue with no deadline: give it its own thread and the
        # time left, then refuse what is left (it counts as dropped) and stop any retry.
        flusher = threading.Thread(target=self._provider.shutdown, name="faultproxy-otlp-flush", daemon=True)
        flusher.start()
        flusher.join(max(0.0, deadline - time.time()))
        self._exporter.closed = True
        self._exporter.inner.shutdown()
        return {"episodes": self.episodes, "spans": self.spans, "delivered": self._exporter.delivered,
                "unexported": self.unexported}

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
        """Wait (at most a batch's timeout) until the SDK's queue can take `spans` more."""
        deadline = time.monotonic() + EXPORT_TIMEOUT_S
        while self.spans - self._exporter.handed + spans > QUEUE_SPANS and time.monotonic() < deadline:
            time.sleep(0.02)


class Inbox:
    """Frames from the parent, read on a thread of their own into a bounded queue."""

    def __init__(self, frames: IO[bytes], wait_for_room: bool) -> None:
        self.frames, self.wait_for_room = frames, wait_for_room
        self.episodes: queue.Queue[tuple[Any, ...]] = queue.Queue(QUEUE_EPISODES)
        self.received = self.lost = 0
        self.deadline: float | None = None  # set once the parent closes (or is gone)
        self.closed = threading.Event()

    def read(self) -> None:
        while True:
            try:
                frame = pickle.load(self.frames)
            except Exception:  # noqa: BLE001 - the end of stdin, or a frame cut by a parent killed mid-write
                frame = ("close", time.time() + FLUSH_TIMEOUT_S)  # the parent is gone: flush, exit
            if frame[0] == "close":
                self.deadline = frame[1]
                self.closed.set()
                return
            self.received += 1
            try:
                self.episodes.put(frame[1:], block=self.wait_for_room)
            except queue.Full:
                self.lost += 1

    def next(self) -> tuple[Any, ...] | None:
        """The next episode to build; None once closed and drained, or past the close deadline."""
        while True:
            if self.closed.is_set() and (self.episodes.empty() or time.time() >= (self.deadline or 0)):
                return None
            try:
                return self.episodes.get(timeout=0.1)
            except queue.Empty:
                continue

    def left(self) -> int:
        return self.episodes.qsize()


def main() -> None:
    # Ctrl-C reaches the whole process group; the parent decides when to close (and then flushes).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    report = Reporter(sys.stdout)
    frames = sys.stdin.buffer
    try:
        settings: SenderSettings = pickle.load(frames)
    except Exception:  # noqa: BLE001 - the parent was gone before it said anything: nothing to send
        return
    sender = SpanSender(settings, report)
    inbox = Inbox(frames, settings.wait_for_room)
    report({"ready": os.getpid()})
    threading.Thread(target=inbox.read, name="faultproxy-otlp-inbox", daemon=True).start()
    while (episode := inbox.next()) is not None:
        sender.export(*episode)
    counts = sender.close(inbox.deadline or time.time())
    report({"summary": {**counts, "received": inbox.received, "lost": inbox.lost + inbox.left()}})
    os._exit(0)  # the SDK's threads may still wait on a stalled collector: the flush time is over


def _trace_lines(record: Mapping[str, Any], source: TraceSource) -> Iterable[Mapping[str, Any]]:
    if isinstance(source, list):
        return source
    kind, path = source
    return _logged_trace(path, record) if kind == "logged" else read_trace(path)


def _logged_trace(run_dir: Path, record: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The trace lines of a logged episode, read lazily (inside export's guard)."""
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


if __name__ == "__main__":
    main()
