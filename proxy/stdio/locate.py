"""Which episode is this shim part of, and where is its proxy?

An MCP client starts its stdio servers with an environment of its own choosing: the official
SDK passes only HOME, LOGNAME, PATH, SHELL, TERM and USER, so `faultproxy run`'s variables do not
reach the shim. The process tree does: the shim is a descendant of the agent, whose environment
holds FAULTPROXY_EPISODE and the proxy URL with the episode's credentials. So the shim looks at
its own environment first (a client that passes the environment on, or `env` in the server
configuration), then at its ancestors', nearest first, through /proc/<pid>/environ (Linux; a
process may read the environment of its own user's processes). Elsewhere only the first works.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
MAX_DEPTH = 32
PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy")


@dataclass(frozen=True)
class Located:
    """The episode's proxy (its URL carries the episode's credentials), and whether it replays."""

    episode: str
    proxy_url: str
    # FAULTPROXY_REPLAY=1 (a command agent under `faultproxy replay`): it marks a harness's episode;
    # whether to start the server the shim learns from the proxy itself (proxy/stdio/lane.py).
    replay: bool
    pid: int | None  # the process whose environment said so; None: the shim's own
    # A faultproxy run or replay set them (it sets FAULTPROXY_TASK too), not an agent in production
    # that names its own episode and has a proxy of its own (`faultproxy mcp --monitor` then applies).
    harness: bool = True


def from_environment(env: Mapping[str, str], pid: int | None = None) -> Located | None:
    episode = env.get("FAULTPROXY_EPISODE")
    proxy_url = next((env[name] for name in PROXY_VARIABLES if env.get(name)), None)
    if not episode or not proxy_url:
        return None
    replay = env.get("FAULTPROXY_REPLAY") == "1"
    return Located(episode, proxy_url, replay, pid, replay or "FAULTPROXY_TASK" in env)


def locate(env: Mapping[str, str] | None = None, pid: int | None = None) -> Located | None:
    """The nearest of this process's environment and its ancestors' that names an episode."""
    found = from_environment(os.environ if env is None else env)
    if found:
        return found
    for ancestor in ancestors(os.getpid() if pid is None else pid):
        found = from_environment(read_environ(ancestor), ancestor)
        if found:
            return found
    return None


def nearest(name: str) -> str | None:
    """The value of environment variable `name` in this process's environment or, failing that,
    in its nearest ancestor's that has it (the agent's, which an MCP client does not pass on)."""
    if os.environ.get(name):
        return os.environ[name]
    return next((value for pid in ancestors(os.getpid()) if (value := read_environ(pid).get(name))), None)


def ancestors(pid: int) -> Iterator[int]:
    """Parent, grandparent, ... up to (not including) init; nothing where there is no /proc."""
    for _ in range(MAX_DEPTH):
        pid = parent_of(pid)
        if pid <= 1:
            return
        yield pid


def parent_of(pid: int) -> int:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
    return int(stat.rsplit(")", 1)[1].split()[1])


def read_environ(pid: int) -> dict[str, str]:
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    pairs = (entry.decode("utf-8", "replace").partition("=") for entry in raw.split(b"\0") if entry)
    return {name: value for name, _, value in pairs}
