"""Which episode does a request belong to?

Forward mode: the proxy credentials, `http://EPISODE:TOKEN@127.0.0.1:PORT`, sent with every
plain-HTTP request and once with CONNECT, so they are remembered per client connection.
Reverse mode: a path prefix `/EPISODE/UPSTREAM/...`, stripped before forwarding. A client that
sends its reverse-mode request through the forward proxy (it honours HTTP_PROXY and was given the
base URL) is routed the same way: mitmproxy would refuse to connect to its own port.
We do this ourselves rather than with mitmproxy's proxyauth, which would demand Basic auth
from reverse-mode clients too (they send their own Authorization header to the API).
"""

from __future__ import annotations

import base64
import binascii
import collections.abc
import weakref
from urllib.parse import unquote

from mitmproxy import connection, ctx, exceptions, http
from mitmproxy.proxy.mode_specs import ReverseMode

EPISODE_KEY = "faultproxy_episode"
DEFAULT_EPISODE = "default"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})  # where the proxy's own reverse port listens


def episode_of(flow: http.HTTPFlow) -> str:
    return flow.metadata.get(EPISODE_KEY, DEFAULT_EPISODE)


def basic_username(header: str) -> str | None:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        return unquote(base64.b64decode(token).decode().split(":", 1)[0]) or None
    except (binascii.Error, UnicodeDecodeError):
        return None


class Attribution:
    def __init__(self) -> None:
        self._tunnels: weakref.WeakKeyDictionary[connection.Client, str] = weakref.WeakKeyDictionary()
        self._upstreams: dict[str, str] = {}

    def load(self, loader) -> None:
        loader.add_option(
            "faultproxy_upstreams", collections.abc.Sequence[str], [],
            "Reverse-mode upstreams as NAME=URL; clients use http://HOST:PORT/EPISODE/NAME/... as base URL.",
        )

    def configure(self, updated: set[str]) -> None:
        if "faultproxy_upstreams" in updated:
            try:
                self._upstreams = parse_upstreams(ctx.options.faultproxy_upstreams)
            except ValueError as error:
                raise exceptions.OptionsError(str(error)) from None

    def http_connect(self, flow: http.HTTPFlow) -> None:
        episode = self._take_credentials(flow)
        if episode:
            self._tunnels[flow.client_conn] = episode

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if isinstance(flow.client_conn.proxy_mode, ReverseMode) or self._to_reverse_port(flow):
            self._route_reverse(flow)
            return
        episode = self._take_credentials(flow) or self._tunnels.get(flow.client_conn)
        flow.metadata[EPISODE_KEY] = episode or DEFAULT_EPISODE

    def _to_reverse_port(self, flow: http.HTTPFlow) -> bool:
        if not self._upstreams or flow.request.host not in LOOPBACK:
            return False
        servers = ctx.master.addons.get("proxyserver").servers
        return any(flow.request.port == port for server in servers if isinstance(server.mode, ReverseMode)
                   for _, port, *_ in server.listen_addrs)

    def _take_credentials(self, flow: http.HTTPFlow) -> str | None:
        header = flow.request.headers.pop("proxy-authorization", None)
        return basic_username(header) if header else None

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
        episode, name = unquote(parts[1]), parts[2].split("?")[0]
        rest = parts[3] if len(parts) > 3 else parts[2][len(name):]
        flow.metadata[EPISODE_KEY] = episode
        base = upstreams[name].rstrip("/")
        flow.request.url = base + "/" + rest.lstrip("/") if not rest.startswith("?") else base + rest


def parse_upstreams(specs: list[str]) -> dict[str, str]:
    upstreams = {}
    for spec in specs:
        name, sep, url = spec.partition("=")
        if not sep or not name or "://" not in url:
            raise ValueError(f"upstream {spec!r} is not NAME=URL (e.g. openai=https://api.openai.com)")
        upstreams[name] = url
    return upstreams
