"""Sweeps: perturbation curves, the reliability surface, acceptance and the model matrix (sweep_analysis),
from which trials of each grid label passed (outcomes).

This front door names what the evaluator's other packages and the layers above may import
(evaluator/front_door.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faultproxy.evaluator.front_door import front_door

if TYPE_CHECKING:
    from faultproxy.evaluator.sweeps.sweep_analysis import (EPSILON, SWEEP_FILE, SWEEP_HTML, TOLERANCE, SweepError,
                                                            acceptance_rules, analyse_sweep, exit_status, is_sweep,
                                                            level_label, level_text, point_order)

__all__, __getattr__, __dir__ = front_door(__name__, __file__)
