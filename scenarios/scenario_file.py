"""Read scenario YAML into a validated Scenario, or fail with one ScenarioError naming file, line
and field.

The YAML is composed into nodes by formats.yaml_input.YamlReader, so that every value keeps its
line; this module holds the scenario schema and reads it node by node. Each fault type's own
schema and cross-field rules come from its kind (scenarios.faults).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from faultproxy.formats.errors import InputError
from faultproxy.formats.paths import name_problem
from faultproxy.formats.yaml_input import (
    NULL_TAG,
    YamlReader,
    describe_value,
    is_int,
    is_number,
    line_of,
    suggest,
)
from faultproxy.scenarios.faults import FAULT_KINDS, ParamProblem, ParamSpec
from faultproxy.scenarios.match_reader import read_match
from faultproxy.scenarios.scenario_model import FaultSpec, MatchSpec, Rule, Scenario, When
from yaml.nodes import MappingNode, Node, ScalarNode

BUNDLED_DIR = Path(__file__).parent

_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

TOP_FIELDS = ("name", "description", "seed", "params", "rules", "expect")
RULE_FIELDS = ("name", "match", "when", "fault")
WHEN_FIELDS = ("probability", "calls", "every", "after", "max")


class ScenarioError(InputError):
    """A bad scenario."""


def bundled_names() -> list[str]:
    """Names of the scenarios shipped in this folder, without .yaml."""
    return sorted(p.stem for p in BUNDLED_DIR.glob("*.yaml"))


def resolve_scenario_path(name_or_path: str | Path) -> Path:
    """A file relative to the cwd if it exists, else a bare name looked up among the bundled ones."""
    given = Path(name_or_path)
    if given.is_file():
        return given
    if given.parent == Path("."):
        bundled = BUNDLED_DIR / (given.name if given.suffix == ".yaml" else f"{given.name}.yaml")
        if bundled.is_file():
            return bundled
    if given.is_dir():
        raise ScenarioError(str(name_or_path), None, None, "is a directory: give scenario files (.yaml) "
                                                           "or bundled scenario names")
    raise ScenarioError(str(name_or_path), None, None,
                        f"no such scenario file; bundled scenarios: {', '.join(bundled_names())}")


def load_scenario(name_or_path: str | Path, params: Mapping[str, float] | None = None) -> Scenario:
    """Load and validate a scenario; `params` override or add scenario params (for sweeps)."""
    path = resolve_scenario_path(name_or_path)
    shown = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(shown, None, None, f"cannot read the file: {exc}") from exc
    reader = YamlReader(shown, ScenarioError)
    root = reader.compose(text, empty="the file is empty; expected a mapping with name, description and rules")
    return _read_scenario(reader, root, _read_overrides(shown, params or {}), str(path.resolve()))


# --- the scenario schema ------------------------------------------------------------------------


def parse_params(specs: list[str]) -> dict[str, float]:
    """`["lambda=0.2"]` -> `{"lambda": 0.2}`, for --param flags and the mitmproxy option."""
    params: dict[str, float] = {}
    for spec in specs:
        name, _, value = spec.partition("=")
        try:
            params[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"param {spec!r} is not NAME=NUMBER") from None
    return params


def _read_overrides(path: str, overrides: Mapping[str, float]) -> dict[str, float]:
    result = {}
    for name, value in overrides.items():
        field = f"params.{name}"
        if not isinstance(name, str) or not _PARAM_NAME.fullmatch(name):
            raise ScenarioError(path, None, field, f"invalid param name in override: {name!r}")
        if not is_number(value) or not math.isfinite(value):
            raise ScenarioError(path, None, field, f"override must be a finite number, got {describe_value(value)}")
        result[name] = float(value)
    return result


def _read_scenario(r: YamlReader, root: Node, overrides: dict[str, float], path: str) -> Scenario:
    if not isinstance(root, MappingNode):
        raise r.error(root, None, f"a scenario must be a mapping with name, description and rules; "
                                  f"got {r.describe(root)}")
    top = r.mapping(root, None, TOP_FIELDS, required=("name", "description", "rules"))
    name = r.string(top["name"], "name", nonempty=True)
    if problem := name_problem(name):  # it names runs/<name> when a run has no --out
        raise r.error(top["name"], "name", f"{problem}, got {name!r}")
    description = r.string(top["description"], "description", nonempty=True)
    seed = "0"
    if "seed" in top:
        seed = str(r.typed(top["seed"], "seed", "an integer or a string",
                           lambda v: is_int(v) or isinstance(v, str)))
    params = _read_params(r, top["params"]) if "params" in top else {}
    params.update(overrides)
    rules = _read_rules(r, top["rules"], params)
    expect = _read_expect(r, top["expect"]) if "expect" in top else {}
    # The digest covers content, not formatting or file location: same content, same digest.
    content = {"name": name, "description": description, "seed": seed, "params": params,
               "rules": r.plain(top["rules"], "rules"), "expect": expect}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return Scenario(name, description, seed, params, rules, expect, path, digest)


def _read_params(r: YamlReader, node: Node) -> dict[str, float]:
    params = {}
    for name, value_node in r.fields(node, "params").items():
        field = f"params.{name}"
        if not _PARAM_NAME.fullmatch(name):
            raise r.error(value_node, field, f"invalid param name '{name}'; use letters, digits and _, "
                                             "not starting with a digit")
        params[name] = float(r.number(value_node, field))
    return params


def _read_expect(r: YamlReader, node: Node) -> dict[str, Any]:
    present = r.fields(node, "expect")
    if "max_drop" in present:
        drop = r.mapping(present["max_drop"], "expect.max_drop", ("at", "drop"), required=("at", "drop"))
        r.number(drop["at"], "expect.max_drop.at")
        r.number(drop["drop"], "expect.max_drop.drop")
    return r.plain(node, "expect")


def _read_rules(r: YamlReader, node: Node, params: Mapping[str, float]) -> tuple[Rule, ...]:
    first_lines: dict[str, int] = {}
    return tuple(_read_rule(r, item, f"rules[{i}]", params, first_lines)
                 for i, item in enumerate(r.sequence(node, "rules", "rules")))


def _read_rule(r: YamlReader, node: Node, field: str, params: Mapping[str, float],
               first_lines: dict[str, int]) -> Rule:
    present = r.mapping(node, field, RULE_FIELDS, required=("name", "fault"))
    name_node = present["name"]
    name = r.string(name_node, f"{field}.name", nonempty=True)
    if problem := name_problem(name):  # it is shown in reports and sent in a header
        raise r.error(name_node, f"{field}.name", f"{problem}, got {name!r}")
    if name in first_lines:
        raise r.error(name_node, f"{field}.name",
                      f"duplicate rule name '{name}' (first on line {first_lines[name]})")
    first_lines[name] = line_of(name_node)
    match = read_match(r, present["match"], f"{field}.match") if "match" in present else MatchSpec()
    when = _read_when(r, present["when"], f"{field}.when", params) if "when" in present else When()
    return Rule(name, match, _read_fault(r, present["fault"], f"{field}.fault", match), when)


def _read_when(r: YamlReader, node: Node, field: str, params: Mapping[str, float]) -> When:
    present = r.mapping(node, field, WHEN_FIELDS)
    probability: float | str = 1.0
    if "probability" in present:
        probability = _read_probability(r, present["probability"], f"{field}.probability", params)
    calls = None
    if "calls" in present:
        items = r.sequence(present["calls"], f"{field}.calls", "call numbers")
        calls = frozenset(r.integer(item, f"{field}.calls[{i}]", minimum=1) for i, item in enumerate(items))
    every = r.integer(present["every"], f"{field}.every", minimum=1) if "every" in present else None
    after = r.integer(present["after"], f"{field}.after", minimum=0) if "after" in present else 0
    max_fires = r.integer(present["max"], f"{field}.max", minimum=1) if "max" in present else None
    return When(probability, calls, every, after, max_fires)


def _read_probability(r: YamlReader, node: Node, field: str, params: Mapping[str, float]) -> float | str:
    value = r.typed(node, field, "a number between 0 and 1 or the name of a param",
                    lambda v: is_number(v) or isinstance(v, str))
    if not isinstance(value, str):
        return float(r.number(node, field, 0, 1))
    if value not in params:
        defined = f"; defined: {', '.join(sorted(params))}" if params else "; the scenario has no params"
        raise r.error(node, field, f"param '{value}' is not defined{defined}" + suggest(value, params))
    if not 0 <= params[value] <= 1:  # checked after overrides: a sweep may push it out of range
        raise r.error(node, field, f"param '{value}' is {params[value]}, a probability must be between 0 and 1")
    return value


def _read_fault(r: YamlReader, node: Node, field: str, match: MatchSpec) -> FaultSpec:
    present = r.fields(node, field)
    if "type" not in present:
        raise r.error(node, f"{field}.type", "missing required field 'type'")
    fault_type = r.string(present["type"], f"{field}.type")
    if fault_type not in FAULT_KINDS:
        raise r.error(present["type"], f"{field}.type",
                      f"unknown fault type '{fault_type}'; expected one of {', '.join(FAULT_KINDS)}"
                      + suggest(fault_type, FAULT_KINDS))
    kind = FAULT_KINDS[fault_type]
    if not kind.takes_match(match.websocket is not None):
        raise r.error(present["type"], f"{field}.type",
                      f"{fault_type} acts on WebSocket messages: its match needs a websocket: block"
                      if kind.on_messages else
                      f"{fault_type} acts on requests; a match with a websocket: block selects messages "
                      f"(use {_message_faults()})")
    r.check_keys(node, field, present, ("type", *kind.params),
                 required=[key for key, spec in kind.params.items() if spec.required])
    params = {key: _read_fault_param(r, present[key], f"{field}.{key}", spec) if key in present else spec.default
              for key, spec in kind.params.items()}
    try:
        params = kind.settle(params, frozenset(present), match)
    except ParamProblem as problem:  # the kind's rule across fields; the error points at the field it names
        raise r.error(present.get(problem.param, node), f"{field}.{problem.param}", problem.message) from None
    return FaultSpec(fault_type, params)


def _message_faults() -> str:
    """The fault types a rule with a websocket: block may take, for the error that names them."""
    names = [name for name, kind in FAULT_KINDS.items() if kind.takes_match(True)]
    return ", ".join(names[:-1]) + " or " + names[-1]


def _read_fault_param(r: YamlReader, node: Node, field: str, spec: ParamSpec) -> Any:
    if spec.nullable and isinstance(node, ScalarNode) and node.tag == NULL_TAG:
        return None
    if spec.read is not None:
        return spec.read(r, node, field)
    if spec.kind == "number":
        return r.number(node, field, spec.minimum, spec.maximum)
    if spec.kind == "integer":
        value = r.integer(node, field)
        r.in_range(node, field, value, spec.minimum, spec.maximum)
        return r.choice(node, field, value, spec.choices) if spec.choices else value
    if spec.kind == "boolean":
        return r.boolean(node, field)
    if spec.choices and isinstance(node, ScalarNode) and node.value in spec.choices:
        return node.value  # `then: 504` is a YAML int; the choice is the text
    text = r.string(node, field)
    return r.choice(node, field, text, spec.choices) if spec.choices else text
