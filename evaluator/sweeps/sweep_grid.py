"""A sweep's grid, as its plan holds it: the points, the params they set and their levels, the
models; how a level is written; which params are the faults', the perturbation's or the agent's."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from faultproxy.formats.errors import UserError

EPSILON = "epsilon"  # the param the proxy reads as the intensity of semantics-preserving perturbation
TOLERANCE = 1e-9  # float noise, never a real difference between two rates


class SweepError(UserError):
    """A sweep that cannot be analysed or checked as asked; the message says why."""


def level_text(value: float | str) -> str:
    """A param's level as grid labels, episode keys and the agent's environment write it: a
    number to 6 significant digits (0.1), a word (a categorical level such as `high`) as it is."""
    return value if isinstance(value, str) else f"{value:g}"


def level_label(name: str, value: float | str) -> str:
    """As runner.plan.GridPoint writes a param into a grid label."""
    return f"{name}={level_text(value)}"


def point_order(analysis: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], tuple]:
    """Sort key for an analysis' points, as its tables list them: by model, then each param's level
    in the order swept_params gives (ascending numbers, categorical levels as the sweep gave them)."""
    models = {m: i for i, m in enumerate(analysis["models"])}
    params = analysis["params"]
    return lambda point: (models.get(point["model"], -1),
                          [params[n].index(point["params"][n]) if n in point["params"] else -1 for n in params])


def is_sweep(plan: Mapping[str, Any]) -> bool:
    """A plan with more than one grid point, or one that sets params: what `faultproxy sweep` writes."""
    grid = plan.get("grid") or []
    return len(grid) > 1 or any(point.get("params") for point in grid)


def grid_points(plan_grid: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The plan's grid as points {label, params, model}, numeric levels as floats; one unnamed
    point when the plan has no grid."""
    points = []
    for point in plan_grid or [{"label": "", "params": {}, "model": None}]:
        params = {str(n): v if isinstance(v, str) else float(v) for n, v in sorted((point.get("params") or {}).items())}
        points.append({"label": point.get("label") or "", "params": params, "model": point.get("model")})
    return points


def swept_params(grid: Sequence[Mapping[str, Any]]) -> dict[str, list[float | str]]:
    """Each param the grid sets, with its levels in order: numbers ascending, words (a categorical
    param, such as effort=low,medium,high) in the order the sweep gave them, its grid's order."""
    names = sorted({name for point in grid for name in point["params"]})
    levels: dict[str, list[float | str]] = {}
    for name in names:
        seen = list(dict.fromkeys(point["params"][name] for point in grid if name in point["params"]))
        levels[name] = seen if any(isinstance(v, str) for v in seen) else sorted(seen)
    return levels


def swept_models(grid: Sequence[Mapping[str, Any]]) -> list[str]:
    """The grid's models, in the order the grid first names them."""
    models: list[str] = []
    for point in grid:
        if point["model"] is not None and point["model"] not in models:
            models.append(point["model"])
    return models


def param_roles(params: Iterable[str], rule_params: Iterable[str] | None) -> dict[str, str] | None:
    """fault: a rule's probability names it (λ); perturbation: epsilon, read by the proxy (ε);
    agent: named by nothing in the proxy, so only the agent sees it (FAULTPROXY_PARAM_<NAME>, {name})."""
    if rule_params is None:
        return None
    named = set(rule_params)
    return {name: "fault" if name in named else "perturbation" if name == EPSILON else "agent" for name in params}
