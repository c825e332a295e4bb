"""Trace lines are encoded and written on a writer thread (formats.background), off the proxy's
response path; ending an episode waits until its lines are on disk, and a full queue makes the
proxy wait rather than drop a line. An answer the proxy made is traced as its own, not the upstream's."""

from __future__ import annotations

import threading
import time
from functools import partial

import httpx

from faultproxy.formats import background
from faultproxy.formats.trace import read_trace, trace_path
from tests.support.fixtures import NOTHING, scenario


def hold(writer) -> threading.Event:
    """Keep `writer`'s thread busy until the returned event is set; returns once it is held."""
    holding, release = threading.Event(), threading.Event()
    writer.submit(lambda: (holding.set(), release.wait(60)))
    assert holding.wait(30)
    return release


def test_the_client_is_answered_while_the_writer_is_held_and_ending_the_episode_waits_for_its_lines(
        make_proxy, upstream, tmp_path):
    _, server = upstream
    proxy = make_proxy(NOTHING)
    path = trace_path(tmp_path / "flows", "held")
    release = hold(background.WRITER)
    try:
        with httpx.Client(proxy=proxy.proxy_url("held")) as client:
            for n in range(3):
                assert client.get(f"{server.url}/items/{n}").status_code == 200
        # Three answers while the writer could write nothing: the response path did not wait on it.
        assert path.read_bytes() == b""
        stats: list = []
        ending = threading.Thread(target=lambda: stats.append(proxy.end_episode("held")))
        ending.start()
        deadline = time.monotonic() + 30  # the three lines, the file's close and end_episode's flush queued
        while background.WRITER._queue.unfinished_tasks < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ending.is_alive()  # the episode cannot end (and be judged) with its lines still queued
    finally:
        release.set()
    ending.join(30)
    assert stats and stats[0].exchanges == 3
    assert path.read_text().count("\n") == 3  # on disk when end_episode returned: the runner reads them next


def test_a_full_queue_makes_the_submitter_wait_and_drops_nothing():
    writer = background._Writer(size=2)
    release = hold(writer)
    done: list[int] = []
    writer.submit(partial(done.append, 1))
    writer.submit(partial(done.append, 2))  # the queue is full now
    third = threading.Thread(target=writer.submit, args=(partial(done.append, 3),))
    third.start()
    third.join(0.2)
    assert third.is_alive()  # waiting for room, not dropped
    release.set()
    third.join(30)
    writer.flush()
    assert done == [1, 2, 3]


def test_an_answer_the_proxy_made_is_not_recorded_as_the_upstreams(make_proxy, upstream, tmp_path):
    """mitmproxy runs the responseheaders hook for answers set in the request hook too; the
    injector must not take an injected 429 for what the upstream said (replay would serve it)."""
    state, server = upstream
    proxy = make_proxy(scenario("""
        - name: limited
          match: {path: "/items/*"}
          fault: {type: rate_limit}
          when: {calls: [1]}
    """))
    with httpx.Client(proxy=proxy.proxy_url("ep"), verify=str(proxy.ca_bundle)) as http:
        assert [http.get(f"{server.url}/items/1").status_code for _ in range(2)] == [429, 200]
    proxy.end_episode("ep")
    injected, forwarded = read_trace(trace_path(tmp_path / "flows", "ep"))
    assert injected["upstream"] is None and injected["client"]["status"] == 429 and injected["client"]["body"]
    assert forwarded["upstream"]["status"] == 200 and state.hits["GET /items/1"] == 1
