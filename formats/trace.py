"""The episode trace: `flows/<episode>.jsonl`, one exchange per line.

This module owns the format; writers and readers go through it. Lines are appended and flushed
as each exchange ends, so a crash loses at most the exchange in flight, and a reader drops a
torn last line. Nothing here imports mitmproxy: the evaluator reads traces too.

A line:
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
  infra_error: only when the proxy failed to reach or hear the upstream by no fault's doing
            (refused, DNS, TLS, a reset): the reason. On the task's path it makes the episode
            incomplete; elsewhere the verdict lists it as a side-channel error (evaluator.side_channels)
  matched:  only when some rule's match block selected the request: those rules' names (whether
            or not one fired); a report tells "no rule matched" from "rules matched, none fired"
  usage:    model token usage read from the response, or null
  response_after_s: seconds from the request to the upstream's response headers (only when the
            upstream answered; SSE offsets count from then), for the time to the first chunk
  direction: MCP over stdio: "client to server" (the client's message and the server's answer)
            or "server to client" (a server's request and the client's answer, or its notification);
            over Streamable HTTP only the latter is marked (a server's message on an event stream)
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
string), episode (as claimed, or null), reason (no token, wrong token, unknown episode, ...).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from faultproxy.formats.errors import DiskFull
from faultproxy.formats.files import append_line, open_lines
from faultproxy.formats.redact import Redactor

FORMAT_VERSION = 1
CLIENT_TO_SERVER = "client to server"  # a line's `direction` (MCP): the client's message
SERVER_TO_CLIENT = "server to client"  # the server's own request or notification: not the agent's
DEFAULT_BODY_LIMIT = 1 << 20  # 1 MiB per body: a model request with a long conversation fits
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


REJECTED_NAME = "_rejected"


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


class TraceWriter:
    """Appends one episode's exchanges, each line whole or not at all; the file stays open for the
    episode's lifetime. A line that finds the disk full is not written and `disk_full` is set (the
    proxy must not fail the agent's request over it); nothing more is written after it, and
    whoever ends the episode reports it (a trace with a line missing cannot be judged)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[bytes] = open_lines(path)
        self.lines = 0
        self.disk_full = False

    def write(self, record: dict[str, Any]) -> None:
        if self.disk_full:
            return
        line = json.dumps({"v": FORMAT_VERSION, **record}, ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            append_line(self._file, line, self.path)
        except DiskFull:
            self.disk_full = True
            return
        self.lines += 1

    def close(self) -> None:
        self._file.close()


def read_trace(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the exchanges of a trace in order; a torn last line (a crash mid-write) is dropped."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as file:
        for line in file:
            if not line.endswith("\n"):
                return
            yield json.loads(line)
