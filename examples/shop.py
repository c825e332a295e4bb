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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Callable

import yaml
from aiohttp import web

SPECS: dict[str, dict] = {t["name"]: t for t in yaml.load(
    Path(__file__).with_name("shop_api.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["tools"]}
MCP_PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
MAX_TENANTS = 4096  # least recently used tenants beyond this are forgotten

# ---------------------------------------------------------------- seed data

PRODUCTS = [  # sku, name, price_cents, stock
    ("mug", "Ceramic mug", 1200, 40),
    ("tee", "T-shirt", 2500, 12),
    ("hoodie", "Hoodie", 5500, 3),
    ("stickers", "Sticker pack", 400, 250),
    ("poster", "Poster", 1800, 0),
]
CUSTOMERS = [  # id, name, email, address
    ("c1", "Ada Lovelace", "ada@example.com", "12 St James's Square, London"),
    ("c2", "Grace Hopper", "grace@example.com", "1 Navy Yard, Arlington"),
    ("c3", "Alan Turing", "alan@example.com", "43 Adlington Road, Wilmslow"),
    ("c4", "Katherine Johnson", "katherine@example.com", "7 Langley Blvd, Hampton"),
    ("c5", "Edsger Dijkstra", "edsger@example.com", "Plataanstraat 5, Nuenen"),
    ("c6", "Barbara Liskov", "barbara@example.com", "32 Vassar St, Cambridge"),
]
ORDERS = [  # id, customer, status, {sku: qty}
    (1001, "c1", "delivered", {"mug": 2}),
    (1002, "c2", "shipped", {"hoodie": 1}),
    (1003, "c3", "pending", {"tee": 1, "stickers": 2}),
    (1004, "c4", "pending", {"poster": 1, "mug": 1}),
    (1005, "c3", "delivered", {"hoodie": 1, "tee": 1}),
    (1006, "c5", "pending", {"stickers": 3}),
    (1007, "c2", "delivered", {"mug": 1}),
    (1008, "c1", "delivered", {"tee": 1}),
    (1009, "c3", "delivered", {"mug": 3}),
    (1010, "c6", "refunded", {"hoodie": 1}),
    (1011, "c1", "shipped", {"stickers": 5}),
    (1012, "c3", "delivered", {"poster": 2}),
    (1013, "c1", "cancelled", {"mug": 1}),
    (1014, "c2", "paid", {"tee": 2}),
    (1015, "c1", "delivered", {"hoodie": 1}),
    (1016, "c1", "delivered", {"mug": 1, "stickers": 1}),
    (1017, "c1", "paid", {"poster": 1}),
    (1018, "c1", "delivered", {"tee": 3}),
    (1019, "c4", "delivered", {"mug": 4}),
    (1020, "c1", "delivered", {"stickers": 10}),
    (1021, "c1", "shipped", {"tee": 1, "mug": 1}),
    (1022, "c1", "delivered", {"hoodie": 2}),
    (1023, "c1", "pending", {"mug": 1}),
]
PAID = {"paid", "shipped", "delivered", "partially_refunded", "refunded"}
SEED_EPOCH = datetime(2025, 1, 1, 9, 0, tzinfo=UTC)
CLOCK_EPOCH = datetime(2025, 4, 1, 12, 0, tzinfo=UTC)  # where each tenant's logical clock starts


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _busy_extras() -> tuple[list, list]:
    """More customers and orders, all unrelated to the named ones: longer listings, same answers."""
    customers = [(f"c{i}", f"Customer {i}", f"customer{i}@example.com", f"{i} High Street, Leeds") for i in range(7, 31)]
    statuses = ["delivered", "shipped", "pending", "paid", "cancelled"]
    skus = [p[0] for p in PRODUCTS if p[0] != "poster"]
    orders = [(1024 + i, f"c{7 + i % 24}", statuses[i % 5], {skus[i % 4]: 1 + i % 3}) for i in range(48)]
    return customers, orders


def seed(name: str) -> dict:
    """A fresh copy of one named seed state."""
    customers, orders = list(CUSTOMERS), list(ORDERS)
    if name == "busy":
        extra_customers, extra_orders = _busy_extras()
        customers += extra_customers
        orders += extra_orders
    elif name != "default":
        raise KeyError(name)
    prices = {sku: price for sku, _, price, _ in PRODUCTS}
    state: dict[str, dict] = {
        "customers": {c: {"id": c, "name": n, "email": e, "address": a} for c, n, e, a in customers},
        "products": {s: {"sku": s, "name": n, "price_cents": p, "stock": k} for s, n, p, k in PRODUCTS},
        "orders": {},
        "payments": {},
        "refunds": {},
    }
    for i, (oid, cid, status, items) in enumerate(orders):
        created = iso(SEED_EPOCH + timedelta(days=i))
        lines = [{"sku": s, "qty": q, "unit_price_cents": prices[s]} for s, q in items.items()]
        total = sum(line["qty"] * line["unit_price_cents"] for line in lines)
        order = {
            "id": str(oid), "customer_id": cid, "status": status, "items": lines, "total_cents": total,
            "paid_cents": total if status in PAID else 0,
            "refunded_cents": total if status == "refunded" else 0,
            "shipping_address": state["customers"][cid]["address"], "created_at": created,
        }
        state["orders"][order["id"]] = order
        if status in PAID:
            pid = f"pay_{len(state['payments']) + 1}"
            state["payments"][pid] = {"id": pid, "order_id": order["id"], "amount_cents": total,
                                      "status": "captured", "created_at": created}
        if status == "refunded":
            rid = f"re_{len(state['refunds']) + 1}"
            state["refunds"][rid] = {"id": rid, "order_id": order["id"], "amount_cents": total,
                                     "reason": "requested_by_customer", "created_at": created}
    return state


SEED_STATES = ("default", "busy")

# ---------------------------------------------------------------- the world of one tenant


class ShopError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message}}


def natural(key: str) -> tuple:
    """Sort key that puts c2 before c10 and 999 before 1000."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", key) if p)


class Tenant:
    def __init__(self, state_name: str = "default"):
        self.reset(state_name)

    def reset(self, state_name: str) -> None:
        self.state = seed(state_name)
        self.clock = 0
        self.idempotency: dict[tuple[str, str], tuple[str, int, str]] = {}  # (op, key) -> (args, status, body)
        self.effects: list[dict] = []
        self.dropped_refund = False

    def now(self) -> str:
        self.clock += 1
        return iso(CLOCK_EPOCH + timedelta(seconds=self.clock))

    def get(self, table: str, key: Any, what: str) -> dict:
        found = self.state[table].get(str(key))
        if found is None:
            raise ShopError(404, f"{what}_not_found", f"No {what} with id {key!r}.")
        return found

    def snapshot(self) -> dict:
        return {table: {k: rows[k] for k in sorted(rows, key=natural)} for table, rows in self.state.items()}


# ---------------------------------------------------------------- operations (one per spec)

OPS: dict[str, Callable[[Tenant, dict], tuple[int, Any]]] = {}


def op(fn: Callable[[Tenant, dict], tuple[int, Any]]) -> Callable:
    OPS[fn.__name__] = fn
    return fn


def page(rows: list[dict], key: str, args: dict) -> tuple[int, dict]:
    limit = args.get("limit", 10)
    if not 1 <= limit <= 50:
        raise ShopError(400, "invalid_limit", "limit must be between 1 and 50.")
    rows = sorted(rows, key=lambda r: natural(r[key]))
    if args.get("cursor"):
        rows = [r for r in rows if natural(r[key]) > natural(args["cursor"])]
    data = rows[:limit]
    return 200, {"data": data, "next_cursor": data[-1][key] if len(rows) > limit else None}


@op
def list_customers(t: Tenant, a: dict) -> tuple[int, Any]:
    q = a.get("q", "").strip().lower()
    rows = [c for c in t.state["customers"].values() if q in c["name"].lower() or q in c["email"].lower()]
    return page(rows, "id", a)


@op
def get_customer(t: Tenant, a: dict) -> tuple[int, Any]:
    return 200, t.get("customers", a["customer_id"], "customer")


@op
def update_customer(t: Tenant, a: dict) -> tuple[int, Any]:
    customer = t.get("customers", a["customer_id"], "customer")
    changes = {k: a[k] for k in ("name", "email", "address") if k in a}
    if not changes:
        raise ShopError(400, "nothing_to_update", "Give at least one of name, email, address.")
    if "email" in changes and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", changes["email"]):
        raise ShopError(422, "invalid_email", f"{changes['email']!r} is not an email address.")
    customer.update(changes)
    return 200, customer


@op
def list_products(t: Tenant, a: dict) -> tuple[int, Any]:
    return page(list(t.state["products"].values()), "sku", a)


@op
def get_product(t: Tenant, a: dict) -> tuple[int, Any]:
    return 200, t.get("products", a["sku"], "product")


@op
def list_orders(t: Tenant, a: dict) -> tuple[int, Any]:
    rows = [o for o in t.state["orders"].values()
            if a.get("customer_id") in (None, o["customer_id"]) and a.get("status") in (None, o["status"])]
    return page(rows, "id", a)


@op
def get_order(t: Tenant, a: dict) -> tuple[int, Any]:
    return 200, t.get("orders", a["order_id"], "order")


@op
def create_order(t: Tenant, a: dict) -> tuple[int, Any]:
    customer = t.get("customers", a["customer_id"], "customer")
    if not a["items"]:
        raise ShopError(422, "no_items", "An order needs at least one item.")
    lines = []
    for item in a["items"]:
        if not isinstance(item, dict) or not isinstance(item.get("qty"), int) or item["qty"] < 1:
            raise ShopError(422, "invalid_item", f"Each item needs a sku and a positive qty, got {item!r}.")
        product = t.get("products", item.get("sku"), "product")
        if product["stock"] < item["qty"]:
            raise ShopError(409, "insufficient_stock", f"Only {product['stock']} of {product['sku']} in stock.")
        lines.append({"sku": product["sku"], "qty": item["qty"], "unit_price_cents": product["price_cents"]})
    for line in lines:
        t.state["products"][line["sku"]]["stock"] -= line["qty"]
    oid = str(max(int(k) for k in t.state["orders"]) + 1)
    order = {
        "id": oid, "customer_id": customer["id"], "status": "pending", "items": lines,
        "total_cents": sum(line["qty"] * line["unit_price_cents"] for line in lines),
        "paid_cents": 0, "refunded_cents": 0, "shipping_address": customer["address"], "created_at": t.now(),
    }
    t.state["orders"][oid] = order
    return 201, order


@op
def update_order(t: Tenant, a: dict) -> tuple[int, Any]:
    order = t.get("orders", a["order_id"], "order")
    if order["status"] not in ("pending", "paid"):
        raise ShopError(409, "order_not_editable", f"Order {order['id']} is {order['status']}; it can no longer be changed.")
    order["shipping_address"] = a["shipping_address"]
    return 200, order


@op
def cancel_order(t: Tenant, a: dict) -> tuple[int, Any]:
    order = t.get("orders", a["order_id"], "order")
    if order["status"] == "cancelled":  # DELETE is idempotent
        return 200, order
    if order["status"] != "pending":
        raise ShopError(409, "order_not_cancellable",
                        f"Order {order['id']} is {order['status']}; only pending orders can be cancelled.")
    for line in order["items"]:
        t.state["products"][line["sku"]]["stock"] += line["qty"]
    order["status"] = "cancelled"
    return 200, order


@op
def create_payment(t: Tenant, a: dict) -> tuple[int, Any]:
    order = t.get("orders", a["order_id"], "order")
    if order["status"] == "cancelled":
        raise ShopError(409, "order_cancelled", f"Order {order['id']} is cancelled.")
    if a["amount_cents"] <= 0:
        raise ShopError(422, "invalid_amount", "amount_cents must be positive.")
    pid = f"pay_{len(t.state['payments']) + 1}"
    payment = {"id": pid, "order_id": order["id"], "amount_cents": a["amount_cents"], "status": "captured",
               "created_at": t.now()}
    t.state["payments"][pid] = payment
    order["paid_cents"] += a["amount_cents"]
    if order["status"] == "pending" and order["paid_cents"] >= order["total_cents"]:
        order["status"] = "paid"
    return 201, payment


@op
def list_payments(t: Tenant, a: dict) -> tuple[int, Any]:
    return page([p for p in t.state["payments"].values() if a.get("order_id") in (None, p["order_id"])], "id", a)


@op
def refund_order(t: Tenant, a: dict) -> tuple[int, Any]:
    order = t.get("orders", a["order_id"], "order")
    if order["status"] not in PAID:
        raise ShopError(409, "order_not_paid", f"Order {order['id']} is {order['status']}; there is no payment to refund.")
    amount = a.get("amount_cents", order["total_cents"])  # not capped: see the module docstring
    if amount <= 0:
        raise ShopError(422, "invalid_amount", "amount_cents must be positive.")
    rid = f"re_{len(t.state['refunds']) + 1}"
    refund = {"id": rid, "order_id": order["id"], "amount_cents": amount,
              "reason": a.get("reason", "requested_by_customer"), "created_at": t.now()}
    t.state["refunds"][rid] = refund
    order["refunded_cents"] += amount
    order["status"] = "refunded" if order["refunded_cents"] >= order["total_cents"] else "partially_refunded"
    return 201, refund


@op
def list_refunds(t: Tenant, a: dict) -> tuple[int, Any]:
    return page([r for r in t.state["refunds"].values() if a.get("order_id") in (None, r["order_id"])], "id", a)


assert OPS.keys() == SPECS.keys(), "shop_api.yaml and the operations above must agree"

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
