"""Text hidden in an encoding: base64 runs in text, and gzip bytes, opened for the redactor and scan.

A secret base64-encoded into a JSON field, a whole base64 body, a gzip body sent without a
Content-Encoding header or a HAR body stored as `encoding: base64` is as much a secret as the
plain value. Both formats.redact (which masks it before anything is written) and `faultproxy
scan` (which looks for what was left) open them here, so they agree on what counts as hidden.

The proxy runs this on every body, so it is cheap where nothing is hidden. The redactor looks at
runs where an encoded value sits: the whole text (a body, a header value, a form field), a JSON
string (`"..."`), a query or form value (`=...`) and a data URL (`base64,...`); found by regexes
that start at a literal character, so a long conversation costs a fraction of a millisecond.
scan (offline) looks at every run. A run is opened only if it is at least MIN_ENCODED_LENGTH
base64 characters long with both upper- and lower-case letters (words and ids rarely are), and
only its first bytes are decoded until they look like text or gzip; binary (an image in a data
URL) is dropped there. A configured secret is found in any base64, binary included, without
decoding: formats.redact searches its base64_forms like its other written forms.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

MIN_ENCODED_LENGTH = 12  # base64 of the shortest secret formats.redact accepts (8 characters)
MAX_DECODED_BYTES = 16 << 20  # a gzip stream is opened this far and no further
MAX_DEPTH = 4  # base64 inside gzip inside base64 ... is opened this deep
GZIP_MAGIC = b"\x1f\x8b"
_B64 = r"([A-Za-z0-9+/_-]{%d,}={0,2})" % MIN_ENCODED_LENGTH
_RUN = re.compile(r"(?<![A-Za-z0-9+/_-])" + _B64)  # every run (scan)
_WHOLE = re.compile(r"\s*" + _B64 + r"\s*")
_QUOTED = re.compile('"' + _B64 + r'\\?"')  # a JSON string's whole value (also JSON-escaped)
_ASSIGNED = re.compile("=" + _B64 + r"(?=[&;\s]|$)")  # a query or form value
_DATA_URL = re.compile("base64," + _B64)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_PROBE = 64  # base64 characters decoded first (48 bytes): enough to tell text and gzip from binary


@dataclass(frozen=True)
class Hidden:
    """A base64 run in some text and what it holds: `data`, gunzipped when it was gzip (`gzipped`;
    `complete` False when the stream was cut or longer than MAX_DECODED_BYTES: `data` is its start)."""

    start: int
    end: int
    token: str
    data: bytes
    gzipped: bool
    complete: bool = True

    def text(self) -> str | None:
        """The decoded content as text, or None when it is not text."""
        return as_text(self.data)

    def reencode(self, data: bytes) -> str:
        """`data` encoded as this run was (gzip again if it was, the same base64 alphabet and padding)."""
        raw = gzip_bytes(data) if self.gzipped else data
        encoded = base64.b64encode(raw).decode("ascii")
        if "-" in self.token or "_" in self.token:
            encoded = encoded.replace("+", "-").replace("/", "_")
        padded = self.token.endswith("=") or len(self.token) % 4 == 0  # unpadded only if it was so
        return encoded if padded else encoded.rstrip("=")


def hidden_runs(text: str, everywhere: bool = False) -> Iterator[Hidden]:
    """Each base64 run in `text` that decodes to text or gzip, in order: where values sit, or
    `everywhere` (see the module docstring for the cost)."""
    if len(text) < MIN_ENCODED_LENGTH:
        return
    end = 0
    for match in _candidates(text, everywhere):
        if match.start(1) < end:
            continue  # inside a run already found
        token = match.group(1)
        if token.islower() or token.isupper() or token.isdigit() or len(token.rstrip("=")) % 4 == 1:
            continue  # not mixed-case (checked in C: this loop sees every long word of every body)
        head = _decode(token[:_PROBE] if len(token) > _PROBE else token)
        if head is None or not (head.startswith(GZIP_MAGIC) or _looks_like_text(head)):
            continue
        data = _decode(token)
        if data is None:
            continue
        opened = gunzip(data)
        end = match.end(1)
        if opened is None:
            yield Hidden(match.start(1), end, token, data, False)
        else:
            yield Hidden(match.start(1), end, token, opened[0], True, opened[1])


def _candidates(text: str, everywhere: bool) -> list[re.Match]:
    if everywhere:
        return list(_RUN.finditer(text))
    whole = _WHOLE.fullmatch(text)
    if whole:
        return [whole]
    found = list(_QUOTED.finditer(text))
    if "=" in text:
        found += _ASSIGNED.finditer(text)
    if "base64," in text:
        found += _DATA_URL.finditer(text)
    return sorted(found, key=lambda m: m.start(1)) if len(found) > 1 else found


def openings(text: str, depth: int = 0) -> Iterator[tuple[Hidden, bytes]]:
    """Every hidden run in `text` and, recursively to MAX_DEPTH, in what they hold: (the outermost
    run, the content found) — for a reader that looks for secrets rather than rewriting them."""
    if depth >= MAX_DEPTH:
        return
    for run in hidden_runs(text, everywhere=True):
        yield run, run.data
        inner = as_text(run.data)
        if inner is not None:
            yield from ((run, data) for _, data in openings(inner, depth + 1))


def base64_forms(value: str) -> set[str]:
    """The runs of base64 characters that `value` becomes wherever it sits in base64-encoded bytes
    (at each of the three byte alignments, standard and URL-safe alphabets, edge characters that
    depend on the neighbouring bytes left off): found by a plain substring search."""
    raw = value.encode("utf-8")
    forms = set()
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw + b"\0\0").decode("ascii")
        first, last = -(-pad * 8 // 6), (pad + len(raw)) * 8 // 6
        form = encoded[first:last]
        if len(form) >= MIN_ENCODED_LENGTH - 4:
            forms |= {form, form.replace("+", "-").replace("/", "_")}
    return forms


def gunzip(data: bytes) -> tuple[bytes, bool] | None:
    """(content, complete) of gzip bytes, the content up to MAX_DECODED_BYTES (complete False when
    the stream goes on beyond, or is cut short); None when `data` is not gzip."""
    if not data.startswith(GZIP_MAGIC):
        return None
    inflater = zlib.decompressobj(wbits=31)
    try:
        content = inflater.decompress(data, MAX_DECODED_BYTES)
    except zlib.error:
        return None
    return content, inflater.eof and not inflater.unconsumed_tail


def gzip_bytes(data: bytes) -> bytes:
    """gzip of `data` (mtime 0: the same bytes every time)."""
    compressor = zlib.compressobj(wbits=31)
    return compressor.compress(data) + compressor.flush()


def as_text(data: bytes) -> str | None:
    """UTF-8 text without control characters, or None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if _CONTROL.search(text) else text


def _decode(token: str) -> bytes | None:
    body = token.rstrip("=")
    if len(body) % 4 == 1:
        return None
    body = body.replace("-", "+").replace("_", "/") + "=" * (-len(body) % 4)
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        return None


def _looks_like_text(head: bytes) -> bool:
    """The first bytes of UTF-8 text (a character cut at the end is allowed), no control characters."""
    text = head.decode("utf-8", "ignore")
    return len(text.encode("utf-8")) >= len(head) - 3 and not _CONTROL.search(text)
