"""Does a rule's match block select this request? The proxy asks it of every request, and the
evaluator of traced ones (injection_followed: did the agent send what a planted instruction asked).

A body nested too deeply for the JSON parser (about a thousand levels: Python's recursion limit)
cannot be evaluated. Then a rule's body predicates are not evaluated at all: the rule selects
the request on its other predicates (method, host, path, headers), a warning
(`body_not_evaluated`) is logged, and the exchange's trace line carries `body_not_evaluated` with
the reason (proxy.exchange). So a hostile body cannot hide a request from the faults that
would otherwise match it; what a rule may select is only ever widened, by its body predicates.
The same holds for `stream:`, which the APIs other than Gemini say in the body.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import structlog
from faultproxy.formats.model_apis import ModelApi, detect_api, is_model_call, is_streamed
from faultproxy.formats.request_kinds import CLIENT_ONLY_METHODS, Kind
from faultproxy.scenarios.scenario_model import BodyPredicate, MatchSpec, TextPattern

log = structlog.get_logger("faultproxy.match")

NO_BODY = object()
UNREADABLE_BODY = object()  # JSON nested too deeply to parse: body predicates are not evaluated
UNREADABLE_REASON = "JSON nested too deeply to parse"


def parse_json_body(raw: bytes | None) -> Any:
    """The request body as JSON, NO_BODY (none, or not JSON; body predicates never match it), or
    UNREADABLE_BODY (too deeply nested to parse; body predicates are skipped)."""
    if not raw:
        return NO_BODY
    try:
        return json.loads(raw)
    except ValueError:
        return NO_BODY
    except RecursionError:
        return UNREADABLE_BODY


def request_matches(
    spec: MatchSpec, method: str, host: str, port: int, path: str, headers: Mapping[str, str],
    body_json: Callable[[], Any], kinds: Callable[[], frozenset[Kind]] | None = None,
) -> bool:
    """`body_json()` gives the parsed body; it is called only when a body predicate needs it,
    as parsing a model request (the whole conversation) costs more than all the other checks.
    `kinds()` gives what the request is (tasks.request_class), asked only of a rule with `kind:`;
    without it such a rule matches nothing."""
    if spec.methods and method.upper() not in spec.methods:
        return False
    if spec.host and not (spec.host.matches(host) or spec.host.matches(f"{host}:{port}")):
        return False
    if spec.path and not spec.path.matches(path.split("?", 1)[0]):
        return False
    for name, pattern in spec.headers.items():
        value = headers.get(name)
        if value is None or not pattern.matches(value):
            return False
    if spec.kinds is not None and (kinds is None or not spec.kinds & kinds()):
        return False
    api = None
    if spec.apis is not None:
        api = detect_api(host, path, headers)
        if api not in spec.apis:
            return False
    # Gemini asks for a stream in its path; the others in the body, which costs a parse.
    needs_body = bool(spec.body) or (spec.stream is not None and api is not ModelApi.GEMINI)
    if not needs_body:
        return spec.stream is None or is_streamed(api, path, None) == spec.stream
    body = body_json()
    if body is UNREADABLE_BODY:
        log.warning("body_not_evaluated", reason=UNREADABLE_REASON, method=method, host=host,
                    path=path.split("?", 1)[0])
        return True
    if spec.stream is not None and is_streamed(api, path, body) != spec.stream:
        return False
    return not spec.body or (body is not NO_BODY and all(predicate.matches(body) for predicate in spec.body))


_SERVER_MESSAGE_HEADERS = {"content-type": "application/json"}  # a server's message's, as it passes the proxy


def may_select_server_messages(spec: MatchSpec, host: str, port: int, path: str) -> bool:
    """Could this match select a message an MCP server sends on an event stream from this URL?
    Such a message passes the proxy as a POST to the URL with the JSON-RPC message as its body
    (proxy.mcp_http), so body predicates are unknown until it comes: True unless the rule
    certainly cannot select it. Its kind is MCP plumbing (formats.request_kinds), never a tool
    call, a read or a write; its method is never one only a client sends."""
    if spec.websocket is not None:
        return False
    if spec.kinds is not None and not (Kind.MODEL in spec.kinds and is_model_call(path)):
        return False
    if any(_names_client_methods_only(predicate) for predicate in spec.body):
        return False
    return request_matches(replace(spec, body=(), kinds=None, stream=None), "POST", host, port, path,
                           _SERVER_MESSAGE_HEADERS, lambda: NO_BODY)


def _names_client_methods_only(predicate: BodyPredicate) -> bool:
    """Does this predicate ask for a JSON-RPC method only a client sends (literal names only)?"""
    if predicate.path != ("method",):
        return False
    options = predicate.expected if isinstance(predicate.expected, tuple) else (predicate.expected,)
    return all(isinstance(option, TextPattern) and option.source in CLIENT_ONLY_METHODS for option in options)
