"""Names for stdio servers: the address their messages are recorded under
(`http://<server>.stdio.invalid/mcp`), and a short name for the server a command starts."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePath

STDIO_SUFFIX = ".stdio.invalid"  # RFC 2606: a name that never resolves, so nothing else is reached
STDIO_PATH = "/mcp"


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
