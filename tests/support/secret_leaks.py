"""Whether a secret leaks in output, also encoded: gzip-compressed or in base64 runs, recursively."""

from __future__ import annotations

import base64
import binascii
import re
import zlib

_RUN = re.compile(rb"[A-Za-z0-9+/_-]{4,}={0,2}")


def everything_in(data: bytes, depth: int = 0) -> list[bytes]:
    """data, what gzip in it holds and what every base64 run in it decodes to, recursively."""
    found = [data]
    if depth > 6:
        return found
    if data[:2] == b"\x1f\x8b":
        try:
            found += everything_in(zlib.decompressobj(wbits=31).decompress(data), depth + 1)
        except zlib.error:
            pass
    for run in _RUN.findall(data):
        run = run.rstrip(b"=").replace(b"-", b"+").replace(b"_", b"/")
        for shift in range(4):
            part = run[shift:]
            part = part[:len(part) - len(part) % 4]
            try:
                found += everything_in(base64.b64decode(part, validate=True), depth + 1)
            except (binascii.Error, ValueError):
                pass
    return found


def leaks(output: str | bytes, secret: str) -> bool:
    data = output.encode() if isinstance(output, str) else output
    return any(secret.encode() in blob for blob in everything_in(data))
