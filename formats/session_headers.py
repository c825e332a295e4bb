"""Which request headers could name a session, for `monitor --episode-by header:NAME`.

A monitor told to split live traffic into episodes by a header that no request carries falls
back to one episode per client connection; the live warning (proxy.monitor_sessions) and the report
(evaluator.aggregate.unmatched) then name the headers that do vary between requests, so the user can pick
the right one. Both read them here.
"""

from __future__ import annotations

from collections.abc import Iterable

# Headers that vary for reasons of their own (sizes, retries, credentials): never a session's name.
NOT_SESSIONS = frozenset({"content-length", "content-type", "host", "connection", "accept", "accept-encoding",
                          "user-agent", "authorization", "proxy-authorization", "cookie", "x-api-key",
                          "x-stainless-retry-count", "x-stainless-read-timeout"})
SHOWN = 8


def varying_headers(requests: Iterable[Iterable[tuple[str, str]]]) -> list[str]:
    """The header names (lower case) with more than one value across `requests` (each a list of
    name, value pairs), but for NOT_SESSIONS; sorted, at most SHOWN."""
    values: dict[str, set[str]] = {}
    for headers in requests:
        for name, value in headers:
            values.setdefault(name.lower(), set()).add(value)
    return sorted(name for name, seen in values.items() if len(seen) > 1 and name not in NOT_SESSIONS)[:SHOWN]


def missing_header_warning(rule: str, requests: int, varying: list[str], fallback: list[str]) -> str:
    """The one line both the live warning and the report give a session header no request carried;
    `fallback`: the --episode-by rules after it (`client`, one episode per connection, last)."""
    return (f"--episode-by {rule}: no request carried the header in the first {requests} (episodes came from "
            f"{', '.join(fallback)} instead); headers that vary: {', '.join(varying) or 'none'}")
