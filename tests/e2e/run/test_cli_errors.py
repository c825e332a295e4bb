"""Bad command-line values and configurations that leave nothing to judge: one line, exit 2, no
traceback, before anything runs."""

from __future__ import annotations

import socket
import sys

import pytest

from faultproxy.cli.main import main
from tests.support.refusals import UNSET, one_task_file, refusal

AGENT = [sys.executable, "-c", "pass"]


@pytest.mark.parametrize(("options", "message"), [
    (["--k", "1000000000"], "--k must be 1 to 10,000, got 1000000000"),
    (["--k", "0"], "--k must be 1 to 10,000, got 0"),
    (["--parallel", "100000"], "--parallel must be 1 to 256, got 100000"),
    (["--budget-s", "1e300"], "--budget-s must be more than 0 to 86,400, got 1e+300"),
    (["--budget-s", "nan"], "--budget-s must be more than 0 to 86,400, got nan"),
    (["--upstream", "x=ftp://x"], "--upstream x=ftp://x: URL must be http(s)://HOST[:PORT][/PATH]"),
    (["--upstream", "foo=notaurl"], "--upstream foo=notaurl: URL must be http(s)://HOST[:PORT][/PATH]"),
    (["--upstream", "a/b=http://h"], "--upstream a/b=http://h: NAME must be letters, digits, '_' and '-'"),
    (["--upstream", "x=http://h:99999"], "--upstream x=http://h:99999: Port out of range"),
    (["--upstream", "ftp://x"], "--upstream 'ftp://x' is not NAME=VALUE"),
    (["--secret-env", UNSET], f"--secret-env {UNSET}: no such variable is set here"),
    (["--out", "/proc/nope"], "--out /proc/nope: cannot write the run directory there"),
])
def test_bad_run_options(capsys, tmp_path, monkeypatch, options, message):
    monkeypatch.delenv(UNSET, raising=False)
    argv = ["run", "--scenario", "rate_limit", "--out", str(tmp_path / "run"), *options, "--", *AGENT]
    assert message in refusal(capsys, argv)
    assert not (tmp_path / "run" / "episodes.jsonl").exists()


@pytest.mark.parametrize(("case", "message"), [
    ("missing_program", "the agent command 'no-such-agent-program' cannot start: no such program on PATH"),
    ("missing_file", "cannot start: it is not an executable file"),
    ("unset_in_command", f"the agent command uses ${{{UNSET}}}, which is not set here"),
    ("unset_in_tasks_env", f"tasks.jsonl:1: task t: ${{{UNSET}}} is not set (needed by"),
    ("unset_in_state_url", f"tasks.jsonl:1: task t: ${{{UNSET}}} is not set"),
    ("missing_checker", "task t: expected.output checker no_such_checks:judge cannot be loaded: No module named"),
    ("missing_checker_function", "checker json:no_such_function cannot be loaded: module 'json' has no function"),
])
def test_a_run_that_could_judge_nothing_exits_2_before_the_first_episode(capsys, tmp_path, monkeypatch, case,
                                                                         message):
    monkeypatch.delenv(UNSET, raising=False)
    command, task = AGENT, {}
    if case == "missing_program":
        command = ["no-such-agent-program"]
    elif case == "missing_file":
        command = [str(tmp_path / "agent.sh")]
    elif case == "unset_in_command":
        command = [*AGENT, f"--url=${{{UNSET}}}/x"]
    elif case == "unset_in_tasks_env":
        task = {"env": {"SHOP_URL": f"${{{UNSET}}}/shop"}}
    elif case == "unset_in_state_url":
        task = {"state_url": f"${{{UNSET}}}/_state"}
    elif case == "missing_checker":
        task = {"expected": {"output": {"checker": "no_such_checks:judge"}}}
    else:
        task = {"expected": {"output": {"checker": "json:no_such_function"}}}
    out = tmp_path / "run"
    argv = ["run", "--scenario", "rate_limit", "--tasks", str(one_task_file(tmp_path, **task)), "--out", str(out),
            "--", *command]
    assert message in refusal(capsys, argv)
    assert not (out / "episodes.jsonl").exists()


def test_variables_the_agent_gets_from_faultproxy_or_the_tasks_file_are_not_refused(tmp_path):
    agent = [sys.executable, "-c", "pass"]  # the arguments are never expanded: only their names are checked
    tasks = one_task_file(tmp_path, env={"GIVEN": "by the tasks file"})
    argv = ["run", "--scenario", "rate_limit", "--tasks", str(tasks), "--out", str(tmp_path / "run"),
            "--allow-unexercised", "--allow-incomplete", "--", *agent, "${FAULTPROXY_OUTPUT}", "${GIVEN}"]
    assert main(argv) == 0  # the agent sends nothing (no_traffic): only the refusal of its variables is tested


@pytest.mark.parametrize(("options", "message"), [
    (["--port", "70000"], "--port must be 0 (any free port) to 65535, got 70000"),
    (["--upstream", "a/b=http://h"], "NAME must be letters, digits"),
    (["--secret-env", UNSET], f"--secret-env {UNSET}: no such variable is set here"),
])
def test_bad_proxy_options(capsys, monkeypatch, options, message):
    monkeypatch.delenv(UNSET, raising=False)
    assert message in refusal(capsys, ["proxy", "--scenario", "rate_limit", *options])


def test_choose_another_port_only_when_the_port_is_the_problem(capsys, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = refusal(capsys, ["proxy", "--scenario", "rate_limit", "--port", str(port),
                                       "--trace-dir", str(tmp_path)])
    assert busy.endswith("; choose another port")
    elsewhere = refusal(capsys, ["proxy", "--scenario", "rate_limit", "--port", "0", "--host", "192.0.2.1",
                                        "--allow-remote", "--auth", "--trace-dir", str(tmp_path)])  # TEST-NET-1: no such local address
    assert "did not start" in elsewhere and "choose another port" not in elsewhere
