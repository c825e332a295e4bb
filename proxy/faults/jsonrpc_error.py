"""jsonrpc_error: answer a JSON-RPC request (MCP over HTTP) with an error or an isError tool result."""

from __future__ import annotations

from faultproxy.proxy import responses
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, answer
from faultproxy.scenarios.faults import jsonrpc_error
from mitmproxy import http


class JsonRpcErrorFault(Fault):
    kind = jsonrpc_error.KIND

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        request_json = ex.body_json()
        rpc_id = request_json.get("id") if isinstance(request_json, dict) else None
        if self.params["mode"] == "tool_error":
            body = responses.jsonrpc_tool_error(rpc_id, self.params["message"])
        else:
            body = responses.jsonrpc_error(rpc_id, self.params["code"], self.params["message"])
        answer(flow, ex, 200, {"content-type": "application/json"}, body)
        ex.deliver(self.params["mode"])
