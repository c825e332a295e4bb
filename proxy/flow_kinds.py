"""What a request is, for the rules that match on `kind:` and for the writes that faults
remembering reads keep track of (stale_state's after_write) (tasks.request_class says how), and
which requests are MCP session plumbing, which no `requests` budget counts.

Kinds are decided at most once per request, and only when one of the scenario's rules has
`kind:` or a fault that remembers reads, so other scenarios pay nothing. The declarations are the
episode's task's (or the proxy's own: a monitor's policy); the MCP tools' annotations are those
the episode's tools/list answers gave, learnt as they pass — only while such a rule exists too —
and kept by server: a call takes its own server's, never those of another's tool of the same name.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from faultproxy.formats.model_apis import is_model_call
from faultproxy.formats.request_kinds import MCP_SESSION_HEADER, Kind, is_mcp_plumbing, listed_tools, rpc_method
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.sse import data_payloads
from faultproxy.scenarios import FAULT_KINDS, Rule, Scenario
from faultproxy.tasks.request_class import NOTHING_DECLARED, Declared, classify
from mitmproxy import http

_USES_KINDS: dict[str, bool] = {}  # scenario digest -> has a rule with `kind:`
_REMEMBERS_READS: dict[str, bool] = {}  # scenario digest -> has a rule whose fault remembers reads


def uses_kinds(scenario: Scenario) -> bool:
    return _any_rule(_USES_KINDS, scenario, _has_kinds)


def remembers_reads(scenario: Scenario) -> bool:
    """Has the scenario a rule whose fault keeps reads' answers? Only then are writes noted (writes)."""
    return _any_rule(_REMEMBERS_READS, scenario, _remembers_reads)


def _has_kinds(rule: Rule) -> bool:
    return rule.match.kinds is not None


def _remembers_reads(rule: Rule) -> bool:
    return FAULT_KINDS[rule.fault.type].remembers_reads


def _any_rule(found: dict[str, bool], scenario: Scenario, test: Callable[[Rule], bool]) -> bool:
    """Does a rule of the scenario pass `test`? Asked once per scenario version (per request
    after that: one look-up), kept in `found`."""
    answer = found.get(scenario.digest)
    if answer is None:
        answer = found[scenario.digest] = any(test(rule) for rule in scenario.rules)
    return answer


def writes(flow: http.HTTPFlow, ex: FlowExchange, declared: Declared | None) -> bool:
    """Does the request write, for the faults that serve reads from before a write? What classify
    calls a write: MCP plumbing never does, nor does a tool call to an MCP tool nobody annotated or
    named (unclassified): a stale answer after a call that may have written nothing is one no
    lagging replica gives, and an agent could do nothing right against it, whereas not counting
    an unknown tool only lets a careless agent off (the tasks file's `effects` or `irreversible`
    names it a write). Plain HTTP goes by its method unless the task's patterns say otherwise."""
    return Kind.WRITE in kinds_of(flow, ex, declared)


def kinds_of(flow: http.HTTPFlow, ex: FlowExchange, declared: Declared | None) -> frozenset[Kind]:
    """The request's kinds, classified on first use and kept on the exchange."""
    if ex.kinds is None:
        request = flow.request  # mitmproxy's headers answer `in` case-insensitively
        ex.kinds = classify(ex.method, request.host, request.path, request.headers, ex.body_json,
                            ex.episode.declared or declared or NOTHING_DECLARED, ex.episode.tool_hints,
                            ex.server()).kinds
    return ex.kinds


def is_plumbing(request: http.Request, ex: FlowExchange) -> bool:
    """MCP session plumbing (formats.request_kinds)? A model call's body is never looked at, and
    another's is parsed only when it may be a JSON-RPC message."""
    if is_model_call(request.path):
        return False
    if MCP_SESSION_HEADER not in request.headers and b'"jsonrpc"' not in (ex.request_body or b""):
        return False
    return is_mcp_plumbing(request.headers, ex.body_json())


def learn_tools(ex: FlowExchange) -> None:
    """Keep what a tools/list answer lists, as the server gave it, for the episode's later calls:
    the tools' annotations (while a rule has `kind:` or a fault that remembers reads) and their
    input schemas (tools_changed checks calls against a schema it changed)."""
    if b"tools/list" not in (ex.request_body or b"") or rpc_method(ex.body_json()) != "tools/list":
        return
    if ex.upstream_events:
        texts = list(data_payloads(event for _, event in ex.upstream_events))
    else:
        texts = [ex.upstream_body.decode("utf-8", "replace")] if ex.upstream_body else []
    answers = []
    for text in texts:
        try:
            answers.append(json.loads(text))
        except ValueError:
            continue
    server = ex.server()
    if uses_kinds(ex.scenario) or remembers_reads(ex.scenario):
        ex.episode.tool_hints.update(listed_tools(server, answers))
    ex.episode.tool_schemas.update(listed_tools(server, answers, "inputSchema"))
