"""The compact form of a trace line (format version 2), and reading it back as the full record.

formats.trace owns the trace and says what a version 2 line leaves out: fields holding their
default, what is derived from the upstream's answer, the episode and headers the line before
gave; JSON bodies kept as values. A LineContext carries what the lines of one trace said so far:
its writer's to compact, its reader's to expand.
"""

from __future__ import annotations

import json
from typing import Any

from faultproxy.formats.errors import UserError

FORMAT_VERSION = 2  # lines of version 1 (everything spelled out) are still read
JSON_BODY_MAX = 64 << 10  # a longer JSON body stays text: parsing it to store it as a value costs more than it saves
_STYLES = (("json", (",", ":")), ("json_spaced", (", ", ": ")))  # a JSON body kept as a value, and its layout
_DEFAULTS: dict[str, Any] = {"upstream": None, "fault": None, "perturbation": None, "tokens": 0, "error": None}
_DERIVED = ("forwarded", "client")  # left out: derived from the upstream's answer (read_trace says how)
_CONTEXT_MESSAGES = ("request", "upstream")  # whose headers a line may take from the line before


class LineContext:
    """What the lines of one trace read so far said last: a line leaves out what it repeats."""

    def __init__(self) -> None:
        self.episode: str | None = None
        self.headers: dict[str, list | None] = dict.fromkeys(_CONTEXT_MESSAGES)


def compact_line(record: dict[str, Any], context: LineContext) -> dict[str, Any]:
    """A record as a version 2 line: fields holding their default left out, and what the line
    before said (the episode, unchanged headers) not said again."""
    line: dict[str, Any] = {"v": FORMAT_VERSION}
    upstream = record.get("upstream")
    for key, value in record.items():
        if key == "episode":
            if value == context.episode:
                continue
            context.episode = value
        elif key in _DEFAULTS and value == _DEFAULTS[key] and type(value) is type(_DEFAULTS[key]):
            continue
        elif key == "forwarded" and value == (upstream is not None):
            continue
        elif key == "client":
            if upstream is not None and value == {"outcome": "response", "status": upstream["status"]}:
                continue
            value = _compact_message(value, None, key)
        elif key in _CONTEXT_MESSAGES:
            value = _compact_message(value, context, key)
        line[key] = value
    for key in _DERIVED:
        if key not in record:  # not recorded (an older writer's line passed on): null, not the derived value
            line[key] = None
    return line


def _compact_message(message: dict[str, Any], context: LineContext | None, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in message.items():
        if key == "headers":
            previous = context.headers[kind] if context else None
            if context:
                context.headers[kind] = value
                if value == previous:
                    continue
            value = _compact_headers(value, previous)
        elif key == "body":
            if value is None:
                continue
            style = _json_style(value, message)
            if style is not None:
                key, value = style
        out[key] = value
    return out


def _compact_headers(headers: list, previous: list | None) -> list:
    """"Name: value" for each header; a bare "Name" where the previous line's same message had
    the same value for this occurrence of the name; [name, value] for a name ": " would split."""
    before = _occurrences(previous or ())
    seen: dict[str, int] = {}
    out: list[Any] = []
    for name, value in headers:
        n = seen[name] = seen.get(name, -1) + 1
        if ": " in name:
            out.append([name, value])
        elif before.get((name, n)) == value:
            out.append(name)
        else:
            out.append(f"{name}: {value}")
    return out


def _occurrences(headers) -> dict[tuple[str, int], str]:
    seen: dict[str, int] = {}
    out = {}
    for name, value in headers:
        n = seen[name] = seen.get(name, -1) + 1
        out[name, n] = value
    return out


def _json_style(text: str, message: dict[str, Any]) -> tuple[str, Any] | None:
    """(key, document) when the text body is a JSON document that one of _STYLES writes back
    exactly as it was; bodies cut, base64 or over JSON_BODY_MAX stay text."""
    if (text[:1] not in ("{", "[") or len(text) > JSON_BODY_MAX or "body_encoding" in message
            or message.get("body_truncated")):
        return None
    try:
        document = json.loads(text, parse_constant=_no_constant)
        for key, separators in _STYLES:
            if json.dumps(document, ensure_ascii=False, separators=separators) == text:
                return key, document
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to parse
        pass
    return None


def _no_constant(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are not JSON: such a body stays text


def expand_line(line: dict[str, Any], context: LineContext, where: str) -> dict[str, Any]:
    """A line of any readable version as version 1's full record."""
    version = line.get("v", 1)
    if version == 1:
        return line
    if version != FORMAT_VERSION:
        raise UserError(f"{where}: trace format version {version!r}; this faultproxy reads versions 1 to "
                        f"{FORMAT_VERSION} (a newer faultproxy wrote it: read it with that one)")
    record = dict(line)
    if "episode" in line:
        context.episode = line["episode"]
    record["episode"] = context.episode
    for key, default in _DEFAULTS.items():
        record.setdefault(key, default)
    record["request"] = _expand_message(line["request"], context, "request", where)
    upstream = record["upstream"] = (_expand_message(line["upstream"], context, "upstream", where)
                                     if line.get("upstream") is not None else None)
    record.setdefault("forwarded", upstream is not None)
    if "client" not in line:  # what the upstream answered reached the client
        record["client"] = {"outcome": "response", "status": upstream["status"] if upstream else None}
    elif line["client"] is not None:
        record["client"] = _expand_message(line["client"], None, "client", where)
    return record


def _expand_message(message: dict[str, Any], context: LineContext | None, kind: str, where: str) -> dict[str, Any]:
    out = dict(message)
    for key, separators in _STYLES:
        if key in out:
            out["body"] = json.dumps(out.pop(key), ensure_ascii=False, separators=separators)
    previous = context.headers[kind] if context else None
    if "headers" in out:
        out["headers"] = _expand_headers(out["headers"], previous, f"{where}: {kind}.headers")
    elif context:
        if previous is None:
            raise UserError(f"{where}: {kind}.headers: left out, but no line before gave them")
        out["headers"] = [list(pair) for pair in previous]  # each record its own: a reader may change it
    if context:
        out.setdefault("body", None)
        context.headers[kind] = out["headers"]
    return out


def _expand_headers(entries: list, previous: list | None, where: str) -> list[list[str]]:
    before = _occurrences(previous or ())
    seen: dict[str, int] = {}
    out = []
    for entry in entries:
        name, sep, value = (entry[0], ": ", entry[1]) if isinstance(entry, list) else entry.partition(": ")
        n = seen[name] = seen.get(name, -1) + 1
        if not sep:
            if (name, n) not in before:
                raise UserError(f"{where}: {name!r} repeats a value the line before did not give")
            value = before[name, n]
        out.append([name, value])
    return out
