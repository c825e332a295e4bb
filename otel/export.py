"""OpenTelemetry export: judged episodes as spans, over OTLP/HTTP (protobuf), to any collector.

Where it sits: its own package, beside the replay store, above the proxy and the evaluator. It
reads what the layers below write and judge (trace lines through formats, verdicts from the
evaluator, the proxy's names for stdio servers) and is fed by the runner's loops (`run`,
`sweep`, replaying agents) and the monitor after each episode is judged and logged, so it
never runs on the proxy's hot path and needs nothing from the CLI; the CLI only decides whether
to export, where, and prints the summary (`faultproxy export-otel` feeds it a finished run).

Its own process: building spans, encoding protobuf and HTTP would otherwise share the
interpreter lock with the embedded proxy (at 50 episodes/s that cost the proxy a third of its
throughput). The first episode starts an exporter process (otel/sender.py); this process
only pickles what an episode's spans need (its logged record, where its trace is, attributes)
into a bounded queue that a thread writes to the exporter's stdin. Redaction happens there,
before anything is sent; the redactor travels through the pipe, never through a file.

Never slows or breaks a run: a full queue drops the episode (counted, never waited on, except
for `wait_for_room`, export-otel's); the exporter batches spans through the SDK's bounded queue;
a collector that is down or slow costs at most EXPORT_TIMEOUT_S per batch there, and after a
failed batch the next COOL_DOWN_S of batches are dropped at once rather than retried; closing
waits at most FLUSH_TIMEOUT_S (+ CLOSE_GRACE_S for the exporter to answer, else it is killed).
Spans that never reached the collector are counted (`ExportSummary.dropped`, `.lost`); no
verdict, log line or exit status depends on the export. The exporter exits when its stdin
closes, so a parent killed outright leaves no exporter behind (it flushes at most
FLUSH_TIMEOUT_S first).

    export = OtelExport(endpoint, redactor=redactor)
    export.export_logged(run_dir, record)      # after the record is logged
    summary = export.close()                   # "otlp: 12 spans to ..., 0 dropped"
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import structlog

from faultproxy.formats.errors import UsageError
from faultproxy.formats.redact import Redactor

log = structlog.get_logger("faultproxy.otel")

EXPORT_TIMEOUT_S = 5.0  # one batch, retries included
FLUSH_TIMEOUT_S = 5.0  # what closing may add at the end of a run
CLOSE_GRACE_S = 0.5  # for the exporter's summary after the flush deadline, before it is killed
COOL_DOWN_S = 30.0  # after a failed batch, drop batches this long instead of waiting on the collector
QUEUE_EPISODES = 256  # episodes waiting for the exporter, on each side of the pipe
SENDER_MODULE = "faultproxy.otel.sender"
TRACES_PATH = "/v1/traces"
ENDPOINT_ENV = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

# Where an episode's trace lines are: the lines themselves, ("logged", run_dir) for a logged
# record's trace, or ("file", path).
TraceSource = list[Mapping[str, Any]] | tuple[str, Path]


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
    lost: int = 0  # episodes dropped before their spans were built (see below)

    @property
    def dropped(self) -> int:
        """Spans the collector never accepted: queue full, refused, unreachable, or still in
        flight when the flush time ran out."""
        return self.spans - self.delivered

    @property
    def complete(self) -> bool:
        """Every episode handed to the export reached the collector, all its spans."""
        return not (self.dropped or self.unexported or self.lost)

    def line(self) -> str:
        unexported = f", {self.unexported} episodes not exported (see the log)" if self.unexported else ""
        lost = (f", {self.lost} episodes dropped before their spans were built (the exporter fell behind "
                "or ran out of flush time)") if self.lost else ""
        return (f"otlp: {self.spans} spans of {self.episodes} episodes to {self.endpoint}, "
                f"{self.dropped} dropped{lost}{unexported}")


@dataclass(frozen=True)
class SenderSettings:
    """What the exporter process needs before the first episode (pickled into its stdin)."""

    endpoint: str
    redactor: Redactor
    content: bool = False
    attributes: Mapping[str, Any] = field(default_factory=dict)
    wait_for_room: bool = False
    headers: Mapping[str, str] | None = None


class OtelExport:
    """Spans of judged episodes, batched to one OTLP/HTTP collector by an exporter process of
    its own (see the module docstring).

    `attributes` go on every episode's root span (the scenario, the agent's command, the mode);
    `content` adds the conventions' opt-in message content; `wait_for_room` makes a producer
    that is not a live run (export-otel) wait for queue room instead of dropping episodes.
    """

    def __init__(self, endpoint: str, *, redactor: Redactor | None = None, content: bool = False,
                 attributes: Mapping[str, Any] | None = None, wait_for_room: bool = False,
                 headers: Mapping[str, str] | None = None) -> None:
        redactor = redactor or Redactor()
        self.shown = redactor.url(endpoint)  # what summaries and logs name: no userinfo, no keys
        self.settings = SenderSettings(endpoint, redactor, content, dict(attributes or {}), wait_for_room,
                                       dict(headers) if headers else None)
        self._queue: queue.Queue[bytes | None] = queue.Queue(QUEUE_EPISODES)
        self._sender: subprocess.Popen[bytes] | None = None
        self._exited = threading.Event()  # the exporter's stdout closed: it said all it will
        self.ready = threading.Event()  # set once the exporter process is up and has its settings
        self._gone = threading.Event()  # the exporter stopped reading: later episodes are lost at once
        self._answer: dict[str, int] = {}
        self._lock = threading.Lock()
        self.handed = self.lost = self.unexported = 0
        self._closed: ExportSummary | None = None

    @property
    def sender_pid(self) -> int | None:
        """The exporter process's id, once the first episode started it."""
        return self._sender.pid if self._sender is not None else None

    def export_episode(self, record: Mapping[str, Any], trace_lines: Iterable[Mapping[str, Any]],
                       attributes: Mapping[str, Any] | None = None) -> bool:
        """Hand one judged episode (its log line and trace lines) to the exporter; whether it was
        taken. Never raises: an episode that cannot be handed over is logged and counted."""
        try:
            lines = list(trace_lines)
        except Exception as error:  # noqa: BLE001 - export must never fail a run (module docstring)
            return self._not_exported(record, error)
        return self._hand(record, lines, attributes)

    def export_logged(self, run_dir: Path, record: Mapping[str, Any],
                      attributes: Mapping[str, Any] | None = None) -> bool:
        """export_episode for an episode of a run directory, its trace read from flows/ by the exporter."""
        return self._hand(record, ("logged", Path(run_dir)), attributes)

    def export_trace(self, record: Mapping[str, Any], trace: Path, attributes: Mapping[str, Any] | None = None) -> bool:
        """export_episode for an episode whose trace is the file `trace`, read by the exporter."""
        return self._hand(record, ("file", Path(trace)), attributes)

    def close(self) -> ExportSummary:
        """Flush for at most FLUSH_TIMEOUT_S, stop the exporter, and say how many spans arrived."""
        if self._closed is None:
            answer = self._stop() if self._sender is not None else {}
            handed_over = answer.get("received", 0)
            self._closed = ExportSummary(
                self.shown, answer.get("episodes", 0), answer.get("spans", 0), answer.get("delivered", 0),
                self.unexported + answer.get("unexported", 0),
                self.lost + (self.handed - handed_over) + answer.get("lost", 0))
            log.info("otlp_export", endpoint=self.shown, episodes=self._closed.episodes, spans=self._closed.spans,
                     dropped=self._closed.dropped, lost=self._closed.lost)
        return self._closed

    def _hand(self, record: Mapping[str, Any], source: TraceSource, attributes: Mapping[str, Any] | None) -> bool:
        try:
            frame = pickle.dumps(("episode", dict(record), source, dict(attributes or {})), pickle.HIGHEST_PROTOCOL)
            self._start()
        except Exception as error:  # noqa: BLE001 - export must never fail a run
            return self._not_exported(record, error)
        try:
            if self._gone.is_set():
                raise queue.Full
            if self.settings.wait_for_room:
                self._queue.put(frame, timeout=EXPORT_TIMEOUT_S)
            else:
                self._queue.put_nowait(frame)
        except queue.Full:
            with self._lock:
                self.lost += 1
                first = self.lost == 1
            if first:  # the summary counts them all
                log.warning("otlp_episode_dropped", episode=record.get("key"), queue=QUEUE_EPISODES,
                            exporter_gone=self._gone.is_set())
            return False
        with self._lock:
            self.handed += 1
        return True

    def _not_exported(self, record: Mapping[str, Any], error: Exception) -> bool:
        log.warning("otlp_episode_not_exported", episode=record.get("key"), error=repr(error))
        with self._lock:
            self.unexported += 1
        return False

    def _start(self) -> None:
        """Start the exporter process and its two pipe threads, once (the first episode does)."""
        with self._lock:
            if self._sender is not None:
                return
            # -P: the exporter imports faultproxy as installed, not a same-named folder of the cwd.
            self._sender = subprocess.Popen([sys.executable, "-P", "-m", SENDER_MODULE], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE)
        settings = pickle.dumps(self.settings, pickle.HIGHEST_PROTOCOL)
        threading.Thread(target=self._write, args=(self._sender.stdin, settings), name="faultproxy-otlp-pipe",
                         daemon=True).start()
        threading.Thread(target=self._read, args=(self._sender.stdout,), name="faultproxy-otlp-answers",
                         daemon=True).start()

    def _write(self, pipe: IO[bytes], settings: bytes) -> None:
        """Frames from the queue into the exporter's stdin; after a close frame (or a broken
        pipe), stdin is closed, which is what ends the exporter."""
        frame: bytes | None = settings
        while frame is not None:
            try:
                pipe.write(frame)
                pipe.flush()
            except (OSError, ValueError):  # the exporter is gone: what is left counts as lost
                self._gone.set()
                break
            frame = self._queue.get()
        try:
            pipe.close()
        except OSError:
            pass

    def _read(self, pipe: IO[bytes]) -> None:
        """The exporter's JSON lines: warnings to log here, then its summary."""
        for line in pipe:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not one of the exporter's lines (a library printing): nothing to act on
            if "ready" in message:
                self.ready.set()
            elif "summary" in message:
                self._answer = message["summary"]
            else:
                log.warning(message.pop("event"), **message)
        self._gone.set()
        self._exited.set()

    def _stop(self) -> dict[str, int]:
        """Close the exporter: it flushes until the deadline, answers, exits; killed if it does not."""
        assert self._sender is not None
        deadline = time.time() + FLUSH_TIMEOUT_S
        if not self._gone.is_set():
            try:
                self._queue.put(pickle.dumps(("close", deadline)), timeout=FLUSH_TIMEOUT_S)
                self._queue.put(None, timeout=max(0.0, deadline - time.time()))
            except queue.Full:
                pass  # the exporter stopped reading: it is killed below
        if self._exited.wait(max(0.0, deadline - time.time()) + CLOSE_GRACE_S):
            try:
                self._sender.wait(CLOSE_GRACE_S)  # it answered and is exiting
                return self._answer
            except subprocess.TimeoutExpired:
                pass
        log.warning("otlp_exporter_killed", pid=self._sender.pid, reason="not done within the flush time")
        self._sender.kill()
        self._sender.wait()
        return self._answer
