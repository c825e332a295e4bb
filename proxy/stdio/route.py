"""Names for stdio servers: the address their messages are recorded under
(`http://<server>.stdio.invalid/mcp`), a short name for the server a command starts, and how a
monitored session is named to the monitor."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePath

STDIO_SUFFIX = ".stdio.invalid"  # RFC 2606: a name that never resolves, so nothing else is reached
STDIO_PATH = "/mcp"
# `faultproxy mcp --monitor`: the session a shim names on its lane request (proxy/stdio/monitored.py),
# which the monitor (proxy.monitor_sessions) puts the session's messages in, and the rule that named it.
STDIO_SESSION_HEADER = "x-faultproxy-stdio-session"
STDIO_RULE_HEADER = "x-faultproxy-stdio-rule"
# flow.metadata of a lane request: the call that gives, for each message of the session, its episode
# now (None: unsampled, pass it untouched); a session outlives an episode its silence ended.
SESSION_NAMING_KEY = "faultproxy_stdio_naming"


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
