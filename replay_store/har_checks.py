"""Field-by-field checks of a stored replay entry as it is read back, each failure one StoreError
naming the file, the entry and the field (har.py owns the format; these only validate it)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from faultproxy.formats.errors import InputError
from faultproxy.formats.yaml_input import describe_value, is_number


class StoreError(InputError):
    """A store entry that cannot be read: "FILE: FIELD: message"."""


# --- the recorded exchanges, as replay uses them -------------------------------------------------


def is_object(value: Any) -> bool:
    return isinstance(value, dict)


def json_object(path: Path, value: Any, field: str, optional: bool = False) -> dict[str, Any]:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise StoreError(str(path), None, field, f"expected an object, got {describe_value(value)}")
    return value


def optional_value(path: Path, value: Any, field: str, accept: Any, expected: str) -> Any:
    if value is not None and not accept(value):
        raise StoreError(str(path), None, field, f"expected {expected}, got {describe_value(value)}")
    return value


def absolute_http_url(url: Any) -> bool:
    if not isinstance(url, str):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 — raises ValueError for a port that is not a number in range
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def header_pairs(path: Path, headers: Any, field: str) -> tuple[tuple[str, str], ...]:
    if headers is None:
        return ()
    if not isinstance(headers, list):
        raise StoreError(str(path), None, field, f"expected a list, got {describe_value(headers)}")
    for n, header in enumerate(headers):
        if not (isinstance(header, dict) and isinstance(header.get("name"), str)
                and isinstance(header.get("value"), str)):
            raise StoreError(str(path), None, f"{field}[{n}]", "expected {\"name\": string, \"value\": string}")
    return tuple((h["name"], h["value"]) for h in headers)


def body_bytes(path: Path, holder: Mapping[str, Any], text_key: str, encoding_key: str, field: str) -> bytes | None:
    text, encoding = holder.get(text_key), holder.get(encoding_key)
    if text is None:
        return None
    if not isinstance(text, str):
        raise StoreError(str(path), None, f"{field}.{text_key}", f"expected a string, got {describe_value(text)}")
    if encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except ValueError:
            raise StoreError(str(path), None, f"{field}.{text_key}", "is not valid base64") from None
    if encoding is not None:
        raise StoreError(str(path), None, f"{field}.{encoding_key}", f"expected \"base64\" or none, got {encoding!r}")
    return text.encode("utf-8")


def sse_events(path: Path, events: Any, field: str) -> tuple[tuple[float, str], ...] | None:
    if not events:
        return None
    if not isinstance(events, list):
        raise StoreError(str(path), None, field, f"expected a list, got {describe_value(events)}")
    for n, event in enumerate(events):
        if not (isinstance(event, list) and len(event) == 2 and is_number(event[0]) and isinstance(event[1], str)):
            raise StoreError(str(path), None, f"{field}[{n}]", "expected [seconds, event text]")
    return tuple((float(t), e) for t, e in events)


def ws_session(path: Path, session: Any, field: str) -> Mapping[str, Any] | None:
    """A recorded WebSocket session: messages both ways (text or binary) and the close."""
    if session is None:
        return None
    session = json_object(path, session, field)
    messages = session.get("messages")
    if not isinstance(messages, list):
        raise StoreError(str(path), None, f"{field}.messages", f"expected a list, got {describe_value(messages)}")
    for n, message in enumerate(messages):
        at = f"{field}.messages[{n}]"
        message = json_object(path, message, at)
        if message.get("from") not in ("client", "server"):
            raise StoreError(str(path), None, f"{at}.from", f"expected client or server, got {message.get('from')!r}")
        kind = message.get("type")
        if kind == "text" and not isinstance(message.get("text"), str):
            raise StoreError(str(path), None, f"{at}.text", f"expected a string, got {describe_value(message.get('text'))}")
        if kind == "binary" and not isinstance(message.get("sha256"), str):
            raise StoreError(str(path), None, f"{at}.sha256", "expected the binary message's sha256")
        if kind not in ("text", "binary"):
            raise StoreError(str(path), None, f"{at}.type", f"expected text or binary, got {kind!r}")
    close = json_object(path, session.get("close"), f"{field}.close", optional=True)
    if close and close.get("code") is not None and not (isinstance(close["code"], int) and 1000 <= close["code"] <= 4999):
        raise StoreError(str(path), None, f"{field}.close.code", f"expected a close code, got {close['code']!r}")
    return session
