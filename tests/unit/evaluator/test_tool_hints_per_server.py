"""MCP tool annotations are their own server's (formats.request_kinds.mcp_server): an agent with
a cache server and a files server that both list `delete`, one read-only, the other destructive,
has each call judged by the annotations of the server it went to, whichever tools/list came last.
Crafted traces in the real format (tests.support.run_records)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from faultproxy.evaluator.judging import judge_episode
from faultproxy.formats.trace import read_trace
from faultproxy.tasks.task_model import EndpointPattern, Task
from tests.support.run_records import exchange, fault, record, write_trace
from tests.support.verdicts import check

CACHE, FILES, OTHER = "http://127.0.0.1:8001/mcp", "http://127.0.0.1:8002/mcp", "http://127.0.0.1:8003/mcp"
ANNOTATIONS = {CACHE: {"readOnlyHint": True}, FILES: {"readOnlyHint": False, "destructiveHint": True}}
_ids = itertools.count(1)


def rpc(url: str, method: str, params: dict, at: float, result: Any = None, **kwargs: Any) -> dict:
    rpc_id = next(_ids)
    answer = {"jsonrpc": "2.0", "id": rpc_id, "result": result if result is not None else {"content": []}}
    return exchange("POST", url, body={"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params},
                    at=at, response=answer, **kwargs)


def listings(order: tuple[str, ...]) -> list[dict]:
    return [rpc(url, "tools/list", {}, 0.1 * i, {"tools": [{"name": "delete", "annotations": ANNOTATIONS[url]}]})
            for i, url in enumerate(order)]


def delete_retried(url: str) -> list[dict]:
    """`delete` on `url` whose answer was lost, sent again with no idempotency key."""
    call = {"name": "delete", "arguments": {"key": "report.pdf"}}
    return [rpc(url, "tools/call", call, 1, outcome="reset", fault=fault("response_lost")),
            rpc(url, "tools/call", call, 2)]


def judged(tmp_path: Path, lines: list[dict], irreversible: tuple[str, ...] = ()) -> dict:
    task = Task(id="t", prompt="Tidy up.", irreversible=tuple(EndpointPattern.parse(p) for p in irreversible))
    path = write_trace(tmp_path / "flows" / f"ep{next(_ids)}.jsonl", lines)
    return judge_episode(task, record(), read_trace(path), {})


ORDERS = [(CACHE, FILES), (FILES, CACHE)]  # whichever server listed last, each keeps its own


@pytest.mark.parametrize("order", ORDERS)
def test_a_blind_retry_of_the_read_only_namesake_passes(tmp_path: Path, order: tuple[str, ...]) -> None:
    verdict = judged(tmp_path, listings(order) + delete_retried(CACHE))
    assert check(verdict, "idempotency")["passed"] is True
    assert verdict["unclassified_tools"] == []


@pytest.mark.parametrize("order", ORDERS)
def test_a_blind_retry_of_the_destructive_namesake_fails(tmp_path: Path, order: tuple[str, ...]) -> None:
    idem = check(judged(tmp_path, listings(order) + delete_retried(FILES)), "idempotency")
    assert idem["passed"] is False and "delete" in idem["detail"]


def test_a_server_never_listed_borrows_no_namesakes_annotations(tmp_path: Path) -> None:
    verdict = judged(tmp_path, listings((CACHE, FILES)) + delete_retried(OTHER))
    assert verdict["unclassified_tools"] == ["delete"]


def test_a_tasks_tool_pattern_names_the_tool_on_every_server(tmp_path: Path) -> None:
    """Declarations name tools by path and tool: `mcp:delete` makes the cache's delete irreversible too."""
    idem = check(judged(tmp_path, listings((CACHE, FILES)) + delete_retried(CACHE), ("mcp:delete",)), "idempotency")
    assert idem["passed"] is False
