"""Writing replay store entries: `episode.json` and `flows.har` from an episode's description and
its trace lines, everything copied in redacted again and the written text checked for every
configured secret value; and the changes `replay --accept` and `minimize` make to an entry
afterwards. The format is replay_store.har's, which reads entries back.
"""

from __future__ import annotations

import base64
import datetime
import http.client
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from faultproxy.formats import __version__
from faultproxy.formats.redact import MIN_SECRET_LENGTH, Redactor
from faultproxy.formats.trace import body_cut
from faultproxy.replay_store.har import EPISODE_FILE, FORMAT, HAR_FILE, VERSION, load_json
from faultproxy.replay_store.har_checks import StoreError
from faultproxy.scenarios import trace_forwarded

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def entry_name(key: str, scenario: str) -> str:
    return _UNSAFE.sub("_", f"{key}--{scenario}")


def choose_entry_dir(store: Path, key: str, scenario: str, source: Mapping[str, Any]) -> Path:
    """The entry's folder: named after episode and scenario; an entry frozen from the same run and
    episode is replaced, another one with the same name gets a numbered sibling."""
    base = entry_name(key, scenario)
    for n in range(1, 1000):
        candidate = store / (base if n == 1 else f"{base}-{n}")
        if not candidate.exists():
            return candidate
        try:
            existing = json.loads((candidate / EPISODE_FILE).read_text(encoding="utf-8")).get("source") or {}
        except (OSError, ValueError):
            continue
        if (existing.get("run"), existing.get("created")) == (source.get("run"), source.get("created")):
            return candidate
    raise StoreError(str(store), None, None, f"too many entries named {base}")


def write_entry(directory: Path, episode: Mapping[str, Any], trace: Iterable[Mapping[str, Any]],
                redactor: Redactor, secret_values: Iterable[str] = ()) -> Path:
    """Write one entry from an episode description and its trace lines (already redacted once)."""
    directory.mkdir(parents=True, exist_ok=True)
    document = {"format": FORMAT, "version": VERSION, "name": directory.name, **episode}
    document.setdefault("minimal_faults", None)
    document = redactor.document(document)
    har = {"log": {
        "version": "1.2",
        "creator": {"name": "faultproxy", "version": __version__},
        "pages": [],
        "entries": [_har_entry(line, redactor) for line in sorted(trace, key=lambda l: l.get("seq") or 0)],
        "_faultproxy": {"version": VERSION, "episode": document.get("episode")},
    }}
    texts = {EPISODE_FILE: json.dumps(document, indent=2, ensure_ascii=False) + "\n",
             HAR_FILE: json.dumps(har, indent=1, ensure_ascii=False) + "\n"}
    for value in secret_values:
        if len(value) >= MIN_SECRET_LENGTH and any(value in text for text in texts.values()):
            raise StoreError(str(directory), None, None, "a configured secret survived redaction; entry not written")
    for name, text in texts.items():
        _write_atomically(directory / name, text)
    return directory


def update_episode(directory: Path, changes: Mapping[str, Any]) -> None:
    """Change top-level fields of an entry's episode.json (minimize's result, an accepted verdict)."""
    path = Path(directory) / EPISODE_FILE
    document = load_json(path)
    document.update(changes)
    _write_atomically(path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def _write_atomically(path: Path, text: str) -> None:
    # A scratch file of our own (O_EXCL, random name): a planted `episode.json.tmp` link is never
    # written through, and the rename replaces a link at `path` rather than following it.
    handle, scratch = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, 0o644)  # mkstemp's 0600 would hide a committed entry from other users
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise


def _iso(timestamp: float | None) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp or 0, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _headers_json(pairs: Iterable[Any], redactor: Redactor) -> list[dict[str, str]]:
    clean = [(str(p[0]), str(p[1])) for p in pairs or () if isinstance(p, (list, tuple)) and len(p) == 2]
    return [{"name": k, "value": v} for k, v in redactor.headers(clean)]


def _header(pairs: Iterable[Any], name: str) -> str | None:
    for pair in pairs or ():
        if isinstance(pair, (list, tuple)) and len(pair) == 2 and str(pair[0]).lower() == name:
            return str(pair[1])
    return None


def _body_text(message: Mapping[str, Any], redactor: Redactor) -> tuple[str | None, str | None]:
    """(text, encoding) of a trace message's body, redacted again."""
    body = message.get("body")
    if body is None:
        return None, None
    if message.get("body_encoding") == "base64":  # binary (gzip, say): redacted as bytes
        try:
            raw = base64.b64decode(str(body), validate=True)
        except ValueError:  # not base64 after all (binascii.Error is one): kept as text, redacted as text
            return redactor.body(str(body)), None
        return base64.b64encode(redactor.binary(raw)).decode("ascii"), "base64"
    return redactor.body(body), None


def _har_entry(line: Mapping[str, Any], redactor: Redactor) -> dict[str, Any]:
    request = line.get("request") or {}
    upstream = line.get("upstream")
    client = line.get("client") or {}
    fault = line.get("fault")
    forwarded = trace_forwarded(line)
    if not forwarded:
        upstream = None  # an answer the proxy made is never the upstream's (older traces recorded it)
    url = redactor.url(str(request.get("url") or ""))
    req_text, req_encoding = _body_text(request, redactor)
    har_request: dict[str, Any] = {
        "method": str(request.get("method") or "GET"), "url": url, "httpVersion": "HTTP/1.1", "cookies": [],
        "headers": _headers_json(request.get("headers"), redactor),
        "queryString": [{"name": k, "value": v} for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True)],
        "headersSize": -1, "bodySize": len(req_text.encode()) if req_text is not None else 0,
    }
    if req_text is not None:
        har_request["postData"] = {"mimeType": _header(request.get("headers"), "content-type") or "", "text": req_text}
        if req_encoding:
            har_request["postData"]["_encoding"] = req_encoding
    sse = None
    if upstream is not None:
        text, encoding = _body_text(upstream, redactor)
        if upstream.get("sse"):
            sse = [[float(t), e] for (t, _), e in zip(upstream["sse"], redactor.events([str(e) for _, e in upstream["sse"]]), strict=True)]
            if text is None:
                text = "".join(e for _, e in sse)
        content: dict[str, Any] = {"size": len(text.encode()) if text is not None else 0,
                                   "mimeType": _header(upstream.get("headers"), "content-type") or ""}
        if text is not None:
            content["text"] = text
        if encoding:
            content["encoding"] = encoding
        status = int(upstream.get("status") or 0)
        response = {"status": status, "statusText": http.client.responses.get(status, ""), "httpVersion": "HTTP/1.1", "cookies": [],
                    "headers": _headers_json(upstream.get("headers"), redactor), "content": content,
                    "redirectURL": "", "headersSize": -1, "bodySize": -1}
    else:
        response = {"status": 0, "statusText": "", "httpVersion": "HTTP/1.1", "cookies": [], "headers": [],
                    "content": {"size": 0, "mimeType": ""}, "redirectURL": "", "headersSize": -1, "bodySize": -1}
    duration_ms = round(float(line.get("duration_s") or 0) * 1000, 3)
    cut = {side: body_cut(m) for side, m in (("request", request), ("response", upstream or {})) if body_cut(m)}
    return {
        "startedDateTime": _iso(line.get("started")),
        "time": duration_ms,
        "request": har_request,
        "response": response,
        "cache": {},
        "timings": {"send": 0, "wait": duration_ms, "receive": 0},
        "_faultproxy": {
            "seq": line.get("seq"),
            "forwarded": forwarded,
            "upstream_error": None if upstream is not None or not forwarded
            else redactor.text(str(line.get("error") or "no response")),
            "fault": redactor.document(fault) if fault else None,
            "client": {"outcome": client.get("outcome"), "status": client.get("status")},
            "tokens": line.get("tokens") or 0,
            "sse": sse,
            **({"truncated": cut} if cut else {}),
            **({"websocket": _session_json(line["websocket"], redactor)} if line.get("websocket") else {}),
            **({"direction": str(line["direction"])} if line.get("direction") else {}),
        },
    }


def _session_json(session: Mapping[str, Any], redactor: Redactor) -> dict[str, Any]:
    """A trace's WebSocket session, with each message's text and fault redacted again."""
    def message(m: Mapping[str, Any]) -> dict[str, Any]:
        copy = dict(m)
        for name in ("text", "sent"):  # as received, and as passed on when a fault rewrote it
            if isinstance(copy.get(name), str):
                copy[name] = redactor.body(copy[name])
        if copy.get("fault"):
            copy["fault"] = redactor.document(copy["fault"])
        return copy

    close = session.get("close")
    return {"messages": [message(m) for m in session.get("messages") or ()],
            "close": {**close, "reason": redactor.text(str(close.get("reason") or ""))} if close else None}
