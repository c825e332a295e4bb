"""server_exit: the server dies mid-session; the shim (proxy/stdio) kills a stdio server on the
proxy's word, a header on the answer it gets instead of the server's."""

from __future__ import annotations

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, answer
from faultproxy.scenarios.faults import server_exit
from mitmproxy import http

SERVER_EXIT_HEADER = "x-faultproxy-server-exit"


class ServerExitFault(Fault):
    kind = server_exit.KIND

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if self.params["when"] == "before":
            self._die(flow, ex, "the server died as the call arrived; it never ran")

    async def response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if self.params["when"] == "after" and ex.upstream is not None:
            self._die(flow, ex, f"the server answered {ex.upstream['status']}, then died before the client heard")

    def _die(self, flow: http.HTTPFlow, ex: FlowExchange, detail: str) -> None:
        headers = {"content-type": "text/plain", SERVER_EXIT_HEADER: self.params["when"]}
        answer(flow, ex, 502, headers, f"faultproxy: server_exit: {detail}\n".encode())
        ex.deliver(detail)
