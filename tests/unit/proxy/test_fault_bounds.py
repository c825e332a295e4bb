"""Every number a fault takes has a documented range; anything outside it is refused up front in
one line naming file, line and field (exit 2), instead of holding a connection for ever or
sending a 300-digit Retry-After header."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from faultproxy.cli.main import main
from faultproxy.proxy.episodes import EpisodeState
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.delay import DelayFault
from faultproxy.proxy.relay import Relay
from faultproxy.scenarios import FAULT_KINDS, load_scenario
from faultproxy.scenarios.faults.base import MAX_DELAY_MS

NUMERIC = [(kind.name, name, spec) for kind in FAULT_KINDS.values() for name, spec in kind.params.items()
           if spec.kind in ("number", "integer") and not spec.choices]  # a choice is bounded by its list


def fault_yaml(fault_type: str, param: str, value: object) -> str:
    match = "    match: {websocket: {}}\n" if FAULT_KINDS[fault_type].on_messages else ""  # a message fault's rule
    return (f"name: t\ndescription: d\nrules:\n  - name: r\n    fault:\n      type: {fault_type}\n"
            f"      {param}: {value}\n" + match)


def test_every_numeric_fault_param_has_both_bounds():
    assert len(NUMERIC) >= 14  # the catalogue really was walked
    for fault_type, name, spec in NUMERIC:
        assert spec.minimum is not None and spec.maximum is not None, f"{fault_type}.{name}"
        assert math.isfinite(spec.minimum) and math.isfinite(spec.maximum), f"{fault_type}.{name}"


@pytest.mark.parametrize(("fault_type", "param", "spec"), NUMERIC, ids=[f"{t}.{p}" for t, p, _ in NUMERIC])
def test_a_value_past_the_maximum_is_one_line_naming_file_line_and_field(fault_type, param, spec, tmp_path, capsys):
    path = tmp_path / "s.yaml"
    too_big = spec.maximum + 1 if spec.kind == "integer" else "1.0e+300"
    path.write_text(fault_yaml(fault_type, param, too_big))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()]
    assert err.startswith(f"faultproxy: {path}:7: rules[0].fault.{param}: must be between {spec.minimum} and ")

    path.write_text(fault_yaml(fault_type, param, spec.maximum))  # the bound itself is in range
    assert main(["check", str(path)]) == 0


@pytest.mark.parametrize(("fault_type", "param", "value"), [
    ("delay", "ms", "1.0e+35"), ("timeout", "hold_s", "1.0e+300"), ("rate_limit", "retry_after", "1.0e+300"),
])
def test_the_reported_huge_numbers_exit_2_without_a_traceback(fault_type, param, value, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(fault_yaml(fault_type, param, value))
    result = subprocess.run([sys.executable, "-m", "faultproxy", "check", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert f"{path}:7: rules[0].fault.{param}: must be between 0 and " in result.stderr


def test_a_lognormal_draw_never_exceeds_the_delay_range(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(fault_yaml("delay", "distribution", "lognormal").replace(
        "distribution: lognormal", f"distribution: lognormal\n      median_ms: {MAX_DELAY_MS}\n      sigma: 5"))
    scenario = load_scenario(path)
    rule = scenario.rules[0]
    fault = DelayFault(dict(rule.fault.params), scenario.seed, Relay())
    episode = EpisodeState("ep", None)
    drawn = []
    for seq in range(1, 200):
        ex = FlowExchange(episode, seq, "GET", "http://x/", [], None, scenario, rule=rule)
        drawn.append(fault.seconds(ex))
    assert max(drawn) == MAX_DELAY_MS / 1000  # half the draws lie above the median: the cap is reached
    assert min(drawn) < MAX_DELAY_MS / 1000
