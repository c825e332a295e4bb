"""Sweeps: the analysis of a sweep's run directory (sweep_analysis), from which trials of each grid
label passed (outcomes): the grid and its levels (sweep_grid), mean success and pass^k per point
with the curves and surface they make (curves), the model matrix (model_matrix), and acceptance
against the scenario's `expect:` block (acceptance).

This front door names what the evaluator's other packages and the layers above may import
(evaluator/front_door.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faultproxy.evaluator.front_door import front_door

if TYPE_CHECKING:
    from faultproxy.evaluator.sweeps.acceptance import acceptance_rules, exit_status
    from faultproxy.evaluator.sweeps.sweep_analysis import SWEEP_FILE, SWEEP_HTML, analyse_sweep
    from faultproxy.evaluator.sweeps.sweep_grid import (EPSILON, TOLERANCE, SweepError, is_sweep, level_label,
                                                        level_text, point_order)

__all__, __getattr__, __dir__ = front_door(__name__, __file__)
