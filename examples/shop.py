"""The demo shop: a small stateful tool service that agents act on and faultproxy judges.

Customers, products, orders, payments and refunds, served as REST (the routes in shop_api.yaml)
and as an MCP server over streamable HTTP (`POST /mcp`). Every route is also served under
`/t/{tenant}/...`, one independent copy of the world per tenant, so parallel episodes never share
state. Admin routes: `GET /_state`, `POST /_reset` (body `{"state": name}` picks a seed variant),
`GET /_log` (committed writes, in order).

The world is deterministic: ids come from the state (next free number), timestamps from a
per-tenant logical clock, listings are in id order. Refunds and payments are deliberately not
capped: like many payment back-ends, the only protection against a duplicate is the
Idempotency-Key, so an agent that retries without one visibly refunds twice.

Run it alone with `python examples/shop.py --port 0`: the first line of stdout is its URL.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import re
from collections import OrderedDict
from typing import Any, Callable

from aiohttp import web

try:  # imported as examples.shop, or run as a script from examples/
    from examples.shop_world import OPS, SEED_STATES, SPECS, ShopError, Tenant
except ModuleNotFoundError:
    from shop_world import OPS, SEED_STATES, SPECS, ShopError, Tenant

MCP_PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
MAX_TENANTS = 4096  # least recently used tenants beyond this are forgotten

# ---------------------------------------------------------------- dispatch: validation, idempotency, effects log

TYPES = {"string": str, "integer": int, "array": list, "object": dict}


def check_args(spec: dict, args: dict) -> None:
    params = spec.get("params", {})
    for name, value in args.items():
        if name not in params:
            raise ShopError(400, "unknown_parameter", f"{spec['name']} has no parameter {name!r}.")
        want = TYPES[params[name]["type"]]
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise ShopError(400, "invalid_parameter", f"{name} must be of type {params[name]['type']}.")
    for name in spec.get("required", []):
        if name not in args:
            raise ShopError(400, "missing_parameter", f"{spec['name']} needs {name!r}.")


def rest_path(spec: dict, args: dict) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: str(args[m.group(1)]), spec["path"])


class Shop:
    """All tenants' worlds plus the HTTP front ends (REST, MCP, admin)."""

    def __init__(self, drop_first_refund_response: bool = False):
        # Test-only fault: commit a tenant's first refund, then drop the connection unanswered.
        self.drop_first_refund_response = drop_first_refund_response
        self.tenants: OrderedDict[str, Tenant] = OrderedDict()

    def tenant(self, key: str) -> Tenant:
        if key not in self.tenants:
            self.tenants[key] = Tenant()
            if len(self.tenants) > MAX_TENANTS:
                self.tenants.popitem(last=False)
        self.tenants.move_to_end(key)
        return self.tenants[key]

    def call(self, t: Tenant, name: str, args: dict, key: str | None, transport: str) -> tuple[int, Any, bool]:
        """Run one operation; returns (status, body, replayed)."""
        spec = SPECS[name]
        check_args(spec, args)
        fingerprint = json.dumps(args, sort_keys=True)
        if key and spec["method"] == "POST":
            stored = t.idempotency.get((name, key))
            if stored:
                if stored[0] != fingerprint:
                    raise ShopError(422, "idempotency_key_reused", "This Idempotency-Key was used with different arguments.")
                return stored[1], json.loads(stored[2]), True
        try:
            status, body = OPS[name](t, args)
        except ShopError as e:
            status, body = e.status, e.body()
        body = copy.deepcopy(body)  # the caller may hold it while the world moves on
        if key and spec["method"] == "POST":
            t.idempotency[(name, key)] = (fingerprint, status, json.dumps(body))
        if spec["method"] != "GET" and status < 400:
            t.effects.append({
                "seq": len(t.effects) + 1, "op": name, "method": spec["method"], "path": rest_path(spec, args),
                "status": status, "irreversible": bool(spec.get("irreversible")), "idempotency_key": key,
                "transport": transport,
            })
        return status, body, False

    def should_drop(self, t: Tenant, name: str, status: int, replayed: bool) -> bool:
        if not self.drop_first_refund_response or name != "refund_order" or status >= 400 or replayed:
            return False
        first, t.dropped_refund = not t.dropped_refund, True
        return first

    # ------------------------------------------------------------ HTTP

    def app(self) -> web.Application:
        app = web.Application()
        for prefix in ("", "/t/{tenant}"):
            for spec in SPECS.values():
                app.router.add_route(spec["method"], prefix + spec["path"], self._rest_handler(spec))
            app.router.add_post(prefix + "/mcp", self._mcp)
            app.router.add_get(prefix + "/_state", self._state)
            app.router.add_post(prefix + "/_reset", self._reset)
            app.router.add_get(prefix + "/_log", self._log)
        return app

    def _tenant_of(self, request: web.Request) -> Tenant:
        return self.tenant(request.match_info.get("tenant", "default"))

    def _rest_handler(self, spec: dict) -> Callable:
        params = spec.get("params", {})

        async def handle(request: web.Request) -> web.StreamResponse:
            t = self._tenant_of(request)
            try:
                args = {k: v for k, v in request.match_info.items() if k != "tenant"}
                if spec["method"] in ("POST", "PATCH"):
                    body = await _json_body(request)
                    args.update(body)
                else:
                    for k, v in request.query.items():
                        if params.get(k, {}).get("type") == "integer":
                            try:
                                v = int(v)
                            except ValueError:
                                raise ShopError(400, "invalid_parameter", f"{k} must be an integer.") from None
                        args[k] = v
                status, body, replayed = self.call(t, spec["name"], args, request.headers.get("Idempotency-Key"), "rest")
            except ShopError as e:
                return web.json_response(e.body(), status=e.status)
            if self.should_drop(t, spec["name"], status, replayed):
                return _drop(request)
            return web.json_response(body, status=status, headers={"Idempotent-Replayed": "true"} if replayed else None)

        return handle

    async def _mcp(self, request: web.Request) -> web.StreamResponse:
        """MCP over streamable HTTP, answering every request with a single application/json body."""
        try:
            msg = await request.json()
        except ValueError:
            return _rpc(None, error=(-32700, "Parse error"))
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or "method" not in msg:
            return _rpc(msg.get("id") if isinstance(msg, dict) else None, error=(-32600, "Invalid request"))
        if "id" not in msg:  # a notification, e.g. notifications/initialized
            return web.Response(status=202)
        rid, method, params = msg["id"], msg["method"], msg.get("params") or {}
        if method == "initialize":
            asked = params.get("protocolVersion")
            return _rpc(rid, {
                "protocolVersion": asked if asked in MCP_PROTOCOL_VERSIONS else MCP_PROTOCOL_VERSIONS[0],
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "faultproxy-demo-shop", "version": "1.0.0"},
            })
        if method == "ping":
            return _rpc(rid, {})
        if method == "tools/list":
            return _rpc(rid, {"tools": [_mcp_tool(s) for s in SPECS.values()]})
        if method != "tools/call":
            return _rpc(rid, error=(-32601, f"Method not found: {method}"))
        name, args = params.get("name"), params.get("arguments") or {}
        if name not in SPECS or not isinstance(args, dict):
            return _rpc(rid, error=(-32602, f"Unknown tool {name!r} or arguments not an object"))
        args = dict(args)
        t = self._tenant_of(request)
        key = args.pop("idempotency_key", None)
        try:
            status, body, replayed = self.call(t, name, args, key, "mcp")
        except ShopError as e:
            status, body, replayed = e.status, e.body(), False
        if self.should_drop(t, name, status, replayed):
            return _drop(request)
        if status >= 400:  # tool errors go back as results, with the HTTP status the REST route would give
            body = {"http_status": status, **body}
        return _rpc(rid, {"content": [{"type": "text", "text": json.dumps(body)}], "isError": status >= 400})

    async def _state(self, request: web.Request) -> web.Response:
        return web.json_response(self._tenant_of(request).snapshot())

    async def _reset(self, request: web.Request) -> web.Response:
        try:
            body = await _json_body(request) if request.can_read_body else {}
            name = body.get("state", "default")
            if name not in SEED_STATES:
                raise ShopError(400, "unknown_state", f"Unknown seed state {name!r}; known: {', '.join(SEED_STATES)}.")
        except ShopError as e:
            return web.json_response(e.body(), status=e.status)
        self._tenant_of(request).reset(name)
        return web.json_response({"ok": True, "state": name})

    async def _log(self, request: web.Request) -> web.Response:
        return web.json_response({"effects": self._tenant_of(request).effects})


async def _json_body(request: web.Request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        raise ShopError(400, "invalid_json", "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ShopError(400, "invalid_json", "The request body must be a JSON object.")
    return body


def _drop(request: web.Request) -> web.Response:
    if request.transport is not None:
        request.transport.abort()
    return web.Response()  # never sent: the connection is gone


def _rpc(rid: Any, result: Any = None, error: tuple[int, str] | None = None) -> web.Response:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
    if error:
        msg["error"] = {"code": error[0], "message": error[1]}
    else:
        msg["result"] = result
    return web.json_response(msg)


def _mcp_tool(spec: dict) -> dict:
    props = dict(spec.get("params", {}))
    if spec["method"] == "POST":
        props["idempotency_key"] = {"type": "string",
                                    "description": "Repeat a call with the same key to get the same result, once."}
    schema = {"type": "object", "properties": props, "required": spec.get("required", [])}
    annotations = {"readOnlyHint": spec["method"] == "GET", "destructiveHint": bool(spec.get("irreversible"))}
    return {"name": spec["name"], "description": spec["description"], "inputSchema": schema, "annotations": annotations}


# ---------------------------------------------------------------- standalone server


async def serve(app: web.Application, port: int) -> tuple[web.AppRunner, int]:
    """Start `app` on 127.0.0.1:port (0 = any free port); returns the runner and the bound port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, runner.addresses[0][1]


async def _main(args: argparse.Namespace) -> None:
    _, port = await serve(Shop(args.drop_first_refund_response).app(), args.port)
    print(f"http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--drop-first-refund-response", action="store_true",
                        help="for tests: commit each tenant's first refund, then drop the connection unanswered")
    try:
        asyncio.run(_main(parser.parse_args()))
    except KeyboardInterrupt:
        pass
