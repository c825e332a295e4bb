"""A sweep's acceptance, from the scenario's `expect:` block, and the exit status it gives.

  max_drop: {at: 0.10, drop: 0.08}   # mean success at param=0.10 ≥ (mean at param=0) − 0.08
The param is `max_drop.param` if given, else `lambda` if swept, else the only numeric swept param
(a categorical param has no level 0 to compare with). `at`
and 0 must both be swept levels (SweepError otherwise). It is checked in every series of that
param (each level of the other params, each model); one violation fails the sweep (exit 1). A
series whose two points are not fully run is pending, which also exits 1: a partial sweep must
not pass for a whole one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from faultproxy.evaluator.sweeps.sweep_grid import TOLERANCE, SweepError


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def acceptance_rules(expect: Mapping[str, Any] | None, params: Mapping[str, Sequence[float]]) -> list[dict[str, Any]]:
    """The sweep rules of an expect block, resolved against the swept levels; SweepError if one
    cannot be checked on this sweep (call it before running, to fail fast)."""
    rules = []
    drop_rule = (expect or {}).get("max_drop")
    if drop_rule is None:
        return rules
    if not isinstance(drop_rule, Mapping) or not {"at", "drop"} <= set(drop_rule):
        raise SweepError("expect.max_drop must be a mapping with 'at' and 'drop'")
    at, drop = drop_rule["at"], drop_rule["drop"]
    for field, value in (("at", at), ("drop", drop)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SweepError(f"expect.max_drop.{field} must be a number, got {value!r}")
    name = drop_rule.get("param")
    words = {n for n, levels in params.items() if any(isinstance(v, str) for v in levels)}
    if name in words:
        raise SweepError(f"expect.max_drop is about {name}, whose levels are words, not numbers from 0")
    params = {n: levels for n, levels in params.items() if n not in words}
    if name is None:
        if "lambda" in params:
            name = "lambda"
        elif len(params) == 1:
            name = next(iter(params))
        elif not params:
            raise SweepError(f"expect.max_drop.at {at:g} is not a swept level: this sweep sets no params"
                             f"{' with numeric levels' if words else ''} "
                             "(sweep one with --param NAME=0,...)")
        else:
            raise SweepError(f"expect.max_drop does not say which param it is about (swept: {', '.join(params)}); "
                             "sweep lambda, or one param")
    if name not in params:
        raise SweepError(f"expect.max_drop is about {name}, which this sweep does not vary "
                         f"(add --param {name}=0,{at:g})")
    levels = params[name]
    shown = ", ".join(f"{v:g}" for v in levels)
    if not any(_same(at, v) for v in levels):
        raise SweepError(f"expect.max_drop.at {at:g} is not a swept level of {name} ({shown})")
    if not any(_same(0.0, v) for v in levels):
        raise SweepError(f"expect.max_drop compares with {name}=0, which is not a swept level ({shown})")
    rules.append({"rule": "max_drop", "param": name, "at": float(at), "baseline": 0.0, "drop": float(drop)})
    return rules


def evaluate_acceptance(analysis: Mapping[str, Any], expect: Mapping[str, Any]) -> dict[str, Any]:
    """Each rule in each series of its param: ok (true, false) or pending (null, not fully run)."""
    results = []
    for rule in acceptance_rules(expect, analysis["params"]):
        for series in analysis["curves"][rule["param"]]:
            base = next((p for p in series["points"] if _same(p["level"], rule["baseline"])), None)
            at = next((p for p in series["points"] if _same(p["level"], rule["at"])), None)
            if base is None or at is None:  # a series of a grid that is not a full product
                continue
            entry = {**rule, "series": series["series"], "baseline_mean": base["mean"], "at_mean": at["mean"],
                     "fall": None, "ok": None, "note": None}
            if base["not_run"] or at["not_run"]:
                entry["note"] = f"not until resumed: {base['not_run'] + at['not_run']} episode(s) not run"
            else:
                entry["fall"] = base["mean"] - at["mean"]
                entry["ok"] = entry["fall"] <= rule["drop"] + TOLERANCE
            results.append(entry)
    if not results:
        status = "none"
    elif any(r["ok"] is False for r in results):
        status = "violated"
    elif any(r["ok"] is None for r in results):
        status = "pending"
    else:
        status = "met"
    return {"status": status, "results": results}


def exit_status(analysis: Mapping[str, Any]) -> int:
    """0: acceptance met or none asked; 1: violated, or pending on a sweep not fully run."""
    acceptance = analysis.get("acceptance") or {}
    return 1 if acceptance.get("status") in ("violated", "pending") else 0
