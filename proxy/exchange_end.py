"""How an exchange ended: still waiting for its upstream, left by its client, or failed on the
proxy's own way to the upstream (an `infra_error` in its trace line), and the headers it recorded."""

from __future__ import annotations

import time

from faultproxy.formats.trace import trace_time
from faultproxy.proxy.exchange import FlowExchange
from mitmproxy import flow as flow_module
from mitmproxy import http

CLIENT_GONE_ERROR = "Client disconnected"  # mitmproxy's message when the client closed first


def header_pairs(headers: http.Headers) -> list[tuple[str, str]]:
    """Headers as sent, repeated ones kept apart (cheaper than .items(), which folds them)."""
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers.fields]


def awaits_upstream(ex: FlowExchange) -> bool:
    """Whether the exchange was forwarded and its upstream has neither answered nor failed yet."""
    return ex.forwarded and ex.upstream is None and ex.error is None and not ex.written


def client_left(ex: FlowExchange) -> None:
    """The client closed its connection first (mitmproxy then abandons the upstream request)."""
    ex.outcome, ex.gone_after_s = "client_gone", trace_time(time.time() - ex.started)
    if ex.forwarded and ex.upstream is None:
        ex.cut_short = "the client left before the upstream answered; the answer was not awaited"


def infrastructure_error(ex: FlowExchange) -> str | None:
    """The reason, when an exchange's error is the proxy's own failure to reach or hear the
    upstream (refused, DNS, TLS verification, a reset) rather than a fault's doing or the
    client's leaving. An upstream that answered and then broke its answer off is heard: what
    the agent does next is judged (the commit is unknown: evaluator.traces.ambiguity)."""
    message = ex.error or ""
    if not ex.forwarded or ex.outcome != "error" or not message or ex.upstream is not None:
        return None
    if message == flow_module.Error.KILLED_MESSAGE or message.startswith(CLIENT_GONE_ERROR):
        return None
    return message
