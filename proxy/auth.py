"""Who may write into an episode's trace: the proxy token, the episodes the proxy knows, and the
log of what it refused.

Without a token any client that can reach the port could name any episode and shift its call
indexes (and so its faults and its verdict). With one (`faultproxy run` makes a random one per
run; `faultproxy proxy --auth` takes $FAULTPROXY_TOKEN or makes one), a request must carry it
as the proxy password (forward mode, `http://EPISODE:TOKEN@HOST:PORT`) or after the episode in
its first path segment (reverse mode, `/EPISODE:TOKEN/NAME/...`); a runner's proxy also refuses
an episode it has not begun (or has ended). A refused request gets 407 and one line in
`flows/_rejected.jsonl` (formats.trace owns it), never a line in an episode's trace.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import structlog
from faultproxy.formats.errors import UsageError
from faultproxy.formats.redact import Redactor
from faultproxy.formats.trace import RejectedLog, is_reserved_episode, rejected_path
from mitmproxy import http

log = structlog.get_logger("faultproxy")

TOKEN_BYTES = 18  # 24 URL-safe characters: never guessed, and it fits in a path segment
MIN_TOKEN_CHARS = 16


def new_token() -> str:
    """A random token for one run's proxy (security, not a fault decision: no keyed hash here)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def check_token(token: str, source: str) -> str:
    """A token a user chose: long enough not to be guessed, and plain enough for a URL."""
    if len(token) < MIN_TOKEN_CHARS or not token.replace("-", "").replace("_", "").isalnum():
        raise UsageError(f"{source} must be at least {MIN_TOKEN_CHARS} letters, digits, '-' or '_'")
    return token


def is_loopback(host: str) -> bool:
    """Does listening on `host` keep the proxy to this machine?"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class EpisodeGate:
    """Decides whether a request may speak for an episode; answers and logs the refused ones.

    `token`: what credentials must carry (None: any, the hand-run default on loopback).
    `known`: when given, an episode it does not know is refused (a runner's proxy: only the
    episodes it began and has not ended).
    """

    def __init__(self, token: str | None = None, known: Callable[[str], bool] | None = None) -> None:
        self.token = token or None
        self.known = known
        self.trace_dir: Path | None = None
        self._log: RejectedLog | None = None
        self._redactor = Redactor()

    @property
    def closed(self) -> bool:
        """Must every request name an episode with credentials (no anonymous default episode)?"""
        return self.token is not None or self.known is not None

    def refusal(self, episode: str | None, token: str | None) -> str | None:
        """Why a request naming `episode` with `token` is refused, or None if it may pass."""
        if episode is None:
            return "no episode credentials" if self.closed else None
        if self.token is not None and (token is None or not hmac.compare_digest(token.encode(), self.token.encode())):
            return "wrong token" if token else "no token"
        if is_reserved_episode(episode):
            return "reserved episode name"
        if self.known is not None and not self.known(episode):
            return "unknown episode"
        return None

    def reject(self, flow: http.HTTPFlow, episode: str | None, reason: str) -> None:
        """Answer 407 and log the request to flows/_rejected.jsonl (no token, no query string)."""
        flow.response = http.Response.make(
            407, f"faultproxy: {reason}; use http://EPISODE:TOKEN@HOST:PORT as the proxy\n",
            {"content-type": "text/plain", "proxy-authenticate": 'Basic realm="faultproxy"'},
        )
        request = flow.request
        host, port = flow.client_conn.peername[:2]
        record = {"time": round(time.time(), 6), "client": f"{host}:{port}", "method": request.method,
                  "url": self._redactor.url(request.pretty_url.split("?")[0]), "episode": episode, "reason": reason}
        log.warning("request refused", **record)
        if self.trace_dir is not None:
            if self._log is None:
                self._log = RejectedLog(rejected_path(self.trace_dir))
            self._log.write(record)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
