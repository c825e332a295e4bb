"""Server-sent events, split on event boundaries as bytes arrive.

SSE events end with a blank line. Chunks from the network cut events anywhere, so faults that
count, cut or rewrite events work on whole events only: the splitter keeps the unfinished tail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class EventSplitter:
    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Return the complete events (each with its terminating blank line) in `chunk`."""
        self._buffer += chunk
        events = []
        while match := _BOUNDARY.search(self._buffer):
            events.append(self._buffer[: match.end()])
            self._buffer = self._buffer[match.end() :]
        return events

    def rest(self) -> bytes:
        """What is left when the stream ends: a partial event without its blank line."""
        rest, self._buffer = self._buffer, b""
        return rest


def split_events(body: bytes) -> list[bytes]:
    """A whole body's events, the last one partial when the body does not end on a blank line."""
    splitter = EventSplitter()
    events = splitter.feed(body)
    rest = splitter.rest()
    return events + ([rest] if rest else [])


def is_event_stream(content_type: str | None) -> bool:
    return bool(content_type) and content_type.split(";")[0].strip().lower() == "text/event-stream"


def map_json_data(event: bytes, transform: Callable[[Any], Any]) -> bytes:
    """Rewrite the JSON payload of each `data:` line of one event; other lines pass unchanged."""
    lines = event.split(b"\n")
    for i, line in enumerate(lines):
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        try:
            value = json.loads(payload)
        except ValueError:
            continue  # e.g. "[DONE]"
        crlf = b"\r" if line.endswith(b"\r") else b""  # CRLF line ends stay, or the event's end is lost
        lines[i] = b"data: " + json.dumps(transform(value), separators=(",", ":")).encode() + crlf
    return b"\n".join(lines)


def data_payloads(events: Iterator[bytes] | list[bytes]) -> Iterator[str]:
    for event in events:
        for line in event.splitlines():
            if line.startswith(b"data:"):
                yield line[5:].strip().decode("utf-8", "replace")
