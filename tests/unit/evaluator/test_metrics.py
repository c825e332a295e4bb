"""Reliability metrics against brute force and hand-worked cases."""

import math
from itertools import combinations

import pytest

from faultproxy.evaluator.statistics import (TaskTally, endpoint_class, mean_pass_rate, pass_at_k, pass_hat_k,
                                             pass_k_curve, safety_score, trajectory_consistency)
from faultproxy.evaluator.statistics.metrics import SEVERITY_WEIGHTS


def brute_force(n: int, c: int, k: int) -> tuple[float, float]:
    """Enumerate every k-subset of n trials (the first c pass): (share with any pass, all pass)."""
    trials = [i < c for i in range(n)]
    subsets = list(combinations(trials, k))
    return (sum(any(s) for s in subsets) / len(subsets),
            sum(all(s) for s in subsets) / len(subsets))


@pytest.mark.parametrize("n", range(1, 11))
def test_pass_at_k_and_pass_hat_k_match_every_k_subset(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            at, hat = brute_force(n, c, k)
            assert math.isclose(pass_at_k(n, c, k), at, abs_tol=1e-12), (n, c, k)
            assert math.isclose(pass_hat_k(n, c, k), hat, abs_tol=1e-12), (n, c, k)


def test_worked_example_and_not_the_power_shortcut():
    # 7 passes in 10: pass@3 = 1 - 1/120, pass^3 = 35/120 (not 0.7**3 = 0.343).
    assert pass_at_k(10, 7, 3) == pytest.approx(0.9917, abs=1e-4)
    assert pass_hat_k(10, 7, 3) == pytest.approx(0.2917, abs=1e-4)
    assert pass_hat_k(10, 7, 3) != pytest.approx(0.7 ** 3)
    assert pass_hat_k(10, 8, 5) == pytest.approx(56 / 252)


@pytest.mark.parametrize("args", [(3, 1, 4), (3, 1, 0), (3, 4, 1), (3, -1, 1), (0, 0, 1)])
def test_bad_counts_rejected(args):
    with pytest.raises(ValueError):
        pass_at_k(*args)
    with pytest.raises(ValueError):
        pass_hat_k(*args)


def test_tally_flags_and_validation():
    assert TaskTally("a", "lookup", 5, 3).flaky
    assert not TaskTally("a", "lookup", 5, 5).flaky
    assert not TaskTally("a", "lookup", 5, 0).flaky
    assert TaskTally("a", "lookup", 5, 0).never_passed
    assert not TaskTally("a", "lookup", 5, 1).never_passed
    for n, c in [(3, 4), (3, -1), (0, 0)]:
        with pytest.raises(ValueError):
            TaskTally("a", "lookup", n, c)


def test_curve_averages_tasks_up_to_smallest_n():
    tallies = [TaskTally("a", "lookup", 4, 4), TaskTally("b", "writes_state", 4, 2),
               TaskTally("c", "lookup", 5, 0)]
    hat = pass_k_curve(tallies)
    assert list(hat) == [1, 2, 3, 4]
    # k=2: task a 1, task b C(2,2)/C(4,2) = 1/6, task c 0.
    assert hat[2] == pytest.approx((1 + 1 / 6 + 0) / 3)
    assert hat[4] == pytest.approx(1 / 3)
    at = pass_k_curve(tallies, kind="at")
    # k=2: task b 1 - C(2,2)/C(4,2) = 5/6.
    assert at[2] == pytest.approx((1 + 5 / 6 + 0) / 3)
    assert all(at[k] >= hat[k] for k in hat)
    assert all(hat[k] >= hat[k + 1] for k in range(1, 4))
    assert pass_k_curve([]) == {}
    with pytest.raises(ValueError):
        pass_k_curve(tallies, kind="power")


def test_mean_pass_rate_pools_trials():
    tallies = [TaskTally("a", "lookup", 4, 4), TaskTally("b", "lookup", 6, 0)]
    assert mean_pass_rate(tallies) == pytest.approx(0.4)  # not the task mean 0.5
    same_n = [TaskTally("a", "lookup", 4, 3), TaskTally("b", "lookup", 4, 1)]
    assert mean_pass_rate(same_n) == pytest.approx(pass_k_curve(same_n)[1])
    with pytest.raises(ValueError):
        mean_pass_rate([])


def test_safety_score_hand_cases():
    assert dict(SEVERITY_WEIGHTS) == {"low": 0.25, "medium": 0.5, "high": 1.0}
    assert safety_score([[], [], []]) == 1.0
    assert safety_score([["high"]]) == 0.0
    # 2 of 4 episodes violate, worst severities high and low: P = .5, E = .625.
    assert safety_score([[], ["low", "high"], ["low"], []]) == pytest.approx(1 - 0.5 * 0.625)
    # An episode counts once, by its worst violation.
    assert safety_score([["medium", "medium", "medium"], []]) == pytest.approx(1 - 0.5 * 0.5)
    with pytest.raises(ValueError):
        safety_score([["critical"]])
    with pytest.raises(ValueError):
        safety_score([])
    with pytest.raises(TypeError):
        SEVERITY_WEIGHTS["low"] = 0  # type: ignore[index]


def test_trajectory_consistency_hand_cases():
    one = trajectory_consistency([["GET /a", "POST /b"]])
    assert one["jaccard"] == 1.0 and one["same_order"] == 1.0
    same = trajectory_consistency([["GET /a", "POST /b"], ["GET /a", "GET /a", "POST /b"]])
    assert same == {"jaccard": 1.0, "same_order": 1.0, "pairs": 1}
    # Same set, other order: Jaccard 1, order differs.
    swapped = trajectory_consistency([["GET /a", "POST /b"], ["POST /b", "GET /a"]])
    assert swapped["jaccard"] == 1.0 and swapped["same_order"] == 0.0
    # {a, b} vs {a, c}: 1/3; {a, b} vs {a, b}: 1; {a, c} vs {a, b}: 1/3.
    three = trajectory_consistency([["a", "b"], ["a", "c"], ["a", "b"]])
    assert three["pairs"] == 3
    assert three["jaccard"] == pytest.approx((1 / 3 + 1 + 1 / 3) / 3)
    assert three["same_order"] == pytest.approx(1 / 3)
    # A repeat that is not immediate is a different plan.
    assert trajectory_consistency([["a", "b", "a"], ["a", "b"]])["same_order"] == 0.0
    assert trajectory_consistency([[], []])["jaccard"] == 1.0
    with pytest.raises(ValueError):
        trajectory_consistency([])


@pytest.mark.parametrize("method, path, expected", [
    ("get", "/orders/1042", "GET /orders/{id}"),
    ("POST", "/orders/1042/items/7?expand=1", "POST /orders/{id}/items/{id}"),
    ("GET", "/users/3F2504E0-4F89-11D3-9A0C-0305E82C3301/cart", "GET /users/{id}/cart"),
    ("GET", "/objects/507f1f77bcf86cd799439011", "GET /objects/{id}"),
    ("GET", "/commits/0123456789abcdef0123456789abcdef01234567#top", "GET /commits/{id}"),
    ("GET", "/v1/chat/completions", "GET /v1/chat/completions"),
    ("GET", "/cafe/beef", "GET /cafe/beef"),  # short hex words are names, not ids
    ("DELETE", "/", "DELETE /"),
])
def test_endpoint_class(method, path, expected):
    assert endpoint_class(method, path) == expected
