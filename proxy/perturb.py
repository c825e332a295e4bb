"""ε: semantics-preserving perturbation of JSON response bodies.

A perturbation must not change the outcome of a correct agent: the body is rewritten into
another text of the same JSON value — keys in another order, other whitespace, numbers written
another way (1250, 1250.0, 1.25e3, 1.25E+3), strings with other (equivalent) escapes. Parsing
the result gives a value equal (==, so 1250 == 1250.0) to parsing the original. An agent that
breaks on it depends on formatting, not on data.

Pure functions, no random generator: every choice is derived from one number in [0, 1) that
the caller draws with proxy.decide.decision_value, so the same episode gets the same
perturbation on a rerun, whatever runs beside it.

    value = decision_value(seed, episode, "epsilon", seq, stream="perturb-form")
    new_body = perturb_json_body(body, value)      # None: not JSON, leave the body alone

Not perturbed (None): bodies that are not strict UTF-8 JSON (a BOM, NaN/Infinity, bad syntax,
nesting too deep to walk) and empty bodies. Objects with a duplicate key keep their key order
(which duplicate wins depends on it); integers beyond 2**53 keep their digits (as floats they
would round).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

KINDS = ("key_order", "whitespace", "numbers", "escapes")
LAYOUTS = ("compact", "spaced", "indent2", "indent4", "tab", "loose")
KEY_ORDERS = ("reverse", "sorted", "rotate", "hashed")
NUMBER_STYLES = ("point", "exponent", "exponent_upper", "trailing_zero", "shifted")
JSON_TYPES = ("application/json",)


def is_json_content_type(content_type: str | None) -> bool:
    """application/json, or any application/*+json (problem+json, vnd.api+json, ...)."""
    if not content_type:
        return False
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime in JSON_TYPES or (mime.startswith("application/") and mime.endswith("+json"))


@dataclass(frozen=True)
class Perturbation:
    body: bytes
    changes: tuple[str, ...]  # which of KINDS changed the text, e.g. ("key_order", "numbers")

    @property
    def detail(self) -> str:
        return "perturbed: " + ", ".join(self.changes)


def perturb_json_body(body: bytes, value: float) -> bytes | None:
    """An equivalent JSON text of `body`, different from it; None if `body` is not JSON."""
    result = perturb_json(body, value)
    return result.body if result else None


def perturb_response(content_type: str | None, body: bytes | None, value: float) -> Perturbation | None:
    """For the proxy: perturb a decoded response body only if its content type says JSON."""
    if not body or not is_json_content_type(content_type):
        return None
    return perturb_json(body, value)


def perturb_json(body: bytes, value: float) -> Perturbation | None:
    """perturb_json_body with the kinds of change it made (for the trace)."""
    if not 0 <= value < 1:
        raise ValueError(f"the draw must lie in [0, 1), got {value}")
    document = _parse(body)
    if document is None:
        return None
    draws = _Draws(value)
    enabled = {kind for kind in KINDS if draws.next() < 2 / 3} or {KINDS[int(draws.next() * 3)]}
    layout = LAYOUTS[int(draws.next() * len(LAYOUTS))] if "whitespace" in enabled else _layout_of(body)
    writer = _Writer(
        layout=layout,
        key_order=KEY_ORDERS[int(draws.next() * len(KEY_ORDERS))] if "key_order" in enabled else None,
        numbers="numbers" in enabled,
        escapes="escapes" in enabled,
        draws=draws,
    )
    try:
        text = writer.write(document)
    except RecursionError:
        return None
    out = text.encode("utf-8")
    if out == body:  # nothing to reorder or reformat, and the layout happened to match: add whitespace
        out = body + b"\n" if not body.endswith(b"\n") else b" " + body
    if not _same_value(body, out):  # cannot happen by construction; never send a changed value
        return None
    changes = set(writer.changed)
    if _whitespace_runs(out) != _whitespace_runs(body):
        changes.add("whitespace")
    return Perturbation(out, tuple(kind for kind in KINDS if kind in changes))


# --- parsing, keeping what the value does not fix -------------------------------------------------


class _Object(list):
    """A JSON object as its (key, value) pairs in source order (duplicates kept)."""


@dataclass(frozen=True)
class _Number:
    text: str  # the number as written in the source


class _NotStrict(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NotStrict(name)  # NaN, Infinity: Python's json accepts them, JSON does not


def _parse(body: bytes) -> Any:
    if not body:
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.startswith("\ufeff"):
        return None
    try:
        return json.loads(text, object_pairs_hook=_Object, parse_int=_Number, parse_float=_Number,
                          parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None


def _same_value(a: bytes, b: bytes) -> bool:
    try:
        return json.loads(a) == json.loads(b)
    except (ValueError, RecursionError):
        return False


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_WHITESPACE = re.compile(rb"[ \t\n\r]+")


def _whitespace_runs(data: bytes) -> Counter[bytes]:
    """The whitespace between tokens, as a multiset: reordering keys keeps it, a new layout not."""
    return Counter(_WHITESPACE.findall(_STRING.sub(b'""', data)))


def _layout_of(body: bytes) -> str:
    """The layout closest to the source's, used when whitespace is not a chosen change."""
    head = body[:4096]
    if b"\n\t" in head:
        return "tab"
    if b"\n    " in head:
        return "indent4"
    if b"\n  " in head:
        return "indent2"
    return "spaced" if (b": " in head or b", " in head) else "compact"


class _Draws:
    """Numbers in [0, 1) derived from one draw by a keyed hash: a stream, not a generator."""

    def __init__(self, value: float) -> None:
        self.key = repr(float(value)).encode()
        self.count = 0

    def next(self) -> float:
        self.count += 1
        return self.of(str(self.count))

    def of(self, label: str) -> float:
        digest = hashlib.blake2b(label.encode("utf-8"), key=self.key, digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2.0**64


# --- writing --------------------------------------------------------------------------------------


class _Writer:
    def __init__(self, layout: str, key_order: str | None, numbers: bool, escapes: bool, draws: _Draws) -> None:
        self.layout, self.key_order, self.numbers, self.escapes, self.draws = layout, key_order, numbers, escapes, draws
        self.item_sep, self.key_sep = {"compact": (",", ":"), "spaced": (", ", ": "),
                                       "loose": (" , ", " : ")}.get(layout, (",", ": "))
        self.indent = {"indent2": "  ", "indent4": "    ", "tab": "\t"}.get(layout)
        self.changed: set[str] = set()

    def write(self, document: Any) -> str:
        parts: list[str] = []
        self._value(document, parts, 0)
        text = "".join(parts)
        if self.layout == "loose":
            text = " " + text + " \n"
        elif self.indent:
            text += "\n"
        return text

    def _newline(self, parts: list[str], depth: int) -> None:
        if self.indent:
            parts.append("\n" + self.indent * depth)

    def _value(self, node: Any, parts: list[str], depth: int) -> None:
        if isinstance(node, _Object):
            self._object(node, parts, depth)
        elif isinstance(node, list):
            if not node:
                parts.append("[]")
                return
            parts.append("[")
            for i, item in enumerate(node):
                if i:
                    parts.append(self.item_sep)
                self._newline(parts, depth + 1)
                self._value(item, parts, depth + 1)
            self._newline(parts, depth)
            parts.append("]")
        elif isinstance(node, _Number):
            parts.append(self._number(node.text))
        elif isinstance(node, str):
            parts.append(self._string(node))
        else:  # True, False, None
            parts.append(json.dumps(node))

    def _object(self, pairs: _Object, parts: list[str], depth: int) -> None:
        if not pairs:
            parts.append("{}")
            return
        ordered = self._order(pairs)
        parts.append("{")
        for i, (key, item) in enumerate(ordered):
            if i:
                parts.append(self.item_sep)
            self._newline(parts, depth + 1)
            parts.append(self._string(key))
            parts.append(self.key_sep)
            self._value(item, parts, depth + 1)
        self._newline(parts, depth)
        parts.append("}")

    def _order(self, pairs: _Object) -> list[tuple[str, Any]]:
        keys = [key for key, _ in pairs]
        if self.key_order is None or len(pairs) < 2 or len(set(keys)) != len(keys):
            return list(pairs)  # with a duplicate key, the order decides which one counts
        if self.key_order == "reverse":
            ordered = pairs[::-1]
        elif self.key_order == "sorted":
            ordered = sorted(pairs, key=lambda kv: kv[0])
            if ordered == list(pairs):
                ordered = ordered[::-1]
        elif self.key_order == "rotate":
            shift = 1 + int(self.draws.of("rotate") * (len(pairs) - 1))
            ordered = pairs[shift:] + pairs[:shift]
        else:
            ordered = sorted(pairs, key=lambda kv: self.draws.of("key\x1f" + kv[0]))
            if ordered == list(pairs):
                ordered = ordered[::-1]
        if [key for key, _ in ordered] != keys:
            self.changed.add("key_order")
        return list(ordered)

    def _string(self, text: str) -> str:
        if not self.escapes:
            return json.dumps(text, ensure_ascii=False)
        escaped = json.dumps(text, ensure_ascii=True).replace("/", "\\/")  # "/" is never inside an escape
        if escaped != json.dumps(text, ensure_ascii=False):
            self.changed.add("escapes")
        return escaped

    def _number(self, text: str) -> str:
        if not self.numbers or self.draws.next() < 1 / 3:
            return text  # leave some numbers as they were
        start = int(self.draws.next() * len(NUMBER_STYLES))
        for i in range(len(NUMBER_STYLES)):
            candidate = number_form(text, NUMBER_STYLES[(start + i) % len(NUMBER_STYLES)])
            if candidate is not None and candidate != text:
                self.changed.add("numbers")
                return candidate
        return text


# --- numbers ------------------------------------------------------------------------------------

MAX_EXACT_INT = 2**53


def number_form(text: str, style: str) -> str | None:
    """`text` (a JSON number) written in `style`, or None when that would change its value.

    Every form is the same decimal value as `text`; it is kept only if JSON parsing gives a
    number equal to the original's (an int beyond 2**53 written as a float would round, and so
    would a float written out as a long integer), which `json.loads(a) == json.loads(b)` checks.
    """
    try:
        exact = Decimal(text)
    except InvalidOperation:
        return None
    if not exact.is_finite() or exact.is_zero() and exact.is_signed():
        return None
    sign, digits, exponent = exact.as_tuple()
    assert isinstance(exponent, int)
    minus = "-" if sign else ""
    significant = "".join(map(str, digits)).lstrip("0") or "0"
    # value = significant × 10^power, with significant's trailing zeros folded into power
    power = exponent + (len(digits) - len("".join(map(str, digits)).lstrip("0") or "0"))
    if significant != "0":
        stripped = significant.rstrip("0")
        power += len(significant) - len(stripped)
        significant = stripped
    else:
        power = 0
    adjusted = power + len(significant) - 1  # exponent with one digit before the point
    mantissa = significant[0] + ("." + significant[1:] if len(significant) > 1 else "")
    if style == "exponent":
        candidate = f"{minus}{mantissa}e{adjusted}"
    elif style == "exponent_upper":
        candidate = f"{minus}{mantissa}E{'+' if adjusted >= 0 else '-'}{abs(adjusted)}"
    elif style == "shifted":  # two digits before the point: 1250 -> 12.5e2
        if len(significant) < 2:
            candidate = f"{minus}{significant}0e{power - 1}"
        else:
            rest = significant[2:]
            candidate = f"{minus}{significant[:2]}{'.' + rest if rest else ''}e{adjusted - 1}"
    elif style in ("point", "trailing_zero"):
        fixed = _fixed(significant, power)
        if fixed is None:
            return None
        if "." not in fixed:
            fixed += ".0" if style == "point" else ".00"
        elif style == "trailing_zero":
            fixed += "0"
        candidate = minus + fixed
    else:
        raise ValueError(f"unknown number style {style!r}")
    return candidate if _equal_numbers(text, candidate) else None


def _fixed(significant: str, power: int) -> str | None:
    """significant × 10^power in positional notation; None if absurdly long."""
    if abs(power) > 40:
        return None
    if power >= 0:
        return significant + "0" * power
    point = len(significant) + power
    if point > 0:
        return significant[:point] + "." + significant[point:]
    return "0." + "0" * (-point) + significant


def _equal_numbers(a: str, b: str) -> bool:
    try:
        x, y = json.loads(a), json.loads(b)
    except ValueError:
        return False
    if isinstance(x, int) and abs(x) > MAX_EXACT_INT and not isinstance(y, int):
        return False
    return x == y and math.isfinite(x)


def iter_forms(text: str) -> Iterator[str]:
    """Every distinct equivalent form of a JSON number that number_form offers."""
    seen = {text}
    for style in NUMBER_STYLES:
        form = number_form(text, style)
        if form is not None and form not in seen:
            seen.add(form)
            yield form
