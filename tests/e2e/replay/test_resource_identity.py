"""Resource identity from the answer, wherever it is (issue 33 §2), on a booking API unlike the
demo shop: cancellations answer `{"cancellation_id": "CX0001", "audit_id": ...}` (v1) or
`{"cancellation": {"cancellation_id": ...}}` (v2), never a top-level `id`.

A careful agent whose first cancellation's answer is lost retries with the same Idempotency-Key;
the API deduplicates and answers the same cancellation. That is one commit when the task
declares where the id is, or when the usual places hold only it; it is two when the only ids
found differ (v1's per-answer audit id), since then nothing says the upstream deduplicated.
In replay, the careful agent run against the frozen failure of a naive one (a keyless second
cancellation) is judged on what it did, and accepting the replay records that it passes."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import httpx
import pytest
from aiohttp import web

from faultproxy import Episode, run_function, task_set_from_json
from faultproxy.cli.replay import accept
from faultproxy.formats.rundir import read_run
from faultproxy.replay_store import har
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.runner.replay_agents import replay_function
from tests.support.fixtures import scenario
from tests.support.upstream import ServerThread
from tests.support.verdicts import check

LOSE_FIRST_CANCEL = scenario("""
    - name: lose-cancel
      match: {method: POST, path: "*/cancel"}
      fault: {type: response_lost}
      when: {calls: [1]}
""")
DECLARED = {"pattern": "POST */cancel", "id": "cancellation_id"}


class Bookings:
    """Cancels a booking each time it is asked, except that a repeated Idempotency-Key gets the
    cancellation it already made (with a fresh audit id: each answer is audited)."""

    def __init__(self) -> None:
        self.cancellations: list[str] = []
        self.by_key: dict[str, str] = {}
        self.audits = itertools.count(1)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{version}/bookings/{ref}/cancel", self.cancel)
        return app

    async def cancel(self, request: web.Request) -> web.Response:
        key = request.headers.get("Idempotency-Key")
        cancellation = self.by_key.get(key) if key else None
        if cancellation is None:
            cancellation = f"CX{len(self.cancellations) + 1:04d}"
            self.cancellations.append(cancellation)
            if key:
                self.by_key[key] = cancellation
        if request.match_info["version"] == "v2":
            return web.json_response({"cancellation": {"cancellation_id": cancellation, "status": "cancelled"}})
        return web.json_response({"cancellation_id": cancellation, "audit_id": f"AU-{next(self.audits)}"})


@pytest.fixture
def bookings() -> Iterator[tuple[Bookings, str]]:
    world = Bookings()
    with ServerThread(world.app()) as server:
        yield world, server.url


def cancel(episode: Episode, keyed: bool) -> bool:
    """Cancel the booking the task names; on a lost answer, send the cancellation again."""
    url = episode.env["BOOKING_URL"]
    headers = {"Idempotency-Key": f"cancel-{episode.key}"} if keyed else {}
    with httpx.Client(proxy=episode.proxy_url, timeout=10) as client:
        for _ in range(2):
            try:
                return client.post(url, json={"reason": "customer request"}, headers=headers).is_success
            except httpx.TransportError:
                continue
    return False


def careful(episode: Episode) -> bool:
    return cancel(episode, keyed=True)


def naive(episode: Episode) -> bool:
    return cancel(episode, keyed=False)


def booking_task(task_id: str, url: str, irreversible: object) -> dict:
    return {"id": task_id, "prompt": "Cancel the booking.", "env": {"BOOKING_URL": url},
            "irreversible": [irreversible],
            "expected": {"effects": [{"method": "POST", "path": "*/cancel", "count": 1}]}}


def test_a_keyed_retry_answered_with_the_same_cancellation_is_one_commit(tmp_path, bookings):
    world, url = bookings
    tasks = task_set_from_json([
        booking_task("declared", f"{url}/v1/bookings/BK1001/cancel", DECLARED),
        booking_task("nested", f"{url}/v2/bookings/BK1002/cancel", "POST */cancel"),
        booking_task("undeclared", f"{url}/v1/bookings/BK1003/cancel", "POST */cancel"),
    ])
    run_function(careful, tasks, k=1, scenario=scenario_file(tmp_path), out=tmp_path / "run")
    assert world.cancellations == ["CX0001", "CX0002", "CX0003"]  # the API deduplicated every retry
    verdicts = {r["task_id"]: r["verdict"] for r in read_run(tmp_path / "run").episodes}
    for task_id in ("declared", "nested"):
        assert verdicts[task_id]["status"] == "pass", verdicts[task_id]
        assert [f["type"] for f in verdicts[task_id]["faults"]] == ["response_lost"]
    # v1's ids, undeclared: the cancellation and a per-answer audit id, which differ between the two
    # answers; nothing then shows the upstream deduplicated, so the two commits count apart.
    effects = check(verdicts["undeclared"], "effects")
    assert effects["passed"] is False
    assert "(resources audit_id=AU-3 cancellation_id=CX0003, audit_id=AU-4 cancellation_id=CX0003): it did not " \
        "deduplicate (if its answers name the resource elsewhere, say where: irreversible: [{pattern: ..., id: " \
        "FIELD}])" in effects["detail"]


def test_the_careful_agent_replayed_against_the_naive_agents_failure_passes_and_is_accepted(tmp_path, bookings):
    world, url = bookings
    tasks = task_set_from_json([booking_task("cancel_bk1001", f"{url}/v1/bookings/BK1001/cancel", DECLARED)])
    run_function(naive, tasks, k=1, scenario=scenario_file(tmp_path), out=tmp_path / "run")
    assert world.cancellations == ["CX0001", "CX0002"]  # a keyless retry cancels twice
    freeze(tmp_path / "run", tmp_path / "store", failing=True)
    [entry] = har.read_entries(tmp_path / "store")
    assert entry.expect == "fail" and {"effects", "idempotency"} <= set(entry.expect_failed)

    [result] = replay_function(careful, tmp_path / "store", ReplayOptions(out=tmp_path / "replay"))
    assert (result.status, result.failed, result.diverged) == ("pass", [], [])
    assert [s["how"] for s in result.served] == ["exact", "idempotent"]  # answered as the first send was
    assert not result.meets_expectation  # MISMATCH: the entry expects the naive failure
    assert accept([result]) == 0
    [entry] = har.read_entries(tmp_path / "store")
    assert (entry.expect, entry.expect_failed) == ("pass", [])
    [again] = replay_function(careful, tmp_path / "store", ReplayOptions(out=tmp_path / "again"))
    assert again.meets_expectation


def scenario_file(tmp_path) -> str:
    path = tmp_path / "lose-cancel.yaml"
    path.write_text(LOSE_FIRST_CANCEL)
    return str(path)
