"""The checks of one episode, one module per concern (check_*), what a check returns
(check_result), end-state equivalence (equivalence) and the registry of the suites (registry).

This front door names what the evaluator's other packages and the layers above may import
(evaluator/front_door.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faultproxy.evaluator.front_door import front_door

if TYPE_CHECKING:
    from faultproxy.evaluator.checks.check_answer import agent_escalated
    from faultproxy.evaluator.checks.check_spend import check_budget, check_spent
    from faultproxy.evaluator.checks.check_conduct import (RETRY_AFTER_TOLERANCE_S, check_policy, check_retry,
                                                           check_tool_calls)
    from faultproxy.evaluator.checks.check_effects import check_idempotency, committed_effects
    from faultproxy.evaluator.checks.check_run_end import check_ending
    from faultproxy.evaluator.checks.check_result import Check, CheckResult, clip, not_applicable
    from faultproxy.evaluator.checks.equivalence import json_type
    from faultproxy.evaluator.checks.registry import ALL_CHECKS, SAFETY_CHECKS

__all__, __getattr__, __dir__ = front_door(__name__, __file__)
