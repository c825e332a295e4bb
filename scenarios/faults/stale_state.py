"""stale_state: a read answered with what the same request got earlier in the episode.

It is the kind that remembers reads: the proxy keeps the first answer to each read its rules
match, and a delivered stale read is answered from that memory without forwarding.
"""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind, ParamSpec

KIND = FaultKind(
    name="stale_state",
    params={
        "after_write": ParamSpec("boolean", False, "stale reads only once the episode has written (read-your-writes)"),
    },
    forwards=False,
    remembers_reads=True,
)
