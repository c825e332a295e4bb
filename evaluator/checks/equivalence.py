"""End-state equivalence: is the expected state a JSON subset of the actual one?

    ok, differences = subset_equal(expected, actual, ignore=("refunds.*.created_at",),
                                   multiset=("orders.*.items",))

Rules, applied recursively:
- an object matches when every key of the expected object is present in the actual one and
  its value matches; extra keys in the actual object are allowed (that is the "subset");
- a list matches a list of the same length, element by element in order — unless its dotted
  path is declared a multiset, then each expected element is paired with a distinct actual
  element it matches, in any order;
- numbers compare by value (1 == 1.0) but booleans are not numbers (true != 1);
- any other value matches only an equal value of the same JSON type.

Paths are dotted: object keys and list indexes as segments ("orders.1001.status",
"refunds.0.created_at"); in `ignore` and `multiset` a `*` segment stands for any one key or
index. An ignored path is skipped wherever it occurs (and everything under it).

Two different plans that leave the world in the same state both pass: only the state is
compared, never how it was reached.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

MAX_DIFFERENCES = 20


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, integral floats written as integers (1.0 -> 1), so two JSON
    documents that are equal by these rules have the same text."""
    return json.dumps(_normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _normalise(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    return value


def _split(pattern: str) -> tuple[str, ...]:
    return tuple(pattern.split("."))


class _Paths:
    """Dotted path patterns with `*` segments, matched against concrete paths (tuples)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = [_split(p) for p in patterns if p]

    def matches(self, path: tuple[str, ...]) -> bool:
        return any(len(p) == len(path) and all(s == "*" or s == q for s, q in zip(p, path))
                   for p in self.patterns)

    def __bool__(self) -> bool:
        return bool(self.patterns)


def subset_equal(expected: Any, actual: Any, ignore: Sequence[str] = (),
                 multiset: Sequence[str] = ()) -> tuple[bool, list[str]]:
    """(True, []) when `expected` is a subset of `actual` by the rules above; otherwise False and
    up to MAX_DIFFERENCES lines, each naming a dotted path and what differs there."""
    differences: list[str] = []
    _compare(expected, actual, (), _Paths(ignore), _Paths(multiset), differences)
    return not differences, differences[:MAX_DIFFERENCES]


def _show(path: tuple[str, ...]) -> str:
    return ".".join(path) if path else "(root)"


def _brief(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_type(value: Any) -> str:
    """The JSON type of a parsed value: null, boolean, number, string, array or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _compare(expected: Any, actual: Any, path: tuple[str, ...], ignore: _Paths, multiset: _Paths,
             out: list[str]) -> None:
    if len(out) >= MAX_DIFFERENCES:
        return
    if ignore and ignore.matches(path):
        return
    kind_e, kind_a = json_type(expected), json_type(actual)
    if kind_e != kind_a:
        out.append(f"{_show(path)}: expected {kind_e} {_brief(expected)}, got {kind_a} {_brief(actual)}")
        return
    if kind_e == "object":
        for key, value in expected.items():
            sub = path + (str(key),)
            if ignore and ignore.matches(sub):
                continue
            if key not in actual:
                out.append(f"{_show(sub)}: missing (expected {_brief(value)})")
                if len(out) >= MAX_DIFFERENCES:
                    return
                continue
            _compare(value, actual[key], sub, ignore, multiset, out)
        return
    if kind_e == "array":
        if multiset and multiset.matches(path):
            _compare_multiset(list(expected), list(actual), path, ignore, multiset, out)
            return
        if len(expected) != len(actual):
            out.append(f"{_show(path)}: expected {len(expected)} items, got {len(actual)}")
            return
        for i, (e, a) in enumerate(zip(expected, actual)):
            _compare(e, a, path + (str(i),), ignore, multiset, out)
        return
    if kind_e == "number":
        if expected != actual:  # int/float compare by value in Python: 1 == 1.0
            out.append(f"{_show(path)}: expected {_brief(expected)}, got {_brief(actual)}")
        return
    if expected != actual:
        out.append(f"{_show(path)}: expected {_brief(expected)}, got {_brief(actual)}")


def _matches(expected: Any, actual: Any, path: tuple[str, ...], ignore: _Paths, multiset: _Paths) -> bool:
    scratch: list[str] = []
    _compare(expected, actual, path, ignore, multiset, scratch)
    return not scratch


def _compare_multiset(expected: list, actual: list, path: tuple[str, ...], ignore: _Paths, multiset: _Paths,
                      out: list[str]) -> None:
    """Same length, and a one-to-one pairing of expected with actual elements that match.

    Elements equal as canonical JSON are paired first (fast, and the common case). That never
    loses a perfect pairing: if e == a and a perfect pairing has e-a' and e'-a, then e' ⊆ a = e
    ⊆ a', so e-a and e'-a' is perfect too. The rest are paired by augmenting paths (Kuhn's
    bipartite matching), since under subset semantics one expected element may match several
    actual ones and a greedy choice can miss a perfect pairing.
    """
    if len(expected) != len(actual):
        out.append(f"{_show(path)}: expected {len(expected)} items (any order), got {len(actual)}")
        return
    # Elements of a multiset have no meaningful index: paths below them use `*` for it, so
    # `orders.*.created_at` applies inside and `orders.0.created_at` does not.
    element_path = path + ("*",)
    exact = not ignore and all(not isinstance(e, (dict, list)) for e in expected)
    free_actual = Counter(canonical_json(a) for a in actual)
    rest_expected: list[int] = []
    for i, e in enumerate(expected):
        key = canonical_json(e)
        if free_actual[key] > 0:  # equal as canonical JSON: matches under every rule
            free_actual[key] -= 1
        else:
            rest_expected.append(i)
    if not rest_expected:
        return
    if exact:
        missing = [expected[i] for i in rest_expected]
        out.append(f"{_show(path)}: no match (any order) for {_brief(missing)}")
        return
    # Actual elements not consumed by the exact pass.
    remaining = Counter(free_actual)
    rest_actual: list[int] = []
    for j, a in enumerate(actual):
        key = canonical_json(a)
        if remaining[key] > 0:
            remaining[key] -= 1
            rest_actual.append(j)
    compatible = {i: [j for j in rest_actual
                      if _matches(expected[i], actual[j], element_path, ignore, multiset)]
                  for i in rest_expected}
    owner: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j in compatible[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    unmatched = [i for i in rest_expected if not augment(i, set())]
    if unmatched:
        shown = [expected[i] for i in unmatched[:3]]
        out.append(f"{_show(path)}: no match (any order) for {len(unmatched)} item(s), e.g. {_brief(shown)}")

