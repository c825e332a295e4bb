"""Side-channel patterns: requests a task does not depend on, named by the user or built in.

    SideChannel.parse("POST api.openai.com/v1/traces/ingest").matches("POST", "api.openai.com", 443, "/v1/traces/ingest")

The form is `[METHOD ]HOST[:PORT][/PATH]`: HOST and PATH are globs (fnmatch, `*` crosses `/`),
no METHOD means any method, no PORT any port, no PATH any path on the host. A failed request is
kept off the task's path (the verdict stands) only when such a pattern names it
(evaluator.judging.side_channels); tasks files and policies declare them under `side_channels:`, the
commands take `--side-channel`.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

_FORM = re.compile(r"(?:(?P<method>[A-Za-z]+) +)?(?P<host>[^\s/:]+)(?::(?P<port>\d{1,5}))?(?P<path>/\S*)?")


@dataclass(frozen=True)
class SideChannel:
    """One `[METHOD ]HOST[:PORT][/PATH]` pattern; `text` is what the user wrote."""

    text: str
    method: str | None
    host: str
    port: int | None
    path: str | None

    @classmethod
    def parse(cls, text: str) -> SideChannel:
        """From its text; ValueError says what is wrong."""
        found = _FORM.fullmatch(text.strip())
        if not found:
            raise ValueError(f"bad side channel {text!r}; expected [METHOD ]HOST[:PORT][/PATH], "
                             "e.g. \"api.openai.com/v1/traces/ingest\" or \"telemetry.example.com\"")
        method, port = found["method"], found["port"]
        return cls(text.strip(), method.upper() if method else None, found["host"].lower(),
                   int(port) if port else None, found["path"])

    def matches(self, method: str, host: str, port: int | None, path: str) -> bool:
        """Does it name this request (`path` without its query)?"""
        return ((self.method is None or self.method == method.upper())
                and fnmatch.fnmatchcase(host.lower(), self.host)
                and (self.port is None or self.port == port)
                and (self.path is None or fnmatch.fnmatchcase(path, self.path)))

    def __str__(self) -> str:
        return self.text


def parse_side_channels(texts: tuple[str, ...] | list[str]) -> tuple[SideChannel, ...]:
    """Each text parsed (ValueError on the first bad one)."""
    return tuple(SideChannel.parse(text) for text in texts)
