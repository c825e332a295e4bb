"""The faults' behaviour, one module per fault type, Toxiproxy-style.

Each module defines one class ending in `Fault` (RateLimitFault, TimeoutFault, ...) whose `kind`
is the fault's FaultKind from `faultproxy.scenarios.faults`: the declarative half (name,
parameters with defaults and ranges, description, whether the request still reaches the
upstream, whether reads must be remembered, how a failure cause names an agent's answer to it).
The split keeps the layers: the scenario layer validates files for `faultproxy check` and lies
below the proxy, so it cannot hold mitmproxy hooks; the hooks live here and point down at their
kind, never the other way.

The classes are listed below, in the order of the scenario layer's catalogue, and paired with the
kinds when this package is imported: a kind with no class, a kind with two, a class whose kind is
not in the catalogue, or a list out of the catalogue's order stops the import with a message
naming them, so a fault type `faultproxy check` accepts always has an implementation. Helper
modules (base, provider_error, model_answer, lingering) define no class with a `kind` of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from faultproxy.proxy.faults.auth_failure import AuthFailureFault
from faultproxy.proxy.faults.base import SUPPLIED_KEY, Fault, answer
from faultproxy.proxy.faults.delay import DelayFault
from faultproxy.proxy.faults.duplicate_delivery import DuplicateDeliveryFault
from faultproxy.proxy.faults.elicitation_declined import ElicitationDeclinedFault
from faultproxy.proxy.faults.empty_response import EmptyResponseFault
from faultproxy.proxy.faults.jsonrpc_error import JsonRpcErrorFault
from faultproxy.proxy.faults.malformed_tool_call import MalformedToolCallFault
from faultproxy.proxy.faults.partial_response import PartialResponseFault
from faultproxy.proxy.faults.prompt_injection import PromptInjectionFault
from faultproxy.proxy.faults.rate_limit import RateLimitFault
from faultproxy.proxy.faults.refusal import RefusalFault
from faultproxy.proxy.faults.reset import ResetFault
from faultproxy.proxy.faults.response_lost import ResponseLostFault
from faultproxy.proxy.faults.schema_drift import SchemaDriftFault
from faultproxy.proxy.faults.server_error import ServerErrorFault
from faultproxy.proxy.faults.server_exit import ServerExitFault
from faultproxy.proxy.faults.server_restart import ServerRestartFault
from faultproxy.proxy.faults.session_expired import SessionExpiredFault
from faultproxy.proxy.faults.slow_stream import SlowStreamFault
from faultproxy.proxy.faults.stale_state import StaleStateFault
from faultproxy.proxy.faults.stream_cut import StreamCutFault
from faultproxy.proxy.faults.timeout import TimeoutFault
from faultproxy.proxy.faults.token_expired import TokenExpiredFault
from faultproxy.proxy.faults.tool_poisoning import ToolPoisoningFault
from faultproxy.proxy.faults.tools_changed import ToolsChangedFault
from faultproxy.proxy.faults.truncated import TruncatedFault
from faultproxy.proxy.faults.ws_close import WsCloseFault
from faultproxy.proxy.faults.ws_delay import WsDelayFault
from faultproxy.proxy.faults.ws_drop import WsDropFault
from faultproxy.proxy.faults.ws_inject import WsInjectFault
from faultproxy.scenarios import FAULT_KINDS, FaultKind


class FaultRegistryError(RuntimeError):
    """The fault kinds and the fault classes do not pair one to one (a programming error)."""


def pair_kinds(kinds: Mapping[str, FaultKind], classes: Iterable[type[Fault]]) -> dict[str, type[Fault]]:
    """Each kind's one class, by fault type; raises FaultRegistryError naming every mismatch, and
    classes listed out of the kinds' order."""
    found: dict[str, list[type[Fault]]] = {}
    problems = []
    for cls in classes:
        if kinds.get(cls.kind.name) is not cls.kind:
            problems.append(f"{cls.__qualname__} points at kind {cls.kind.name!r}, which is not in "
                            "scenarios.faults.FAULT_KINDS")
        found.setdefault(cls.kind.name, []).append(cls)
    for name in kinds:
        implementations = found.get(name, [])
        if len(implementations) != 1:
            listed = ", ".join(cls.__qualname__ for cls in implementations) or "none"
            problems.append(f"fault kind {name!r} needs exactly one class in proxy/faults/, found {listed}")
    listed_order = [name for name in found if name in kinds]
    if not problems and listed_order != list(kinds):
        problems.append("the fault classes are not listed in the catalogue's order: "
                        f"{', '.join(listed_order)} (the catalogue: {', '.join(kinds)})")
    if problems:
        raise FaultRegistryError("; ".join(problems))
    return {name: found[name][0] for name in kinds}


# One per fault type, in the order of scenarios.faults.FAULT_KINDS.
FAULT_CLASSES: Mapping[str, type[Fault]] = pair_kinds(FAULT_KINDS, [
    RateLimitFault, ServerErrorFault, AuthFailureFault,
    DelayFault, TimeoutFault, ResetFault,
    ResponseLostFault, PartialResponseFault, SlowStreamFault, SchemaDriftFault,
    StaleStateFault, JsonRpcErrorFault, ElicitationDeclinedFault, ServerExitFault,
    SessionExpiredFault, ServerRestartFault, TokenExpiredFault, ToolPoisoningFault, ToolsChangedFault,
    DuplicateDeliveryFault, StreamCutFault,
    TruncatedFault, MalformedToolCallFault, RefusalFault, EmptyResponseFault, PromptInjectionFault,
    WsDropFault, WsDelayFault, WsCloseFault, WsInjectFault,
])

__all__ = ["FAULT_CLASSES", "SUPPLIED_KEY", "Fault", "FaultRegistryError", "answer", "pair_kinds"]
