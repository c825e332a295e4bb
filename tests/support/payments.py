"""A payments API that commits every refund it is sent (the `payments` fixture, registered by
tests/conftest.py, serves it and names it in PAY_URL), and the one-task tasks file that refunds through it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.upstream import ServerThread


class Payments:
    """A payments API that commits every refund it is sent — it ignores idempotency keys — and
    answers each with a new refund id; `/_reset` answers `reset_status`."""

    def __init__(self, reset_status: int = 200) -> None:
        self.refunds: list[dict] = []
        self.reset_status = reset_status
        self.hold: asyncio.Event | None = None  # when set up, refunds wait for it (an upstream still working)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/refunds", self.refund)
        app.router.add_post("/_reset", self.reset)
        app.router.add_get("/_state", self.state)
        return app

    async def refund(self, request: web.Request) -> web.Response:
        body = await request.json()
        if self.hold is not None:
            await self.hold.wait()
        refund = {"id": f"rf_{len(self.refunds) + 1}", "order": body.get("order"), "status": "succeeded"}
        self.refunds.append(refund)
        return web.json_response(refund, status=201)

    async def reset(self, request: web.Request) -> web.Response:
        if self.reset_status >= 400:
            return web.json_response({"error": "reset is down"}, status=self.reset_status)
        self.refunds.clear()
        return web.json_response({"ok": True})

    async def state(self, request: web.Request) -> web.Response:
        return web.json_response({"refunds": len(self.refunds)})


@pytest.fixture
def payments(monkeypatch) -> Iterator[tuple[Payments, ServerThread]]:
    world = Payments()
    with ServerThread(world.app()) as server:
        monkeypatch.setenv("PAY_URL", server.url)
        yield world, server


def tasks_file(folder: Path, url: str, **expected) -> Path:
    task = {"id": "refund_1001", "prompt": "Refund order 1001.", "shape": "writes_state",
            "irreversible": ["POST */refunds"],
            "expected": {"effects": [{"method": "POST", "path": "*/refunds", "count": 1}], **expected},
            "reset_url": f"{url}/_reset", "state_url": f"{url}/_state"}
    path = folder / "tasks.jsonl"
    path.write_text(json.dumps(task) + "\n")
    return path
