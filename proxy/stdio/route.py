"""The proxy addon that delivers stdio MCP exchanges to the shim that sent them.

The shim addresses each message to `http://<server>.stdio.invalid/mcp` and names, in a request
header, the loopback port where it takes them back. The header is removed before the injector
sees the request, so the trace records only the stable address (replay matches on it, and the
port changes every session); once the injector's request hook has matched, decided and let the
request through, this addon points the connection at that port.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePath

from mitmproxy import http

STDIO_SUFFIX = ".stdio.invalid"  # RFC 2606: a name that never resolves, so nothing else is reached
PORT_HEADER = "x-faultproxy-stdio-port"
_PORT_KEY = "faultproxy_stdio_port"


def stdio_url(server: str) -> str:
    """The address a stdio server's messages are recorded under."""
    return f"http://{server}{STDIO_SUFFIX}/mcp"


class StdioRoute:
    """Added after the FaultInjector, so its `request` hook runs once the injector's has."""

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        port = flow.request.headers.pop(PORT_HEADER, None)
        if port and port.isdecimal() and flow.request.host.endswith(STDIO_SUFFIX):
            flow.metadata[_PORT_KEY] = int(port)

    def request(self, flow: http.HTTPFlow) -> None:
        port = flow.metadata.get(_PORT_KEY)
        if port is None or flow.response is not None or flow.error is not None:
            return  # a fault answered or killed it: nothing reaches the server
        flow.request.host, flow.request.port = "127.0.0.1", port


_LAUNCHERS = re.compile(r"(python[\d.]*|pypy[\d.]*|node|npx|uvx?|deno|bun|sh|bash|pipx|docker)(\.exe)?")
_SUBCOMMANDS = frozenset({"run", "x", "exec", "tool"})


def server_name(command: Sequence[str]) -> str:
    """A short name for the server a command starts, usable as a host name label: the program,
    or for an interpreter or launcher (python, node, npx, uvx, ...) the script or package it runs."""
    words = list(command)
    stem = PurePath(words[0]).stem
    if _LAUNCHERS.fullmatch(PurePath(words[0]).name):
        rest = iter(words[1:])
        for word in rest:
            if word == "-m":
                stem = next(rest, word).rsplit(".", 1)[-1]
                break
            if not word.startswith("-") and word not in _SUBCOMMANDS:
                stem = PurePath(word.lstrip("@").split("@")[0].rstrip("/")).stem
                break
    return re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")[:63] or "server"
