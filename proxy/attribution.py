"""Which episode does a request belong to?

Forward mode: the proxy credentials, `http://EPISODE:TOKEN@127.0.0.1:PORT`, sent with every
plain-HTTP request and once with CONNECT, so they are remembered per client connection.
Reverse mode: a path prefix `/EPISODE/UPSTREAM/...`, stripped before forwarding. A client that
sends its reverse-mode request through the forward proxy (it honours HTTP_PROXY and was given the
base URL) is routed the same way: mitmproxy would refuse to connect to its own port.
We do this ourselves rather than with mitmproxy's proxyauth, which would demand Basic auth
from reverse-mode clients too (they send their own Authorization header to the API).

The token travels as the proxy password, or in reverse mode after the episode:
`/EPISODE:TOKEN/UPSTREAM/...` (the episode is percent-encoded, so its first unencoded `:` is
the separator). proxy.auth decides whether it is good; a refused request is answered 407 here
and never reaches the injector, so no episode's trace sees it.
"""

from __future__ import annotations

import base64
import binascii
import collections.abc
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from faultproxy.proxy.auth import EpisodeGate
from mitmproxy import connection, ctx, exceptions, http
from mitmproxy.net.http import url as mitmproxy_url
from mitmproxy.proxy.mode_specs import ReverseMode

EPISODE_KEY = "faultproxy_episode"
PASS_THROUGH_KEY = "faultproxy_pass_through"  # flow.metadata: forward untouched, record nothing (unsampled)
DEFAULT_EPISODE = "default"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})  # where the proxy's own reverse port listens
# A path that mitmproxy's URL parsing (urllib's split and join) gives back unchanged: printable
# ASCII without spaces, `#` or `;`, not ending in an empty query.
_PARSED_AS_IS = re.compile(r"/[!\"$-:<-~]*(?<!\?)")


def episode_of(flow: http.HTTPFlow) -> str:
    return flow.metadata.get(EPISODE_KEY, DEFAULT_EPISODE)


Credentials = tuple[str | None, str | None]  # (episode, token) as a request gives them


def basic_credentials(header: str) -> Credentials:
    """(user, password) of a Basic Proxy-Authorization header; (None, None) if it is not one."""
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None, None
    try:
        user, sep, password = base64.b64decode(encoded).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None, None
    return unquote(user) or None, (unquote(password) if sep else None)


def path_credentials(segment: str) -> Credentials:
    """(episode, token) of a reverse-mode path's first segment, `EPISODE` or `EPISODE:TOKEN`."""
    episode, sep, token = segment.rpartition(":")
    if not sep:
        return unquote(segment) or None, None
    return unquote(episode) or None, token or None


class Attribution:
    """`known`: when given, an episode it does not know is refused (a runner's proxy)."""

    def __init__(self, known: Callable[[str], bool] | None = None) -> None:
        self._tunnels: weakref.WeakKeyDictionary[connection.Client, str] = weakref.WeakKeyDictionary()
        self._upstreams: dict[str, str] = {}
        self._targets: dict[str, ReverseTarget | None] = {}  # each upstream's base URL, parsed once
        self._reverse_ports: frozenset[int] = frozenset()  # found once the reverse servers listen
        self.gate = EpisodeGate(known=known)

    def load(self, loader) -> None:
        loader.add_option(
            "faultproxy_upstreams", collections.abc.Sequence[str], [],
            "Reverse-mode upstreams as NAME=URL; clients use http://HOST:PORT/EPISODE/NAME/... as base URL.",
        )
        loader.add_option(
            "faultproxy_token", str, "",
            "Proxy token every request must carry (EPISODE:TOKEN); empty: any credentials are taken.",
        )

    def configure(self, updated: set[str]) -> None:
        if "mode" in updated:
            self._reverse_ports = frozenset()  # the servers change: look again
        if "faultproxy_token" in updated:
            self.gate.token = ctx.options.faultproxy_token or None
        if "faultproxy_trace_dir" in updated:  # the injector's option: the rejected log sits beside the traces
            self.gate.close()
            self.gate.trace_dir = Path(ctx.options.faultproxy_trace_dir) if ctx.options.faultproxy_trace_dir else None
        if "faultproxy_upstreams" in updated:
            try:
                self._upstreams = parse_upstreams(ctx.options.faultproxy_upstreams)
                self._targets = {name: ReverseTarget.of(base) for name, base in self._upstreams.items()}
            except ValueError as error:
                raise exceptions.OptionsError(str(error)) from None

    def done(self) -> None:
        self.gate.close()

    def http_connect(self, flow: http.HTTPFlow) -> None:
        episode, token = self._take_credentials(flow)
        if episode is None and not self.gate.closed:
            return  # an anonymous tunnel: its requests go to the default episode
        if self._admit(flow, episode, token):
            self._tunnels[flow.client_conn] = episode

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if isinstance(flow.client_conn.proxy_mode, ReverseMode) or self._to_reverse_port(flow):
            self._route_reverse(flow)
            return
        episode, token = self._take_credentials(flow)
        if episode is None and flow.client_conn in self._tunnels:
            # Inside a tunnel whose CONNECT carried a good token; the episode may have ended since.
            episode, token = self._tunnels[flow.client_conn], self.gate.token
        if episode is None and not self.gate.closed:
            episode = DEFAULT_EPISODE
        if self._admit(flow, episode, token):
            flow.metadata[EPISODE_KEY] = episode

    def _admit(self, flow: http.HTTPFlow, episode: str | None, token: str | None) -> bool:
        reason = self.gate.refusal(episode, token)
        if reason:
            self.gate.reject(flow, episode, reason)
        return reason is None

    def _to_reverse_port(self, flow: http.HTTPFlow) -> bool:
        if not self._upstreams or flow.request.host not in LOOPBACK:
            return False
        if not self._reverse_ports:  # mitmproxy asks the sockets each time: once is enough
            servers = ctx.master.addons.get("proxyserver").servers
            self._reverse_ports = frozenset(port for server in servers if isinstance(server.mode, ReverseMode)
                                            for _, port, *_ in server.listen_addrs)
        return flow.request.port in self._reverse_ports

    def _take_credentials(self, flow: http.HTTPFlow) -> Credentials:
        header = flow.request.headers.pop("proxy-authorization", None)
        return basic_credentials(header) if header else (None, None)

    def _route_reverse(self, flow: http.HTTPFlow) -> None:
        upstreams = self._upstreams
        parts = flow.request.path.split("/", 3)  # "", episode, name, rest
        if len(parts) < 3 or parts[2].split("?")[0] not in upstreams:
            known = ", ".join(sorted(upstreams)) or "none configured"
            flow.response = http.Response.make(
                404,
                f"faultproxy: reverse-mode paths are /EPISODE/UPSTREAM/...; upstreams: {known}\n",
                {"content-type": "text/plain"},
            )
            return
        (episode, token), name = path_credentials(parts[1]), parts[2].split("?")[0]
        if episode is None and not self.gate.closed:
            episode = DEFAULT_EPISODE
        if not self._admit(flow, episode, token):
            return
        rest = parts[3] if len(parts) > 3 else parts[2][len(name):]
        flow.metadata[EPISODE_KEY] = episode
        tail = "/" + rest.lstrip("/") if not rest.startswith("?") else rest
        target = self._targets[name]
        if target is not None and _PARSED_AS_IS.fullmatch(tail):
            # What `url = base + tail` sets, without parsing the whole URL again on each request.
            request = flow.request
            request.scheme, request.host, request.port, request.path = (target.scheme, target.host, target.port,
                                                                        target.path + tail)
        else:
            flow.request.url = upstreams[name].rstrip("/") + tail


@dataclass(frozen=True)
class ReverseTarget:
    """An upstream's base URL as mitmproxy parses it (its path without the trailing slash)."""

    scheme: str
    host: str
    port: int
    path: str

    @classmethod
    def of(cls, base: str) -> ReverseTarget | None:
        """None when a path appended to `base` would not simply follow its path (a query or a
        fragment in it), or mitmproxy refuses it (then each request's URL is set, and refused, whole)."""
        base = base.rstrip("/")
        if any(mark in base for mark in "?#;"):
            return None
        try:
            scheme, host, port, path = mitmproxy_url.parse(base + "/")
        except ValueError:
            return None
        return cls(scheme.decode(), host.decode("idna"), port, path.decode().removesuffix("/"))


def parse_upstreams(specs: list[str]) -> dict[str, str]:
    upstreams = {}
    for spec in specs:
        name, sep, url = spec.partition("=")
        if not sep or not name or "://" not in url:
            raise ValueError(f"upstream {spec!r} is not NAME=URL (e.g. openai=https://api.openai.com)")
        upstreams[name] = url
    return upstreams
