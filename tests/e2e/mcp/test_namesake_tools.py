"""Two MCP servers (official SDK, Streamable HTTP, both at /mcp on ports of their own) that list a
tool of the same name: a cache's `delete`, read-only, and a files server's `delete`, destructive.
Each call takes its own server's annotations (formats.request_kinds.mcp_server), in the proxy (a
rule's `kind:`) and in the verdict, whichever server's tools/list came last: the agent of each
task lists its target's tools first and the other's last, so that a last-listed-wins lookup by
name alone would class each call by the wrong server. A blind retry of the cache's delete after
its answer was lost passes idempotency; the same retry of the files server's fails it."""

from __future__ import annotations

import asyncio

import pytest
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations

from faultproxy import Episode, run_function, task_set_from_json
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.scenarios import load_scenario
from tests.support.mcp_clients import HttpServer, http_session
from tests.support.verdicts import detail, failed_checks

pytestmark = pytest.mark.timeout(120)

SCENARIO = """name: namesakes
description: the first read and the first irreversible call each lose their answer after the server ran them
rules:
  - name: read_lost
    match: {kind: read}
    when: {calls: [1]}
    fault: {type: response_lost, mode: "504"}
  - name: irreversible_lost
    match: {kind: irreversible}
    when: {calls: [1]}
    fault: {type: response_lost, mode: "504"}
"""


def server(name: str, annotations: ToolAnnotations, deleted: list[str]) -> MCPServer:
    mcp = MCPServer(name)

    @mcp.tool(name="delete", annotations=annotations)
    def delete(key: str) -> str:
        deleted.append(f"{name}:{key}")
        return f"deleted {key}"

    return mcp


def agent(urls: dict[str, str]):
    """Lists the target server's tools, then the other's, and deletes on the target, once more
    (with nothing to tell the server it is the same call) when the first answer is an error."""
    async def tidy(episode: Episode) -> dict:
        target, other = episode.task_id, next(name for name in urls if name != episode.task_id)
        async with http_session(episode.proxy_url, urls[target]) as mcp, \
                http_session(episode.proxy_url, urls[other]) as other_mcp:
            await mcp.list_tools()
            await other_mcp.list_tools()
            for _ in range(2):
                try:
                    if not (await mcp.call_tool("delete", {"key": "report.pdf"})).is_error:
                        break
                except MCPError:
                    continue
        return {"answer": f"deleted report.pdf on {target}"}

    return lambda episode: asyncio.run(tidy(episode))


def test_namesake_tools_are_classed_by_their_own_server(tmp_path) -> None:
    deleted: list[str] = []
    scenario = tmp_path / "namesakes.yaml"
    scenario.write_text(SCENARIO)
    with HttpServer(server("cache", ToolAnnotations(readOnlyHint=True), deleted).streamable_http_app(
            host="127.0.0.1")) as cache, \
            HttpServer(server("files", ToolAnnotations(readOnlyHint=False, destructiveHint=True), deleted)
                       .streamable_http_app(host="127.0.0.1")) as files:
        tasks = task_set_from_json([{"id": name, "prompt": "Delete report.pdf."} for name in ("cache", "files")])
        out = tmp_path / "run"
        run_function(agent({"cache": cache.url, "files": files.url}), tasks, k=1, scenario=load_scenario(scenario),
                     out=out)
    assert sorted(deleted) == ["cache:report.pdf"] * 2 + ["files:report.pdf"] * 2  # each ran twice
    records = {r["task_id"]: r for r in read_run(out).episodes}
    for name, rule in (("cache", "read_lost"), ("files", "irreversible_lost")):
        calls = [line for line in read_trace(out / records[name]["trace"])
                 if '"tools/call"' in (line["request"]["body"] or "")]
        # the proxy's `kind:`, by the call's own server: both calls match, the first is faulted
        assert [(line["matched"], bool(line["fault"])) for line in calls] == [([rule], True), ([rule], False)], name
    verdicts = {name: record["verdict"] for name, record in records.items()}
    assert verdicts["cache"]["status"] == "pass", verdicts["cache"]["failed"]
    assert verdicts["cache"]["unclassified_tools"] == []
    assert failed_checks(verdicts["files"]) == {"idempotency": "high"}
    assert "delete" in detail(verdicts["files"], "idempotency")
