"""The episode trace: `flows/<episode>.jsonl`, one exchange per line.

This module owns the format; writers and readers go through it (read_trace). A proxy hands each
exchange's record to TraceWriter, which encodes and appends it on the writer thread
(formats.background), off the response path; each line is appended whole, so a crash loses at
most the lines still queued, and a reader drops a torn last line (the next writer cuts it off).
Closing a writer (the episode's end) returns once its lines are on disk. Nothing here imports
mitmproxy: the evaluator reads traces too.

read_trace yields every line as the full record below, whatever the line's version ("v"):
- version 1 wrote every field of the record.
- version 2 (FORMAT_VERSION, written and read back by formats.trace_compact) writes the same
  record compactly; a line leaves out
  - `episode` when the writer's line before gave it (a writer's first line always does);
  - `upstream`, `fault`, `perturbation`, `error` when null, `tokens` when 0; a body when null;
  - `forwarded` when it is whether the upstream answered (null: not recorded, as in lines older
    than the field);
  - `client` when it is {outcome: response, status: the upstream's status} (null: not recorded);
  - request and upstream `headers` when the same as the previous line's request's / upstream's.
  Headers are a list of "Name: value" strings; a bare "Name" has the value that occurrence of the
  name had in the previous line's same message; [name, value] where the name holds ": ". A text
  body that is a JSON document written back exactly by json.dumps with compact separators is kept
  as the value `json`, with ", " and ": " as `json_spaced` (up to JSON_BODY_MAX; cut, base64,
  NaN-holding and other bodies stay `body` text). Times are to the microsecond (trace_time).

The record (what read_trace yields, and what TraceWriter.write takes):
  seq, episode, started (unix s), duration_s
  request:  method, url, headers [[k, v]], body (text or base64 with body_encoding); a body longer
            than the trace body limit (DEFAULT_BODY_LIMIT) is cut to it and says so with
            body_truncated: true, body_length and body_sha256 of the whole (redacted) body — the
            same on upstream and client bodies
  upstream: status, headers, body, sse [[offset_s, event]] — what the upstream sent, or null
  client:   outcome (response | reset | cut | stale | injected), status, headers, and body/sse
            only where they differ from the upstream's
  forwarded: did the request reach the upstream (the proxy passed it on); lines written before
            it was recorded are read with scenarios.trace_forwarded
  fault:    rule, type, params, delivered, detail — or null
  consequence_of: only when the proxy answered the request because of what an earlier fault left
            (an MCP session it ended, a token it expired): {rule, type, seq} of that fault's line;
            not forwarded, and no fault decision of its own; or when that fault cut a forwarded
            request's open stream (a server_restart drops its server's streams): outcome `cut`
  infra_error: only when the proxy failed to reach or hear the upstream by no fault's doing
            (refused, DNS, TLS, a reset before the upstream answered; one after its status
            line is the upstream's own doing, `upstream` then holds what it sent): the reason. It makes the episode incomplete, unless the
            request is a known side channel: then the verdict lists it (evaluator.judging.side_channels)
  matched:  only when some rule's match block selected the request: those rules' names (whether
            or not one fired); a report tells "no rule matched" from "rules matched, none fired"
  usage:    model token usage read from the response, or null
  response_after_s: seconds from the request to the upstream's response headers (only when the
            upstream answered; SSE offsets count from then), for the time to the first chunk
  stdio MCP: a server that is gone answers 502 with the header STDIO_EXITED_HEADER (below)
  direction: MCP over stdio: "client to server" (the client's message and the server's answer)
            or "server to client" (a server's request and the client's answer, or its notification);
            over Streamable HTTP only the latter is marked (a server's message on an event stream).
            A conversation's turn (runner.chat) is a line of its own: "user to agent" or "agent
            to user", request {method: TURN, url: chat:user | chat:agent, headers: [], body: what
            was said}, upstream null, forwarded false, client null, and `turn`: {reply: the index
            of the scripted reply said, or null; end: the user left after it; silent: true when
            the user said nothing}
  websocket: only on a WebSocket upgrade that succeeded (101); the line is written when the session
            ends. messages: [{from: client | server, t: seconds since the upgrade, type: text |
            binary, size: bytes, text (redacted, cut to the body limit with text_truncated and
            sha256 of the whole; base64 audio in `audio`, `delta` or `data` fields replaced by
            {base64_length, sha256}) | sha256 (binary: never the bytes), injected / dropped: true
            when the proxy made or withheld it, fault: {rule, type, params, decision, delivered,
            detail} when a rule fired on it, sent: the text as the proxy passed it on when a fault
            rewrote it (schema_drift)}], close: {by: client | server | proxy, code, reason,
            t} or null if the session was still open when the episode ended
  body_not_evaluated: only when a rule's body predicates were skipped because the request body
            could not be parsed (nested too deeply): why; the rule's other predicates decided

`flows/_rejected.jsonl` sits beside the traces (no episode's trace can take its name): one line
per request the proxy refused (proxy.auth) — time, client (address:port), method, url (no query
string), episode (as claimed, or null), reason (no token, wrong token, unknown episode, ...); every
field spelled out (RejectedLog, REJECTED_VERSION).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import IO, Any

from faultproxy.formats import background
from faultproxy.formats.errors import DiskFull
from faultproxy.formats.files import append_line, cut_torn_tail, open_lines
from faultproxy.formats.redact import Redactor
from faultproxy.formats.trace_compact import LineContext, compact_line, expand_line

REJECTED_VERSION = 1
CLIENT_TO_SERVER = "client to server"  # a line's `direction` (MCP): the client's message
SERVER_TO_CLIENT = "server to client"  # the server's own request or notification: not the agent's
USER_TO_AGENT = "user to agent"  # a conversation's turn (turn_record): what the user said
AGENT_TO_USER = "agent to user"  # and what the agent said back
TURN_DIRECTIONS = (USER_TO_AGENT, AGENT_TO_USER)
TURN_METHOD = "TURN"
TURN_URLS = ("chat:user", "chat:agent")  # a turn's request url: who spoke
# On the 502 of a stdio MCP exchange whose server is gone: "start" (it could not start, or exited
# before answering anything: the body says why), "exit" (it died after serving) or "restart" (a
# server_restart fault replaced it before it answered: the answer is lost).
STDIO_EXITED_HEADER = "x-faultproxy-stdio-exited"
DEFAULT_BODY_LIMIT = 1 << 20  # 1 MiB per body: a model request with a long conversation fits
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


REJECTED_NAME = "_rejected"


def trace_time(seconds: float) -> float:
    """A time or duration as a trace line holds it: to the microsecond. Checks compare them (was a
    server's request made while a tool call was open?), and a replayed exchange can take less than
    a millisecond: rounded to the millisecond, it could end before a request made during it."""
    return round(seconds, 6)


def turn_record(seq: int, episode: str, direction: str, text: str, started: float, duration_s: float,
                reply: int | None = None, end: bool = False, silent: bool = False) -> dict[str, Any]:
    """One turn of a conversation as a trace record: `direction` one of TURN_DIRECTIONS, `text`
    what was said, `reply` the scripted reply's index (a user's turn), `end` the user's last,
    `silent` a user's turn that said nothing (the agent was not told anything)."""
    url = TURN_URLS[0] if direction == USER_TO_AGENT else TURN_URLS[1]
    return {"seq": seq, "episode": episode, "started": trace_time(started), "duration_s": trace_time(duration_s),
            "direction": direction, "request": {"method": TURN_METHOD, "url": url, "headers": [],
                                                "body": text},
            "upstream": None, "forwarded": False,
            "turn": {"reply": reply, "end": end, **({"silent": True} if silent else {})}}


def is_turn(line: dict[str, Any]) -> bool:
    """Is this trace line a conversation's turn (turn_record) rather than an exchange on the wire?"""
    return line.get("direction") in TURN_DIRECTIONS


def trace_path(trace_dir: Path, episode: str) -> Path:
    return trace_dir / f"{_SAFE_NAME.sub('_', episode)}.jsonl"


def rejected_path(trace_dir: Path) -> Path:
    """The log of requests the proxy refused, beside the episodes' traces."""
    return trace_dir / f"{REJECTED_NAME}.jsonl"


def is_reserved_episode(episode: str) -> bool:
    """An episode whose trace would be the rejected-requests log: the proxy refuses the name."""
    return _SAFE_NAME.sub("_", episode) == REJECTED_NAME


def encode_body(raw: bytes | None, redactor: Redactor, limit: int | None = None) -> dict[str, Any]:
    """A body as a trace message holds it: redacted text (or base64), cut to `limit` bytes.

    The cut comes after redaction (a cut JSON document could no longer be redacted by key), and a
    cut body says so with the length and sha256 of the whole (redacted) body.
    """
    if raw is None:
        return {"body": None}
    try:
        text = redactor.body(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raw = redactor.binary(raw)  # gzip without Content-Encoding, or a secret in binary
        if limit is None or len(raw) <= limit:
            return {"body": base64.b64encode(raw).decode(), "body_encoding": "base64"}
        return {"body": base64.b64encode(raw[:limit]).decode(), "body_encoding": "base64", **_cut(raw)}
    data = text.encode("utf-8")
    if limit is None or len(data) <= limit:
        return {"body": text}
    return {"body": data[:limit].decode("utf-8", "ignore"), **_cut(data)}


def encode_ws_message(content: bytes, is_text: bool, redactor: Redactor, limit: int | None = None) -> dict[str, Any]:
    """A WebSocket message's payload as a trace holds it: text redacted and cut to `limit` bytes;
    binary (audio, mostly) as its sha256 only, so traces of voice sessions stay small."""
    if not is_text:
        return {"type": "binary", "size": len(content), "sha256": hashlib.sha256(content).hexdigest()}
    text = redactor.body(_audio_hashed(content.decode("utf-8", "replace")))
    data = text.encode("utf-8")
    record: dict[str, Any] = {"type": "text", "size": len(content)}
    if limit is None or len(data) <= limit:
        return record | {"text": text}
    return record | {"text": data[:limit].decode("utf-8", "ignore"), "text_truncated": True,
                     "sha256": hashlib.sha256(data).hexdigest()}


_AUDIO_MARK = re.compile(r'"(audio|delta|data)"\s*:\s*"[A-Za-z0-9+/=]{256,}"')


def _audio_hashed(text: str) -> str:
    """Base64 audio inside a JSON event (OpenAI Realtime `audio` and `*.audio.delta` deltas,
    Gemini Live's `data` of media chunks) replaced by its length and sha256, as binary is."""
    if not _AUDIO_MARK.search(text):
        return text
    try:
        event = json.loads(text)
    except ValueError:
        return text
    return json.dumps(_hash_audio(event), ensure_ascii=False, separators=(",", ":"))


def _hash_audio(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _base64_summary(v) if k in ("audio", "delta", "data") and _is_long_base64(v) else _hash_audio(v)
                for k, v in node.items()}
    if isinstance(node, list):
        return [_hash_audio(v) for v in node]
    return node


def _is_long_base64(value: Any) -> bool:
    return isinstance(value, str) and len(value) >= 256 and re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", value) is not None


def _base64_summary(value: str) -> dict[str, Any]:
    raw = base64.b64decode(value + "=" * (-len(value) % 4))
    return {"base64_length": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def _cut(whole: bytes) -> dict[str, Any]:
    return {"body_truncated": True, "body_length": len(whole), "body_sha256": hashlib.sha256(whole).hexdigest()}


def body_cut(message: dict[str, Any]) -> dict[str, Any] | None:
    """{"length", "sha256"} of the whole body when the trace cut this message's body; else None."""
    if not message.get("body_truncated"):
        return None
    return {"length": message.get("body_length"), "sha256": message.get("body_sha256")}


def decode_body(message: dict[str, Any]) -> bytes | None:
    body = message.get("body")
    if body is None:
        return None
    if message.get("body_encoding") == "base64":
        return base64.b64decode(body)
    return body.encode("utf-8")


class _LineFile(ABC):
    """An append-only file of JSON lines written on the writer thread (formats.background): the
    caller hands over a record and goes on. Each line is whole or not at all. A line that finds
    the disk full is not written and `disk_full` is set (the proxy must not fail the agent's
    request over it); any other failure sets `failed`; either way nothing more is written, and
    whoever ends the episode reports it (a trace with a line missing cannot be judged)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        cut_torn_tail(path)  # a line a crash left half-written was never written: append after the last whole one
        self.path = path
        self._file: IO[bytes] = open_lines(path)
        self.lines = 0  # handed to the writer thread (written, unless the disk filled or writing failed)
        self.disk_full = False
        self.failed: Exception | None = None

    @property
    def stopped(self) -> bool:
        """Has this file stopped taking lines (the disk filled, or writing failed)?"""
        return self.disk_full or self.failed is not None

    def write(self, record: dict[str, Any]) -> None:
        if self.stopped:
            return
        self.lines += 1
        background.submit(partial(self._append, record))

    def close(self) -> None:
        """Close the file once every line handed over is on disk; returns when it is."""
        background.submit(self._file.close)
        background.flush()

    @abstractmethod
    def _encode(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record as its line holds it."""

    def _append(self, record: dict[str, Any]) -> None:
        if self.stopped:
            return
        try:
            line = json.dumps(self._encode(record), ensure_ascii=False, separators=(",", ":")) + "\n"
            append_line(self._file, line, self.path)
        except DiskFull:
            self.disk_full = True
        except Exception as error:
            self.failed = error
            raise  # the writer thread logs it


class TraceWriter(_LineFile):
    """Appends one episode's exchanges (records as read_trace yields them) in the compact form of
    version 2 (formats.trace_compact); the file stays open for the episode's lifetime."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._context = LineContext()  # what this writer's last line said: its first line says everything

    def _encode(self, record: dict[str, Any]) -> dict[str, Any]:
        return compact_line(record, self._context)


class RejectedLog(_LineFile):
    """`flows/_rejected.jsonl`: one plain line per refused request (its format is in this module's docstring)."""

    def _encode(self, record: dict[str, Any]) -> dict[str, Any]:
        return {"v": REJECTED_VERSION, **record}


def read_trace(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the exchanges of a trace in order, each in full (version 1's fields, whatever the
    line's version); a torn last line (a crash mid-write) is dropped. Lines this process still
    has on its way to the file are written first."""
    background.flush()
    if not path.exists():
        return
    context = LineContext()
    with path.open(encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            if not line.endswith("\n"):
                return
            yield expand_line(json.loads(line), context, f"{path}:{number}")
