"""Model API calls: which requests are ones, and asking another model (sweeps across models).

An agent that hard-codes its model can still be swept across models: with `--rewrite-model`
the proxy sets the `model` field of each model API request to the episode's model.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from faultproxy.formats.trace import is_model_call

if TYPE_CHECKING:
    from mitmproxy import http

def rewrite_model(request: http.Request, model: str) -> str | None:
    """Ask `model` instead: returns the model the request named, None when it is not a model
    API call with a `model` field (then it is left as it was)."""
    if request.method != "POST" or not is_model_call(request.path):
        return None
    try:
        document = json.loads(request.get_content(strict=False) or b"")
    except ValueError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("model"), str):
        return None
    asked, document["model"] = document["model"], model
    if asked != model:
        request.content = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
    return asked
