"""jsonrpc_error: for JSON-RPC over HTTP (MCP), an error or an isError tool result; not forwarded."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind, ParamSpec

KIND = FaultKind(
    name="jsonrpc_error",
    description="for JSON-RPC (MCP over HTTP or stdio): an error, or a tool result with `isError: true`",
    params={
        "mode": ParamSpec("string", "error", "JSON-RPC error object or MCP tool result with isError",
                          choices=("error", "tool_error")),
        "code": ParamSpec("integer", -32603, "JSON-RPC error code (a 32-bit integer)",
                          minimum=-2**31, maximum=2**31 - 1),
        "message": ParamSpec("string", "Internal error", "error message"),
    },
    forwards=False,
    over_stdio="the error response, or a result with `isError: true`; the server never sees the call",
)
