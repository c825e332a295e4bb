"""duplicate_delivery: the request reaches the server twice, as through an at-least-once gateway;
the client gets the first answer only.

Once the upstream answered, the proxy sends the same request again (`delay_ms` later) and keeps
the second answer in the trace line's `fault.duplicate`. It tests the server, not the agent: the
`effects` check counts what the agent sent apart from what the harness duplicated, and fails
"the server committed a duplicate delivery" when the duplicate's answer shows a commit of its own
(another resource than the first answer's, or a success naming none); never `idempotency`.
Over stdio the request is not duplicated (the fault is recorded as not delivered, saying so).
"""

from __future__ import annotations

from faultproxy.scenarios.faults.base import MAX_DELAY_MS, FaultKind, ParamSpec

KIND = FaultKind(
    name="duplicate_delivery",
    description=("the request reaches the upstream twice, as through an at-least-once gateway: once the first "
                 "answer is in, the proxy sends the same request again (`delay_ms` later) and the client gets "
                 "the first answer only (below)"),
    params={
        "delay_ms": ParamSpec("integer", 0, "milliseconds between the first answer and the duplicate",
                              minimum=0, maximum=MAX_DELAY_MS),
    },
    forwards=True,
    over_stdio="nothing: a stdio server's messages are not duplicated (recorded as not delivered, saying so)",
    over_mcp_http=("one answer, the first; the server got the call twice (the second answer is in the trace's "
                   "`fault.duplicate`)"),
    robust_client=("nothing to do on the client's side: it tests the server, whose commit of the duplicate fails "
                   "`effects` (\"the server committed a duplicate delivery\"), never the agent's `idempotency`"),
)
