"""A booking API whose cancellations commit, for tests of writes the trace cannot see."""

from __future__ import annotations

from aiohttp import web


class Bookings:
    """A booking API: cancelling answers a cancellation id; /admin/state says what is cancelled."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/bookings/{id}/cancel", self.cancel)
        app.router.add_get("/admin/state", self.state)
        return app

    async def cancel(self, request: web.Request) -> web.Response:
        self.cancelled.append(request.match_info["id"])
        return web.json_response({"cancellation_id": f"CX{len(self.cancelled):04d}"}, status=201)

    async def state(self, request: web.Request) -> web.Response:
        return web.json_response({"cancelled": self.cancelled})
