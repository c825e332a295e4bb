"""Model API requests: which fields the proxy may set in them, and setting them.

An agent that hard-codes its model or its reasoning effort can still be swept across both: with
`--rewrite FIELD=TEMPLATE` the runner resolves each template for the episode's grid point and the
proxy sets the field in every model API request of the episode, before anything records it.

Each field belongs to the APIs that have it, and is set only in their requests (an Anthropic
request with an OpenAI `reasoning_effort` would be refused as an unknown field):

| field                    | API (path)                              | value                         |
|--------------------------|-----------------------------------------|-------------------------------|
| `model`                  | every model API whose body names one    | the model to ask              |
| `reasoning_effort`       | OpenAI chat completions (`/chat/completions`) | e.g. low, medium, high  |
| `reasoning.effort`       | OpenAI responses (`/responses`)         | e.g. low, medium, high        |
| `thinking.budget_tokens` | Anthropic messages (`/v1/messages`)     | tokens; 0 turns thinking off  |

The Anthropic API counts the thinking budget inside `max_tokens` and refuses a budget that is not
below it, so setting a budget also sets `max_tokens` to the budget plus what the agent left for
its answer: every level of a sweep gets the same room to answer, and only the thinking differs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from faultproxy.formats.model_apis import ModelApi, api_of_path

if TYPE_CHECKING:
    from mitmproxy import http

CHAT, RESPONSES, MESSAGES = ModelApi.OPENAI_CHAT, ModelApi.OPENAI_RESPONSES, ModelApi.ANTHROPIC_MESSAGES


def _set_model(document: dict[str, Any], value: Any) -> None:
    if isinstance(document.get("model"), str):  # a body without one is not ours to complete
        document["model"] = value


def _set_reasoning_effort(document: dict[str, Any], value: Any) -> None:
    document["reasoning_effort"] = value


def _set_responses_effort(document: dict[str, Any], value: Any) -> None:
    reasoning = document.get("reasoning")
    document["reasoning"] = {**(reasoning if isinstance(reasoning, dict) else {}), "effort": value}


def _set_thinking_budget(document: dict[str, Any], budget: int) -> None:
    thinking = document.get("thinking")
    own = thinking.get("budget_tokens") if isinstance(thinking, dict) and thinking.get("type") == "enabled" else 0
    max_tokens = document.get("max_tokens")
    answer = max_tokens - own if isinstance(max_tokens, int) and isinstance(own, int) else None
    if budget == 0:
        document["thinking"] = {"type": "disabled"}
    else:
        document["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if answer is not None:
        document["max_tokens"] = answer + budget


@dataclass(frozen=True)
class RewriteField:
    """A request field `--rewrite` may set: the model APIs that have it, its value type, how to set it."""

    apis: tuple[str, ...]
    kind: type
    apply: Callable[[dict[str, Any], Any], None]
    about: str


FIELDS: dict[str, RewriteField] = {
    "model": RewriteField(tuple(ModelApi), str, _set_model, "the model asked for (every model API)"),
    "reasoning_effort": RewriteField((CHAT,), str, _set_reasoning_effort, "OpenAI chat completions"),
    "reasoning.effort": RewriteField((RESPONSES,), str, _set_responses_effort, "OpenAI responses"),
    "thinking.budget_tokens": RewriteField((MESSAGES,), int, _set_thinking_budget,
                                           "Anthropic messages, tokens (0: thinking off)"),
}


def rewrite_field(name: str) -> RewriteField:
    """The field called `name`; ValueError listing the fields there are when it is none of them."""
    field = FIELDS.get(name)
    if field is None:
        known = ", ".join(f"{n} ({f.about})" for n, f in FIELDS.items())
        raise ValueError(f"{name} is not a field faultproxy rewrites; it rewrites {known}")
    return field


def field_value(name: str, text: str) -> str | int:
    """The value `text` sets field `name` to; ValueError saying why for an unknown field or a
    value of the wrong kind."""
    field = rewrite_field(name)
    if field.kind is int:
        if not (text.isascii() and text.isdigit()):
            raise ValueError(f"{name} must be a whole number of tokens, 0 or more, got {text!r}")
        return int(text)
    if not text:
        raise ValueError(f"{name} must not be empty")
    return text


def rewrite_request(request: http.Request, values: Mapping[str, str | int]) -> None:
    """Set each field of `values` (resolved: field -> value) in `request` if it is a model API
    call whose API has that field; anything else is left as it was."""
    api = api_of_path(request.path)
    fields = [(FIELDS[name], value) for name, value in values.items() if api in FIELDS[name].apis]
    if request.method != "POST" or not fields:
        return
    try:
        document = json.loads(request.get_content(strict=False) or b"")
    except ValueError:
        return
    if not isinstance(document, dict):
        return
    before = dict(document)
    for field, value in fields:
        field.apply(document, value)
    if document != before:
        request.content = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
