"""The fault types: one module each, holding everything there is to know about the fault as data.

Each module here defines `KIND`, a FaultKind: the fault's name, its one-line description, its
parameters (types, defaults, documented ranges, what each does), whether the request still reaches
the upstream once the fault is delivered, whether the proxy must remember reads for it, how a
failure cause names an agent's answer to it, what an MCP client sees over stdio or HTTP, and its
rules across parameters. The scenario loader validates `fault:` blocks against these (file, line
and field in every error), the evaluator and the replay store read old traces and explain failures
with them, `docs_table` writes the docs' fault tables from them, and nothing else keeps a list of
fault names or compares with one (a test holds the product to it).

The behaviour lives one layer up, in `faultproxy.proxy.faults.<name>`: a class ending in `Fault`
whose `kind` is this module's KIND. The split follows the layers — this package sits below the
proxy (it cannot import mitmproxy or the proxy) so `faultproxy check` validates a scenario with
no proxy at all. `faultproxy.proxy.faults` lists the classes in this catalogue's order and pairs
every kind with exactly one class when it is imported, refusing to load otherwise; tests pin the
pairing both ways.

Adding a fault: its KIND in a module here and a line in the catalogue below (which fixes the
order in which docs and error messages list the types); its class in a module of
`proxy/faults/` and a line in that package's list, at the same place; `make docs`; a test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faultproxy.scenarios.faults import (
    auth_failure,
    delay,
    duplicate_delivery,
    elicitation_declined,
    empty_response,
    jsonrpc_error,
    malformed_tool_call,
    partial_response,
    prompt_injection,
    rate_limit,
    refusal,
    reset,
    response_lost,
    schema_drift,
    server_error,
    server_exit,
    server_restart,
    session_expired,
    slow_stream,
    stale_state,
    stream_cut,
    timeout,
    token_expired,
    tool_poisoning,
    tools_changed,
    truncated,
    ws_close,
    ws_delay,
    ws_drop,
    ws_inject,
)
from faultproxy.scenarios.faults.base import FaultKind, ParamProblem, ParamSpec
from faultproxy.scenarios.faults.schema_drift import DriftOp


def _catalogue(*kinds: FaultKind) -> dict[str, FaultKind]:
    by_name: dict[str, FaultKind] = {}
    for kind in kinds:
        if kind.name in by_name:
            raise ValueError(f"two fault kinds are named {kind.name!r}")
        by_name[kind.name] = kind
    return by_name


FAULT_KINDS: Mapping[str, FaultKind] = _catalogue(
    rate_limit.KIND, server_error.KIND, auth_failure.KIND,
    delay.KIND, timeout.KIND, reset.KIND,
    response_lost.KIND, partial_response.KIND, slow_stream.KIND, schema_drift.KIND,
    stale_state.KIND, jsonrpc_error.KIND, elicitation_declined.KIND, server_exit.KIND,
    session_expired.KIND, server_restart.KIND, token_expired.KIND, tool_poisoning.KIND, tools_changed.KIND,
    duplicate_delivery.KIND, stream_cut.KIND,
    truncated.KIND, malformed_tool_call.KIND, refusal.KIND, empty_response.KIND, prompt_injection.KIND,
    ws_drop.KIND, ws_delay.KIND, ws_close.KIND, ws_inject.KIND,
)
# Each fault type's parameter schema, by name: what `fault:` blocks are validated against.
FAULT_TYPES: Mapping[str, Mapping[str, ParamSpec]] = {name: kind.params for name, kind in FAULT_KINDS.items()}


def trace_forwarded(line: Mapping[str, Any]) -> bool:
    """Did the request of this trace line reach the upstream?

    The injector records it on every line (`forwarded`). A line written before it did is read
    as then: a delivered fault's kind says; otherwise it was forwarded unless the proxy
    answered itself (an unknown forced rule, a replay that diverged).
    """
    recorded = line.get("forwarded")
    if isinstance(recorded, bool):
        return recorded
    fault = line.get("fault") or {}
    kind = FAULT_KINDS.get(fault.get("type"))
    if fault.get("delivered") and kind is not None:
        return kind.forwards
    return (line.get("client") or {}).get("outcome") != "injected"


__all__ = ["FAULT_KINDS", "FAULT_TYPES", "DriftOp", "FaultKind", "ParamProblem", "ParamSpec", "trace_forwarded"]
