"""Node agents behind faultproxy (issue 23), on this machine's Node 20, whose global fetch ignores
HTTP(S)_PROXY: with npm `undici` in the agent's project the preload routes fetch (and the npm
`openai` SDK built on it) through the proxy unmodified; without it, `--reverse OPENAI_BASE_URL`
does. Upstreams are HTTPS, so the proxy's CA must reach Node too (NODE_EXTRA_CA_CERTS)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from faultproxy import RunOptions, run
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.runner.run_options import reverse_variables
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import task_set_from_json
from tests.support.fixtures import scenario
from tests.support.node_projects import node_project

FIRST_CALL_429 = scenario("""
    - name: first-429
      match: {method: POST, path: "*/chat/completions"}
      fault: {type: rate_limit, retry_after: 0}
      when: {calls: [1]}
""")

REFUND_503 = scenario("""
    - name: refund-503
      match: {method: POST, path: "*/refund"}
      fault: {type: server_error, status: 503}
""")


def run_node(tmp_path: Path, script: Path, scenario_text: str, task: dict, certificate: Path, **kw) -> tuple[dict, list[dict]]:
    """One episode of `node script`; returns its trace, the record's verdict checked to be judged."""
    (tmp_path / "scenario.yaml").write_text(scenario_text)
    options = RunOptions(scenario=load_scenario(tmp_path / "scenario.yaml"), tasks=task_set_from_json([task]),
                         command=["node", str(script)], out=tmp_path / "run", upstream_ca=certificate,
                         show_progress=False, **kw)
    run(options)
    [record] = read_run(tmp_path / "run").episodes
    return record, sorted(read_trace(tmp_path / "run" / record["trace"]), key=lambda line: line["seq"])


def test_node20_fetch_with_npm_undici_in_the_project_goes_through_the_proxy(tmp_path, https_upstream,
                                                                             upstream_certificate, monkeypatch):
    state, server = https_upstream
    monkeypatch.setenv("REFUND_URL", f"{server.url}/items/1/refund")
    script = node_project(tmp_path / "agent", "node_refund_agent.mjs", "undici")
    task = {"id": "refund", "prompt": "Refund item 1.", "expected": {"output": {"regex": "^refunded$"}}}
    record, [line] = run_node(tmp_path, script, REFUND_503, task, upstream_certificate[0])
    assert state.commits["refund 1"] == 0  # the fault answered in the upstream's place
    assert line["request"]["url"] == f"{server.url}/items/1/refund"  # over CONNECT, trusting the proxy's CA
    assert line["fault"]["type"] == "server_error" and line["fault"]["delivered"] is True
    assert record["output"] == {"answer": "failed"}  # the agent saw the 503
    assert (record["verdict"]["status"], record["verdict"]["cause"]) == ("fail", None)


@pytest.mark.parametrize("route", ["preload", "reverse"])
def test_node20_npm_openai_gets_the_fault_and_retries(route, tmp_path, https_upstream, upstream_certificate,
                                                      monkeypatch):
    """preload: npm undici is in the project, the SDK's fetch goes through the forward proxy.
    reverse: only npm openai; --reverse OPENAI_BASE_URL gives the agent the proxy as base URL."""
    state, server = https_upstream
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
    packages = ("openai", "undici") if route == "preload" else ("openai",)
    script = node_project(tmp_path / "agent", "node_openai_agent.mjs", *packages)
    upstreams, base_url_env = reverse_variables(["OPENAI_BASE_URL"] if route == "reverse" else [], os.environ, {})
    task = {"id": "chat", "prompt": "Say hello.", "expected": {"output": {"regex": "Hello from the scripted model"}}}
    record, lines = run_node(tmp_path, script, FIRST_CALL_429, task, upstream_certificate[0],
                             upstreams=upstreams, base_url_env=base_url_env)
    assert [(line["client"]["status"], bool(line["fault"])) for line in lines] == [(429, True), (200, False)]
    assert all(line["request"]["url"] == f"{server.url}/v1/chat/completions" for line in lines)
    assert dict(lines[1]["request"]["headers"])["x-stainless-retry-count"] == "1"  # the SDK's own retry
    assert state.hits["POST /v1/chat/completions"] == 1
    assert record["verdict"]["status"] == "pass", record["verdict"]
    assert record["verdict"]["faults"][0]["delivered"] is True
