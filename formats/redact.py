"""Redaction: secrets never reach disk.

Applied to every header, URL and body a trace or store entry writes. Bodies are redacted as
whole texts (an SSE token split across network chunks is whole again by then), by JSON key and
by the configured secret values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "[REDACTED]"

SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie"}
)
_SECRET_NAME = re.compile(r"(?i)(api[_-]?key|secret|password|passwd|token|authorization|credential)")
# Well-known key shapes, caught even when nobody configured them.
# A secret-named JSON key with a string value: only bodies with one need parsing.
_SECRET_FIELD = re.compile(r'(?i)"[^"]*(api[_-]?key|secret|passw|token|authorization|credential)[^"]*"\s*:\s*"')
_KEY_SHAPES = re.compile(r"\b(sk-(?:ant-)?[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,})")


class Redactor:
    def __init__(self, secret_values: Iterable[str] = ()) -> None:
        # Longest first, so a secret that contains another is masked whole.
        self._values = sorted({v for v in secret_values if v and len(v) >= 4}, key=len, reverse=True)

    def text(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, MASK)
        return _KEY_SHAPES.sub(MASK, text)

    def headers(self, headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(k, MASK if k.lower() in SECRET_HEADERS else self.text(v)) for k, v in headers]

    def url(self, url: str) -> str:
        if "?" not in url and "@" not in url:
            return self.text(url)
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)[-1]  # drop userinfo (proxy credentials)
        query = urlencode(
            [(k, MASK if _SECRET_NAME.search(k) else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)],
            safe="[]",
        )
        return self.text(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))

    def body(self, text: str) -> str:
        """Mask values of secret-named JSON keys, then secret values anywhere."""
        if not _SECRET_FIELD.search(text):
            return self.text(text)
        try:
            document = json.loads(text)
        except ValueError:
            return self.text(text)
        return self.text(json.dumps(self._json(document), ensure_ascii=False))

    def _json(self, node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: MASK if _SECRET_NAME.search(k) and isinstance(v, str) else self._json(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [self._json(v) for v in node]
        return node
