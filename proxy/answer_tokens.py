"""The tokens a model call used, for the live token budget and the trace line's `tokens`: its
upstream answer (a JSON body or an event stream) read by formats.model_answers, the reading the
verdict, the report and the OpenTelemetry export use too."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from faultproxy.formats.model_answers import read_usage
from faultproxy.formats.model_apis import api_of_path
from faultproxy.proxy.sse import data_payloads


def tokens_used(path: str, body: bytes | None, events: Iterable[bytes] = ()) -> int:
    """Input plus output tokens the answer to a request for `path` reports; 0 for an answer of
    no model API, or one that reports none."""
    api = api_of_path(path)
    if api is None:
        return 0
    documents = _json_documents(data_payloads(list(events))) if body is None else _json_documents([body])
    usage = read_usage(api, documents)
    return usage.total if usage is not None else 0


def _json_documents(texts: Iterable[str | bytes]) -> Iterator[Any]:
    for text in texts:
        try:
            yield json.loads(text)
        except ValueError:
            continue
