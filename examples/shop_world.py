"""The demo shop's world: the seed data, one tenant's state and logical clock, and the operations
of shop_api.yaml (one function each), which shop.py serves over REST and MCP."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Callable

import yaml

SPECS: dict[str, dict] = {t["name"]: t for t in yaml.load(
    Path(__file__).with_name("shop_api.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["tools"]}

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
