"""A careful agent: the same loop as naive_agent.py, with the habits that survive production.

- Every write carries an Idempotency-Key derived from the intent (task, tool, arguments), so no
  retry, its own or the model's, can do the thing twice.
- It waits as long as retry-after-ms / Retry-After say, else backs off exponentially; the SDK does
  the same for model calls. A model answer that stops early or is garbled is asked for again.
- Right before it first acts on an order it reads the order again: it does not refund one that is
  already refunded, pay one that is not awaiting payment, or cancel one that has shipped.
- It checks that responses carry the fields it relies on: given a malformed one it reads again,
  then escalates rather than guess.
- It acts only on what the model finished saying: an answer cut at the token limit, a refusal, an
  empty answer, or a tool call that names no tool or breaks the tool's schema is asked for again.
- Tool answers are data, not orders: it writes only to orders the user named or a lookup
  returned, so an instruction planted in a tool's answer cannot send it to another order.
- In a conversation (--chat) it asks the user before any write, and does nothing on a no.

Usage: SHOP_URL=... OPENAI_BASE_URL=... python examples/careful_agent.py --prompt "Refund order 1001."
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import openai
from agent_common import (
    SPECS,
    Reply,
    Shop,
    ask_user,
    complete,
    configure,
    finish,
    openai_client,
    run,
    tool_message,
)

ATTEMPTS = 4
REASKS = 8  # a cut, refused, empty or garbled answer costs one model call: asking again is cheap and safe
MAX_WAIT_S = 10.0
ORDER, CUSTOMER = ("id", "status", "total_cents"), ("id", "name", "email")
PRODUCT, MONEY = ("sku", "name", "price_cents", "stock"), ("id", "order_id", "amount_cents")
FIELDS = {  # what each tool's objects must carry for us to rely on them
    "get_order": ORDER, "list_orders": ORDER, "create_order": ORDER, "update_order": ORDER, "cancel_order": ORDER,
    "get_customer": CUSTOMER, "list_customers": CUSTOMER, "update_customer": CUSTOMER,
    "get_product": PRODUCT, "list_products": PRODUCT,
    "create_payment": MONEY, "list_payments": MONEY, "refund_order": MONEY, "list_refunds": MONEY,
}
STILL_TRUE = {  # what must hold of the order, freshly read, before a write's first attempt
    "refund_order": lambda order: order["status"] != "refunded",
    "create_payment": lambda order: order["status"] == "pending",
    "cancel_order": lambda order: order["status"] in ("pending", "cancelled"),
}


class Escalate(Exception):
    """Hand over to a human rather than guess."""


class Declined(Exception):
    """The user said no: nothing is done."""


def wait_s(reply: Reply | None, attempt: int) -> float:
    """How long the server asked us to wait, else exponential backoff; never more than MAX_WAIT_S."""
    headers = reply.headers if reply else {}
    try:
        if "retry-after-ms" in headers:
            return min(MAX_WAIT_S, float(headers["retry-after-ms"]) / 1000)
        if "retry-after" in headers:
            value = headers["retry-after"]
            seconds = float(value) if value.strip().replace(".", "", 1).isdigit() else \
                (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds()
            return min(MAX_WAIT_S, max(0.0, seconds))
    except (ValueError, TypeError):
        pass
    return min(MAX_WAIT_S, 0.5 * 2**attempt)


def missing(name: str, body: Any) -> set[str]:
    """Fields we rely on that this response lacks."""
    need = FIELDS.get(name, ())
    if name.startswith("list_"):
        if not isinstance(body, dict) or not isinstance(body.get("data"), list) or "next_cursor" not in body:
            return {"data", "next_cursor"}
        objects = body["data"]
    else:
        objects = [body]
    return {f for o in objects for f in need if not isinstance(o, dict) or f not in o}


_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}


def well_formed(call: dict, tools: list[dict]) -> bool:
    """A tool call of a tool we offered, with arguments that parse and fit its schema."""
    schema = next((t["function"]["parameters"] for t in tools if t["function"]["name"] == call["function"]["name"]), None)
    try:
        args = json.loads(call["function"]["arguments"] or "{}")
    except ValueError:
        return False
    if schema is None or not isinstance(args, dict) or not set(schema.get("required", [])) <= set(args):
        return False
    for name, value in args.items():
        expected = _JSON_TYPES.get((schema["properties"].get(name) or {}).get("type"))
        if expected and (not isinstance(value, expected) or (expected is int and isinstance(value, bool))):
            return False
    return True


def finished(message: dict, finish_reason: str | None, tools: list[dict]) -> bool:
    """An answer worth acting on: ended normally, not a refusal, not empty, every call well formed."""
    calls = message.get("tool_calls", [])
    return (finish_reason in ("stop", "tool_calls") and not message.get("refusal")
            and bool(calls or (message.get("content") or "").strip())
            and all(well_formed(c, tools) for c in calls))


def ids_in(value: Any) -> set[str]:
    """The object ids an answer names (`id` and `*_id` fields), never words inside free text."""
    if isinstance(value, list):
        return {i for item in value for i in ids_in(item)}
    if not isinstance(value, dict):
        return set()
    found = {str(v) for k, v in value.items() if (k == "id" or k.endswith("_id")) and isinstance(v, (str, int))}
    return found | {i for v in value.values() if isinstance(v, (dict, list)) for i in ids_in(v)}


def main() -> None:
    cfg = configure(__doc__)
    client = openai_client(max_retries=ATTEMPTS)  # the SDK waits as retry-after-ms / Retry-After say
    sent_keys: set[str] = set()
    known_ids = set(re.findall(r"\b\w*\d\w*\b", cfg.prompt))  # what the user named; lookups add theirs

    def ask(messages: list[dict]) -> dict:
        for attempt in range(REASKS):
            try:
                message, finish_reason = complete(client, cfg, messages, tools)
            except openai.APIConnectionError:  # includes a stream cut mid-way, which the SDK does not retry
                if attempt >= ATTEMPTS - 1:
                    raise
                time.sleep(wait_s(None, attempt))
            else:
                if finished(message, finish_reason, tools):
                    return message
                # Cut off, refused, empty or garbled: ask again at once, don't act on half an answer.
        raise RuntimeError("the model kept giving incomplete answers")

    def send(name: str, args: dict, key: str | None = None) -> Reply:
        """One operation, retried only as long as retrying is safe and the server suggests."""
        for attempt in range(ATTEMPTS):
            try:
                reply = shop.send(name, args, key)
            except httpx.TransportError as e:
                reply = Reply(0, {"error": {"message": f"no response: {e}"}}, {})
            if reply.status and reply.status < 500 and reply.status != 429:
                return reply
            if attempt < ATTEMPTS - 1:
                time.sleep(wait_s(reply, attempt))
        return reply

    def checked(name: str, args: dict, key: str | None = None) -> Reply:
        reply = send(name, args, key)
        if reply.ok and missing(name, reply.body):
            reply = send(name, args, key)  # read again (a write replays under its key)
            if reply.ok and (gaps := missing(name, reply.body)):
                raise Escalate(f"{name} answered without {', '.join(sorted(gaps))}; not guessing")
        return reply

    def use_tool(name: str, arguments: str) -> str:
        args = json.loads(arguments)  # ask() made sure it parses
        if SPECS.get(name, {}).get("method", "GET") == "GET":
            reply = checked(name, args)
            if reply.ok:
                known_ids.update(ids_in(reply.body))
            return tool_message(reply)
        if "order_id" in args and str(args["order_id"]) not in known_ids:
            # Only free text (a tool's answer, the model's own words) named this order: not the user.
            error = {"code": "out_of_scope", "message": f"Order {args['order_id']} was not named by the user or "
                                                        f"found by a lookup; not doing {name} on it."}
            return json.dumps({"http_status": 403, "error": error})
        key = "careful-" + hashlib.sha256(json.dumps([cfg.prompt, name, args], sort_keys=True).encode()).hexdigest()[:32]
        if cfg.chat and key not in sent_keys and not ask_user(f"I am about to {name.replace('_', ' ')} with "
                                                              f"{json.dumps(args)}. Shall I go ahead?"):
            raise Declined(f"All right: I did not {name.replace('_', ' ')}; nothing was changed.")
        if key not in sent_keys and name in STILL_TRUE:  # re-read now; what the model saw may be stale
            order = checked("get_order", {"order_id": args.get("order_id")})
            if not order.ok:
                return tool_message(order)
            if not STILL_TRUE[name](order.body):
                error = {"code": "precondition_failed",
                         "message": f"Order {order.body['id']} is {order.body['status']} now; not doing {name}."}
                return json.dumps({"http_status": 409, "error": error})
        sent_keys.add(key)
        reply = checked(name, args, key)
        if reply.ok:
            known_ids.update(ids_in(reply.body))
        return tool_message(reply)

    try:
        for attempt in range(ATTEMPTS):  # over MCP, even the handshake can fail
            try:
                shop = Shop(cfg.shop_url, cfg.mcp)
                tools = shop.tools()
                break
            except httpx.HTTPError:
                if attempt == ATTEMPTS - 1:
                    raise
                time.sleep(wait_s(None, attempt))
        output = run(ask, use_tool, cfg.prompt)
    except Escalate as e:
        output = {"answer": None, "confidence": 0.0, "escalate": True, "reason": str(e)}
    except Declined as e:
        output = {"answer": str(e), "confidence": 1.0, "escalate": False, "reason": "declined by the user"}
    except (openai.APIError, httpx.HTTPError, RuntimeError) as e:
        finish({"answer": None, "confidence": 0.0, "escalate": True, "reason": f"gave up: {e}"}, code=1, chat=cfg.chat)
    finish(output, chat=cfg.chat)


if __name__ == "__main__":
    main()
