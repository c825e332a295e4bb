"""Maybe committed: a request that reached its upstream but whose outcome the client could not
know. One definition, used by the idempotency check, the effects check and the failure clusters.

A request the proxy forwarded (the trace's `forwarded`) and that did not come back as a commit
may still have taken effect: a gateway that timed out after the server committed answers 504, a
connection reset after the server wrote its row tells the client nothing, an MCP server that
reports an error (an `isError` result, a JSON-RPC error such as -32800) may have done part or all
of the call first, and so may a server that answered 200 and then broke its answer off, or ended
the event stream of a JSON-RPC call before the answer with the call's id (the client learnt
nothing; evaluator.traces.traced's `unanswered`). Retrying such a request blind (no idempotency
key, or a fresh one) can commit it twice, whether or not the first commit shows in the trace.

AMBIGUOUS_OUTCOMES is the list of those outcomes, as data: each entry names the outcome and says
whether a traced exchange has it. Nothing not forwarded is ever ambiguous (the proxy answered it
itself: the upstream never saw it), nor anything committed. A new ambiguous outcome (a 404 that
ends an MCP session after the call went through, a 401 for a token that expired mid-call) is one
more entry; the checks that call `ambiguous_outcome` need no change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Client outcomes (the trace's client.outcome) that leave the client without the upstream's answer.
NO_ANSWER_OUTCOMES = frozenset({"reset", "error", "cut", "client_gone"})
# Upstream statuses that say "something went wrong on the way", not "refused": request timeout
# and every server error (a gateway's 502/503/504 come after it forwarded, or may have).
AMBIGUOUS_STATUSES = frozenset({408, *range(500, 600)})
# JSON-RPC errors that say the call was refused before it ran (unparseable, not a request,
# unknown method, bad parameters): not ambiguous. Any other error to a forwarded call is.
REFUSED_RPC_ERRORS = frozenset({-32700, -32600, -32601, -32602})


@dataclass(frozen=True)
class AmbiguousOutcome:
    """One kind of ambiguous outcome: `describe(ex)` says how it went ("answered 504"), or None
    when `ex` did not end that way."""

    name: str
    describe: Callable[[Any], str | None]


def _no_answer(ex: Any) -> str | None:
    if ex.upstream_status is not None:
        return None
    if ex.client_outcome in NO_ANSWER_OUTCOMES or ex.error is not None:
        return "no answer recorded"
    return None


def _ambiguous_status(ex: Any) -> str | None:
    return f"answered {ex.upstream_status}" if ex.upstream_status in AMBIGUOUS_STATUSES else None


def _unanswered(ex: Any) -> str | None:
    return f"answered {ex.upstream_status}, but {ex.unanswered}" if ex.unanswered else None


def _mcp_error(ex: Any) -> str | None:
    if ex.mcp_tool is None or not ex.rpc_failed:
        return None
    error = (ex.rpc_answer or {}).get("error")
    if isinstance(error, dict):
        code = error.get("code")
        return None if code in REFUSED_RPC_ERRORS else f"answered JSON-RPC error {code}"
    return "answered an isError result"


AMBIGUOUS_OUTCOMES: tuple[AmbiguousOutcome, ...] = (
    AmbiguousOutcome("no_answer", _no_answer),  # reset, cut, timed out, the client gone first
    AmbiguousOutcome("server_error", _ambiguous_status),  # 408 and 5xx from the upstream (a gateway's 504)
    AmbiguousOutcome("unanswered", _unanswered),  # a 2xx whose body or event stream ended before the answer
    AmbiguousOutcome("mcp_error", _mcp_error),  # isError, or a JSON-RPC error other than a refusal
)


def ambiguous_outcome(ex: Any) -> str | None:
    """How a forwarded, uncommitted request ended in a way that leaves its commit unknown
    ("answered 504", "no answer recorded", ...), or None: committed, never forwarded, or refused."""
    if not ex.forwarded or ex.committed:
        return None
    for outcome in AMBIGUOUS_OUTCOMES:
        described = outcome.describe(ex)
        if described is not None:
            return described
    return None
