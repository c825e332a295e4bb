"""Scenario registry: the YAML schema, its loader, and the bundled scenarios in this folder."""

from faultproxy.scenarios.loader import (
    BUNDLED_DIR,
    ScenarioError,
    bundled_names,
    load_scenario,
    resolve_scenario_path,
)
from faultproxy.scenarios.model import (
    FAULT_TYPES,
    BodyPredicate,
    DriftOp,
    FaultSpec,
    MatchSpec,
    ParamSpec,
    Rule,
    Scenario,
    TextPattern,
    When,
)

__all__ = [
    "BUNDLED_DIR",
    "FAULT_TYPES",
    "BodyPredicate",
    "DriftOp",
    "FaultSpec",
    "MatchSpec",
    "ParamSpec",
    "Rule",
    "Scenario",
    "ScenarioError",
    "TextPattern",
    "When",
    "bundled_names",
    "load_scenario",
    "resolve_scenario_path",
]
