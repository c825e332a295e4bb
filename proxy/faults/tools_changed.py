"""tools_changed: the server's tools change just before the matching call (proxy.faults.lingering
keeps the change for the rest of the episode)."""

from __future__ import annotations

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, answer
from faultproxy.proxy.faults.lingering import change_tool, unknown_tool
from faultproxy.scenarios.faults import tools_changed
from faultproxy.scenarios.model import value_at
from mitmproxy import http


class ToolsChangedFault(Fault):
    kind = tools_changed.KIND

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        called = value_at(ex.body_json(), ("params", "name"))
        called = called if isinstance(called, str) else None
        tool = self.params["tool"] or called
        if tool is None:
            ex.detail = "no tool changed: the request names none and the rule's `tool` is not set"
            return
        renamed = (self.params["to"] or f"{tool}_v2") if self.params["change"] == "rename" else None
        change_tool(ex, tool, renamed)
        what = f"{tool} renamed {renamed}" if renamed else f"{tool} removed"
        if called != tool:
            ex.detail = f"{what}; this call names {called}, and went on"
            return
        streamed = self.params["notify"] and "text/event-stream" in flow.request.headers.get("accept", "")
        answer(flow, ex, *unknown_tool(ex, tool, notify=streamed))
        ex.deliver(f"{what}; the call got the unknown-tool result" + (" after list_changed" if streamed else ""))
