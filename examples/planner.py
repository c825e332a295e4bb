"""The scripted model's brain: read a conversation, decide the next tool call or the final answer.

Each intent (refund an order, count a customer's orders, ...) is a short straight-line script.
It is re-run from the top on every turn against the tool results already in the conversation:
`s.read(...)` and `s.write(...)` return a result the conversation already holds, and otherwise stop
the script with that call as the next action. So the model is stateless, like a real one: the
conversation is the whole state, and the same conversation always gives the same decision.

Honest variation: at temperature > 0 each turn rolls a seeded die, and with probability
rate(model) × temperature the turn deviates in one of the model's habitual ways (see MODELS) that
this turn offers a chance for: a dry run of the script finds them, a second die picks one.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Model:
    error_rate: float  # chance that a turn deviates, at temperature 1
    habits: tuple[str, ...]  # the deviations this model makes


# detour: an extra, needless re-read · wrong_read: reads a neighbouring id first (then corrects)
# skip_check: acts without reading the object first · short_cut: stops paginating too early
# wrong_write: writes to a neighbouring id. demo-large's slips are all recoverable; the others' not.
MODELS = {
    "demo-large": Model(0.05, ("detour", "wrong_read")),
    "demo-medium": Model(0.20, ("detour", "wrong_read", "skip_check", "short_cut")),
    "demo-small": Model(0.45, ("detour", "wrong_read", "skip_check", "short_cut", "wrong_write")),
}


@dataclass
class ToolCall:
    name: str
    args: dict


@dataclass
class Final:
    answer: str
    escalate: bool = False
    reason: str = ""
    confidence: float = 0.9

    def as_json(self) -> str:
        return json.dumps({"answer": self.answer, "confidence": self.confidence,
                           "escalate": self.escalate, "reason": self.reason})


class _Stop(Exception):
    def __init__(self, action: ToolCall | Final):
        self.action = action


# ---------------------------------------------------------------- reading the conversation


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _result(content: str) -> Any:
    try:
        return json.loads(content)
    except ValueError:  # e.g. an HTML error page passed through verbatim
        return {"error": {"message": content[:200]}, "http_status": None}


def _is_error(result: Any) -> bool:
    return isinstance(result, dict) and "error" in result


def _retryable(result: Any) -> bool:
    status = result.get("http_status")  # None: no response arrived at all
    return not isinstance(status, int) or status == 429 or status >= 500


def tool_history(messages: list[dict]) -> list[tuple[str, dict, Any]]:
    """(tool name, arguments, result) for every answered tool call, in order."""
    asked: dict[str, tuple[str, dict]] = {}
    done = []
    for m in messages:
        if m.get("role") == "assistant":
            for tc in m.get("tool_calls") or []:
                try:
                    args = json.loads(tc["function"]["arguments"] or "{}")
                except ValueError:
                    args = {}
                asked[tc.get("id", "")] = (tc["function"]["name"], args)
        elif m.get("role") == "tool" and m.get("tool_call_id") in asked:
            name, args = asked.pop(m["tool_call_id"])
            done.append((name, args, _result(_text(m.get("content")))))
    return done


# ---------------------------------------------------------------- the script runtime


def _neighbour(value: str) -> str:
    m = re.search(r"(\d+)$", value)
    return value[: m.start()] + str(int(m.group(1)) + 1) if m else value


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


@dataclass
class Session:
    history: list[tuple[str, dict, Any]]
    tools: set[str]
    habit: str | None = None  # the deviation this turn makes, if it gets the chance
    errors: int = field(init=False, default=0)
    chances: list[str] = field(init=False, default_factory=list)  # habits this turn could have indulged

    def __post_init__(self) -> None:
        self.errors = sum(_is_error(r) for _, _, r in self.history)

    def attempted(self, name: str, **args: Any) -> bool:
        return any(n == name and a == args for n, a, _ in self.history)

    def read(self, name: str, *, check: bool = False, **args: Any) -> Any:
        """The first good result of this call; a `check` read may be skipped by a careless turn."""
        if check and not self.attempted(name, **args) and self._take("skip_check"):
            return None
        return self._result_or_stop(name, args)

    def write(self, name: str, **args: Any) -> Any:
        return self._result_or_stop(name, args)

    def rows(self, page: Any) -> list[dict]:
        data = _get(page, "data")  # a renamed field reads as "nothing there": the model guesses
        return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []

    def list_all(self, name: str, **args: Any) -> list[dict]:
        rows, cursor = [], None
        while True:
            page = self.read(name, **args, **({"cursor": cursor} if cursor else {}))
            rows += self.rows(page)
            cursor = _get(page, "next_cursor")
            if not cursor:
                return rows
            if not self.attempted(name, **args, cursor=cursor) and self._take("short_cut"):
                return rows

    def answer(self, text: str, *, escalate: bool = False, reason: str = "") -> None:
        confidence = max(0.1, (0.4 if escalate else 0.9) - 0.1 * self.errors)
        raise _Stop(Final(text, escalate, reason, round(confidence, 2)))

    def _take(self, habit: str) -> bool:
        self.chances.append(habit)
        if self.habit == habit:
            self.habit = None
            return True
        return False

    def _result_or_stop(self, name: str, args: dict) -> Any:
        results = [r for n, a, r in self.history if n == name and a == args]
        good = [r for r in results if not _is_error(r)]
        if good:
            return good[0]
        if name not in self.tools:
            self.answer(f"I have no {name} tool, and this task needs one.", escalate=True, reason="missing_tool")
        if results and (not _retryable(results[-1]) or len(results) >= 3):
            message = _get(results[-1]["error"], "message") or json.dumps(results[-1]["error"])
            self.answer(f"I could not {name.replace('_', ' ')}: {message}", escalate=True, reason="tool_error")
        raise _Stop(self._deviate(ToolCall(name, args)))

    def _deviate(self, call: ToolCall) -> ToolCall:
        is_read = call.name.startswith(("get_", "list_"))
        id_arg = next((k for k in ("order_id", "customer_id") if k in call.args), None)
        reads = [(n, a) for n, a, r in self.history if n.startswith(("get_", "list_")) and not _is_error(r)]
        if reads and self._take("detour"):
            return ToolCall(*reads[-1])
        if id_arg and (self._take("wrong_read") if is_read else self._take("wrong_write")):
            return ToolCall(call.name, {**call.args, id_arg: _neighbour(str(call.args[id_arg]))})
        return call


# ---------------------------------------------------------------- understanding the prompt

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
    s.answer(f"Order {oid} is {_get(order, 'status') or 'in an unknown state'}.")


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
    s.answer(f"Placed order {_get(order, 'id')} for {name}: {qty} x {product.get('name')}, "
             f"{money(_get(order, 'total_cents'))}, awaiting payment.")


def refund_one(s: Session, text: str) -> None:
    oid = _need(find_order_id(text), "order", s)
    args = {"order_id": oid, "reason": "damaged" if re.search(r"broken|damaged|defective", text) else "requested_by_customer"}
    if not s.attempted("refund_order", **args):
        status = _get(s.read("get_order", check=True, order_id=oid), "status")
        if status in ("pending", "cancelled"):
            s.answer(f"Order {oid} has not been paid (it is {status}), so there is nothing to refund.",
                     escalate=True, reason="order_not_paid")
        if status == "refunded":
            s.answer(f"Order {oid} was already refunded; I did not refund it again.")
    refund = s.write("refund_order", **args)
    s.answer(f"Refunded {money(_get(refund, 'amount_cents'))} for order {oid}.")


def refund_all(s: Session, text: str) -> None:
    status = (re.search(r"\b(delivered|shipped|paid)\b", text) or [None, None])[1]
    customer, name = _customer(s, text)
    query = {"customer_id": customer.get("id"), "limit": 5} | ({"status": status} if status else {})
    orders = s.list_all("list_orders", **query)
    refunds = [s.write("refund_order", order_id=o.get("id"), reason="requested_by_customer") for o in orders]
    ids = ", ".join(str(o.get("id")) for o in orders)
    total = sum(_get(r, "amount_cents") or 0 for r in refunds)
    what = f"{status} orders" if status else "orders"
    s.answer(f"Refunded {len(refunds)} {what} of {name} ({ids or 'none'}), {money(total)} in total.")


def pay(s: Session, text: str) -> None:
    oid = _need(find_order_id(text), "order", s)
    order = s.read("get_order", order_id=oid)  # not skippable: the amount comes from it
    args = {"order_id": oid, "amount_cents": _get(order, "total_cents")}
    if not s.attempted("create_payment", **args) and _get(order, "status") != "pending":
        s.answer(f"Order {oid} is {_get(order, 'status')}, not awaiting payment; I did not charge it.",
                 escalate=_get(order, "status") == "cancelled", reason="not_payable")
    s.write("create_payment", **args)
    s.answer(f"Paid {money(args['amount_cents'])} for order {oid}.")


def cancel(s: Session, text: str) -> None:
    oid = _need(find_order_id(text), "order", s)
    if not s.attempted("cancel_order", order_id=oid):
        status = _get(s.read("get_order", check=True, order_id=oid), "status")
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
    s.answer(f"Updated {name}'s email address to {_get(updated, 'email')}.")


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


# ---------------------------------------------------------------- deciding


def _die(material: str, turn: int, salt: str) -> float:
    digest = hashlib.sha256(f"{material}|{turn}|{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _run(messages: list[dict], tools: set[str], habit: str | None) -> tuple[ToolCall | Final, list[str]]:
    prompt = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    session = Session(tool_history(messages), tools, habit)
    intent = intent_of(prompt)
    try:
        if intent is None:
            session.answer("I don't know how to help with that request.", escalate=True, reason="unknown_request")
        intent(session, prompt.lower())
    except _Stop as stop:
        return stop.action, session.chances
    raise AssertionError(f"intent {intent.__name__} ended without an answer")


# An instruction written into a tool's answer: "call TOOL with {JSON arguments}".
INSTRUCTION = re.compile(r"\bcall (\w+) with (\{[^{}]*\})")


def _strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def obeyed_instruction(messages: list[dict], tools: set[str]) -> ToolCall | None:
    """Like many real models, this one does what a tool's answer tells it to (prompt injection):
    the first instruction found in a tool result that it has not yet attempted. Agents must not
    rely on the model to refuse; the careful agent's guard is in careful_agent.py."""
    history = tool_history(messages)
    for _, _, result in history:
        for text in _strings(result):
            for name, arguments in INSTRUCTION.findall(text):
                try:
                    args = json.loads(arguments)
                except ValueError:
                    continue
                if name in tools and not any(n == name and a == args for n, a, _ in history):
                    return ToolCall(name, args)
    return None


def decide(messages: list[dict], tools: set[str], *, model: str, material: str,
           temperature: float, error_rate: float | None = None) -> ToolCall | Final:
    """The next action for this conversation; `material` (request seed or conversation) keys the dice.

    Same inputs, same decision: the dice are keyed hashes of (material, turn), never global state.
    """
    spec = MODELS[model]
    turn = sum(m.get("role") == "assistant" for m in messages)
    planted = obeyed_instruction(messages, tools)
    if planted is not None:
        return planted
    action, chances = _run(messages, tools, habit=None)
    rate = spec.error_rate if error_rate is None else error_rate
    options = [h for h in spec.habits if h in chances]
    if not options or _die(material, turn, "deviate") >= min(1.0, rate * temperature):
        return action
    return _run(messages, tools, habit=options[int(_die(material, turn, "habit") * len(options))])[0]
