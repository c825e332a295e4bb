"""Does a rule's match block select this request?"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from faultproxy.scenarios import MatchSpec

NO_BODY = object()


def parse_json_body(raw: bytes | None) -> Any:
    """The request body as JSON, or NO_BODY; body predicates never match NO_BODY."""
    if not raw:
        return NO_BODY
    try:
        return json.loads(raw)
    except ValueError:
        return NO_BODY


def request_matches(
    spec: MatchSpec, method: str, host: str, port: int, path: str, headers: Mapping[str, str],
    body_json: Callable[[], Any],
) -> bool:
    """`body_json()` gives the parsed body; it is called only when a body predicate needs it,
    as parsing a model request (the whole conversation) costs more than all the other checks."""
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
    if not spec.body:
        return True
    body = body_json()
    return body is not NO_BODY and all(predicate.matches(body) for predicate in spec.body)
