"""Redaction: secrets never reach disk.

Every writer in faultproxy passes what it writes through a Redactor: trace lines (headers, URLs,
bodies, SSE events), the run log, plan.json, task copies, replay store entries and log events.
Four kinds of redaction, applied together:

- by name (formats/secret_names.py): secret-named headers, query parameters, form and multipart
  fields, and JSON keys in every JSON document, wherever it sits (a whole body, each SSE `data:`
  event, NDJSON lines, JSON-RPC messages, JSON inside form fields or inside a JSON string). Any
  value under a secret-named key is masked, whatever its type;
- by value: every configured secret value, also URL- and JSON-escaped, as it shows inside any
  base64 text (at each byte alignment), and also when a stream splits it across SSE events (each
  event's JSON strings are joined per field before searching);
- by shape: well-known credential formats in any text (`Bearer ...`, `sk-...`, `AIza...`, ...);
- inside encodings (formats/encoded.py): a base64 run in any text (a whole body, a JSON string
  field, a header) and gzip bytes (a body sent without Content-Encoding, a HAR body stored as
  base64) are opened, their content redacted by all of the above and, as it is free text no
  structure names, each secret-named assignment's value masked (`api_key=...`, `password: ...`:
  formats.secret_names), and encoded again as they were when that changed something (nested
  base64 and JSON opened again, to MAX_DEPTH); configured values are masked in binary bodies too.

The per-request cost stays small: a body is parsed only when a cheap scan finds a secret-named
field in it, SSE events are joined only when secret values are configured, and a base64 run is
decoded only when it is long, mixed-case and its first bytes look like text or gzip.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote_plus, urlencode, urlsplit, urlunsplit

from faultproxy.formats.encoded import MAX_DEPTH, as_text, base64_forms, gunzip, gzip_bytes, hidden_runs
from faultproxy.formats.errors import UserError
from faultproxy.formats.secret_names import SHAPE_HINTS, SHAPES, is_secret_name, names_a_session, secret_assignments

MASK = "[REDACTED]"
MIN_SECRET_LENGTH = 8
# The standard auth headers: a mask there is expected (the policy check looks elsewhere).
SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie"}
)

# A field name with a secret-looking word in it, as a JSON key ("name": or \"name\":), a form or
# query field (name=) or a multipart field (name="name"): only then is a body worth parsing.
_STEMS = ("key", "token", "secr", "passw", "pwd", "passphrase", "pin", "auth", "sess", "sid", "sig", "cred", "cookie",
          "bearer", "jwt", "csrf", "xsrf")
_CANDIDATE_PATTERN = r'(?:^|["&?;\s])([\w.\[\]-]*(?:' + "|".join(_STEMS) + r')[\w.\[\]-]*)(?:\\?"\s*:|=|")'
_CANDIDATE = re.compile("(?i)" + _CANDIDATE_PATTERN)
# The same, for ASCII text lowered: without IGNORECASE, which makes Python's re try every stem
# case-folded at every place (~10x slower on a 2 kB JSON body: milliseconds per MCP tools/list).
# Lowering ASCII keeps every character's place and class, so the matches are the same.
_CANDIDATE_LOWERED = re.compile(_CANDIDATE_PATTERN)
# Every whole run of name characters between a delimiter and a terminator of _CANDIDATE: its
# matches are among these (neither side belongs to a name), so when none of them holds a stem
# there is none; these do not consume the delimiters as _CANDIDATE does, which decides then.
_NAME_RUN = re.compile(r'(?:^|(?<=["&?;\s]))[\w.\[\]-]++(?=\\?"\s*:|=|")')
_STEM_LOWERED = re.compile("|".join(_STEMS))
# faultproxy's own fields whose values are names, not secrets (the episode key, the names of
# secret variables): kept in its own documents, masked in traffic like any other.
OWN_NAME_FIELDS = frozenset({"key", "secrets", "secret_hosts", "secret_env"})
_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
_FORM = re.compile(r"[\w.~%+\[\]-]+=[^&\s]*(?:&[\w.~%+\[\]-]*=?[^&\s]*)*")
_SSE_DATA = re.compile(r"(?m)^data:")
_EVENT_BOUNDARY = re.compile(r"(\r\n\r\n|\n\n|\r\r)")
_MULTIPART_NAME = re.compile(r'(?i)content-disposition:[^\r\n]*?\bname="([^"]*)"')
_REMEMBERED_VALUES = 1024  # header values whose redaction a Redactor keeps
_REMEMBERED_VALUE_CHARS = 256  # longer ones (tokens, cookies, ...) are redacted each time
# How many encodings deep the redaction of this context is (base64 in gzip in base64 ...): bounded.
_DEPTH: ContextVar[int] = ContextVar("redact_depth", default=0)


class SecretTooShort(UserError):
    """A secret value shorter than MIN_SECRET_LENGTH: masking it would mask every "1234"."""

    def __init__(self, source: str, length: int) -> None:
        super().__init__(f"{source}: a secret must be at least {MIN_SECRET_LENGTH} characters, this one has "
                         f"{length}; a shorter value would be masked wherever it occurs (use a real secret, "
                         "or do not mark it secret)")


class Redactor:
    """Masks secrets in what a writer is about to write; see the module docstring."""

    def __init__(self, secret_values: Iterable[str] = (), *, source: str = "a secret") -> None:
        """Refuses (SecretTooShort) a non-empty value shorter than MIN_SECRET_LENGTH."""
        values = set()
        for value in secret_values:
            if value and len(value) < MIN_SECRET_LENGTH and value != MASK:
                raise SecretTooShort(source, len(value))
            if value:
                values.add(value)
        self.secrets = frozenset(values)
        # Each value as written raw, URL-encoded and JSON-escaped; longest first, so a secret that
        # contains another is masked whole.
        forms = {form for value in values for form in _written_forms(value)}
        self._values = sorted(forms, key=len, reverse=True)
        self._header_values: dict[str, str] = {}  # a header value -> as redacted (see headers())

    @classmethod
    def from_env(cls, names: Iterable[str], environ: Mapping[str, str] | None = None) -> Redactor:
        """A Redactor for the values of the environment variables `names` (unset ones add nothing)."""
        environ = os.environ if environ is None else environ
        redactor = cls()
        for name in names:
            redactor = redactor.with_values([environ.get(name, "")], source=f"--secret-env {name}")
        return redactor

    def with_values(self, secret_values: Iterable[str], *, source: str = "a secret") -> Redactor:
        """This redactor plus more secret values (self, when they add nothing)."""
        more = set(secret_values) - self.secrets
        return Redactor([*self.secrets, *more], source=source) if more else self

    # -- free text ---------------------------------------------------------------------------

    def text(self, text: str) -> str:
        """Mask configured values and well-known shapes in free text, and secrets in its base64 runs."""
        text = self._unhide(text)
        for value in self._values:
            if value in text:
                text = text.replace(value, MASK)
        lowered = text.lower()
        return SHAPES.sub(_mask_shape, text) if any(hint in lowered for hint in SHAPE_HINTS) else text

    def binary(self, data: bytes) -> bytes:
        """A body that is not UTF-8 text: gzip opened, its content redacted and compressed again when
        that changed it; configured values masked in the bytes."""
        opened = gunzip(data)
        if opened is not None:
            content, complete = opened
            redacted = self._opened(content) if complete else MASK.encode()  # what cannot be read whole goes
            if redacted != content:
                data = gzip_bytes(redacted)
        for value in self._values:
            raw = value.encode("utf-8")
            if raw in data:
                data = data.replace(raw, MASK.encode())
        return data

    def _unhide(self, text: str) -> str:
        """Each base64 run of `text` that holds text or gzip, its content redacted (and the run
        encoded again as it was) when that changes it."""
        out, last = [], 0
        for run in hidden_runs(text):
            redacted = self._opened(run.data) if run.complete else MASK.encode()  # what cannot be read whole goes
            if redacted != run.data:
                out += [text[last:run.start], run.reencode(redacted)]
                last = run.end
        return "".join([*out, text[last:]]) if out else text

    def _opened(self, data: bytes) -> bytes:
        """The content of an encoding, redacted as a body (or as binary), one level deeper; beyond
        MAX_DEPTH levels it is masked whole rather than left unread."""
        depth = _DEPTH.get()
        if depth >= MAX_DEPTH:
            return MASK.encode()
        token = _DEPTH.set(depth + 1)
        try:
            text = as_text(data)
            return _mask_assignments(self.body(text)).encode("utf-8") if text is not None else self.binary(data)
        finally:
            _DEPTH.reset(token)

    def headers(self, headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(k, MASK if is_secret_name(k) else self._header_value(v)) for k, v in headers]

    def _header_value(self, value: str) -> str:
        """text(value), remembered: most header values come again on every request (content
        types, hosts, agents, lengths); redacting each as free text was half of what a trace line cost."""
        redacted = self._header_values.get(value)
        if redacted is None:
            redacted = self.text(value)
            if len(value) <= _REMEMBERED_VALUE_CHARS:
                if len(self._header_values) >= _REMEMBERED_VALUES:
                    self._header_values.clear()  # bounded: a stream of ever new values starts over
                self._header_values[value] = redacted
        return redacted

    def url(self, url: str) -> str:
        """Secret-named query parameters and userinfo (proxy credentials) go, then values and shapes."""
        if "?" not in url and "@" not in url:
            return self.text(url)
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        query = urlencode([(k, MASK if is_secret_name(k) else v)
                           for k, v in parse_qsl(parts.query, keep_blank_values=True)], safe="[]")
        return self.text(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))

    # -- bodies ------------------------------------------------------------------------------

    def body(self, text: str) -> str:
        """A request or response body of any text type (JSON, NDJSON, SSE, form, multipart, plain)."""
        if self._values and _SSE_DATA.search(text):
            return "".join(self.events(_EVENT_BOUNDARY.split(text)))
        if _has_secret_field(text):
            text = self._fields(text)
        return self.text(text)

    def events(self, events: list[str]) -> list[str]:
        """SSE events in stream order: each redacted as a body, and configured values split across
        events (a model streaming a secret a few characters at a time) masked too."""
        out = [self.text(self._fields(e)) if _has_secret_field(e) else self.text(e) for e in events]
        return _mask_across(out, self._values) if self._values and len(out) > 1 else out

    def document(self, node: Any) -> Any:
        """Any JSON-like document (a log line, a plan, a task): secret-named keys masked whatever
        their value, every string redacted as a URL, an embedded JSON text or free text."""
        if isinstance(node, Mapping):
            return {k: MASK if k not in OWN_NAME_FIELDS and _masks(k, v) else self.document(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [self.document(v) for v in node]
        if isinstance(node, str):
            return self.url(node) if "://" in node and "?" in node else self.body(node)
        return node

    def _fields(self, text: str) -> str:
        """Mask secret-named fields in whichever structure `text` has."""
        stripped = text.strip()
        if stripped[:1] in "{[":
            try:
                return _dumps(self._json(json.loads(stripped)))
            except ValueError:
                pass  # NDJSON, or not JSON after all: line by line below
        if stripped.startswith("--"):
            return self._multipart(text)
        if "\n" not in stripped and _FORM.fullmatch(stripped):
            return self._form(stripped)
        return "".join(self._line(line) for line in text.splitlines(keepends=True))

    def _line(self, line: str) -> str:
        """One line of NDJSON or SSE: its JSON payload, if any, redacted by key."""
        prefix, payload = ("data:", line[5:]) if line.startswith("data:") else ("", line)
        if payload.strip()[:1] not in ("{", "[") or not _has_secret_field(payload):
            return line
        try:
            document = json.loads(payload)
        except ValueError:
            return line
        ending = line[len(line.rstrip("\r\n")):]
        return prefix + (" " if prefix else "") + _dumps(self._json(document)) + ending

    def _json(self, node: Any) -> Any:
        if isinstance(node, dict):
            return {k: MASK if _masks(k, v) else self._json(v) for k, v in node.items()}
        if isinstance(node, list):
            return [self._json(v) for v in node]
        if isinstance(node, str) and node[:1] in "{[" and _has_secret_field(node):
            return self._fields(node)  # JSON inside a JSON string (tool call arguments)
        if isinstance(node, str) and "://" in node and "?" in node:
            return self.url(node)  # a URL echoed in a body, secret-named query parameters and all
        return node

    def _form(self, text: str) -> str:
        pairs = parse_qsl(text, keep_blank_values=True)
        return urlencode([(k, MASK if is_secret_name(k) else self.body(v)) for k, v in pairs], safe="[]")

    def _multipart(self, text: str) -> str:
        """Each part of a multipart body: a secret-named field's content masked, others as bodies."""
        boundary = text.strip().split("\n", 1)[0].strip()
        parts = text.split(boundary)
        for i, part in enumerate(parts):
            head, sep, content = part.partition("\r\n\r\n") if "\r\n\r\n" in part else part.partition("\n\n")
            name = _MULTIPART_NAME.search(head)
            if not sep or not name:
                continue
            ending = content[len(content.rstrip("\r\n")):]
            value = MASK if is_secret_name(name.group(1)) else self.body(content.rstrip("\r\n"))
            parts[i] = head + sep + value + ending
        return boundary.join(parts)


def _masks(key: str, value: Any) -> bool:
    """A secret-named key masks any value but a flag, a null, a variable reference or a session's
    settings object (opened instead: its secret-named fields are masked by their own names)."""
    if value is None or isinstance(value, bool) or value == MASK:
        return False
    if isinstance(value, str) and _REFERENCE.fullmatch(value):
        return False  # `${NAME}`: where the secret comes from, not the secret
    if isinstance(value, Mapping) and names_a_session(str(key)):
        return False
    return is_secret_name(str(key))


def _has_secret_field(text: str) -> bool:
    if "%7B" in text or "%7b" in text:  # URL-encoded JSON (a form field): look inside
        text = unquote_plus(text)
    lowered = text.lower()  # substring tests in C first: most bodies have no stem at all
    if not any(stem in lowered for stem in _STEMS):
        return False
    if not text.isascii():
        return any(is_secret_name(m.group(1)) for m in _CANDIDATE.finditer(text))
    if not _STEM_LOWERED.search(" ".join(_NAME_RUN.findall(lowered))):
        return False  # the stems were in values and prose, not in any name
    return any(is_secret_name(text[m.start(1):m.end(1)]) for m in _CANDIDATE_LOWERED.finditer(lowered))


def _mask_assignments(text: str) -> str:
    """Decoded free text with the value of each secret-named assignment masked."""
    out, last = [], 0
    for _, start, end in secret_assignments(text, MASK):
        start = max(start, last)  # `password: a api_key=b`: the second value lies in the first's
        if start < end:
            out += [text[last:start], MASK]
            last = end
    return "".join([*out, text[last:]]) if out else text


def _dumps(document: Any) -> str:
    return json.dumps(document, ensure_ascii=False)


def _mask_shape(match: re.Match) -> str:
    return (match.group("bearer") or "") + MASK


def _written_forms(value: str) -> set[str]:
    """The value raw, URL-encoded, JSON-escaped, and as it shows inside any base64 (binary included)."""
    return {value, quote(value, safe=""), quote_plus(value), json.dumps(value, ensure_ascii=False)[1:-1],
            *base64_forms(value)}


# -- values split across SSE events -----------------------------------------------------------


def _mask_across(events: list[str], values: list[str]) -> list[str]:
    """Join each JSON string field across the events' `data:` payloads (the same field path in
    every event, e.g. choices.0.delta.content) and mask configured values found in the join."""
    parsed: dict[tuple[int, int], Any] = {}
    streams: dict[tuple, list[tuple[tuple[int, int], list, Any, str]]] = {}
    for i, event in enumerate(events):
        for j, line in enumerate(event.split("\n")):
            if not line.startswith("data:") or line[5:].strip()[:1] not in ("{", "["):
                continue
            try:
                parsed[(i, j)] = document = json.loads(line[5:])
            except ValueError:
                continue
            for path, holder, key, value in _string_leaves(document, ()):
                streams.setdefault(path, []).append(((i, j), holder, key, value))
    changed: set[tuple[int, int]] = set()
    for pieces in streams.values():
        if len(pieces) > 1:
            changed |= _mask_pieces(pieces, values)
    if not changed:
        return events
    out = [event.split("\n") for event in events]
    for i, j in changed:
        out[i][j] = "data: " + _dumps(parsed[(i, j)])
    return ["\n".join(lines) for lines in out]


def _string_leaves(node: Any, path: tuple) -> Iterable[tuple[tuple, Any, Any, str]]:
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        if isinstance(value, str):
            yield (*path, key), node, key, value
        else:
            yield from _string_leaves(value, (*path, key))


def _mask_pieces(pieces: list[tuple[tuple[int, int], Any, Any, str]], values: list[str]) -> set[tuple[int, int]]:
    """Mask the spans of `pieces`' concatenation that hold a secret: the mask goes where the
    secret starts, the rest of it is cut from the pieces that follow."""
    joined = "".join(p[3] for p in pieces)
    marks = bytearray(len(joined))  # 0: kept, 1: inside a secret, 2: where a secret starts
    for value in values:
        for match in re.finditer(re.escape(value), joined):
            if not marks[match.start()]:
                marks[match.start()] = 2
            marks[match.start() + 1:match.end()] = b"\x01" * (len(value) - 1)
    changed, offset = set(), 0
    for where, holder, key, value in pieces:
        span = marks[offset:offset + len(value)]
        if any(span):
            holder[key] = "".join(MASK if m == 2 else "" if m else c for c, m in zip(value, span, strict=True))
            changed.add(where)
        offset += len(value)
    return changed
