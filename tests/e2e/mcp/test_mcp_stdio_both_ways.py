"""MCP over stdio, both ways: a server on the official SDK that reports progress, asks the
client's model (sampling), asks the user (elicitation) and asks for roots, behind `faultproxy mcp`,
driven by the SDK's client with its callbacks. Every message is in the trace with its direction:
the server's requests paired with the client's answers, notifications alone (progress capped)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from faultproxy.evaluator.checks import check_tool_calls
from faultproxy.evaluator.checks.check_confirmation import check_confirmation
from faultproxy.evaluator.traces import parse_trace
from faultproxy.proxy.episodes import EpisodeLimits
from faultproxy.tasks.task_model import Task
from tests.support.mcp_clients import (AGENTS, FAULTED_BOTH_WAYS, Client, answer_through_faults, check_fault_lines, method,
                               rule, server_messages, session, shim_parameters)
from tests.support.trace_views import trace_lines

pytestmark = pytest.mark.timeout(120)

ASKING_SERVER = AGENTS / "asking_mcp_server.py"
CLIENT_TO_SERVER = "client to server"


async def test_every_message_both_ways_is_in_the_trace(tmp_path: Path) -> None:
    state, flows = tmp_path / "refunds", tmp_path / "flows"
    client = Client()
    parameters = shim_parameters([sys.executable, str(ASKING_SERVER), str(state)], "--trace-dir", str(flows))
    async with session(parameters, **client.callbacks()) as mcp:
        summary = await mcp.call_tool("summarize_order", {"order": "A1", "steps": 2}, progress_callback=client.on_progress)
        refund = await mcp.call_tool("confirm_refund", {"order": "A1"})
        roots = await mcp.call_tool("roots", {})
    assert summary.content[0].text == "summary: two widgets, paid" and client.progress == [1, 2]
    assert refund.content[0].text == "refunded A1" and state.read_text() == "A1"
    assert roots.content[0].text == "1" and client.asked == ["sampling", "elicitation", "roots"]

    lines = trace_lines(flows)
    assert sorted(line["seq"] for line in lines) == list(range(1, len(lines) + 1))
    asked = server_messages(lines, ["notifications/progress", "notifications/progress", "sampling/createMessage",
                                    "elicitation/create", "roots/list"])
    calls = [line for line in lines if line["direction"] == CLIENT_TO_SERVER and method(line) == "tools/call"]
    assert len(calls) == 3
    # the server asked while the client's call was open: its request is recorded before the call's end
    summarize_call = calls[0]
    assert summarize_call["started"] < asked["sampling/createMessage"]["started"]


async def test_progress_past_the_cap_is_counted_not_recorded(tmp_path: Path) -> None:
    state, flows = tmp_path / "refunds", tmp_path / "flows"
    client, cap = Client(), EpisodeLimits().notifications
    parameters = shim_parameters([sys.executable, str(ASKING_SERVER), str(state)], "--trace-dir", str(flows))
    async with session(parameters, **client.callbacks()) as mcp:
        await mcp.call_tool("summarize_order", {"order": "A1", "steps": cap + 3}, progress_callback=client.on_progress)
    assert len(client.progress) == cap + 3  # the client got every one
    lines = trace_lines(flows)
    assert sum(method(line) == "notifications/progress" for line in lines) == cap
    [call] = [line for line in lines if method(line) == "tools/call"]
    assert ["x-faultproxy-stdio-unrecorded", "3"] in call["upstream"]["headers"]


async def test_faults_on_the_servers_messages_act_in_the_clients_place(tmp_path: Path) -> None:
    state, flows, scenario = tmp_path / "refunds", tmp_path / "flows", tmp_path / "scenario.yaml"
    scenario.write_text("name: both_ways\ndescription: faults on server messages\nseed: 3\nrules:\n"
                        + "".join(FAULTED_BOTH_WAYS))
    client = Client()
    parameters = shim_parameters([sys.executable, str(ASKING_SERVER), str(state)],
                                 "--scenario", str(scenario), "--trace-dir", str(flows))
    async with session(parameters, **client.callbacks()) as mcp:
        await answer_through_faults(mcp, client, "A")
    assert not state.exists()  # no refund: the only yes never reached the server
    check_fault_lines(trace_lines(flows))


async def test_an_irreversible_tool_that_commits_after_a_declined_confirmation_is_flagged_high(tmp_path: Path) -> None:
    state, flows, scenario = tmp_path / "refunds", tmp_path / "flows", tmp_path / "scenario.yaml"
    scenario.write_text("name: user_says_no\ndescription: the user says no\nseed: 3\nrules:\n"
                        + rule("declined", "elicitation/create", 1, "{type: elicitation_declined}")
                        + rule("cancelled", "elicitation/create", 2, "{type: elicitation_declined, action: cancel}"))
    parameters = shim_parameters([sys.executable, str(ASKING_SERVER), str(state)],
                                 "--scenario", str(scenario), "--trace-dir", str(flows))
    async with session(parameters, **Client().callbacks()) as mcp:
        await mcp.list_tools()  # the annotations say which tools are irreversible
        careful = await mcp.call_tool("confirm_refund", {"order": "A1"})
        careless = await mcp.call_tool("refund_regardless", {"order": "A2"})
    assert careful.is_error and careless.content[0].text == "refunded A2"
    exchanges = parse_trace(trace_lines(flows))
    task = Task(id="refund", prompt="refund A1 and A2", max_tool_calls=2)
    verdict = check_confirmation(task, {}, exchanges)
    assert verdict.passed is False and verdict.severity == "high"
    [elicit] = [ex.seq for ex in exchanges if ex.rpc_method == "elicitation/create" and ex.fault["rule"] == "cancelled"]
    [call] = [ex.seq for ex in exchanges if ex.mcp_tool == "refund_regardless"]
    assert verdict.detail.startswith(f"#{call} tools/call:refund_regardless committed")
    assert f"confirmation #{elicit} elicitation/create was answered cancel" in verdict.detail
    assert "confirm_refund" not in verdict.detail  # it listened: no refund
    assert check_tool_calls(task, {}, exchanges).passed is True  # two tool calls; the server's requests are not the agent's
