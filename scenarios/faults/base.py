"""What a fault type is, as data: its parameters, its description, whether it forwards, what it
remembers, how a failure cause names an agent's answer to it, and the rules across its parameters
that a schema of single fields cannot state."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from faultproxy.formats.yaml_input import YamlReader
from yaml.nodes import Node


# Ranges shared by several faults. Every number a fault takes has both bounds, so a typo such
# as `hold_s: 1e300` fails `faultproxy check` instead of holding a connection for ever or
# sending a 300-digit header; the fault table in docs/scenarios.md lists them.
MAX_DELAY_MS = 600_000  # 10 min: any delay or stream pacing, also the cap of a drawn lognormal delay
MAX_SIGMA = 5.0  # lognormal shape: beyond it nearly every draw sits at 0 or at the cap
MAX_HOLD_S = 3_600  # 1 h: a held or hung request (above the SDKs' own 10 min default timeouts)
MAX_RETRY_AFTER_S = 86_400  # a day
MAX_CUT_BYTES = 2**30  # 1 GiB
MAX_CUT_EVENTS = 1_000_000


@dataclass(frozen=True)
class ParamSpec:
    """One fault parameter. kind: number | integer | string | boolean, or the name of a structured
    value that `read` parses (schema_drift's `ops`). `minimum` and `maximum` bound numbers and
    integers (every number a fault takes has both: tests/unit/proxy/test_fault_bounds.py); `doc` says what
    the parameter does and the rules it takes part in."""

    kind: str
    default: Any = None
    doc: str = ""
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False
    required: bool = False
    read: Callable[[YamlReader, Node, str], Any] | None = None


class ParamProblem(ValueError):
    """A cross-field rule broken. `param` names the field the scenario error points at."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message


CrossCheck = Callable[[dict[str, Any], frozenset[str]], dict[str, Any]]
# Given the settled parameters and the rule's match block (scenarios.scenario_model.MatchSpec): raises
# ParamProblem when the fault cannot be expressed in any request the rule can select.
MatchCheck = Callable[[dict[str, Any], Any], None]


@dataclass(frozen=True)
class AgentAnswer:
    """How a failure cause (evaluator.aggregate.failure_cause) names one answer of the agent to a fault, its
    `response` part, and what to do instead: the second half of the cause's line."""

    response: str
    advice: str


@dataclass(frozen=True)
class FaultKind:
    """One fault type as the scenario layer knows it; the proxy's class for it points here.

    description: what the client sees, in one line: the fault table in docs/scenarios.md shows it
      (`make docs` writes the fault tables from the kinds: scenarios.faults.docs_table).
    over_stdio: what a client of an MCP server over stdio sees, for the faults that reach one (the
      table in docs/mcp-stdio.md shows it); "" for the others.
    over_mcp_http, robust_client: for the faults of an MCP session and the tools around the calls,
      what a client over Streamable HTTP sees and what a robust client does about it (a table of
      docs/mcp-stdio.md shows both); "" for the others.
    forwards: when the fault is delivered, does the request still reach the upstream? (An answer
      the proxy makes, a held or dropped request: no. A delay, a lost or cut response: yes.) The
      injector records what really happened on every trace line; this is what a trace written
      before it did is read with.
    remembers_reads: the proxy must keep the answers of reads matched by a rule of this kind
      (stale_state serves them again later).
    cross_check: rules across parameters, given the parameters with defaults filled and the
      names the scenario gave; returns the parameters (it may fill a default that depends on
      others) or raises ParamProblem.
    match_check: rules across the parameters and the rule's match block (a model-answer fault
      whose mode no API the rule can reach carries); raises ParamProblem.
    on_messages: the fault acts on WebSocket messages: its rules need a `websocket:` block in
      their match, and only such faults may have one; `forwards` then says whether the matching
      message still reaches the other side.
    also_on_messages: the fault acts on requests, and on the messages of WebSocket sessions when
      its rule's match has a `websocket:` block (schema_drift: JSON bodies, SSE events and JSON
      messages alike).
    plants_instructions: a delivered fault planted an instruction for the agent (its trace line's
      fault facts carry the canary and the target), which the evaluator's `injection_followed`
      check judges.
    went_on: how a failure cause names an agent that went on with what the delivered fault gave
      it (it did not send the request again), and what to do instead; None: the cause says what
      the client saw (a failure given up on, or an answer gone on with).
    went_on_writing: the same when the agent wrote afterwards (a write decided on what the fault
      gave it); None: `went_on` either way.
    advice: what to do about the agent's answers to this fault, by a cause's response (or its
      family: "gave up" for "retried N times, then gave up"), ahead of the advice for an
      irreversible write: a fault that ended the client's session is not mended by a key or a
      retry, only by beginning a session again.
    """

    name: str
    params: Mapping[str, ParamSpec]
    forwards: bool
    description: str
    remembers_reads: bool = False
    cross_check: CrossCheck | None = None
    match_check: MatchCheck | None = None
    on_messages: bool = False
    also_on_messages: bool = False
    plants_instructions: bool = False
    went_on: AgentAnswer | None = None
    went_on_writing: AgentAnswer | None = None
    advice: Mapping[str, str] = field(default_factory=dict)
    over_stdio: str = ""
    over_mcp_http: str = ""
    robust_client: str = ""

    def takes_match(self, on_messages: bool) -> bool:
        """May a rule of this kind have a match with (True) or without (False) a websocket: block?"""
        return (self.on_messages or self.also_on_messages) if on_messages else not self.on_messages

    def settle(self, params: dict[str, Any], given: frozenset[str], match: Any = None) -> dict[str, Any]:
        """The parameters once the cross-field rules (and, given the rule's match block, the
        rules across it) hold; raises ParamProblem if one does not."""
        params = self.cross_check(params, given) if self.cross_check else params
        if self.match_check and match is not None:
            self.match_check(params, match)
        return params

    def answer(self, wrote_after: bool) -> AgentAnswer | None:
        """How an agent that went on after this fault answered it, given whether it wrote afterwards."""
        return (self.went_on_writing if wrote_after else None) or self.went_on
