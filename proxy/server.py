"""The proxy, embedded: mitmproxy with faultproxy's addons, in a thread of this process.

    with ProxyServer("rate_limit.yaml", trace_dir=Path("runs/x/flows")) as proxy:
        env["HTTPS_PROXY"] = proxy.proxy_url("episode-1")

Forward mode listens on one port (episodes named by proxy credentials); with upstreams, a
reverse-mode port beside it serves `/EPISODE/NAME/...` (for clients that only take a base URL).
With a token (proxy.auth) every request must carry it; `proxy_url` and `reverse_url` include it.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from faultproxy.formats.errors import UsageError
from faultproxy.proxy.attribution import Attribution
from faultproxy.proxy.auth import is_loopback
from faultproxy.proxy.ca import ca_bundle, default_confdir, ensure_ca, upstream_trust
from faultproxy.proxy.addon_dispatch import handled_only
from faultproxy.proxy.episodes import EpisodeLimits
from faultproxy.proxy.episode_lifecycle import SETTLE_S
from faultproxy.proxy.injector import FaultInjector
from faultproxy.proxy.lean_mitmproxy import CrlOnceTlsConfig, skip_debug_checks
from faultproxy.proxy.mcp_http import McpStreams
from faultproxy.proxy.stdio.lane import StdioLane
from faultproxy.scenarios import Scenario, load_scenario
from faultproxy.tasks.request_class import Declared
from mitmproxy.addons import (
    block,
    core,
    disable_h2c,
    next_layer,
    proxyserver,
    update_alt_svc,
)
from mitmproxy.master import Master
from mitmproxy.options import Options

PLACEHOLDER_UPSTREAM = "http://127.0.0.1:9"  # reverse mode needs a target; attribution replaces it


class ProxyStartError(RuntimeError):
    """mitmproxy did not come up (a port in use, a bad listen address); the message says why."""


@dataclass(frozen=True)
class EpisodeStats:
    """What the proxy counted for one episode: exchanges, model tokens and injected faults; and
    the trace that lost a line to a full disk, if one did (formats.trace.TraceWriter.disk_full)."""

    exchanges: int
    tokens: int
    faults: int
    trace_disk_full: str | None = None
    from_server: int = 0  # of the exchanges, those an MCP server began (its requests and notifications)
    turns: int = 0  # of the exchanges, a conversation's turns (user and agent)
    plumbing: int = 0  # of the exchanges, the MCP session's plumbing (proxy.flow_kinds)

    @property
    def requests(self) -> int:
        """The agent's requests: what a `requests` budget counts (a server's own messages, the
        conversation's turns and the MCP session's plumbing are not)."""
        return self.exchanges - self.from_server - self.turns - self.plumbing


@dataclass(frozen=True)
class LiveEpisode:
    """An episode the proxy holds now (one nobody began ends only when told, or when idle long)."""

    key: str
    idle_s: float  # since its last request began
    in_flight: bool  # an exchange of it is not yet in its trace
    exchanges: int


class ProxyServer:
    """faultproxy's chaos proxy running in a thread of this process; `start()` or `with` it.

    `scenario` is a Scenario, a bundled scenario's name or a path (None: inject nothing);
    `trace_dir` gets one trace per episode; it listens on `host` (loopback by default), `port` 0
    meaning any free port. `token`: requests must carry it (required on any host but loopback:
    an open proxy there lets the network reach this machine's loopback services);
    `only_begun`: refuse episodes not begun with `begin_episode` (or already ended) — a runner's
    proxy, where every episode is begun before its agent starts.
    """

    def __init__(
        self,
        scenario: Scenario | str | Path | None,
        *,
        trace_dir: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        reverse_port: int = 0,
        upstreams: Mapping[str, str] | None = None,
        params: Mapping[str, float] | None = None,
        secret_env: Sequence[str] = (),
        confdir: Path | None = None,
        ssl_insecure: bool = False,
        upstream_ca: Path | None = None,
        injector: FaultInjector | None = None,
        addons: Sequence[object] = (),
        token: str | None = None,
        only_begun: bool = False,
        limits: EpisodeLimits | None = None,
    ) -> None:
        """`injector` replaces the default FaultInjector (e.g. replay's, which answers from a
        recording); `addons` are further mitmproxy addons, added after it. `limits`: what the
        default injector keeps per episode and the trace body limit (EpisodeLimits' defaults)."""
        if scenario is not None and not isinstance(scenario, Scenario):
            scenario = load_scenario(scenario, params)
        if not is_loopback(host) and not token:
            raise UsageError(f"listening on {host} needs a proxy token: without one anyone who reaches the port "
                             "can use the proxy to reach this machine's loopback services")
        self.scenario = scenario
        self.host = host
        self.token = token
        self._only_begun = only_begun
        self.confdir = confdir or default_confdir()
        self.injector = injector or FaultInjector(scenario, limits)
        self._extra_addons = list(addons)
        if upstreams and port == reverse_port == 0:
            reverse_port = free_port(host)  # mitmproxy refuses two modes both on port 0
        self._modes = [f"regular@{port}"] + ([f"reverse:{PLACEHOLDER_UPSTREAM}@{reverse_port}"] if upstreams else [])
        self._options = dict(
            listen_host=host, mode=self._modes, confdir=str(self.confdir),
            ssl_insecure=ssl_insecure, connection_strategy="lazy",
            **({"ssl_verify_upstream_trusted_ca": str(upstream_trust(upstream_ca, self.confdir))}
               if upstream_ca else {}),
        )
        self._addon_options = dict(
            faultproxy_trace_dir=str(trace_dir or ""),
            faultproxy_upstreams=[f"{k}={v}" for k, v in (upstreams or {}).items()],
            faultproxy_secret_env=list(secret_env),
            faultproxy_token=token or "",
        )
        self.port = self.reverse_port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._master: Master | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # -- addresses -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The forward proxy's own address, without episode credentials."""
        return f"http://{self.host}:{self.port}"

    def proxy_url(self, episode: str) -> str:
        """The proxy URL for one episode's clients (HTTP_PROXY): the episode and the proxy's token
        (a placeholder when it has none) travel as credentials."""
        return f"http://{quote(episode, safe='')}:{self.token or 'x'}@{self.host}:{self.port}"

    def reverse_url(self, episode: str, upstream: str) -> str:
        """A base URL that reaches upstream `upstream` (a name given in `upstreams`) for one episode:
        `/EPISODE/NAME`, or `/EPISODE:TOKEN/NAME` when the proxy has a token."""
        credentials = quote(episode, safe="") + (f":{self.token}" if self.token else "")
        return f"http://{self.host}:{self.reverse_port}/{credentials}/{upstream}"

    @functools.cached_property
    def ca_bundle(self) -> Path:
        """System roots plus this proxy's CA; built once (it reads and writes a few hundred kB)."""
        return ca_bundle(self.confdir)

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> ProxyServer:
        """Start listening (ports chosen now when 0); ProxyStartError if mitmproxy does not come up."""
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="faultproxy-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout=30) or self._error:
            self.stop()
            raise ProxyStartError(f"the proxy did not start: {self._error or 'timed out'}")
        return self

    def stop(self) -> None:
        """Close every live episode's trace, then shut mitmproxy down and wait for its thread."""
        if self._loop and self._master and self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self.injector.done(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._master.shutdown)
        if self._thread:
            self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def begin_episode(self, episode: str, scenario: Scenario | None = None,
                      rewrites: dict[str, str | int] | None = None, declared: Declared | None = None) -> None:
        """Start an episode afresh, optionally under its own scenario version (a sweep level), with
        `rewrites` (field -> value, proxy.models.FIELDS) set in its model API requests, and what
        its task declares (irreversible, effects, read_only: for rules that match on `kind:`)."""
        self._call(self.injector.begin_episode, episode, scenario, rewrites, declared)

    def end_episode(self, episode: str) -> EpisodeStats | None:
        """Write what the proxy still holds of the episode (after a bounded wait for upstreams
        still working), close its trace and forget its state; returns what the proxy counted."""
        asyncio.run_coroutine_threadsafe(self.injector.settle_episode(episode), self._loop).result(
            timeout=SETTLE_S + 10)
        state = self._call(self.injector.end_episode, episode)
        if state is None:
            return None
        full = str(state.trace.path) if state.trace and state.trace.disk_full else None
        return EpisodeStats(state.exchanges, state.tokens, state.faults, full, state.from_server, state.turns,
                            state.plumbing)

    def episode_stats(self, episode: str) -> EpisodeStats | None:
        """What the proxy has counted so far for a live episode; None if it knows no such episode."""
        state = self._call(self.injector.episodes.peek, episode)
        return EpisodeStats(state.exchanges, state.tokens, state.faults, None, state.from_server,
                            state.turns, state.plumbing) if state else None

    def live_episodes(self) -> list[LiveEpisode]:
        """Every episode the proxy holds now, with how long it has been idle."""
        def snapshot() -> list[LiveEpisode]:
            now, episodes = time.monotonic(), self.injector.episodes
            return [LiveEpisode(state.key, now - state.last_used, bool(state.inflight), state.exchanges)
                    for state in map(episodes.peek, episodes.keys()) if state is not None]
        return self._call(snapshot)

    def record_turn(self, episode: str, direction: str, text: str, started: float, duration_s: float,
                    reply: int | None = None, end: bool = False, silent: bool = False) -> None:
        """Write a conversation's turn to the episode's trace (proxy.injector.FaultInjector.record_turn)."""
        self._call(self.injector.record_turn, episode, direction, text, started, duration_s, reply, end, silent)

    def call(self, function, *args):
        """Run `function(*args)` on the proxy's loop, where the addons' state lives; its result."""
        return self._call(function, *args)

    def _call(self, function, *args):
        """Run `function` on the proxy's loop, where all episode state lives."""
        async def call():
            return function(*args)
        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=10)

    def _run(self, ready: threading.Event) -> None:
        try:
            asyncio.run(self._serve(ready))
        except BaseException as error:  # reported to start(), which raises it in the caller
            self._error = error
            ready.set()

    async def _serve(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(_quiet_on_cancel)
        skip_debug_checks()
        self._master = Master(Options())
        known = (lambda key: self.injector.episodes.peek(key) is not None) if self._only_begun else None
        attribution = Attribution(known)
        self._master.addons.add(*mitmproxy_addons(), attribution, StdioLane(self.injector, attribution.gate),
                                McpStreams(self.injector, attribution.gate), self.injector, *self._extra_addons)
        handled_only(self._master.addons)  # an event reaches only the addons that handle it
        ensure_ca(self.confdir)  # so that mitmproxy's TlsConfig only loads the CA, never makes a second one
        self._master.options.update(**self._options, **self._addon_options)
        running = asyncio.create_task(self._master.run())
        await self._wait_listening(running)
        gc.freeze()  # what start-up built lives as long as the proxy: keep it out of every collection
        ready.set()
        await running

    async def _wait_listening(self, running: asyncio.Task) -> None:
        servers = self._master.addons.get("proxyserver").servers
        for _ in range(1000):
            if running.done():
                running.result()
                raise ProxyStartError("mitmproxy stopped during start-up")
            failed = [s for s in servers if s.last_exception]
            if failed:  # e.g. the port is taken: say so now rather than time out
                error = failed[0].last_exception
                raise ProxyStartError(f"cannot listen on {self.host} ({failed[0].mode.full_spec}): "
                                      f"{getattr(error, 'strerror', None) or error}")
            addresses = {s.mode.type_name: s.listen_addrs for s in servers if s.listen_addrs}
            if len(addresses) == len(self._modes):
                self.port = addresses["regular"][0][1]
                self.reverse_port = addresses.get("reverse", [(None, 0)])[0][1]
                return
            await asyncio.sleep(0.01)
        raise ProxyStartError(f"could not listen on {self.host} ({', '.join(self._modes)})")


def mitmproxy_addons() -> list[object]:
    """The part of mitmproxy's default addon set a chaos proxy uses.

    mitmproxy calls every addon for every hook of every flow, so each unused one (map-local,
    sticky cookies, server playback, onboarding, ... 24 of the 31 defaults) costs every request.
    """
    return [
        core.Core(),  # option checks and commands
        block.Block(),  # refuses clients from beyond this machine unless told otherwise
        disable_h2c.DisableH2C(),
        proxyserver.Proxyserver(),  # the listening servers
        next_layer.NextLayer(),  # which protocol layer a connection gets
        CrlOnceTlsConfig(),  # the CA, and certificates made for HTTPS clients
        update_alt_svc.UpdateAltSvc(),  # reverse mode: Alt-Svc must not lead clients around the proxy
    ]


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _quiet_on_cancel(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    # Connections still open at shutdown are cancelled; that is the intended way down.
    if not isinstance(context.get("exception"), asyncio.CancelledError):
        loop.default_exception_handler(context)
