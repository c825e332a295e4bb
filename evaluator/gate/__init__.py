"""The gate: the regression gate at fixed k (regression_gate), what it reads and answers (gate_model),
and the sequential gate at declared looks with alpha spent across them (sequential_looks).

This front door names what the evaluator's other packages and the layers above may import
(evaluator/front_door.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faultproxy.evaluator.front_door import front_door

if TYPE_CHECKING:
    from faultproxy.evaluator.gate.gate_model import BLOCK, PASS, GateInput, GateResult, TaskCounts
    from faultproxy.evaluator.gate.regression_gate import ALPHA, MARGIN, evaluate_counts, evaluate_gate
    from faultproxy.evaluator.gate.sequential_looks import (BASELINE_KEY, MAX_K, MIN_K, PLAN_KEY, Design, Outcome,
                                                            check_design, evaluate_sequential, replay_looks,
                                                            report_section, sealed_design)

__all__, __getattr__, __dir__ = front_door(__name__, __file__)
