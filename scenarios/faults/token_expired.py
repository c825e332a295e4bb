"""token_expired: the client's access token expired mid-session; answered by the proxy, not forwarded.

401 with `WWW-Authenticate: Bearer error="invalid_token"` and the `resource_metadata` URL of the
MCP authorization spec (RFC 9728's protected resource metadata), the body the official SDK's
bearer middleware sends; on MCP over HTTP and plain HTTP tools alike. The token stays expired:
every later request of the episode with the same Authorization header gets the same 401, until
the client presents another one (it refreshed, or re-authenticated). Over stdio there is no
token: the client gets a JSON-RPC error naming the 401.
"""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind, ParamSpec

KIND = FaultKind(
    name="token_expired",
    description=('401 with `WWW-Authenticate: Bearer error="invalid_token"`, its `error_description` and the '
                 "`resource_metadata` URL of the MCP authorization spec (RFC 9728), and the body the SDK's "
                 "bearer middleware sends; MCP over HTTP and plain HTTP tools alike; the token stays expired: "
                 "later requests with the same `Authorization` get the same 401 until the client presents "
                 "another"),
    params={
        "resource_metadata": ParamSpec("string", None, "the protected resource metadata URL (default: the "
                                       "request's origin + /.well-known/oauth-protected-resource + its path)",
                                       nullable=True),
        "description": ParamSpec("string", "The access token expired", "error_description"),
    },
    forwards=False,
    over_stdio="a JSON-RPC error naming the 401 (a stdio server takes no token)",
    over_mcp_http=('401 with `WWW-Authenticate: Bearer error="invalid_token", error_description=..., '
                   'resource_metadata="<origin>/.well-known/oauth-protected-resource<path>"`; the same token '
                   "keeps getting it"),
    robust_client="refreshes or re-authenticates once (a new token), and does not retry a write blindly",
)
