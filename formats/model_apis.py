"""The model APIs faultproxy knows, and which one a request talks to.

Every layer that needs to know "is this a model call, and of which API" asks here: the proxy
(provider-shaped faults answer in the shape of the API they hit), the evaluator (model calls,
tool calls, usage), the OpenTelemetry export (operation and provider names) and the bundled
scenarios' tests. The shapes of each API's bodies and streams live with the code that writes
them (`proxy/shapes/`); this module only names the APIs and tells them apart.

Detection looks at the path first, so local and proxied endpoints (a model server on
127.0.0.1, a gateway under another host) are recognised; the provider's own host and headers
decide where the path alone does not. A rule or fault may name the API outright (`provider:`).

| API                  | path (any prefix)                                 | host / header hint                       |
|----------------------|---------------------------------------------------|------------------------------------------|
| `openai_chat`        | `/chat/completions`                               | `api.openai.com`                         |
| `openai_responses`   | `/responses`                                      | `api.openai.com`                         |
| `anthropic_messages` | `/v1/messages`                                    | `api.anthropic.com`, `anthropic-version` |
| `gemini`             | `/models/M:generateContent`, `:streamGenerateContent` | `*.googleapis.com`, `x-goog-api-key` |

Live APIs talk over a WebSocket: `openai_realtime` (`.../realtime`) and `gemini_live`
(`...BidiGenerateContent`); the events of theirs the evaluator reads are named at the end of
this module.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qs, urlsplit


class ModelApi(StrEnum):
    OPENAI_CHAT = "openai_chat"
    OPENAI_RESPONSES = "openai_responses"
    ANTHROPIC_MESSAGES = "anthropic_messages"
    GEMINI = "gemini"


class LiveApi(StrEnum):
    """The WebSocket model APIs whose events a message fault imitates."""

    OPENAI_REALTIME = "openai_realtime"
    GEMINI_LIVE = "gemini_live"


def live_api_of(path: str) -> LiveApi:
    """The live API a WebSocket session talks, from its upgrade path: Gemini Live's
    `...BidiGenerateContent`, else OpenAI Realtime (`/v1/realtime`, and the shape assumed for
    any other session)."""
    return LiveApi.GEMINI_LIVE if "BidiGenerateContent" in _route(path) else LiveApi.OPENAI_REALTIME


# Who serves each API: the `provider:` value a fault takes, and the family of error bodies.
PROVIDER: Mapping[ModelApi, str] = {
    ModelApi.OPENAI_CHAT: "openai",
    ModelApi.OPENAI_RESPONSES: "openai",
    ModelApi.ANTHROPIC_MESSAGES: "anthropic",
    ModelApi.GEMINI: "gemini",
}
PROVIDERS = ("openai", "anthropic", "gemini", "generic")

# A request path of each API as clients send it (Gemini's streamed and not): what a rule's path
# pattern is tried against to tell which APIs it can reach (`faultproxy check`).
EXAMPLE_PATHS: Mapping[ModelApi, tuple[str, ...]] = {
    ModelApi.OPENAI_CHAT: ("/v1/chat/completions",),
    ModelApi.OPENAI_RESPONSES: ("/v1/responses",),
    ModelApi.ANTHROPIC_MESSAGES: ("/v1/messages",),
    ModelApi.GEMINI: ("/v1beta/models/gemini-2.5-flash:generateContent",
                      "/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
}

_GEMINI_METHOD = re.compile(r"/models/(?P<model>[^/:]+):(?P<method>streamGenerateContent|generateContent)$")
_SUFFIXES: tuple[tuple[str, ModelApi], ...] = (
    ("/chat/completions", ModelApi.OPENAI_CHAT),
    ("/responses", ModelApi.OPENAI_RESPONSES),
    ("/v1/messages", ModelApi.ANTHROPIC_MESSAGES),
)


def _route(path: str) -> str:
    return path.split("?", 1)[0].rstrip("/")


def api_of_path(path: str) -> ModelApi | None:
    """The model API a request path belongs to, from the path alone; None for any other path."""
    route = _route(path)
    for suffix, api in _SUFFIXES:
        if route.endswith(suffix):
            return api
    if _GEMINI_METHOD.search(route):
        return ModelApi.GEMINI
    return None


def detect_api(host: str, path: str, headers: Mapping[str, str] | None = None) -> ModelApi | None:
    """The model API a request talks to: by path, then by the provider's host or headers for a
    path that could be either of one provider's APIs. None when it is no model call."""
    api = api_of_path(path)
    if api is not None:
        return api
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    route = _route(path)
    if ("anthropic" in host or "anthropic-version" in headers) and route.endswith("/messages"):
        return ModelApi.ANTHROPIC_MESSAGES
    return None


def provider_of(host: str, path: str, headers: Mapping[str, str] | None = None) -> str:
    """The provider whose error bodies a request expects: the API's provider if it is a model
    call, else a hint from the host or headers (a provider's other endpoints), else generic."""
    api = detect_api(host, path, headers)
    if api is not None:
        return PROVIDER[api]
    lowered = {k.lower() for k in (headers or {})}
    if "anthropic" in host or "anthropic-version" in lowered:
        return "anthropic"
    if "googleapis.com" in host or "x-goog-api-key" in lowered:
        return "gemini"
    if "openai" in host or any(p in path for p in ("/embeddings", "/completions")):
        return "openai"
    return "generic"


def is_model_call(path: str) -> bool:
    return api_of_path(path) is not None


def is_streamed(api: ModelApi, path: str, body: Any) -> bool:
    """Does this request ask for a streamed answer? Gemini says so in the path, the others in
    the body's `stream` field."""
    if api is ModelApi.GEMINI:
        return ":streamGenerateContent" in path
    return isinstance(body, dict) and body.get("stream") is True


def request_model(api: ModelApi, path: str, body: Any) -> str | None:
    """The model a request asks for: in the body, or in the path for Gemini."""
    if api is ModelApi.GEMINI:
        match = _GEMINI_METHOD.search(_route(path))
        return match.group("model") if match else None
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None


# ---------------------------------------------------------------- live (WebSocket) sessions
#
# The events of a live session that the evaluator reads, per API (the message shapes; what a
# message fault injects is in proxy/faults/ws_inject.py):
#
# | API               | a turn starts (client)                        | a turn ends (server)                 |
# |-------------------|-----------------------------------------------|--------------------------------------|
# | `openai_realtime` | `response.create`                             | `response.done`                      |
# | `gemini_live`     | `clientContent` with `turnComplete`, `toolResponse` | `serverContent.turnComplete`, `toolCall` |
#
# A server with voice activity detection starts a turn itself, no client event asking for it
# (OpenAI's server VAD answers a committed audio buffer, Gemini answers streamed `realtimeInput`):
# such a turn starts at OpenAI's `response.created`, Gemini's first `serverContent` or `toolCall`.
#
# A function call: OpenAI Realtime `response.function_call_arguments.done` {call_id, name,
# arguments} and `response.output_item.done` with a `function_call` item (the same call twice,
# told apart by call_id); Gemini Live `toolCall.functionCalls[]` {id, name, args}. Its result,
# from the client: OpenAI `conversation.item.create` with a `function_call_output` item {call_id,
# output}; Gemini `toolResponse.functionResponses[]` {id, name, response}. Gemini's top-level
# fields may come in snake_case too (`client_content`, `tool_response`: google-genai sends those).


@dataclass(frozen=True)
class LiveFunctionCall:
    call_id: str
    name: str
    arguments: str  # JSON text, as the model wrote it (Gemini's args object is serialised)


def live_api_of_session(path: str) -> LiveApi | None:
    """The live model API a WebSocket upgrade path names (`.../realtime`, `...BidiGenerateContent`);
    None for a session of anything else (a tool server's events)."""
    route = _route(path)
    if "BidiGenerateContent" in route:
        return LiveApi.GEMINI_LIVE
    return LiveApi.OPENAI_REALTIME if route.endswith("/realtime") else None


# who sends it -> (Gemini's holder of `turnComplete`, Gemini's event that is a turn edge too, OpenAI's type)
_TURN_EDGES = {"client": ("clientContent", "toolResponse", "response.create"),
               "server": ("serverContent", "toolCall", "response.done")}
_SNAKE = re.compile(r"(?<=[a-z])(?=[A-Z])")


def _gemini_field(event: Mapping[str, Any], name: str) -> Any:
    """A Gemini Live message's top-level field, in either spelling proto JSON accepts: Google's
    docs and server write `clientContent`, google-genai's live client sends `client_content`."""
    return event[name] if name in event else event.get(_SNAKE.sub("_", name).lower())


def live_turn_edge(api: LiveApi, event: Any, sender: str) -> bool:
    """Does this event start a model turn (sent by the client) or end one (by the server)?"""
    if not isinstance(event, dict):
        return False
    holder, other, openai_type = _TURN_EDGES[sender]
    if api is LiveApi.GEMINI_LIVE:
        content = _gemini_field(event, holder)
        return _gemini_field(event, other) is not None or (isinstance(content, dict)
                                                            and content.get("turnComplete") is True)
    return event.get("type") == openai_type


def live_server_start(api: LiveApi, event: Any) -> bool:
    """Can this server event start a turn, when no client event started one (voice activity detection)?"""
    if not isinstance(event, dict):
        return False
    if api is LiveApi.GEMINI_LIVE:
        return _gemini_field(event, "serverContent") is not None or _gemini_field(event, "toolCall") is not None
    return event.get("type") == "response.created"


def live_function_calls(api: LiveApi, event: Any) -> list[LiveFunctionCall]:
    """The function calls a server event carries (an OpenAI call may come twice: same call_id)."""
    if not isinstance(event, dict):
        return []
    if api is LiveApi.GEMINI_LIVE:
        call = _gemini_field(event, "toolCall")
        calls = call.get("functionCalls") if isinstance(call, dict) else None
        return [LiveFunctionCall(str(c.get("id") or c.get("name")), str(c.get("name") or ""),
                                 json.dumps(c.get("args") or {}, separators=(",", ":")))
                for c in calls or () if isinstance(c, dict)]
    if event.get("type") == "response.function_call_arguments.done":
        call = event
    elif event.get("type") == "response.output_item.done" and isinstance(event.get("item"), dict) \
            and event["item"].get("type") == "function_call":
        call = event["item"]
    else:
        return []
    return [LiveFunctionCall(str(call.get("call_id") or ""), str(call.get("name") or ""), str(call.get("arguments") or ""))]


def live_function_outputs(api: LiveApi, event: Any) -> list[tuple[str, Any]]:
    """(call_id, output) for each function result a client event sends back to the model."""
    if not isinstance(event, dict):
        return []
    if api is LiveApi.GEMINI_LIVE:
        response = _gemini_field(event, "toolResponse")
        answers = response.get("functionResponses") if isinstance(response, dict) else None
        return [(str(a.get("id") or a.get("name")), a.get("response")) for a in answers or () if isinstance(a, dict)]
    item = event.get("item") if event.get("type") == "conversation.item.create" else None
    if isinstance(item, dict) and item.get("type") == "function_call_output":
        return [(str(item.get("call_id") or ""), item.get("output"))]
    return []


def live_model(api: LiveApi, url: str, events: Iterable[Any]) -> str | None:
    """The model a live session says it talks to: a session event's (Gemini's `setup.model`, its
    `models/` prefix left out; a Realtime `session.update` or `session.created`'s `session.model`),
    else the `model` of a Realtime upgrade URL's query (the openai SDK puts it there)."""
    for event in events:
        if not isinstance(event, dict):
            continue
        if api is LiveApi.GEMINI_LIVE:
            model = (event.get("setup") or {}).get("model") if isinstance(event.get("setup"), dict) else None
        elif event.get("type") in ("session.update", "session.created") and isinstance(event.get("session"), dict):
            model = event["session"].get("model")
        else:
            model = None
        if isinstance(model, str) and model:
            return model.removeprefix("models/")
    found = parse_qs(urlsplit(url).query).get("model") if api is LiveApi.OPENAI_REALTIME else None
    return found[0] if found else None
