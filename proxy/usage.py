"""Model token usage, read from responses of the OpenAI and Anthropic APIs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def tokens_in(document: Any) -> int:
    """Total tokens a response document reports, 0 when it reports none."""
    if not isinstance(document, dict):
        return 0
    usage = document.get("usage")
    if not isinstance(usage, dict) and isinstance(document.get("message"), dict):
        usage = document["message"].get("usage")  # anthropic's message_start event
    if not isinstance(usage, dict):
        return 0
    if isinstance(usage.get("total_tokens"), int):
        return usage["total_tokens"]
    return sum(v for k, v in usage.items() if k in ("input_tokens", "output_tokens") and isinstance(v, int))


def tokens_in_body(body: bytes) -> int:
    if b'"usage"' not in body:
        return 0  # most answers are no model's: a substring test spares parsing them
    try:
        return tokens_in(json.loads(body))
    except ValueError:
        return 0


def tokens_in_events(payloads: Iterable[str]) -> int:
    total = 0
    for payload in payloads:
        try:
            total += tokens_in(json.loads(payload))
        except ValueError:
            continue
    return total
