"""How an episode's calls are named and classed: which of the task's patterns names a call
(matches_any), what the MCP servers say their tools do (mcp_tool_hints), which calls are
irreversible (is_irreversible), which MCP tools nobody classified (unclassified_tools), and a
short list of seq numbers for a check's detail (seqs).

MCP: the trace's tools/list answers give each tool's annotations, by server (mcp_tool_hints): a
call takes those its own server listed, and a server whose tools/list the trace never saw has none,
whatever another server says of a tool of the same name. Endpoint
patterns name an MCP tool call only when their glob contains "tools/" (matches_any). An MCP tool
nobody annotated and no pattern names is unclassified: not a write (unclassified_tools).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from faultproxy.evaluator.traces.traced import TracedExchange
from faultproxy.formats.request_kinds import Access, ToolHints, listed_tools
from faultproxy.tasks.request_class import Declared, naming
from faultproxy.tasks.task_model import Task


def matches_any(patterns: Iterable[Any], ex: TracedExchange) -> Any:
    """The first pattern naming this call. An MCP tool call (always POST to one URL) is named
    only by tool patterns — globs containing "tools/", tried on <path>/tools/<name>, e.g.
    "POST */tools/refund_order" — so that "POST *" keeps meaning HTTP writes."""
    return naming(patterns, ex.method, ex.host, ex.path if ex.tool_name is None else ex.route, ex.tool_name)


def mcp_tool_hints(exchanges: Sequence[TracedExchange]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """{(server, tool): annotations} from every MCP tools/list answer in the trace (readOnlyHint,
    destructiveHint, ...: the MCP spec's own way for a server to say what a tool does)."""
    hints: dict[tuple[str, str], Mapping[str, Any]] = {}
    for ex in exchanges:
        if ex.rpc_method == "tools/list":
            hints.update(listed_tools(ex.server, [ex.rpc_answer]))
    return hints


def is_irreversible(task: Task, ex: TracedExchange, hints: ToolHints) -> bool:
    """Named by the task's irreversible patterns, or an MCP tool its server marks destructive."""
    return ex.request_class(Declared.of(task), hints).irreversible


def unclassified_tools(task: Task, exchanges: Sequence[TracedExchange],
                       hints: ToolHints | None = None) -> list[str]:
    """The MCP tools the agent called that no annotation and no pattern of the task classifies
    (tasks.request_class): neither reads nor writes, shown so that the user can say which."""
    hints = mcp_tool_hints(exchanges) if hints is None else hints
    declared = Declared.of(task)
    return sorted({ex.tool_name for ex in exchanges if ex.mcp_tool is not None
                   and ex.request_class(declared, hints).access is Access.UNCLASSIFIED})


def seqs(exchanges: Iterable[TracedExchange], limit: int = 6) -> str:
    seqs = [str(ex.seq) for ex in exchanges]
    return ", ".join(seqs[:limit]) + (", …" if len(seqs) > limit else "")
