"""The command line: `faultproxy check`, `ca`, `proxy`, and the addon under plain mitmdump."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from faultproxy.formats.trace import read_trace
from faultproxy.proxy.server import free_port
from faultproxy.scenarios import BUNDLED_DIR
from tests.support.layout import ROOT
from tests.support.processes import FAULTPROXY

MITMDUMP = Path(sys.executable).with_name("mitmdump")


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*FAULTPROXY, *args], capture_output=True, text=True, timeout=60, **kwargs)


def test_check_accepts_every_bundled_scenario():
    files = sorted(str(p) for p in BUNDLED_DIR.glob("*.yaml"))
    result = run("check", *files)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok") == len(files)


def test_check_bare_name_resolves_in_the_bundle():
    result = run("check", "rate_limit.yaml")
    assert result.returncode == 0 and "rate_limit" in result.stdout


def test_check_reports_one_line_exit_2_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndescription: d\nrules:\n  - name: r\n    fault: {type: rate_limit}\n    when: {probability: 1.5}\n")
    result = run("check", str(bad))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"faultproxy: {bad}:6: rules[0].when.probability: must be between 0 and 1, got 1.5"]


def test_ca_prints_a_bundle_with_system_roots_and_our_ca(tmp_path):
    result = run("ca", "--confdir", str(tmp_path))
    bundle = Path(result.stdout.strip())
    assert result.returncode == 0 and bundle.exists()
    text = bundle.read_text()
    assert text.count("BEGIN CERTIFICATE") > 10  # the public roots are there
    assert (tmp_path / "mitmproxy-ca-cert.pem").read_text().strip() in text


def wait_for_port(port: int, process: subprocess.Popen) -> None:
    for _ in range(200):
        if process.poll() is not None:
            raise AssertionError(process.stderr.read())
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=0.2)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("proxy did not come up")


@pytest.fixture
def background():
    processes: list[subprocess.Popen] = []

    def start(command: list[str]) -> subprocess.Popen:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
        processes.append(process)
        return process

    yield start
    for process in processes:
        process.terminate()
        process.wait(10)


def test_proxy_command_injects_the_bundled_rate_limit(background, upstream, tmp_path):
    state, server = upstream
    port = free_port("127.0.0.1")
    process = background([*FAULTPROXY, "proxy", "--scenario", "rate_limit", "--param", "lambda=1",
                          "--port", str(port), "--trace-dir", str(tmp_path / "flows")])
    wait_for_port(port, process)
    with httpx.Client(proxy=f"http://cli-ep:x@127.0.0.1:{port}") as client:
        response = client.post(f"{server.url}/v1/chat/completions", json={"model": "m", "messages": []})
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    assert state.hits["POST /v1/chat/completions"] == 0
    assert (tmp_path / "flows" / "cli-ep.jsonl").exists()


def test_proxy_command_on_a_taken_port_says_so_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("proxy", "--scenario", "rate_limit", "--port", str(port))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert f"regular@{port}" in line and "in use" in line.lower() and "another port" in line


def test_proxy_command_bad_param_is_exit_2(tmp_path):
    result = run("proxy", "--scenario", "rate_limit", "--param", "lambda=lots", "--port", "0")
    assert result.returncode == 2 and "lambda=lots" in result.stderr and "Traceback" not in result.stderr


def test_addon_runs_under_plain_mitmdump(background, upstream, tmp_path):
    state, server = upstream
    port = free_port("127.0.0.1")
    addon = ROOT / "proxy" / "mitmdump_addon.py"
    process = background([
        str(MITMDUMP), "-q", "--listen-host", "127.0.0.1", "-p", str(port), "-s", str(addon),
        "--set", "faultproxy_scenario=response_lost", "--set", f"faultproxy_trace_dir={tmp_path / 'flows'}",
        "--set", "faultproxy_params=lambda=1", "--set", "faultproxy_secret_env=PATH",  # HOME may be shorter than a secret may be
        "--set", "connection_strategy=lazy", "--set", f"confdir={tmp_path / 'conf'}",
    ])
    wait_for_port(port, process)
    with httpx.Client(proxy=f"http://mitm-ep:x@127.0.0.1:{port}") as client:
        with pytest.raises(httpx.RemoteProtocolError):
            client.post(f"{server.url}/orders/7/refund", json={})
    assert state.hits["POST /orders/7/refund"] == 1
    [line] = wait_for_lines(tmp_path / "flows" / "mitm-ep.jsonl", 1)
    assert line["fault"]["type"] == "response_lost"


def wait_for_lines(path: Path, count: int) -> list[dict]:
    """The trace's lines once it has `count`: another process writes them off its response path."""
    deadline = time.monotonic() + 30
    while len(lines := list(read_trace(path))) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return lines
