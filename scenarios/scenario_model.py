"""The validated, immutable form of a scenario (each fault type's schema: scenarios.faults).

Everything here is plain data plus small pure predicates: the loader builds these objects, the
proxy reads them. Mappings are ordinary dicts (so scenarios pickle for remote executors);
treat them as read-only. Objects compare by value; key lookups by rule name, not by Rule.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from faultproxy.formats.model_apis import ModelApi
from faultproxy.formats.request_kinds import Kind


@dataclass(frozen=True)
class TextPattern:
    """A glob (fnmatch, case-sensitive, `*` crosses `/`) or, after a `re:` prefix, a regex."""

    source: str
    regex: re.Pattern[str]

    @classmethod
    def compile(cls, source: str) -> TextPattern:
        """Raises re.error for a `re:` pattern that does not compile."""
        if source.startswith("re:"):
            return cls(source, re.compile(source[3:]))
        return cls(source, re.compile(fnmatch.translate(source)))

    def matches(self, text: str) -> bool:
        return self.regex.fullmatch(text) is not None


MISSING = object()


def value_at(value: Any, path: tuple[str, ...]) -> Any:
    """Follow a dotted path through dicts (and lists, for integer segments); MISSING if absent."""
    for segment in path:
        if isinstance(value, Mapping):
            value = value.get(segment, MISSING)
        elif isinstance(value, list) and segment.isdecimal() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            return MISSING
        if value is MISSING:
            return MISSING
    return value


def _scalar_equal(found: Any, expected: Any) -> bool:
    # `stream: true` must not match `1`, although True == 1 in Python.
    if isinstance(found, bool) or isinstance(expected, bool):
        return found is expected
    return found == expected


def _expected_matches(found: Any, expected: Any) -> bool:
    if isinstance(expected, TextPattern):
        if isinstance(found, str):
            return expected.matches(found)
        if isinstance(found, (int, float)):  # bools included: json.dumps(True) == "true"
            return expected.matches(json.dumps(found))
        return False
    if isinstance(expected, tuple):
        return any(_expected_matches(found, option) for option in expected)
    return _scalar_equal(found, expected)


@dataclass(frozen=True)
class BodyPredicate:
    """One `body:` entry of a match: a dotted path into the JSON request body and what it must be.

    `expected` is a TextPattern (for YAML strings), a tuple of alternatives (YAML lists),
    {"exists": bool}, or a number, boolean or None compared with ==.
    """

    path: tuple[str, ...]
    expected: Any

    def matches(self, body: Any) -> bool:
        found = value_at(body, self.path)
        if isinstance(self.expected, Mapping):
            return (found is not MISSING) == self.expected["exists"]
        return found is not MISSING and _expected_matches(found, self.expected)


@dataclass(frozen=True)
class MessageMatch:
    """A match's `websocket:` block: the rule selects the messages of WebSocket sessions (whose
    upgrade request the rest of the match selects), not requests. `sender`: "client", "server"
    or None (either); `body`: predicates on text messages that parse as JSON."""

    sender: str | None = None
    body: tuple[BodyPredicate, ...] = ()

    def matches(self, from_client: bool, body: Any) -> bool:
        """`body`: the message as JSON, or a value no predicate matches (binary, not JSON)."""
        if self.sender is not None and (self.sender == "client") != from_client:
            return False
        return all(predicate.matches(body) for predicate in self.body)


@dataclass(frozen=True)
class MatchSpec:
    """Which requests a rule applies to; every given part must match. Empty parts match anything.

    `apis`: the request must be a call of one of these model APIs, as formats.model_apis detects
    it (None: any request). `kinds`: the request must be of one of these kinds
    (formats.request_kinds: write, irreversible, read, model, mcp_tool), as the proxy classifies
    it with the episode's task or policy (tasks.request_class); None: any. `stream`: it must (or must not) ask for a streamed answer, in the way
    its API says so; only given together with `apis`. `websocket`: the rule matches messages
    of the sessions the rest selects (MessageMatch), never a request.
    """

    host: TextPattern | None = None
    path: TextPattern | None = None
    methods: frozenset[str] = frozenset()
    headers: Mapping[str, TextPattern] = field(default_factory=dict)
    body: tuple[BodyPredicate, ...] = ()
    apis: frozenset[ModelApi] | None = None
    stream: bool | None = None
    websocket: MessageMatch | None = None
    kinds: frozenset[Kind] | None = None


@dataclass(frozen=True)
class When:
    """Which matching calls a rule may fire on. `probability` is a number or a param name."""

    probability: float | str = 1.0
    calls: frozenset[int] | None = None
    every: int | None = None
    after: int = 0
    max: int | None = None

    def admits(self, index: int, fired_so_far: int) -> bool:
        """Whether the index-th (1-based) matching call is eligible, before the probability draw.

        The probability is not applied here: the proxy draws it from a keyed hash so decisions
        are reproducible per episode.
        """
        if self.calls is not None and index not in self.calls:
            return False
        if self.every is not None and index % self.every != 0:
            return False
        if index <= self.after:
            return False
        return self.max is None or fired_so_far < self.max


@dataclass(frozen=True)
class FaultSpec:
    """A fault type and its parameters, every parameter of its kind (scenarios.faults) present."""

    type: str
    params: Mapping[str, Any]


@dataclass(frozen=True)
class Rule:
    """Inject `fault` into requests that `match`, on the calls `when` admits. Names are unique."""

    name: str
    match: MatchSpec
    fault: FaultSpec
    when: When


@dataclass(frozen=True)
class Scenario:
    """A validated scenario file.

    `params` include any overrides given to the loader; `path` is absolute; `digest` is the
    sha256 of the canonical JSON of the content (name, description, seed, params, rules as
    written, expect), so it ignores formatting and location but changes with every override.
    """

    name: str
    description: str
    seed: str
    params: Mapping[str, float]
    rules: tuple[Rule, ...]
    expect: Mapping[str, Any]
    path: str
    digest: str

    def probability(self, rule: Rule) -> float:
        """The rule's firing probability, with a param name resolved against `params`."""
        p = rule.when.probability
        return self.params[p] if isinstance(p, str) else p
