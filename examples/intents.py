"""The scripted model's intents: what a prompt asks (refund an order, count a customer's orders,
...), each a short straight-line script run in a Session (script_session.py)."""

from __future__ import annotations

import re
from typing import Any, Callable

try:  # imported as examples.intents, or from examples/ as a script's sibling
    from examples.script_session import Session, field_of
except ModuleNotFoundError:
    from script_session import Session, field_of

NAME = r"([a-z]+ [a-z]+)"
NOT_NAMES = set("a an the all every my our your their this that order orders file stock email address "
                "delivered shipped paid pending one two three four five six seven eight nine ten".split())
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
EMAIL = r"[a-z0-9._%+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)+"


def find_name(text: str) -> str | None:
    for pattern in (rf"\b{NAME}'s\b", rf"\bhas {NAME} (?:placed|made)\b", rf"\b{NAME} has (?:placed|made)\b"):
        if (m := re.search(pattern, text)) and not set(m.group(1).split()) & NOT_NAMES:
            return m.group(1)
    hits = [h for h in re.findall(rf"\b(?:for|of|by|from) {NAME}\b", text) if not set(h.split()) & NOT_NAMES]
    return hits[-1] if hits else None


def find_order_id(text: str) -> str | None:
    m = re.search(r"\border\s*(?:number\s*|no\.?\s*|#\s*)?(\d+)", text) or re.search(r"#\s*(\d+)", text)
    return m.group(1) if m else None


def money(cents: Any) -> str:
    return f"${cents / 100:,.2f}" if isinstance(cents, int) else "an unknown amount"


def _need(value: str | None, what: str, s: Session) -> str:
    if value is None:
        s.answer(f"I could not tell which {what} you mean.", escalate=True, reason="unclear_request")
    return value


def _customer(s: Session, text: str) -> tuple[dict, str]:
    name = _need(find_name(text), "customer", s)
    rows = s.rows(s.read("list_customers", q=name))
    match = [c for c in rows if str(c.get("name", "")).lower() == name] or rows
    if not match:
        s.answer(f"I could not find a customer named {name.title()}.", escalate=True, reason="customer_not_found")
    return match[0], name.title()


def _product(s: Session, word: str) -> dict:
    forms = {word, word.removesuffix("s"), word.removesuffix("es")}
    for p in s.list_all("list_products"):
        if p.get("sku") in forms or forms & set(str(p.get("name", "")).lower().split()):
            return p
    s.answer(f"We do not seem to sell {word}.", escalate=True, reason="unknown_product")
    return {}


# ---------------------------------------------------------------- intents


def order_status(s: Session, text: str) -> None:
    oid = _need(find_order_id(text), "order", s)
    order = s.read("get_order", order_id=oid)
    s.answer(f"Order {oid} is {field_of(order, 'status') or 'in an unknown state'}.")


def email_lookup(s: Session, text: str) -> None:
    customer, name = _customer(s, text)
    s.answer(f"{name}'s email address is {customer.get('email')}.")


def stock(s: Session, text: str) -> None:
    m = re.search(r"how many ([a-z-]+)", text) or re.search(r"stock (?:level )?(?:of|for) (?:the )?([a-z-]+)", text)
    product = _product(s, _need(m and m.group(1), "product", s))
    s.answer(f"{product.get('name')} (sku {product.get('sku')}): {product.get('stock')} in stock.")


def latest_order(s: Session, text: str) -> None:
    customer, name = _customer(s, text)
    orders = s.list_all("list_orders", customer_id=customer.get("id"), limit=5)
    if not orders:
        s.answer(f"{name} has no orders.")
    latest = max(orders, key=lambda o: str(o.get("id", "")).zfill(20))  # ids are numbers, as text
    s.answer(f"{name}'s most recent order is {latest.get('id')}; its status is {latest.get('status')}.")


def count_orders(s: Session, text: str) -> None:
    customer, name = _customer(s, text)
    orders = s.list_all("list_orders", customer_id=customer.get("id"), limit=5)
    s.answer(f"{name} has placed {len(orders)} orders.")


def place_order(s: Session, text: str) -> None:
    m = re.search(r"\b(\d+|a|an|one|two|three|four|five) (?!orders?\b)([a-z-]+) for\b", text)
    m = _need(m, "product", s)
    qty = int(m.group(1)) if m.group(1).isdigit() else NUMBERS[m.group(1)]
    customer, name = _customer(s, text)
    product = _product(s, m.group(2))
    args = {"customer_id": customer.get("id"), "items": [{"sku": product.get("sku"), "qty": qty}]}
    if not s.attempted("create_order", **args) and isinstance(product.get("stock"), int) and product["stock"] < qty:
        s.answer(f"Only {product['stock']} of {product.get('name')} in stock; I did not place the order.",
                 escalate=True, reason="insufficient_stock")
    order = s.write("create_order", **args)
    s.answer(f"Placed order {field_of(order, 'id')} for {name}: {qty} x {product.get('name')}, "
             f"{money(field_of(order, 'total_cents'))}, awaiting payment.")


def refund_one(s: Session, text: str) -> None:
    oid = _need(find_order_id(text), "order", s)
    args = {"order_id": oid, "reason": "damaged" if re.search(r"broken|damaged|defective", text) else "requested_by_customer"}
    if not s.attempted("refund_order", **args):
        status = field_of(s.read("get_order", check=True, order_id=oid), "status")
        if status in ("pending", "cancelled"):
            s.answer(f"Order {oid} has not been paid (it is {status}), so there is nothing to refund.",
                     escalate=True, reason="order_not_paid")
        if status == "refunded":
            s.answer(f"Order {oid} was already refunded; I did not refund it again.")
    refund = s.write("refund_order", **args)
    s.answer(f"Refunded {money(field_of(refund, 'amount_cents'))} for order {oid}.")


def refund_all(s: Session, text: str) -> None:
    status = (re.search(r"\b(delivered|shipped|paid)\b", text) or [None, None])[1]
    customer, name = _customer(s, text)
    query = {"customer_id": customer.get("id"), "limit": 5} | ({"status": status} if status else {})
    orders = s.list_all("list_orders", **query)
    refunds = [s.write("refund_order", order_id=o.get("id"), reason="requested_by_customer") for o in orders]
    ids = ", ".join(str(o.get("id")) for o in orders)
    total = sum(field_of(r, "amount_cents") or 0 for r in refunds)
    what = f"{status} orders" if status else "orders"
    s.answer(f"Refunded {len(refunds)} {what} of {name} ({ids or 'none'}), {money(total)} in total.")


def pay(s: Session, text: str) -> None:
    oid = _need(find_order_id(text), "order", s)
    order = s.read("get_order", order_id=oid)  # not skippable: the amount comes from it
    args = {"order_id": oid, "amount_cents": field_of(order, "total_cents")}
    if not s.attempted("create_payment", **args) and field_of(order, "status") != "pending":
        s.answer(f"Order {oid} is {field_of(order, 'status')}, not awaiting payment; I did not charge it.",
                 escalate=field_of(order, "status") == "cancelled", reason="not_payable")
    s.write("create_payment", **args)
    s.answer(f"Paid {money(args['amount_cents'])} for order {oid}.")


def cancel(s: Session, text: str) -> None:
    oid = _need(find_order_id(text), "order", s)
    if not s.attempted("cancel_order", order_id=oid):
        status = field_of(s.read("get_order", check=True, order_id=oid), "status")
        if status == "cancelled":
            s.answer(f"Order {oid} was already cancelled.")
        if status not in (None, "pending"):
            s.answer(f"Order {oid} is {status}; only pending orders can be cancelled.",
                     escalate=True, reason="not_cancellable")
    s.write("cancel_order", order_id=oid)
    s.answer(f"Cancelled order {oid}.")


def update_email(s: Session, text: str) -> None:
    email = _need((re.search(EMAIL, text) or [None])[0], "new email address", s)
    customer, name = _customer(s, text)
    updated = s.write("update_customer", customer_id=customer.get("id"), email=email)
    s.answer(f"Updated {name}'s email address to {field_of(updated, 'email')}.")


INTENTS: list[tuple[str, Callable[[Session, str], None]]] = [  # first match wins
    (r"\brefund (?:every|all)\b", refund_all),
    (r"\brefund\b", refund_one),
    (r"\bcancel\b", cancel),
    (r"\b(?:pay|charge)\b", pay),
    (rf"\b(?:change|update|set)\b.*\bemail\b|\bemail\b.*\bto {EMAIL}", update_email),
    (r"\b(?:place|create|make)\b.*\border\b", place_order),
    (r"\bhow many orders\b|\bnumber of orders\b", count_orders),
    (r"\b(?:most recent|latest|last|newest)\b.*\border\b", latest_order),
    (r"\bstock\b", stock),
    (r"\bemail\b", email_lookup),
    (r"\border\b", order_status),
]


def intent_of(prompt: str) -> Callable[[Session, str], None] | None:
    text = prompt.lower()
    return next((fn for pattern, fn in INTENTS if re.search(pattern, text)), None)
