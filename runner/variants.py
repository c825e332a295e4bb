"""The k honest variants of one task: the same intent, reworded, from a declared initial state.

Variant i of a task depends on nothing but `task_id:i` (a local random.Random seeded on that
string, never the global one), so variant 3 of a task is the same input in every run, process and
release. Variant 0 is the task as written, in its first state. The others pick one rewording
(lower-cased; "I need to ..."; "... Please be thorough."; "..., if you can."; a context prefix such
as "Quick one from the support queue: "), sometimes with a context prefix on top, and a state
drawn from the task's `states`.

A rewording changes wording and casing only around the facts: quoted strings and identifier-like
tokens (anything with a digit, `_`, `@`, `/`, `#`, or a capital after its first letter: ORD-7F3A,
SKU_12, VIP) are kept exactly, so every number, id and quotation reaches the agent unchanged.

A user's own variant function, "module:function", is called as `function(task_json, index)` for
every index (0 included) and returns overrides: {"prompt": str, "state": str | None}, either key
optional (None or {} keeps the built-in variant).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import random
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from faultproxy.formats.yaml_input import suggest
from faultproxy.tasks.task_user import User
from faultproxy.tasks.task_model import Task

VariantFunction = Callable[[dict, int], "Mapping[str, Any] | None"]

_SPEC = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# Quoted spans first (so a quotation is one piece), then any other run of non-space characters.
_PIECE = re.compile(r'"[^"\n]*"|“[^”\n]*”|‘[^’\n]*’|`[^`\n]*`|(?<!\w)\'[^\'\n]*\'(?!\w)|\S+')
_QUOTES = ('"', "“", "‘", "`", "'")
_EDGE_PUNCTUATION = ".,;:!?()[]{}<>\"'“”‘’`"
_NOT_IMPERATIVE = frozenset("""
    i i'm i've i'd i'll we we're our my me you your the a an this that these those there it it's its
    what which who whom whose where when why how is are was were am can could do does did will would
    should shall may might must have has had hi hello hey dear please thanks thank
""".split())
CONTEXTS = ("Quick one from the support queue: ", "From a customer ticket: ", "New request: ")


def variant_seed(task_id: str, index: int) -> int:
    """A stable 31-bit int from sha256 of "task_id:index" (for the agent, the model server, ...)."""
    digest = hashlib.sha256(f"{task_id}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class Variant:
    task_id: str
    index: int
    prompt: str
    state: str | None
    seed: int

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "index": self.index, "prompt": self.prompt, "state": self.state,
                "seed": self.seed}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Variant:
        return cls(data["task_id"], int(data["index"]), data["prompt"], data.get("state"), int(data["seed"]))


# --- rewordings ---------------------------------------------------------------------------------


def _protected(piece: str) -> bool:
    """A quotation or an identifier-like token: kept exactly as written."""
    if piece.startswith(_QUOTES) and len(piece) > 1:
        return True
    core = piece.strip(_EDGE_PUNCTUATION)
    return any(c.isdigit() or c in "_@/#" for c in core) or any(c.isupper() for c in core[1:])


def _pieces(text: str) -> list[tuple[str, bool]]:
    """`text` cut into (piece, protected) runs covering it exactly, whitespace included."""
    out: list[tuple[str, bool]] = []
    end = 0
    for match in _PIECE.finditer(text):
        if match.start() > end:
            out.append((text[end:match.start()], False))
        out.append((match.group(), _protected(match.group())))
        end = match.end()
    if end < len(text):
        out.append((text[end:], False))
    return out


def _lower(text: str) -> str:
    """Lower-case all but the protected pieces (and the pronoun I)."""
    return "".join(piece if protected or piece.strip(_EDGE_PUNCTUATION).split("'")[0] == "I" else piece.lower()
                   for piece, protected in _pieces(text))


def _first_word(text: str) -> str:
    words = text.split(None, 1)
    return words[0].strip(_EDGE_PUNCTUATION).lower() if words else ""


def _need_to(text: str) -> str:
    """ "I need to refund ..." for an imperative; a request phrased otherwise keeps its words."""
    original = text
    if _first_word(text) == "please" and len(text.split(None, 1)) == 2:
        text = text.split(None, 1)[1]
    first = text.split(None, 1)[0]
    if first.isalpha() and not _protected(first) and first.lower() not in _NOT_IMPERATIVE:
        return f"I need to {text[0].lower()}{text[1:]}"
    text = original
    if text.rstrip().endswith("?"):
        return f"I need to know this: {text}"
    return f"I need help with this: {text}"


def _thorough(text: str) -> str:
    return f"{text}{'.' if text[-1].isalnum() else ''} Please be thorough."


def _if_you_can(text: str) -> str:
    question = text.endswith("?")
    core = text.rstrip(".?!").rstrip() or text
    return f"{core}, if you can{'?' if question else '.'}"


def _context(text: str, rng: random.Random) -> str:
    return rng.choice(CONTEXTS) + text


REWORDINGS: tuple[str, ...] = ("lower", "need_to", "thorough", "if_you_can", "context")


def reword(prompt: str, rng: random.Random) -> str:
    """One honest rewording of `prompt`, chosen by `rng`; never `prompt` itself."""
    text = prompt.strip()
    kind = rng.choice(REWORDINGS)
    if not text:
        return prompt
    if kind == "lower":
        text = _lower(text)
    elif kind == "need_to":
        text = _need_to(text)
    elif kind == "thorough":
        text = _thorough(text)
    elif kind == "if_you_can":
        text = _if_you_can(text)
    else:
        text = _context(text, rng)
    if kind != "context" and (rng.random() < 0.35 or text in (prompt, prompt.strip())):  # never a plain copy
        text = _context(text, rng)
    return text


REPLY_REWORDINGS: tuple[str, ...] = ("lower", "thorough", "if_you_can")  # nothing before the reply's first word


def reword_reply(reply: str, rng: random.Random) -> str:
    """One honest rewording of a user's reply, chosen by `rng`, that keeps its first word where it
    was (so "Yes, ..." still starts with yes, "No, ..." with no); never `reply` itself."""
    text = reply.strip()
    if not text:
        return reply
    for kind in rng.sample(REPLY_REWORDINGS, len(REPLY_REWORDINGS)):
        worded = _lower(text) if kind == "lower" else _thorough(text) if kind == "thorough" else _if_you_can(text)
        if worded != text:
            return worded
    return text


def user_variant(user: User, task_id: str, index: int) -> User:
    """The task's user as variant `index` meets it: with `rephrase`, each scripted reply reworded
    (reword_reply, seeded on "task_id:index:user.replies[j]"); variant 0 says them as written."""
    if not user.rephrase or index == 0:
        return user
    replies = tuple(reply if reply.silent else replace(
        reply, say=reword_reply(reply.say, random.Random(f"{task_id}:{index}:user.replies[{j}]")))
        for j, reply in enumerate(user.replies))
    return replace(user, replies=replies)


# --- variants -----------------------------------------------------------------------------------


def make_variant(task: Task | Mapping[str, Any], index: int,
                 custom: VariantFunction | str | None = None) -> Variant:
    """Variant `index` of `task` (a Task or its to_json dict). `custom` is a user's variant
    function or its "module:function" spec; its overrides replace the built-in prompt and state."""
    if not isinstance(task, Task):
        task = Task.from_json(task)
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise ValueError(f"a variant index is an integer >= 0, got {index!r}")
    if index == 0:
        prompt, state = task.prompt, (task.states[0] if task.states else None)
    else:
        rng = random.Random(f"{task.id}:{index}")
        prompt = reword(task.prompt, rng)
        state = rng.choice(task.states) if task.states else None
    if custom is not None:
        function = load_variant_function(custom) if isinstance(custom, str) else custom
        prompt, state = _apply_custom(function, task, index, prompt, state)
    return Variant(task.id, index, prompt, state, variant_seed(task.id, index))


def make_variants(task: Task | Mapping[str, Any], k: int, custom: VariantFunction | str | None = None) -> list[Variant]:
    """Variants 0..k-1 of `task`."""
    if isinstance(custom, str):
        custom = load_variant_function(custom)
    return [make_variant(task, i, custom) for i in range(k)]


def _name(function: Callable[..., Any]) -> str:
    module = getattr(function, "__module__", None) or "?"
    return f"{module}:{getattr(function, '__qualname__', repr(function))}"


def _apply_custom(function: VariantFunction, task: Task, index: int, prompt: str,
                  state: str | None) -> tuple[str, str | None]:
    name = _name(function)
    where = f"variant function {name} (task '{task.id}', variant {index})"
    try:
        overrides = function(task.to_json(), index)
    except Exception as exc:
        raise ValueError(f"{where} raised {type(exc).__name__}: {exc}") from exc
    if overrides is None:
        return prompt, state
    if not isinstance(overrides, Mapping):
        raise ValueError(f"{where} must return a dict of overrides (prompt, state), got {type(overrides).__name__}")
    unknown = sorted(set(overrides) - {"prompt", "state"})
    if unknown:
        raise ValueError(f"{where} returned unknown key(s) {', '.join(map(repr, unknown))}; "
                         "it may override only 'prompt' and 'state'")
    if "prompt" in overrides:
        prompt = overrides["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{where} returned a prompt that is not a non-empty string: {prompt!r}")
    if "state" in overrides:
        state = overrides["state"]
        if state is not None and not isinstance(state, str):
            raise ValueError(f"{where} returned a state that is not a string or None: {state!r}")
        if state is not None and task.states and state not in task.states:
            raise ValueError(f"{where} returned state {state!r}, which the task does not declare "
                             f"(states: {', '.join(task.states)})")
    return prompt, state


def load_variant_function(spec: str) -> VariantFunction:
    """Import "module:function" (the module from sys.path or the current directory); ValueError
    naming the spec and the reason if it cannot be used as `function(task_json, index)`."""
    if not isinstance(spec, str) or not _SPEC.fullmatch(spec):
        raise ValueError(f"variant function {spec!r}: expected \"module:function\", e.g. myvariants:make_variant")
    module_name, attribute = spec.split(":")
    added = os.getcwd() not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ValueError(f"variant function {spec!r}: no module named '{exc.name}' "
                             "(is it on PYTHONPATH or in the current directory?)") from exc
        raise ValueError(f"variant function {spec!r}: importing '{module_name}' failed: {exc}") from exc
    except Exception as exc:
        raise ValueError(f"variant function {spec!r}: importing '{module_name}' failed: "
                         f"{type(exc).__name__}: {exc}") from exc
    finally:
        if added:
            sys.path.remove(os.getcwd())
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            names = [n for n in dir(target) if not n.startswith("_")]
            close = [n for n in names if callable(getattr(target, n, None))]
            raise ValueError(f"variant function {spec!r}: '{module_name}' has no attribute '{attribute}'"
                             + suggest(part, close))
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"variant function {spec!r}: '{attribute}' is a {type(target).__name__}, not a function")
    try:
        inspect.signature(target).bind({}, 0)
    except TypeError as exc:
        raise ValueError(f"variant function {spec!r}: it must accept (task_json, index): {exc}") from exc
    except ValueError:  # no signature available (some builtins): let the call decide
        pass
    return target
