"""The scripted model's runtime: what a conversation holds (its answered tool calls), and the
session a script runs in, whose reads and writes return a result the conversation already holds
or stop the script with that call as the next action (see planner.py)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


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


class Stop(Exception):
    def __init__(self, action: ToolCall | Final):
        self.action = action


# ---------------------------------------------------------------- reading the conversation


def text_of(content: Any) -> str:
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
            done.append((name, args, _result(text_of(m.get("content")))))
    return done


# ---------------------------------------------------------------- the script runtime


def _neighbour(value: str) -> str:
    m = re.search(r"(\d+)$", value)
    return value[: m.start()] + str(int(m.group(1)) + 1) if m else value


def field_of(obj: Any, key: str) -> Any:
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
        data = field_of(page, "data")  # a renamed field reads as "nothing there": the model guesses
        return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []

    def list_all(self, name: str, **args: Any) -> list[dict]:
        rows, cursor = [], None
        while True:
            page = self.read(name, **args, **({"cursor": cursor} if cursor else {}))
            rows += self.rows(page)
            cursor = field_of(page, "next_cursor")
            if not cursor:
                return rows
            if not self.attempted(name, **args, cursor=cursor) and self._take("short_cut"):
                return rows

    def answer(self, text: str, *, escalate: bool = False, reason: str = "") -> None:
        confidence = max(0.1, (0.4 if escalate else 0.9) - 0.1 * self.errors)
        raise Stop(Final(text, escalate, reason, round(confidence, 2)))

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
            message = field_of(results[-1]["error"], "message") or json.dumps(results[-1]["error"])
            self.answer(f"I could not {name.replace('_', ' ')}: {message}", escalate=True, reason="tool_error")
        raise Stop(self._deviate(ToolCall(name, args)))

    def _deviate(self, call: ToolCall) -> ToolCall:
        is_read = call.name.startswith(("get_", "list_"))
        id_arg = next((k for k in ("order_id", "customer_id") if k in call.args), None)
        reads = [(n, a) for n, a, r in self.history if n.startswith(("get_", "list_")) and not _is_error(r)]
        if reads and self._take("detour"):
            return ToolCall(*reads[-1])
        if id_arg and (self._take("wrong_read") if is_read else self._take("wrong_write")):
            return ToolCall(call.name, {**call.args, id_arg: _neighbour(str(call.args[id_arg]))})
        return call
