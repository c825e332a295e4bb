"""Which agent stacks work behind faultproxy unmodified: real clients, each run by `faultproxy run`
against the demo world, and the compatibility table docs/agents.md shows.

    .venv/bin/python bench/frameworks.py                    # every client, k = 2 (first run installs: minutes)
    .venv/bin/python bench/frameworks.py --only httpx,curl  # some of them
    .venv/bin/python bench/frameworks.py --markdown         # the table as docs/agents.md has it

The Python frameworks (OpenAI Agents SDK, pydantic-ai, langgraph with langchain-openai, litellm)
are heavy, so `make test` does not install them: this script installs them into a virtualenv of
its own, `.cache/bench-frameworks` (git-ignored), and runs their agents with its interpreter,
while faultproxy runs from the project's. The npm packages (undici, openai) come from the cache
the Node tests use (tests/support/node_projects.py). Everything listens on 127.0.0.1; the frameworks'
side channels are switched off with the variables docs/agents.md names (this machine has no
other network), and each row says so.

Every client asks the scripted model one question (bench/stacks/); the MCP row runs the demo's
MCP agent (examples/mcp_agent.py over Streamable HTTP) on a demo task. The scenario answers
each episode's first model call with a 429 (`retry_after: 0`): a client that retries passes, one
that does not fails, and one whose traffic misses the proxy is `no_traffic`. Columns: the
client, its version, whether it works unmodified (else what to add), the faults delivered, and
the verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.world import world_in_thread  # noqa: E402
from faultproxy.evaluator.aggregate import build_report  # noqa: E402
from faultproxy.formats.model_apis import api_of_path  # noqa: E402
from faultproxy.formats.trace import read_trace  # noqa: E402
from tests.support.node_projects import PACKAGES as NODE_PACKAGES  # noqa: E402
from tests.support.node_projects import installed_packages  # noqa: E402

STACKS = Path(__file__).resolve().parent / "stacks"
VENV = ROOT / ".cache" / "bench-frameworks"
FRAMEWORKS = ["openai-agents", "pydantic-ai-slim[openai]", "langgraph", "langchain-openai", "litellm", "httpx"]
INSTALL_TIMEOUT_S = 1800
RUN_TIMEOUT_S = 600
# The frameworks' side channels, off: they would leave this machine (docs/agents.md#side-channels).
QUIET = {"OPENAI_AGENTS_DISABLE_TRACING": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
SCENARIO = """\
name: bench-first-model-call-429
description: each episode's first model call (any API) is answered 429; a client that retries gets past it
seed: 7
params: {}
rules:
  - name: first-model-429
    match: {api: model}
    fault: {type: rate_limit, retry_after: 0}
    when: {calls: [1]}
"""
HELLO = {"id": "hello", "prompt": "Say hello.", "shape": "lookup",
         "expected": {"output": {"regex": "(?i)know how to help"}}}


@dataclass
class Client:
    """One row: how to run the agent, where its version comes from, and what it needs beside."""

    name: str
    command: list[str]
    version: str
    needs: str = ""  # what a user adds for it to run here (side channels off, a package, a flag)
    flags: list[str] = field(default_factory=list)  # more `faultproxy run` options
    tasks: str = "hello"  # "hello", or the id of a demo task (examples/tasks.yaml)
    node_packages: tuple[str, ...] | None = None  # a Node project folder with these packages
    env: dict[str, str] = field(default_factory=dict)  # the client's own settings


def python_frameworks() -> Path:
    """The bench's virtualenv with the frameworks, created and filled on first use."""
    python, marker = VENV / "bin" / "python", VENV / ".installed"
    if not marker.exists():  # written only once every package is in: an interrupted install starts over
        print(f"installing {', '.join(FRAMEWORKS)} into {VENV} (once) ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *FRAMEWORKS], check=True, timeout=INSTALL_TIMEOUT_S)
        marker.touch()
    return python


def package_version(python: Path, name: str) -> str:
    done = subprocess.run([str(python), "-c", f"from importlib import metadata; print(metadata.version({name!r}))"],
                          capture_output=True, text=True)
    return done.stdout.strip() or "?"


def node_version(package: str | None = None) -> str:
    if package:
        return f"{package} {NODE_PACKAGES[package]}, Node {node_version()}"
    return subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip().lstrip("v")


def clients(python: Path) -> list[Client]:
    stack = lambda script, *args: [str(python), str(STACKS / script), *args]  # noqa: E731
    agents_sdk = f"openai-agents {package_version(python, 'openai-agents')}"
    curl = subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.split()[1:2]
    return [
        Client("OpenAI Agents SDK, Chat Completions model", stack("agents_sdk.py", "chat"), agents_sdk,
               "OPENAI_AGENTS_DISABLE_TRACING=1 offline (trace export to api.openai.com)"),
        Client("OpenAI Agents SDK, default model (Responses)", stack("agents_sdk.py"), agents_sdk,
               "OPENAI_AGENTS_DISABLE_TRACING=1 offline (trace export to api.openai.com)"),
        Client("pydantic-ai", stack("pydantic_ai_agent.py"), f"pydantic-ai {package_version(python, 'pydantic-ai-slim')}"),
        Client("langgraph + langchain-openai", stack("langgraph_agent.py"),
               f"langgraph {package_version(python, 'langgraph')}, langchain-openai "
               f"{package_version(python, 'langchain-openai')}"),
        Client("litellm", stack("litellm_agent.py"), f"litellm {package_version(python, 'litellm')}",
               "LITELLM_LOCAL_MODEL_COST_MAP=True offline (price list fetched at import)"),
        Client("mcp SDK, Streamable HTTP (demo MCP agent)", [sys.executable, str(ROOT / "examples" / "mcp_agent.py")],
               f"mcp {metadata.version('mcp')}", tasks="order_status_1002", env={"MCP_TRANSPORT": "http"}),
        Client("httpx", stack("httpx_agent.py"), f"httpx {package_version(python, 'httpx')}"),
        Client("curl", [str(STACKS / "curl_agent.sh")], f"curl {curl[0] if curl else '?'}"),
        Client("Node fetch (no package)", ["node", str(STACKS / "node_fetch.mjs")], f"Node {node_version()}",
               node_packages=()),
        Client("Node fetch + npm undici", ["node", str(STACKS / "node_fetch.mjs")], node_version("undici"),
               "npm i undici@7 in the project (Node < 24)", node_packages=("undici",)),
        Client("npm openai + npm undici", ["node", str(STACKS / "node_openai.mjs")], node_version("openai"),
               "npm i undici@7 in the project (Node < 24)", node_packages=("openai", "undici")),
        Client("npm openai, reverse mode", ["node", str(STACKS / "node_openai.mjs")], node_version("openai"),
               "--reverse OPENAI_BASE_URL", flags=["--reverse", "OPENAI_BASE_URL"], node_packages=("openai",)),
    ]


def node_project(folder: Path, client: Client) -> list[str]:
    """The client's script copied into a project folder holding exactly its npm packages."""
    modules = installed_packages()
    (folder / "node_modules").mkdir(parents=True)
    for name in client.node_packages or ():
        (folder / "node_modules" / name).symlink_to(modules / name, target_is_directory=True)
    script = folder / Path(client.command[-1]).name
    shutil.copy(client.command[-1], script)
    return [*client.command[:-1], str(script)]


def run_client(client: Client, k: int, work: Path, env: dict[str, str]) -> dict:
    """One `faultproxy run` of the client; its row's facts from the run's report."""
    folder = work / "".join(c if c.isalnum() else "-" for c in client.name.lower())
    folder.mkdir(parents=True)
    command = node_project(folder / "project", client) if client.node_packages is not None else client.command
    (folder / "scenario.yaml").write_text(SCENARIO)
    tasks = folder / "tasks.jsonl"
    if client.tasks == "hello":
        tasks.write_text(json.dumps(HELLO) + "\n")
        only = []
    else:
        tasks = ROOT / "examples" / "tasks.yaml"
        only = ["--only", client.tasks]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "faultproxy", "run", "--scenario", str(folder / "scenario.yaml"),
                           "--tasks", str(tasks), *only, "--k", str(k), "--out", str(folder / "run"),
                           "--allow-unexercised", *client.flags, "--", *command],
                          env={**env, **client.env}, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=folder)
    if not (folder / "run" / "plan.json").exists():  # faultproxy refused the run: the row says why
        return {"client": client, "status": {"pass": 0, "fail": 0}, "causes": {}, "faults": 0, "exit": done.returncode,
                "alerts": [], "seconds": time.monotonic() - started, "refused": done.stderr.strip()[-300:]}
    report = build_report(folder / "run", causes=False)["run"]
    status, causes = report["status"], report["incomplete_by_cause"]
    faults = report["logged"] - report["by_fault"]["not_exercised"]["episodes"]  # episodes a fault reached
    return {"client": client, "status": status, "causes": causes, "faults": faults, "exit": done.returncode,
            "alerts": report["headline"]["alerts"], "seconds": time.monotonic() - started,
            "stderr": done.stderr[-2000:], "missing": missing_in_world(folder / "run")}


def missing_in_world(run_dir: Path) -> list[str]:
    """Model endpoints the demo world answered 404 (an API its scripted model does not speak)."""
    missing = set()
    for trace in (run_dir / "flows").glob("*.jsonl"):
        for line in read_trace(trace):
            request, upstream = line.get("request") or {}, line.get("upstream") or {}
            path = urlsplit(request.get("url", "")).path
            if upstream.get("status") == 404 and api_of_path(path):
                missing.add(f"{request.get('method')} {path}")
    return sorted(missing)


def works(row: dict) -> str:
    client, causes = row["client"], row["causes"]
    if row.get("refused"):
        return f"not run: {row['refused']}"
    if causes.get("no_traffic"):
        return "no: npm i undici@7 in the project, or --reverse OPENAI_BASE_URL"
    if causes.get("infra_error"):
        return "no: infrastructure error (see the run's report)"
    return f"yes, with {client.needs}" if client.needs else "yes"


def verdicts(row: dict) -> str:
    status, causes = row["status"], row["causes"]
    parts = [f"{status[s]} {s}" for s in ("pass", "fail") if status[s]]
    parts += [f"{n} incomplete ({cause})" for cause, n in causes.items() if cause != "NotRun" and n]
    note = f" (the demo model answers {', '.join(row['missing'])} with 404)" if row.get("missing") else ""
    return (", ".join(parts) or "none") + note


def table(rows: list[dict], k: int) -> str:
    lines = [f"| client | version | works unmodified | episodes a fault reached (of {k}) | verdicts |",
             "|---|---|---|---|---|"]
    for row in rows:
        client = row["client"]
        lines.append(f"| {client.name} | {client.version} | {works(row)} | {row['faults']} | {verdicts(row)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=2, help="Episodes per client (default 2).")
    parser.add_argument("--only", default="", help="Comma-separated words: run the clients whose name has one.")
    parser.add_argument("--markdown", action="store_true", help="Print only the table, as docs/agents.md has it.")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="Keep each client's run directory under DIR.")
    args = parser.parse_args(argv)
    python = python_frameworks()
    chosen = [c for c in clients(python)
              if not args.only or any(word.lower() in c.name.lower() for word in args.only.split(","))]
    rows = []
    with world_in_thread() as world, tempfile.TemporaryDirectory(prefix="faultproxy-frameworks-") as scratch:
        env = {**os.environ, **world.env(), **QUIET}
        work = args.keep or Path(scratch)
        for client in chosen:
            row = run_client(client, args.k, work, env)
            rows.append(row)
            if not args.markdown:
                print(f"{client.name}: {verdicts(row)} in {row['seconds']:.1f} s", file=sys.stderr)
                for alert in row["alerts"]:
                    print(f"  {alert}", file=sys.stderr)
    print(table(rows, args.k))
    return 0


if __name__ == "__main__":
    sys.exit(main())
