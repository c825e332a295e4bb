"""delay: wait before forwarding, or before the client gets the answer."""

from __future__ import annotations

import asyncio
from typing import Any

from faultproxy.proxy import decide
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, is_streamed_events
from faultproxy.scenarios.faults import delay
from mitmproxy import http


class DelayFault(Fault):
    kind = delay.KIND

    def seconds(self, ex: FlowExchange) -> float:
        """This exchange's delay: fixed, or drawn from a keyed hash (never shared randomness)."""
        return drawn_ms(self.params, self.seed, ex.episode.key, ex.rule.name, ex.seq) / 1000

    async def _wait(self, ex: FlowExchange) -> None:
        seconds = self.seconds(ex)
        await asyncio.sleep(seconds)
        ex.deliver(f"{seconds * 1000:.0f} ms before the {self.params['at']}")

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if self.params["at"] == "request":
            await self._wait(ex)

    async def responseheaders(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        # A streamed body starts flowing right after this hook, so its delay goes here.
        if self.params["at"] == "response" and is_streamed_events(flow):
            await self._wait(ex)

    async def response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if self.params["at"] == "response" and not ex.delivered:
            await self._wait(ex)


def drawn_ms(p: dict[str, Any], seed: str, episode: str, rule: str, index: int) -> float:
    """A delay in ms as `p` (delay's distribution parameters) says: fixed, or drawn from a keyed
    hash of (seed, episode, rule, index)."""
    if p["distribution"] == "fixed":
        ms = p["ms"]
    else:
        u = decide.decision_value(seed, episode, rule, index, stream="delay")
        if p["distribution"] == "uniform":
            ms = decide.uniform(u, p["min_ms"], p["max_ms"])
        else:
            ms = decide.lognormal(u, p["median_ms"], p["sigma"])
    return min(ms, delay.MAX_DELAY_MS)  # a lognormal tail is unbounded; the documented range is not
