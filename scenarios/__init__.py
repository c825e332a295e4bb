"""Scenario registry: the YAML schema, its loader, the fault kinds (scenarios.faults) and the
bundled scenarios in this folder."""

from faultproxy.scenarios.faults import (
    FAULT_KINDS,
    FAULT_TYPES,
    DriftOp,
    FaultKind,
    ParamSpec,
    trace_forwarded,
)
from faultproxy.scenarios.scenario_file import (
    BUNDLED_DIR,
    ScenarioError,
    bundled_names,
    load_scenario,
    parse_params,
    resolve_scenario_path,
)
from faultproxy.scenarios.scenario_model import (
    BodyPredicate,
    FaultSpec,
    MatchSpec,
    Rule,
    Scenario,
    TextPattern,
    When,
)

__all__ = [
    "BUNDLED_DIR",
    "FAULT_KINDS",
    "FAULT_TYPES",
    "BodyPredicate",
    "DriftOp",
    "FaultKind",
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
    "parse_params",
    "resolve_scenario_path",
    "trace_forwarded",
]
