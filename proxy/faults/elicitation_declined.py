"""elicitation_declined: answer a server's elicitation/create as a user who says no, in the
client's place (the request never reaches the client)."""

from __future__ import annotations

from faultproxy.proxy import responses
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, answer
from faultproxy.scenarios.faults import elicitation_declined
from mitmproxy import http


class ElicitationDeclinedFault(Fault):
    kind = elicitation_declined.KIND

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        request_json = ex.body_json()
        rpc_id = request_json.get("id") if isinstance(request_json, dict) else None
        answer(flow, ex, 200, {"content-type": "application/json"},
               responses.jsonrpc_result(rpc_id, {"action": self.params["action"]}))
        ex.deliver(self.params["action"])
