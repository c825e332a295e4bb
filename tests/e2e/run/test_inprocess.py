"""Agents as Python functions, and the pytest plugin's fixtures."""

from __future__ import annotations

import httpx

from faultproxy import Episode, run_function
from faultproxy.tasks.tasks_file import task_set_from_json
from faultproxy.scenarios import load_scenario
from tests.support.fixtures import scenario

pytest_plugins = ["pytester"]


def test_function_agent_repeated_k_times_behind_the_proxy(tmp_path, upstream):
    state, server = upstream
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario("""
        - name: refund-fails
          match: {method: POST, path: "*/refund"}
          fault: {type: server_error, status: 503}
          when: {probability: lambda}
    """, params="{lambda: 0.3}"))
    seen: list[Episode] = []

    def agent(episode: Episode) -> bool:
        seen.append(episode)
        with httpx.Client(proxy=episode.proxy_url, verify=str(episode.ca_bundle)) as client:
            return client.post(f"{server.url}/items/{episode.task_id}/refund").status_code == 200

    tasks = task_set_from_json([{"id": f"t{i}", "prompt": f"Refund item t{i}"} for i in range(5)])
    result = run_function(agent, tasks, k=6, scenario=load_scenario(path), out=tmp_path / "run")
    assert len(seen) == 30 and {e.variant for e in seen} == set(range(6))
    statuses = [s for task in result.per_task.values() for s in task]
    assert result.mean_pass_rate == statuses.count("pass") / 30
    assert 0 < result.mean_pass_rate < 1  # some refunds were faulted, some not
    assert result.k == 6  # six trials of each task: pass^6 is the share of tasks that passed all six
    assert result.pass_hat_k == sum(all(s == "pass" for s in t) for t in result.per_task.values()) / 5
    assert result.pass_hat_k < result.mean_pass_rate
    assert result.pass_at_k == sum(any(s == "pass" for s in t) for t in result.per_task.values()) / 5
    assert sum(state.commits.values()) == statuses.count("pass")


def test_pytest_plugin_runs_one_test_behind_a_scenario(pytester, upstream, monkeypatch):
    _, server = upstream
    monkeypatch.setenv("PLUGIN_UPSTREAM", server.url)
    pytester.makepyfile("""
        import os
        import pytest

        @pytest.mark.faultproxy("rate_limit", params={"lambda": 1.0})
        async def test_model_call_is_rate_limited(faultproxy_client, faultproxy):
            url = os.environ["PLUGIN_UPSTREAM"] + "/v1/chat/completions"
            response = await faultproxy_client.post(url, json={"model": "m", "messages": []})
            assert response.status_code == 429
            assert faultproxy.scenario.name == "rate_limit"
    """)
    result = pytester.runpytest_subprocess("-p", "asyncio", "-o", "asyncio_mode=auto")
    result.assert_outcomes(passed=1)
