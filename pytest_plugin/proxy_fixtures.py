"""pytest fixtures that put one test behind a faultproxy proxy.

    @pytest.mark.faultproxy("rate_limit", params={"lambda": 1.0})
    async def test_agent_survives(faultproxy_client):
        response = await faultproxy_client.get(...)

`faultproxy` is the running ProxyServer (traces in the test's tmp_path/flows); the test's own
episode key is `faultproxy_episode`; `faultproxy_client` is an httpx.AsyncClient routed
through the proxy under that episode.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from faultproxy.proxy.server import ProxyServer

try:
    import pytest_asyncio
except ImportError:  # the async fixture needs pytest-asyncio; the rest works without it
    pytest_asyncio = None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "faultproxy(scenario, **options): run the test behind a faultproxy proxy with this scenario"
    )


@pytest.fixture
def faultproxy(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProxyServer]:
    marker = request.node.get_closest_marker("faultproxy")
    if marker is None:
        raise pytest.UsageError("the faultproxy fixture needs @pytest.mark.faultproxy(SCENARIO, ...)")
    options = dict(marker.kwargs)
    scenario = marker.args[0] if marker.args else options.pop("scenario")
    options.setdefault("trace_dir", tmp_path / "flows")
    with ProxyServer(scenario, **options) as server:
        yield server


@pytest.fixture
def faultproxy_episode(request: pytest.FixtureRequest) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)


if pytest_asyncio is not None:

    @pytest_asyncio.fixture
    async def faultproxy_client(faultproxy: ProxyServer, faultproxy_episode: str) -> AsyncIterator[httpx.AsyncClient]:
        proxy_url = faultproxy.proxy_url(faultproxy_episode)
        async with httpx.AsyncClient(proxy=proxy_url, verify=str(faultproxy.ca_bundle)) as client:
            yield client
