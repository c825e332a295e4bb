"""Resources read from the trace: the tokens each model used, as the model API reported them
(read by formats.model_answers, as the proxy's live budget and the OpenTelemetry export read them),
and what they cost at the task's prices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from faultproxy.evaluator.traces.traced import TracedExchange, documents
from faultproxy.formats.model_answers import Api, read_usage
from faultproxy.formats.model_apis import LiveApi, api_of_path, request_model


def model_api(ex: TracedExchange) -> Api | None:
    """The model API an exchange talks: a live session's turn its session's, else by its path."""
    if ex.session_kind is not None:
        return LiveApi(ex.raw["session"]["api"]) if ex.is_model else None
    return api_of_path(ex.route)


def model_usage(exchanges: Sequence[TracedExchange], default_model: str | None) -> dict[str, dict[str, int]]:
    """{model: {"input": tokens, "output": tokens}} from the usage each model call's upstream
    answer reported (whole body or SSE events)."""
    usage: dict[str, dict[str, int]] = {}
    for ex in exchanges:
        api = model_api(ex) if ex.upstream_status is not None else None
        if api is None:
            continue
        reported = read_usage(api, documents(ex.raw.get("upstream") or {}))
        if reported is None or not reported.total:
            continue
        slot = usage.setdefault(_model(ex, api) or default_model or "unknown", {"input": 0, "output": 0})
        slot["input"] += reported.input
        slot["output"] += reported.output
    return usage


def _model(ex: TracedExchange, api: Api) -> str | None:
    if isinstance(api, LiveApi):
        return ex.raw["session"].get("model")
    return request_model(api, ex.route, ex.body_json)


def episode_cost(usage: Mapping[str, Mapping[str, int]] | None,
                 prices: Mapping[str, Mapping[str, float]]) -> float | None:
    """Σ over models of input·price_in + output·price_out per million tokens; None when a model
    that used tokens has no price (or there are no prices at all)."""
    if not usage:
        return 0.0 if prices else None
    total = 0.0
    for model, counts in usage.items():
        price = prices.get(model)
        if price is None:
            return None
        total += (counts.get("input", 0) * price.get("input_per_mtok", 0.0)
                  + counts.get("output", 0) * price.get("output_per_mtok", 0.0)) / 1e6
    return total
