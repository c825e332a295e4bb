"""Which resource a commit made: read from the upstream's answer, wherever the user's API puts it.

Two commits of one request that carried the same idempotency key are one effect when their
answers name the same resource: the upstream evidently deduplicated. The resource is, in order:

1. the declared id: an irreversible pattern's `id`, a dotted path into the answer's JSON
   (`irreversible: [{pattern: "POST */cancel", id: "cancellation_id"}]`);
2. else every id-like field in the usual places: `id` and `*_id` keys at the top of the answer
   or one level down (`{"refund": {"id": ...}}`), volatile ones (request_id, trace_id, ...:
   evaluator.traces.identity) left out. All of them, so that `{"refund_id": "rf_2", "order_id": "1001"}`
   is not the same resource as rf_1 for sharing its order;
3. else the answer itself (canonical JSON, volatile keys left out; the raw text when it is not
   JSON; empty when there is no body): the same key with the same answer is one commit, and two
   answers without an id are never two resources just for having none.

For an MCP tool call the answer is the JSON of its result's text content.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from faultproxy.evaluator.traces.identity import canonical_body, is_volatile

_SCALARS = (str, int, float)


def resource_of(documents: Sequence[Any], body: str | None, id_path: str | None = None) -> str:
    """The resource an answer names (see the module docstring), as a short readable string:
    the id, "key=value ..." for several id fields, or "answer <digest>"."""
    if id_path:
        for document in documents:
            value = _at(document, id_path.split("."))
            if isinstance(value, _SCALARS) and not isinstance(value, bool):
                return str(value)
    ids = sorted({pair for document in documents for pair in _usual_ids(document)})
    if len(ids) == 1:
        return ids[0][1]
    if ids:
        return " ".join(f"{name}={value}" for name, value in ids)
    text = canonical_body(json.dumps(documents).encode()) if documents else (body or "")
    return "answer " + hashlib.sha256(text.encode()).hexdigest()[:12]


def _at(document: Any, keys: list[str]) -> Any:
    for key in keys:
        if isinstance(document, dict):
            document = document.get(key)
        elif isinstance(document, list) and key.isdigit() and int(key) < len(document):
            document = document[int(key)]
        else:
            return None
    return document


def _usual_ids(document: Any) -> list[tuple[str, str]]:
    """(dotted name, value) of the id-like fields at the top of a JSON object and one level down."""
    if not isinstance(document, dict):
        return []
    found = []
    for name, value in document.items():
        if _id_like(name, value):
            found.append((name, str(value)))
        elif isinstance(value, dict):
            found += [(f"{name}.{inner}", str(v)) for inner, v in value.items() if _id_like(inner, v)]
    return found


def _id_like(name: str, value: Any) -> bool:
    return ((name == "id" or name.endswith("_id")) and isinstance(value, _SCALARS)
            and not isinstance(value, bool) and not is_volatile(name))
