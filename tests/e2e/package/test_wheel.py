"""The wheel as users install it: built from the sources, installed into a fresh virtualenv
outside the checkout, and run from a directory that is not the checkout. What the package needs
at run time (bundled scenarios, any data file) must come from the wheel, and the wheel must add
no generic top-level name (`proxy`, `scenarios`, ...) to site-packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.support.layout import ROOT, copy_sources, package_dirs
from tests.support.upstream import ServerThread, Upstream

GENERIC_NAMES = ("proxy", "scenarios", "evaluator", "replay_store", "runner", "formats", "tasks", "otel", "monitor", "pytest_plugin")

AGENT = """\
import json, os, sys
import httpx

upstream = sys.argv[1]
with httpx.Client(verify=os.environ["SSL_CERT_FILE"]) as client:  # HTTP_PROXY from the environment
    item = client.get(f"{upstream}/items/a1")
    chat = client.post(f"{upstream}/v1/chat/completions", json={"model": "m", "messages": []})
with open(os.environ["FAULTPROXY_OUTPUT"], "w") as out:
    json.dump({"answer": [item.status_code, chat.status_code]}, out)
sys.exit(0 if (item.status_code, chat.status_code) == (200, 429) else 1)
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, a virtualenv with it installed and nothing else of faultproxy)."""
    base = tmp_path_factory.mktemp("wheel")
    sources = copy_sources(base / "sources")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                  "-w", str(base / "dist"), str(sources)], cwd=base)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    (wheel,) = (base / "dist").glob("faultproxy-*.whl")
    venv = base / "venv"
    _check(_run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base))
    _check(_run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
                 "--no-index", str(wheel)], cwd=base))
    # Dependencies come from this test run's environment, found after the venv's own site-packages
    # (so without the network); a path line in a .pth file does not run that directory's .pth
    # files, so the checkout's editable install stays out of sight.
    (_site_packages(venv) / "faultproxy-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return wheel, venv


def _site_packages(venv: Path) -> Path:
    (site,) = (venv / "lib").glob("python3*/site-packages")
    return site


def _run(command: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _check(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{done.args}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def test_the_wheel_holds_one_package_and_every_data_file(installed: tuple[Path, Path]) -> None:
    wheel, venv = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"faultproxy", wheel.name.split("-py3")[0] + ".dist-info"}
    for package, folder in package_dirs().items():
        for source in folder.rglob("*"):
            if source.is_file() and "__pycache__" not in source.parts:
                inside = "/".join([*package.split("."), *source.relative_to(folder).parts])
                assert inside in names, f"{source.relative_to(ROOT)} is not in the wheel (as {inside})"
    assert not [name for name in os.listdir(_site_packages(venv)) if name.removesuffix(".py") in GENERIC_NAMES]
    assert "faultproxy/scenarios/rate_limit.yaml" in names


def test_the_installed_package_runs_from_outside_the_checkout(installed: tuple[Path, Path], tmp_path: Path) -> None:
    _, venv = installed
    site = _site_packages(venv)
    work = tmp_path / "work"
    work.mkdir()
    python, faultproxy = str(venv / "bin" / "python"), str(venv / "bin" / "faultproxy")

    where = _check(_run([python, "-c", "import faultproxy, faultproxy.scenarios.scenario_file as s; "
                                       "print(faultproxy.__file__); print(s.BUNDLED_DIR / 'rate_limit.yaml')"], work))
    package_file, bundled = (Path(line) for line in where.stdout.split())
    assert package_file.is_relative_to(site) and bundled.is_relative_to(site) and bundled.is_file()
    assert not package_file.is_relative_to(ROOT)

    check = _check(_run([faultproxy, "check", "rate_limit"], work))
    assert "rate_limit: ok (rate_limit: 1 rules" in check.stdout

    usage = _check(_run([python, "-m", "faultproxy", "--help"], work))
    assert usage.stdout.startswith("usage: faultproxy") and "check" in usage.stdout and "replay" in usage.stdout

    (work / "agent.py").write_text(AGENT)
    state = Upstream()
    with ServerThread(state.app()) as server:
        run = _run([faultproxy, "run", "--scenario", "rate_limit", "--param", "lambda=1", "--k", "1",
                    "--out", "runs/one", "--", python, "agent.py", server.url], work)
    _check(run)
    assert state.hits["GET /items/a1"] == 1  # the agent's request went through the installed proxy
    assert state.hits["POST /v1/chat/completions"] == 0  # the bundled scenario's 429 answered instead
    (episode,) = [json.loads(line) for line in (work / "runs/one/episodes.jsonl").read_text().splitlines()
                  if '"verdict"' in line]
    assert episode["verdict"]["status"] == "pass"
    trace = [json.loads(line) for line in (work / "runs/one" / episode["trace"]).read_text().splitlines()]
    assert len(trace) == 2, trace  # both requests were recorded by the installed proxy

    _check(_run([faultproxy, "report", "runs/one"], work))
    report = json.loads((work / "runs/one/report.json").read_text())
    assert report["run"]["headline"]["mean_pass_rate"] == 1.0
    assert report["run"]["by_fault"]["types"]["rate_limit"]["survived"] == 1
    assert (work / "runs/one/report.html").is_file() and (work / "runs/one/junit.xml").is_file()
