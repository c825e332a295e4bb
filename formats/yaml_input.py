"""Line-aware reading of YAML (and JSON) into validated values, failing with one error that names
the file, line and field.

The text is composed into nodes (not loaded straight into dicts) so that every value keeps its
line; values are constructed node by node with PyYAML's safe constructor while validating.
Each file format brings its own error class (ScenarioError, TaskError, ...): any exception class
whose constructor takes (path, line, field, message).

Every document is bounded before any value is built from it (a YAML "billion laughs" alias
bomb is a few hundred bytes that expand to billions of values): at most MAX_DOCUMENT_CHARS
characters, MAX_VALUES values once aliases are expanded, and MAX_DEPTH levels of nesting.
Checking costs one pass over the composed nodes, as each shared node is counted once.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.error import Mark
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

NULL_TAG = "tag:yaml.org,2002:null"
MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MAP_TAG = "tag:yaml.org,2002:map"

MAX_DOCUMENT_CHARS = 16 * 1024 * 1024
MAX_VALUES = 1_000_000  # scalars, lists and mappings, each alias counted as a copy of what it names
MAX_DEPTH = 100

# (path, line, field, message) -> the exception to raise
ErrorFactory = Callable[[str, int | None, str | None, str], Exception]


def join_field(field: str | None, key: str) -> str:
    """The dotted name of `key` inside `field` (just `key` at the top level)."""
    return f"{field}.{key}" if field else key


def line_of(node: Node) -> int:
    """The node's 1-based line."""
    return node.start_mark.line + 1


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)  # YAML true is no number


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def describe_value(value: Any) -> str:
    """A value as an error message shows it: "integer 3", "string 'x'", "a list"..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def suggest(word: str, options: Iterable[str]) -> str:
    """ " (did you mean 'x'?)" for the closest option, or "" when none is close."""
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


class _Pairs(list):
    """A JSON object as its key/value pairs, so that duplicate keys survive to be reported."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class YamlReader:
    """Typed access to composed YAML nodes; every failure becomes `error_class(path, line, field,
    message)` at the node."""

    def __init__(self, path: str, error_class: ErrorFactory) -> None:
        self.path = path
        self.error_class = error_class
        self._constructor = SafeConstructor()

    def error(self, node: Node, field: str | None, message: str) -> Exception:
        return self.error_class(self.path, line_of(node), field, message)

    def check_size(self, text: str) -> None:
        """A whole input file (YAML or JSON Lines) is at most MAX_DOCUMENT_CHARS."""
        if len(text) > MAX_DOCUMENT_CHARS:
            raise self.error_class(self.path, None, None, f"the file is larger than {MAX_DOCUMENT_CHARS:,} characters")

    def compose(self, text: str, empty: str = "the file is empty") -> Node:
        """The single YAML document in `text` as a node tree; `empty` is the message for no document."""
        self.check_size(text)
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except RecursionError:  # PyYAML's composer recurses once per level
            raise self.error_class(self.path, None, None, f"nested more than {MAX_DEPTH} levels deep") from None
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            problem = exc.problem or "cannot parse"
            if exc.context:  # e.g. "while parsing a flow mapping": say where it began
                began = exc.context_mark
                on_line = f" on line {began.line + 1}" if began and began.line + 1 != line else ""
                problem = f"{exc.context}{on_line}, {problem}"
            raise self.error_class(self.path, line, None, f"invalid YAML: {problem}") from exc
        except yaml.YAMLError as exc:
            raise self.error_class(self.path, None, None, f"invalid YAML: {exc}") from exc
        if root is None:
            raise self.error_class(self.path, 1, None, empty)
        self._check_bounds(root, None, 0, {}, set())
        self._reject_duplicates(root, None, set())
        return root

    def compose_json(self, text: str, line: int) -> Node:
        """One JSON value (e.g. a line of a JSON Lines file) as a node tree whose nodes all sit on
        `line`, so the same validation reads YAML and JSON alike."""
        try:
            value = json.loads(text, object_pairs_hook=_Pairs, parse_constant=_reject_constant)
            root = self._json_node(value, Mark(self.path, 0, line - 1, 0, None, None))
        except json.JSONDecodeError as exc:
            raise self.error_class(self.path, line, None, f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
        except RecursionError:
            raise self.error_class(self.path, line, None, f"nested more than {MAX_DEPTH} levels deep") from None
        except ValueError as exc:
            raise self.error_class(self.path, line, None, f"invalid JSON: {exc}") from exc
        self._check_bounds(root, None, 0, {}, set())
        self._reject_duplicates(root, None, set())
        return root

    def _json_node(self, value: Any, mark: Mark) -> Node:
        if isinstance(value, _Pairs):
            pairs = [(ScalarNode(_STR_TAG, key, mark, mark), self._json_node(item, mark)) for key, item in value]
            return MappingNode(_MAP_TAG, pairs, mark, mark, flow_style=True)
        if isinstance(value, list):
            return SequenceNode(_SEQ_TAG, [self._json_node(item, mark) for item in value], mark, mark, flow_style=True)
        if value is None:
            return ScalarNode(NULL_TAG, "null", mark, mark)
        if isinstance(value, bool):
            return ScalarNode(_BOOL_TAG, "true" if value else "false", mark, mark)
        if isinstance(value, int):
            return ScalarNode(_INT_TAG, str(value), mark, mark)
        if isinstance(value, float):  # repr round-trips through the safe constructor's float()
            return ScalarNode(_FLOAT_TAG, repr(value), mark, mark)
        return ScalarNode(_STR_TAG, value, mark, mark, style='"')

    def _check_bounds(self, node: Node, field: str | None, depth: int, measured: dict[int, tuple[int, int]],
                      open_ids: set[int]) -> tuple[int, int]:
        """(values, height) of `node` with aliases expanded; raises at the first node that breaks a
        bound (MAX_VALUES, MAX_DEPTH) or contains itself. Each shared node is measured once."""
        if id(node) in open_ids:
            raise self.error(node, field, "an alias refers to a node that contains it")
        if id(node) in measured:
            values, height = measured[id(node)]
        elif isinstance(node, ScalarNode):
            values, height = 1, 0
        else:
            if depth >= MAX_DEPTH:
                raise self.error(node, field, f"nested more than {MAX_DEPTH} levels deep")
            open_ids.add(id(node))
            values, height = 1, 0
            for child, child_field in self._children(node, field):
                child_values, child_height = self._check_bounds(child, child_field, depth + 1, measured, open_ids)
                values, height = values + child_values, max(height, child_height + 1)
                if values > MAX_VALUES:
                    raise self.error(node, field, f"expands to more than {MAX_VALUES:,} values (aliases "
                                                  "counted as copies); is it an alias bomb?")
            open_ids.discard(id(node))
            measured[id(node)] = (values, height)
        if depth + height > MAX_DEPTH:
            raise self.error(node, field, f"nested more than {MAX_DEPTH} levels deep")
        return values, height

    @staticmethod
    def _children(node: Node, field: str | None) -> list[tuple[Node, str | None]]:
        if isinstance(node, SequenceNode):
            return [(item, f"{field or ''}[{i}]") for i, item in enumerate(node.value)]
        children = []
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, ScalarNode) else "?"
            children += [(key_node, field), (value_node, join_field(field, key))]
        return children

    def _reject_duplicates(self, node: Node, field: str | None, done: set[int]) -> None:
        """PyYAML silently keeps the last of two equal keys; an author wants to know.

        Runs before merge keys are expanded, so `<<: *base` followed by an override is fine.
        """
        if id(node) in done or isinstance(node, ScalarNode):
            return
        if isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                self._reject_duplicates(item, f"{field or ''}[{i}]", done)
        else:
            first_lines: dict[str, int] = {}
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, ScalarNode) else "?"
                if isinstance(key_node, ScalarNode) and key_node.tag != MERGE_TAG:
                    if key in first_lines:
                        first = first_lines[key]
                        where = "twice on this line" if first == line_of(key_node) else f"first on line {first}"
                        raise self.error(key_node, join_field(field, key), f"duplicate key '{key}' ({where})")
                    first_lines[key] = line_of(key_node)
                self._reject_duplicates(value_node, join_field(field, key), done)
        done.add(id(node))

    def value(self, node: Node, field: str | None) -> Any:
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:
            raise self.error(node, field, exc.problem or "cannot read this value") from exc

    def describe(self, node: Node) -> str:
        if isinstance(node, MappingNode):
            return "a mapping"
        if isinstance(node, SequenceNode):
            return "a list"
        try:
            return describe_value(self._constructor.construct_object(node))
        except yaml.YAMLError:
            return repr(node.value)

    def is_null(self, node: Node) -> bool:
        return isinstance(node, ScalarNode) and node.tag == NULL_TAG

    def given(self, present: Mapping[str, Node], key: str) -> bool:
        """Present and not null: an explicit null in an optional field means "not given"."""
        return key in present and not self.is_null(present[key])

    def fields(self, node: Node, field: str | None) -> dict[str, Node]:
        """The mapping's values by key, merge keys (`<<`) applied; keys must be strings."""
        if not isinstance(node, MappingNode):
            raise self.error(node, field, f"expected a mapping, got {self.describe(node)}")
        try:
            self._constructor.flatten_mapping(node)
        except yaml.MarkedYAMLError as exc:
            raise self.error(node, field, exc.problem or "bad merge key") from exc
        result: dict[str, Node] = {}
        for key_node, value_node in node.value:  # merged keys come first, so explicit ones win
            key = self.value(key_node, field) if isinstance(key_node, ScalarNode) else None
            if not isinstance(key, str):
                raise self.error(key_node, field, f"field names must be strings, got {self.describe(key_node)}")
            result[key] = value_node
        return result

    def check_keys(self, node: Node, field: str | None, present: Mapping[str, Node],
                   allowed: tuple[str, ...], required: Iterable[str] = ()) -> None:
        for key_node, _ in node.value:
            if key_node.value not in allowed:
                raise self.error(key_node, join_field(field, key_node.value),
                                 f"unknown field '{key_node.value}'; expected one of {', '.join(allowed)}"
                                 + suggest(key_node.value, allowed))
        for key in required:
            if key not in present:
                raise self.error(node, join_field(field, key), f"missing required field '{key}'")

    def mapping(self, node: Node, field: str | None, allowed: tuple[str, ...],
                required: Iterable[str] = ()) -> dict[str, Node]:
        present = self.fields(node, field)
        self.check_keys(node, field, present, allowed, required)
        return present

    def sequence(self, node: Node, field: str, what: str, allow_empty: bool = False) -> list[Node]:
        """A list (non-empty unless `allow_empty`); `what` names its items in the plural, for messages."""
        if not isinstance(node, SequenceNode):
            raise self.error(node, field, f"expected a list of {what}, got {self.describe(node)}")
        if not node.value and not allow_empty:
            raise self.error(node, field, f"the list of {what} is empty")
        return node.value

    def typed(self, node: Node, field: str, expected: str, accept: Callable[[Any], bool]) -> Any:
        if isinstance(node, ScalarNode):
            value = self.value(node, field)
            if accept(value):
                return value
        raise self.error(node, field, f"expected {expected}, got {self.describe(node)}")

    def in_range(self, node: Node, field: str, value: float,
                 minimum: float | None, maximum: float | None) -> None:
        if maximum is not None and minimum is not None and not minimum <= value <= maximum:
            raise self.error(node, field, f"must be between {minimum} and {maximum}, got {value}")
        if minimum is not None and value < minimum:
            raise self.error(node, field, f"must be at least {minimum}, got {value}")

    def number(self, node: Node, field: str, minimum: float | None = None,
               maximum: float | None = None) -> int | float:
        value = self.typed(node, field, "a number", is_number)
        if not math.isfinite(value):
            raise self.error(node, field, f"expected a finite number, got {value}")
        self.in_range(node, field, value, minimum, maximum)
        return value

    def integer(self, node: Node, field: str, minimum: float | None = None) -> int:
        value = self.typed(node, field, "an integer", is_int)
        self.in_range(node, field, value, minimum, None)
        return value

    def string(self, node: Node, field: str, nonempty: bool = False) -> str:
        value = self.typed(node, field, "a string", lambda v: isinstance(v, str))
        if nonempty and not value.strip():
            raise self.error(node, field, "must not be empty")
        return value

    def positive(self, node: Node, field: str, integer: bool = False) -> int | float:
        value = self.integer(node, field) if integer else self.number(node, field)
        if value <= 0:
            raise self.error(node, field, f"must be positive, got {value}")
        return value

    def regex(self, node: Node, field: str) -> str:
        """A non-empty string that compiles as a regular expression."""
        text = self.string(node, field, nonempty=True)
        try:
            re.compile(text)
        except re.error as exc:
            raise self.error(node, field, f"invalid regex {text!r}: {exc}") from exc
        return text

    def boolean(self, node: Node, field: str) -> bool:
        return self.typed(node, field, "a boolean (true or false)", lambda v: isinstance(v, bool))

    def choice(self, node: Node, field: str, value: Any, choices: tuple[Any, ...]) -> Any:
        if value not in choices:
            raise self.error(node, field, f"must be one of {', '.join(map(str, choices))}, "
                                          f"got {describe_value(value)}")
        return value

    def plain(self, node: Node, field: str) -> Any:
        """JSON-like data (dicts, lists, scalars); other YAML scalars (dates...) keep their text."""
        if isinstance(node, SequenceNode):
            return [self.plain(item, f"{field}[{i}]") for i, item in enumerate(node.value)]
        if isinstance(node, MappingNode):
            return {key: self.plain(value, join_field(field, key)) for key, value in self.fields(node, field).items()}
        value = self.value(node, field)
        return value if value is None or isinstance(value, (str, int, float)) else node.value
