"""Running the agent for one episode: its environment, its process group, its budgets.

The agent is an ordinary program. It learns where it is only from the environment: the proxy
(with the episode's credentials), a CA bundle to trust, the task, and where to write its answer.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from faultproxy.evaluator.sweeps import level_text
from faultproxy.formats.episode_causes import AGENT_NOT_STARTED
from faultproxy.runner.agent_guard import PID_FILE, guard, release
from faultproxy.runner.chat import ChatResult
from faultproxy.tasks.task_model import Budgets

POLL_S = 0.05
LAST_WORDS_S = 10.0  # for a conversation to record what the agent wrote before it was gone
LOG_TAIL_BYTES = 4000
# Where each stack looks for its trust store: Python's ssl and httpx, requests, curl, Node, boto,
# httplib2, gRPC, git and Deno. Each gets the bundle of system roots plus the proxy's CA; one
# left pointing at the system bundle would reject the proxy's certificates.
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "AWS_CA_BUNDLE",
                "HTTPLIB2_CA_CERTS", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "GIT_SSL_CAINFO", "DENO_CERT")
NODE_PRELOAD = Path(__file__).with_name("node_preload.cjs")


@dataclass(frozen=True)
class AgentEnvironment:
    proxy_url: str
    ca_bundle: Path
    episode: str
    task_file: Path
    output_file: Path
    prompt: str
    seed: int
    model: str | None = None
    base_urls: Mapping[str, str] = None
    params: Mapping[str, float | str] = None
    no_proxy: Sequence[str] = ()
    extra: Mapping[str, str] = None
    base_url_env: Mapping[str, str] = None  # VAR -> upstream name: VAR gets that upstream's reverse URL (--reverse)

    def build(self, inherited: Mapping[str, str]) -> dict[str, str]:
        env = dict(inherited)
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env[name] = self.proxy_url
        for name in ("ALL_PROXY", "all_proxy"):
            env.pop(name, None)
        # Cleared, so tools on loopback go through the proxy too, unless exempted by name.
        env["NO_PROXY"] = env["no_proxy"] = ",".join(self.no_proxy)
        for name in CA_VARIABLES:
            env[name] = str(self.ca_bundle)
        env["NODE_USE_ENV_PROXY"] = "1"  # Node >= 24 (and 22.21): fetch honours HTTP(S)_PROXY
        env["NODE_OPTIONS"] = node_options(inherited.get("NODE_OPTIONS", ""))  # older Node: the preload
        env |= {
            "FAULTPROXY_EPISODE": self.episode,
            "FAULTPROXY_TASK": str(self.task_file),
            "FAULTPROXY_PROMPT": self.prompt,
            "FAULTPROXY_SEED": str(self.seed),
            "FAULTPROXY_OUTPUT": str(self.output_file),
        }
        if self.model:
            env["FAULTPROXY_MODEL"] = self.model
        for name, url in (self.base_urls or {}).items():
            env[f"FAULTPROXY_{_env_name(name)}_BASE_URL"] = url
        for variable, name in (self.base_url_env or {}).items():
            env[variable] = self.base_urls[name]
        for name, value in (self.params or {}).items():
            env[f"FAULTPROXY_PARAM_{_env_name(name)}"] = level_text(value)
        env |= dict(self.extra or {})
        return env


def node_options(inherited: str) -> str:
    """NODE_OPTIONS with faultproxy's preload (runner/node_preload.cjs) added once to the caller's."""
    preload = f'--require "{NODE_PRELOAD}"'
    return inherited if preload in inherited else f"{inherited} {preload}".strip()


def _env_name(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).upper()


def fill_placeholders(command: Sequence[str], values: Mapping[str, object]) -> list[str]:
    """Replace {prompt}, {task_id}, {variant}, {seed} (and param names) in each argument."""
    filled = []
    for arg in command:
        for name, value in values.items():
            arg = arg.replace("{" + name + "}", str(value))
        filled.append(arg)
    return filled


@dataclass(frozen=True)
class Usage:
    requests: int
    tokens: int


@dataclass(frozen=True)
class AgentResult:
    exit_code: int | None
    cause: str | None  # None: the agent finished on its own (whatever its exit code)
    duration_s: float
    log_tail: str
    output: dict | None
    output_error: str | None
    detail: str | None = None  # what went wrong, with a harness cause the run found (a user's model that failed)


class Talk(Protocol):
    """A conversation with the agent process while it runs (runner.chat): `stdio` when it talks
    over the agent's stdin and stdout (its stderr is then the log)."""

    stdio: bool

    async def __call__(self, process: asyncio.subprocess.Process) -> ChatResult: ...


async def run_agent(
    command: Sequence[str],
    env: Mapping[str, str],
    budgets: Budgets,
    usage: Callable[[], Usage | None],
    output_file: Path,
    cwd: Path | None = None,
    talk: Talk | None = None,
) -> AgentResult:
    """Run `command` in a process group of its own until it exits or overruns `budgets`; the
    group is killed on the way out, and dies with this process (runner.agent_guard). With `talk`,
    the conversation runs beside it; its end ends the episode once the agent exits (or lingers)."""
    started = time.monotonic()
    stdio = talk is not None and talk.stdio
    pipe = asyncio.subprocess.PIPE
    try:
        process = await asyncio.create_subprocess_exec(
            *command, env=dict(env), cwd=cwd, stdin=pipe if stdio else asyncio.subprocess.DEVNULL,
            stdout=pipe, stderr=pipe if stdio else asyncio.subprocess.STDOUT, start_new_session=True,
        )
    except OSError as error:  # the harness could not start it: nothing the agent did (incomplete, not fail)
        return AgentResult(None, AGENT_NOT_STARTED, 0.0, f"could not start {command[0]!r}: {error}", None, None)
    pid_file = output_file.with_name(PID_FILE)
    tail: collections.deque[bytes] = collections.deque()
    reader = asyncio.create_task(_keep_tail(process.stderr if stdio else process.stdout, tail))
    conversation = asyncio.create_task(talk(process)) if talk else None
    try:
        guard(process.pid, pid_file)  # start_new_session: the group's id is the agent's pid
        cause = await _watch(process, budgets, usage, started, conversation)
    finally:
        _kill_group(process.pid)  # the agent's children too, whatever happened
        release(process.pid, pid_file)
        await process.wait()
        chat = await _conversation_end(conversation)
        await reader
    stopped = chat is not None and chat.lingering and process.returncode < 0  # by the runner, the conversation over
    if cause is None and process.returncode < 0 and not stopped:
        cause = "crash"  # killed by a signal nobody here sent
    output, output_error = read_output(output_file)
    if output is None and chat is not None:
        output = chat.output  # a conversation's answer is the agent's last turn
    return AgentResult(
        None if stopped else process.returncode, cause, time.monotonic() - started,
        b"".join(tail)[-LOG_TAIL_BYTES:].decode("utf-8", "replace"), output, output_error, chat and chat.detail,
    )


async def _conversation_end(conversation: asyncio.Task[ChatResult] | None) -> ChatResult | None:
    """The conversation's result, once it has read what the agent left in its pipes (they are
    closed: the agent's group is gone); None without a conversation, or if it does not end."""
    if conversation is None:
        return None
    try:
        return await asyncio.wait_for(conversation, LAST_WORDS_S)
    except TimeoutError:
        return None


async def _watch(process: asyncio.subprocess.Process, budgets: Budgets, usage, started: float,
                 conversation: asyncio.Task[ChatResult] | None = None) -> str | None:
    """Wait for the agent (or, in a conversation, for it to overrun its reply budget or linger
    once the conversation is over); return the budget it overran, if it did."""
    while True:
        try:
            await asyncio.wait_for(process.wait(), POLL_S)
            return None
        except TimeoutError:
            pass
        if conversation is not None and conversation.done():
            chat = conversation.result()
            if chat.cause is not None or chat.lingering:
                return chat.cause
        if budgets.wall_s is not None and time.monotonic() - started > budgets.wall_s:
            return "budget_wall"
        spent = usage()
        if spent and budgets.requests is not None and spent.requests > budgets.requests:
            return "budget_requests"
        if spent and budgets.tokens is not None and spent.tokens > budgets.tokens:
            return "budget_tokens"


async def _keep_tail(stream: asyncio.StreamReader, tail: collections.deque[bytes]) -> None:
    size = 0
    while chunk := await stream.read(4096):
        tail.append(chunk)
        size += len(chunk)
        while size - len(tail[0]) > LOG_TAIL_BYTES:
            size -= len(tail.popleft())


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def read_output(path: Path) -> tuple[dict | None, str | None]:
    if not path.exists():
        return None, None
    try:
        output = json.loads(path.read_text() or "null")
    except ValueError as error:
        return None, f"FAULTPROXY_OUTPUT is not JSON: {error}"
    if output is not None and not isinstance(output, dict):
        output = {"answer": output}
    return output, None
