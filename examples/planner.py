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
from dataclasses import dataclass
from typing import Any

try:  # imported as examples.planner, or from examples/ as model_server.py's sibling
    from examples.intents import intent_of
    from examples.script_session import Final, Session, Stop, ToolCall, text_of, tool_history
except ModuleNotFoundError:
    from intents import intent_of
    from script_session import Final, Session, Stop, ToolCall, text_of, tool_history


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


# ---------------------------------------------------------------- deciding


def _die(material: str, turn: int, salt: str) -> float:
    digest = hashlib.sha256(f"{material}|{turn}|{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _run(messages: list[dict], tools: set[str], habit: str | None) -> tuple[ToolCall | Final, list[str]]:
    prompt = next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
    session = Session(tool_history(messages), tools, habit)
    intent = intent_of(prompt)
    try:
        if intent is None:
            session.answer("I don't know how to help with that request.", escalate=True, reason="unknown_request")
        intent(session, prompt.lower())
    except Stop as stop:
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
