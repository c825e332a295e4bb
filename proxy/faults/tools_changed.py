"""tools_changed: the server's tools change just before the matching call (proxy.faults.lingering
keeps the change for the rest of the episode)."""

from __future__ import annotations

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, answer
from faultproxy.proxy.faults.lingering import change_tool, fit_to_server, unfit_call, unknown_tool
from faultproxy.scenarios.faults import tools_changed
from faultproxy.scenarios.scenario_model import value_at
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
        change, ops = self.params["change"], self.params["ops"]
        renamed = (self.params["to"] or f"{tool}_v2") if change == "rename" else None
        change_tool(ex, tool, renamed, ops)
        what = {"rename": f"{tool} renamed {renamed}", "remove": f"{tool} removed"}.get(change, f"{tool}'s schema changed")
        if called != tool:
            ex.detail = f"{what}; this call names {called}, and went on"
            return
        streamed = self.params["notify"] and "text/event-stream" in flow.request.headers.get("accept", "")
        got = unknown_tool(ex, tool, notify=streamed) if change != "schema" else unfit_call(ex, tool, ops, streamed)
        if got is None:  # its arguments fit the new schema (or no listing gave the old one)
            fit_to_server(flow, ex, ops)
            ex.detail = f"{what}; this call fits it (or no listing gave its schema), and went on"
            return
        answer(flow, ex, *got)
        result = "the unknown-tool result" if change != "schema" else "the invalid-arguments result"
        ex.deliver(f"{what}; the call got {result}" + (" after list_changed" if streamed else ""))
