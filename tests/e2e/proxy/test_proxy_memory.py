"""What the proxy keeps is bounded: stale_state's reads per episode (an LRU), the writes
after_write looks at, and episodes nobody began (forgotten once idle, never mid-exchange).
And after_write links collection writes to the reads they change (write_resources)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from aiohttp import web

from faultproxy.formats.trace import read_trace, trace_path
from faultproxy.proxy.episodes import EpisodeLimits
from faultproxy.scenarios import ScenarioError, load_scenario
from tests.support.fixtures import scenario
from tests.support.upstream import ServerThread

STALE_ITEMS = scenario("""
    - name: stale-items
      match: {method: GET, path: "/items/*"}
      fault: {type: stale_state}
    - name: held
      match: {path: "/hold"}
      fault: {type: timeout, hold_s: 3, then: "504"}
""")


def outcomes(proxy, tmp_path, episode: str) -> list[tuple[str, str]]:
    proxy.end_episode(episode)
    return [(line["client"]["outcome"], line["fault"]["detail"] if line["fault"] else "")
            for line in read_trace(trace_path(tmp_path / "flows", episode))]


def test_an_episode_keeps_at_most_its_most_recent_reads(make_proxy, upstream, tmp_path):
    _, server = upstream
    proxy = make_proxy(STALE_ITEMS, limits=EpisodeLimits(reads=3))
    with httpx.Client(proxy=proxy.proxy_url("ep")) as client:
        for i in range(10):
            client.get(f"{server.url}/items/{i}")
            assert len(proxy.injector.episodes.peek("ep").reads) == min(i + 1, 3)
        client.get(f"{server.url}/items/9")  # kept: served stale
        client.get(f"{server.url}/items/0")  # the least recently used: forgotten, so fetched afresh
    assert outcomes(proxy, tmp_path, "ep")[-2:] == [
        ("stale", "served the response of exchange 10"), ("response", "no earlier response to this request")]


def test_writes_after_write_looks_at_are_bounded_too(make_proxy, upstream):
    _, server = upstream
    proxy = make_proxy(STALE_ITEMS, limits=EpisodeLimits(writes=4))
    with httpx.Client(proxy=proxy.proxy_url("ep")) as client:
        for i in range(12):
            client.post(f"{server.url}/items/{i}/refund", json={})
    host = server.url.split("/")[2]
    assert list(proxy.injector.episodes.peek("ep").writes) == [(host, f"/items/{i}/refund") for i in range(8, 12)]


def test_an_idle_episode_nobody_began_is_forgotten_and_a_begun_one_is_kept(make_proxy, upstream, tmp_path):
    _, server = upstream
    proxy = make_proxy(STALE_ITEMS, limits=EpisodeLimits(idle_s=1))
    proxy.begin_episode("begun")
    for episode in ("by-hand", "begun"):
        assert httpx.get(f"{server.url}/items/1", proxy=proxy.proxy_url(episode)).status_code == 200
    assert proxy.episode_stats("by-hand").exchanges == 1
    time.sleep(1.5)  # idle for longer than idle_s
    httpx.get(f"{server.url}/items/1", proxy=proxy.proxy_url("someone"))  # any request sweeps
    assert proxy.episode_stats("by-hand") is None
    assert proxy.episode_stats("begun").exchanges == 1
    assert len(list(read_trace(trace_path(tmp_path / "flows", "by-hand")))) == 1  # its trace was closed whole


def test_an_idle_episode_is_kept_while_an_exchange_is_in_flight(make_proxy, upstream, tmp_path):
    _, server = upstream
    proxy = make_proxy(STALE_ITEMS, limits=EpisodeLimits(idle_s=1))
    statuses = []
    held = threading.Thread(target=lambda: statuses.append(
        httpx.get(f"{server.url}/hold", proxy=proxy.proxy_url("held"), timeout=30).status_code))
    held.start()
    deadline = time.monotonic() + 30
    while (proxy.episode_stats("held") is None or proxy.episode_stats("held").exchanges < 1) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)
    httpx.get(f"{server.url}/items/1", proxy=proxy.proxy_url("someone"))
    assert proxy.episode_stats("held") is not None  # held for 3 s: not forgotten under it
    held.join(30)
    assert statuses == [504]
    assert [line["client"]["status"] for line in read_trace(trace_path(tmp_path / "flows", "held"))] == [504]


def test_the_default_limits_are_the_documented_ones():
    limits = EpisodeLimits()
    assert (limits.reads, limits.writes, limits.idle_s, limits.trace_body_bytes) == (256, 1000, 1800, 1 << 20)


class Shop:
    """Orders read one by one; refunds written to a collection, naming the order in the body."""

    def __init__(self) -> None:
        self.refunded: set[str] = set()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/orders/{id}", self.order)
        app.router.add_post("/refunds", self.refund)
        return app

    async def order(self, request: web.Request) -> web.Response:
        order = request.match_info["id"]
        return web.json_response({"id": order, "refunded": order in self.refunded})

    async def refund(self, request: web.Request) -> web.Response:
        self.refunded.add(str((await request.json())["order_id"]))
        return web.json_response({"ok": True}, status=201)


@pytest.fixture
def shop():
    with ServerThread(Shop().app()) as server:
        yield server


def stale_orders(resources: str) -> str:
    return scenario(f"""
        - name: stale-orders
          match: {{method: GET, path: "/orders/*"}}
          fault: {{type: stale_state, after_write: true{resources}}}
    """)


def read_refund_read(proxy, shop) -> list[bool]:
    with httpx.Client(proxy=proxy.proxy_url("ep")) as client:
        first = client.get(f"{shop.url}/orders/7").json()["refunded"]
        client.post(f"{shop.url}/refunds", json={"order_id": 7})
        client.get(f"{shop.url}/orders/8")
        second = client.get(f"{shop.url}/orders/7").json()["refunded"]
    return [first, second]


def test_a_collection_write_named_by_a_body_field_makes_the_read_stale(make_proxy, shop, tmp_path):
    proxy = make_proxy(stale_orders(', write_resources: ["/orders/{order_id}"]'))
    assert read_refund_read(proxy, shop) == [False, False]  # the refund happened; the agent reads the old order
    assert outcomes(proxy, tmp_path, "ep")[-1] == ("stale", "served the response of exchange 1")


def test_without_write_resources_the_detail_names_the_write_it_did_not_link(make_proxy, shop, tmp_path):
    proxy = make_proxy(stale_orders(""))
    assert read_refund_read(proxy, shop) == [False, True]
    host = shop.url.split("/")[2]
    assert outcomes(proxy, tmp_path, "ep")[-1] == (
        "response", f"no write to {host}/orders/7 since exchange 1; later writes touched {host}/refunds "
                    "(write_resources names what a write touches)")


def test_reverse_mode_links_a_write_to_reads_of_its_own_upstream_only(make_proxy, tmp_path):
    """Two shops with the same paths behind --upstream names: a refund at one (its write_resources
    included) leaves the other's order fresh; a refund at the other makes it stale."""
    with ServerThread(Shop().app()) as first, ServerThread(Shop().app()) as second:
        proxy = make_proxy(stale_orders(', write_resources: ["/orders/{order_id}"]'),
                           upstreams={"first": first.url, "second": second.url})
        with httpx.Client() as client:
            def read() -> bool:
                return client.get(proxy.reverse_url("ep", "second") + "/orders/7").json()["refunded"]

            seen = [read()]
            client.post(proxy.reverse_url("ep", "first") + "/refunds", json={"order_id": 7})
            seen.append(read())
            client.post(proxy.reverse_url("ep", "second") + "/refunds", json={"order_id": 7})
            seen.append(read())
    assert seen == [False, False, False]  # the last read's order was refunded, yet it is served from before
    host, other = (server.url.split("/")[2] for server in (second, first))
    assert outcomes(proxy, tmp_path, "ep")[2:] == [
        ("response", f"no write to {host}/orders/7 since exchange 1; later writes touched {other}/refunds, "
                     f"{other}/orders/7 (write_resources names what a write touches)"),
        ("response", ""), ("stale", "served the response of exchange 1")]


@pytest.mark.parametrize(("resources", "field", "message"), [
    ('"/orders/{order_id}"', "write_resources",  # a string is not taken for a list of one
     "expected a list of path templates, e.g. [\"/orders/{order_id}\"], got the string '/orders/{order_id}'"),
    ('["orders/{order_id}"]', "write_resources[0]", "a path template starts with '/'"),
    ('["/orders/{}"]', "write_resources[0]", "names no body field"),
    ('["/orders/{id"]', "write_resources[0]", "unbalanced braces"),
])
def test_a_bad_write_resource_template_is_one_line_with_its_field(tmp_path, resources, field, message):
    path = tmp_path / "s.yaml"
    path.write_text(stale_orders(f", write_resources: {resources}").replace("\n        ", "\n").strip() + "\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert caught.value.field == f"rules[0].fault.{field}" and message in caught.value.message
    assert caught.value.line is not None
