"""Episodes of live traffic (`faultproxy monitor`): which session a request belongs to, and
whether that session is sampled.

Rules, tried in the order given (the first that applies names the session):
- `header:NAME`: the value of a request header (a session or conversation id);
- `traceparent`: the W3C trace id (agents instrumented with OpenTelemetry propagate it);
- `auth`: the proxy credentials' episode (`http://EPISODE:TOKEN@HOST:PORT`, or reverse mode's
  `/EPISODE/NAME`), as proxy.attribution read them;
- `client`: the client connection; also what applies when no rule does.
A stdio MCP session that a `faultproxy mcp --monitor` shim hands over names its own session
(proxy/stdio/monitored.py: the client session, an environment variable or the client's process)
on the lane request. Each message of a stdio session (named so or by the rules) is placed in its
session's episode as it comes, as each HTTP request is: the session may outlive an episode.

A session becomes an episode under a key of its own (the session id, made safe, a hash and when
it began), so a session that comes back after its episode ended starts a new one. Sampling is a
keyed hash of the session id: a session is in or out whole, the same in every monitor with the
same key. An unsampled request is marked PASS_THROUGH_KEY: the injector neither records nor
touches it. Everything here runs on the proxy's event loop.
"""

from __future__ import annotations

import functools
import hashlib
import re
import time
from dataclasses import dataclass

import structlog
from faultproxy.formats.session_headers import missing_header_warning, varying_headers
from faultproxy.proxy import decide
from faultproxy.proxy.attribution import DEFAULT_EPISODE, EPISODE_KEY, PASS_THROUGH_KEY
from faultproxy.proxy.stdio.lane import LANE_HOST
from faultproxy.proxy.stdio.route import SESSION_NAMING_KEY, STDIO_RULE_HEADER, STDIO_SESSION_HEADER
from mitmproxy import http

log = structlog.get_logger("faultproxy.monitor")

RULE_KINDS = ("header", "traceparent", "auth", "client")
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
SAMPLE_STREAM = "sample"
WATCHED_REQUESTS = 10  # with a header rule that none of the first this many requests met, say so once


@dataclass(frozen=True)
class EpisodeRule:
    kind: str
    header: str = ""  # for kind "header": the header's name, lower case

    @classmethod
    def parse(cls, text: str) -> EpisodeRule:
        """From `header:NAME`, `traceparent`, `auth` or `client`; ValueError says what is wrong."""
        kind, sep, name = text.partition(":")
        if kind == "header" and sep and name.strip() and " " not in name.strip():
            return cls("header", name.strip().lower())
        if kind in RULE_KINDS[1:] and not sep:
            return cls(kind)
        raise ValueError(f"episode rule {text!r} is not one of header:NAME, traceparent, auth, client")

    def session(self, flow: http.HTTPFlow) -> str | None:
        """The session this rule names for the request, or None when it does not apply."""
        if self.kind == "header":
            return flow.request.headers.get(self.header) or None
        if self.kind == "traceparent":
            match = _TRACEPARENT.fullmatch(flow.request.headers.get("traceparent", "").strip().lower())
            return match.group(1) if match and match.group(1).strip("0") else None
        if self.kind == "auth":
            episode = flow.metadata.get(EPISODE_KEY)
            return episode if episode and episode != DEFAULT_EPISODE else None
        return flow.client_conn.id

    def __str__(self) -> str:
        return f"header:{self.header}" if self.kind == "header" else self.kind


CLIENT_RULE = EpisodeRule("client")


def stdio_session(flow: http.HTTPFlow) -> tuple[str, str] | None:
    """(rule, session) a `faultproxy mcp --monitor` shim named on its lane request, or None. The
    rule is recorded as `stdio:` and the shim's rule (`stdio:session`, `stdio:env:NAME`, ...)."""
    headers = flow.request.headers
    session, rule = headers.get(STDIO_SESSION_HEADER), headers.get(STDIO_RULE_HEADER)
    return (f"stdio:{rule}", session) if session and rule else None


@dataclass(frozen=True)
class Session:
    """An open episode's session: its id and the rule that named it."""

    id: str
    rule: str


class LiveSessions:
    """The mitmproxy addon that puts each request into its session's episode (or lets it pass)."""

    def __init__(self, rules: tuple[EpisodeRule, ...], sample: float = 1.0, sample_key: str = "faultproxy") -> None:
        self.rules = (*rules, CLIENT_RULE)
        self.sample, self.sample_key = sample, sample_key
        self.requests = 0  # every request admitted, sampled or not (the live view's rate)
        self.passed_through = 0
        self._keys: dict[tuple[str, str], str] = {}  # (rule, session id) -> its open episode's key
        self.sessions: dict[str, Session] = {}  # open episode key -> its session
        self._serial = 0
        # The first requests' headers while no header rule has applied (None once one has, or once warned).
        self._watched: list[list[tuple[str, str]]] | None = [] if any(r.kind == "header" for r in rules) else None

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or EPISODE_KEY not in flow.metadata:
            return  # refused (no token, unknown upstream): no episode's
        self.requests += 1
        named = stdio_session(flow)
        if named:  # a `faultproxy mcp --monitor` shim's lane: the shim named its session
            rule, session = named
        else:
            by, session = next((r, s) for r in self.rules if (s := r.session(flow)) is not None)
            rule = str(by)
            if self._watched is not None:
                self._watch(flow, by)
        if flow.request.host == LANE_HOST:  # a stdio session handed over: its messages are placed as they come
            flow.metadata[SESSION_NAMING_KEY] = functools.partial(self.stdio_message, rule, session)
        key = self._episode(rule, session)
        if key is None:
            flow.metadata[PASS_THROUGH_KEY] = True
        else:
            flow.metadata[EPISODE_KEY] = key

    def stdio_message(self, rule: str, session: str) -> str | None:
        """The episode a message of a monitored stdio session belongs to now (None: unsampled).
        Asked for each message, as each HTTP request is placed, so that a session that comes back
        after its episode ended starts a new one."""
        self.requests += 1
        return self._episode(rule, session)

    def _episode(self, rule: str, session: str) -> str | None:
        """The open episode of the session under `rule` (begun now if none is); None: not sampled."""
        if not self.sampled(session):
            self.passed_through += 1
            return None
        ident = (rule, session)
        key = self._keys.get(ident)
        if key is None:
            key = self._keys[ident] = self._new_key(session)
            self.sessions[key] = Session(session, rule)
        return key

    def _watch(self, flow: http.HTTPFlow, rule: EpisodeRule) -> None:
        """Warn once when the first requests all went by without the header the user named."""
        if rule.kind == "header":
            self._watched = None
            return
        self._watched.append(list(flow.request.headers.items()))
        if len(self._watched) >= WATCHED_REQUESTS:
            varying = varying_headers(self._watched)
            for i, header in enumerate(self.rules):
                if header.kind == "header":
                    fallback = [str(r) for r in self.rules[i + 1:] if r.kind != "header"]
                    log.warning("episode_by_header_missing",
                                detail=missing_header_warning(str(header), len(self._watched), varying, fallback))
            self._watched = None

    def sampled(self, session: str) -> bool:
        return self.sample >= 1 or decide.fires(self.sample, decide.decision_value(
            self.sample_key, session, SAMPLE_STREAM, 0, SAMPLE_STREAM))

    def close(self, key: str) -> Session | None:
        """The episode `key` is ending: its session's next request starts a new episode."""
        session = self.sessions.pop(key, None)
        if session is not None:
            self._keys.pop((session.rule, session.id), None)
        return session

    def _new_key(self, session: str) -> str:
        """The session id made safe and short, a hash of it whole, and when (a restart's keys differ)."""
        self._serial += 1
        digest = hashlib.blake2b(session.encode(), digest_size=4).hexdigest()
        return f"{_UNSAFE.sub('_', session)[:24]}.{digest}.{_base36(time.time_ns() // 1_000_000)}.{self._serial}"


def _base36(number: int) -> str:
    digits = ""
    while number:
        number, digit = divmod(number, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + digits
    return digits or "0"
