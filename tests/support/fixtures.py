"""Shared fixtures (registered by tests/conftest.py): local upstreams (HTTP and HTTPS) and a faultproxy
proxy per scenario; `scenario` writes the YAML a test hands to `make_proxy`."""

from __future__ import annotations

import os
import ssl
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from faultproxy.proxy.server import ProxyServer
from tests.support.upstream import ServerThread, Upstream, make_certificate

# Property tests judge what a function returns, not how fast: on a loaded 2-core machine one
# example can take a second (seen: 1.4 s for a 20 ms redaction), past hypothesis's 200 ms deadline
# and its too-slow health check.
settings.register_profile("loaded-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("loaded-machine")


@pytest.fixture(scope="session", autouse=True)
def faultproxy_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Keep mitmproxy's CA out of the user's home, and make it once per session."""
    home = tmp_path_factory.mktemp("faultproxy-home")
    previous = os.environ.get("FAULTPROXY_HOME")
    os.environ["FAULTPROXY_HOME"] = str(home)
    yield home
    if previous is None:
        del os.environ["FAULTPROXY_HOME"]
    else:
        os.environ["FAULTPROXY_HOME"] = previous


@pytest.fixture(scope="session")
def upstream_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("upstream-cert"))


@pytest.fixture
def upstream() -> Iterator[tuple[Upstream, ServerThread]]:
    state = Upstream()
    with ServerThread(state.app()) as server:
        yield state, server


@pytest.fixture
def https_upstream(upstream_certificate: tuple[Path, Path]) -> Iterator[tuple[Upstream, ServerThread]]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*upstream_certificate)
    state = Upstream()
    with ServerThread(state.app(), context) as server:
        yield state, server


@pytest.fixture
def make_proxy(tmp_path: Path, upstream_certificate: tuple[Path, Path]):
    """Start a proxy for a scenario given as YAML text (dedented); stopped after the test."""
    started: list[ProxyServer] = []

    def start(scenario_yaml: str, **options) -> ProxyServer:
        path = tmp_path / f"scenario{len(started)}.yaml"
        path.write_text(textwrap.dedent(scenario_yaml))
        options.setdefault("trace_dir", tmp_path / "flows")
        options.setdefault("upstream_ca", upstream_certificate[0])
        proxy = ProxyServer(path, **options).start()
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()


def scenario(rules: str, params: str = "{}", seed: int = 7) -> str:
    """A scenario document around a block of rules (YAML, indented as written)."""
    return f"name: test\ndescription: a test scenario\nseed: {seed}\nparams: {params}\nrules:\n" + textwrap.indent(
        textwrap.dedent(rules), "  "
    )


# A scenario whose one rule matches no request: the proxy records every exchange and injects nothing.
NOTHING = scenario("""
    - name: never
      match: {path: "/never"}
      fault: {type: reset}
""")
