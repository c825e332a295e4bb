"""token_expired: 401 invalid_token with the resource metadata URL, as a protected MCP server answers;
the token stays expired for the rest of the episode (proxy.faults.lingering)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, answer
from faultproxy.proxy.faults.lingering import Answer, expire_token
from faultproxy.scenarios.faults import token_expired
from mitmproxy import http

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def resource_metadata_url(url: str) -> str:
    """RFC 9728 §3.1: the well-known path inserted between the resource's origin and its path."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{WELL_KNOWN}{parts.path.rstrip('/')}"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class TokenExpiredFault(Fault):
    kind = token_expired.KIND

    def _answer(self, url: str) -> Answer:
        metadata = self.params["resource_metadata"] or resource_metadata_url(url)
        description = self.params["description"]
        challenge = (f"Bearer error=\"invalid_token\", error_description={_quoted(description)}, "
                     f"resource_metadata={_quoted(metadata)}")
        body = json.dumps({"error": "invalid_token", "error_description": description}).encode()
        return 401, {"content-type": "application/json", "www-authenticate": challenge}, body

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        expired = self._answer(ex.url)
        held = expire_token(flow, ex, expired)
        answer(flow, ex, *expired)
        ex.deliver("401 invalid_token" + ("; the token stays expired" if held else " (no token on the request)"))
