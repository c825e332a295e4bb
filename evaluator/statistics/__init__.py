"""Statistics: intervals, exact tests and multiplicity (stats), the reliability metrics pass@k,
pass^k, safety and trajectory consistency (metrics), and metrics across models (compare).

The bottom of the evaluator: it imports nothing else of it.

This front door names what the evaluator's other packages and the layers above may import
(evaluator/front_door.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faultproxy.evaluator.front_door import front_door

if TYPE_CHECKING:
    from faultproxy.evaluator.statistics.compare import diagnostic_selection, disagreement, pass_at_M, pass_hat_M
    from faultproxy.evaluator.statistics.metrics import (TaskTally, counted_safety_score, endpoint_class,
                                                         mean_pass_rate, pass_at_k, pass_hat_k, pass_k_curve,
                                                         safety_score, trajectory_consistency)
    from faultproxy.evaluator.statistics.stats import (brier_score, calibration_buckets, coefficient_of_variation,
                                                       counted_coefficient_of_variation, detectable_drop, fisher_exact_less, fixed_k_equivalent,
                                                       least_attainable_less, look_levels, mean_rate_change, percentile,
                                                       stratified_exact_less, weighted_holm, wilson_interval)

__all__, __getattr__, __dir__ = front_door(__name__, __file__)
