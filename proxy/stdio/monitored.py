"""`faultproxy mcp --monitor URL`: a stdio session's messages judged by a running monitor.

The shim hands the session to the monitor's proxy exactly as it hands one to a run's (the lane,
proxy/stdio/lane.py), so each message passes the monitor's injector and lands in a trace as
`http://<server>.stdio.invalid/mcp`. What differs is who names the episode: the shim names the
session on the lane request (route.STDIO_SESSION_HEADER, STDIO_RULE_HEADER) by the first of its
`--episode-by` rules that applies, and the monitor (proxy.monitor_sessions) places each message in that
session's open episode, ended by silence like any other.

Rules:
- `env:NAME`: the value of environment variable NAME, in the shim's environment or its nearest
  ancestor's (the agent's: an MCP client passes its servers only a few variables);
- `process`: the client's process, the one that started the shim (an MCP client starts each of
  its servers itself), so all of one agent process's servers share an episode;
- `session`: this client session (one shim process); the default, and what applies when no
  other rule does.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from faultproxy.proxy.stdio.locate import PROC, nearest
from faultproxy.proxy.stdio.route import STDIO_RULE_HEADER, STDIO_SESSION_HEADER

SESSION_RULE = "session"
_PASSWORD = re.compile(r"(//[^/@:]*:)[^@/]*@")
LANE_USER = "stdio"  # the proxy credentials' episode: the monitor places the session by its name, not this


@dataclass(frozen=True)
class ShimRule:
    kind: str  # "env", "process" or "session"
    variable: str = ""  # for "env"

    @classmethod
    def parse(cls, text: str) -> ShimRule:
        """From `env:NAME`, `process` or `session`; ValueError says what is wrong."""
        kind, sep, name = text.partition(":")
        if kind == "env" and sep and name and "=" not in name and not name[0].isdigit() and name.isprintable():
            return cls("env", name)
        if kind in ("process", SESSION_RULE) and not sep:
            return cls(kind)
        raise ValueError(f"episode rule {text!r} is not one of env:NAME, process, session")

    def session(self, server: str) -> str | None:
        """The session this rule names for this shim, or None when it does not apply."""
        if self.kind == "env":
            return nearest(self.variable)
        if self.kind == "process":
            return client_process()
        return f"{server}.{os.getpid()}.{secrets.token_hex(4)}"  # unique whichever machine it runs on

    def __str__(self) -> str:
        return f"env:{self.variable}" if self.kind == "env" else self.kind


def session_headers(rules: tuple[ShimRule, ...], server: str) -> dict[str, str]:
    """The lane request's headers naming this session by the first rule that applies."""
    for rule in (*rules, ShimRule(SESSION_RULE)):
        session = rule.session(server)
        if session is not None:
            return {STDIO_SESSION_HEADER: session, STDIO_RULE_HEADER: str(rule)}
    raise AssertionError("the session rule always applies")


def client_process() -> str:
    """The process that started this one, named so that it is one process on one machine: the
    host, its pid and (where /proc tells) when it started, since pids are reused."""
    parent = os.getppid()
    try:
        started = (PROC / str(parent) / "stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        started = "0"
    return f"{socket.gethostname()}.{parent}.{started}"


def monitor_proxy_url(url: str, token: str | None) -> str:
    """The proxy URL the shim asks for its lane with, from the one the monitor prints
    (`http://EPISODE:TOKEN@HOST:PORT`: its token is used, its EPISODE is not) or `http://HOST:PORT`;
    `token` (--auth's) before the URL's. ValueError, never quoting a password, when it is not one."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("", "/") \
            or parts.query or parts.fragment:
        shown = _PASSWORD.sub(r"\1***@", url)
        raise ValueError(f"--monitor: expected the monitor's proxy URL, http://EPISODE:TOKEN@HOST:PORT, got {shown!r}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    password = token or (unquote(parts.password) if parts.password else "x")
    return f"http://{LANE_USER}:{quote(password, safe='')}@{host}:{port}"
