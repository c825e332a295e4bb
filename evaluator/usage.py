"""Resources read from the trace: the tokens each model used, as the model API reported them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from faultproxy.evaluator.traced import TracedExchange, documents


def model_usage(exchanges: Sequence[TracedExchange], default_model: str | None) -> dict[str, dict[str, int]]:
    """{model: {"input": tokens, "output": tokens}} from the usage the model API reported
    (OpenAI chat and responses, Anthropic; whole bodies and SSE events)."""
    usage: dict[str, dict[str, int]] = {}
    for ex in exchanges:
        if not ex.is_model or ex.upstream_status is None:
            continue
        model = None
        if isinstance(ex.body_json, dict) and isinstance(ex.body_json.get("model"), str):
            model = ex.body_json["model"]
        model = model or default_model or "unknown"
        tokens_in, tokens_out = _usage_of(ex.raw.get("upstream") or {})
        if tokens_in or tokens_out:
            slot = usage.setdefault(model, {"input": 0, "output": 0})
            slot["input"] += tokens_in
            slot["output"] += tokens_out
    return usage


def _usage_of(upstream: Mapping[str, Any]) -> tuple[int, int]:
    # Streams repeat or accumulate counts (anthropic's message_delta is cumulative): take the max.
    best_in = best_out = 0
    for document in documents(upstream):
        for usage in _usage_blocks(document):
            i = usage.get("prompt_tokens", usage.get("input_tokens"))
            o = usage.get("completion_tokens", usage.get("output_tokens"))
            best_in = max(best_in, i if isinstance(i, int) else 0)
            best_out = max(best_out, o if isinstance(o, int) else 0)
    return best_in, best_out


def _usage_blocks(document: Any) -> list[dict]:
    if not isinstance(document, dict):
        return []
    blocks = []
    for holder in (document, document.get("message"), document.get("response")):
        if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
            blocks.append(holder["usage"])
    return blocks
