"""Cross-model metrics and the generic statistics, on hand-made tables and brute force."""

import math
from itertools import combinations

import pytest

from faultproxy.evaluator.compare import diagnostic_selection, disagreement, pass_at_M, pass_hat_M
from faultproxy.evaluator.stats import (binary_entropy, brier_score, calibration_buckets,
                             coefficient_of_variation, fisher_exact_less, percentile,
                             wilson_interval)

T, F = True, False


def test_pass_at_M_and_pass_hat_M_hand_table():
    table = {"m1": [T, T, F, F, T],
             "m2": [T, F, F, T, T],
             "m3": [T, T, F, F, F]}
    assert pass_at_M(table) == pytest.approx(4 / 5)  # only item 3 fails everywhere
    assert pass_hat_M(table) == pytest.approx(1 / 5)  # only item 1 passes everywhere
    assert pass_at_M({"solo": [T, F]}) == pass_hat_M({"solo": [T, F]}) == 0.5


def test_pass_M_rejects_misaligned_or_empty_tables():
    for bad in ({"a": [T, F], "b": [T]}, {}, {"a": [], "b": []}):
        with pytest.raises(ValueError):
            pass_at_M(bad)
        with pytest.raises(ValueError):
            pass_hat_M(bad)


def test_disagreement_hand_values():
    assert disagreement({"a": 0.3, "b": 0.3, "c": 0.3}) == pytest.approx(0.0, abs=1e-12)
    assert disagreement({"a": 1.0, "b": 0.0}) == pytest.approx(1.0)
    # Rates .5 and 1 pool to .75: H(.75) - (H(.5) + H(1)) / 2.
    expected = binary_entropy(0.75) - (binary_entropy(0.5) + 0.0) / 2
    assert disagreement({"a": 0.5, "b": 1.0}) == pytest.approx(expected)
    assert disagreement({"a": 0.5, "b": 1.0}) == pytest.approx(0.8112781 - 0.5)
    assert disagreement({"a": 0.1, "b": 0.9, "c": 0.4}) >= 0
    with pytest.raises(ValueError):
        disagreement({})


def test_diagnostic_selection_covers_patterns_and_keeps_anchors():
    outcomes = {"t9": (T, T, T), "t3": (T, T, T),        # unanimous success
                "t8": (F, F, F),                          # unanimous failure
                "t5": (T, F, T), "t2": (T, F, T),
                "t7": (F, T, F)}
    chosen = diagnostic_selection(outcomes)
    assert chosen == ["t2", "t3", "t7", "t8"]
    assert {outcomes[t] for t in chosen} == set(outcomes.values())
    assert (T, T, T) in {outcomes[t] for t in chosen} and (F, F, F) in {outcomes[t] for t in chosen}
    assert diagnostic_selection({}) == []
    with pytest.raises(ValueError):
        diagnostic_selection({"a": (T,), "b": (T, F)})


def test_binary_entropy():
    assert binary_entropy(0.0) == binary_entropy(1.0) == 0.0
    assert binary_entropy(0.5) == pytest.approx(1.0)
    assert binary_entropy(0.25) == pytest.approx(0.8112781, abs=1e-7)
    with pytest.raises(ValueError):
        binary_entropy(1.5)


@pytest.mark.parametrize("successes, n, expected", [
    (8, 10, (0.4902, 0.9433)),
    (0, 10, (0.0, 0.2775)),
    (10, 10, (0.7225, 1.0)),
    (50, 100, (0.4038, 0.5962)),
])
def test_wilson_known_values(successes, n, expected):
    lo, hi = wilson_interval(successes, n)
    assert (round(lo, 4), round(hi, 4)) == expected


def test_wilson_edges():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo95, hi95 = wilson_interval(8, 10)
    lo99, hi99 = wilson_interval(8, 10, z=2.576)
    assert lo99 < lo95 < hi95 < hi99
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def brute_fisher_less(c_new, n_new, c_base, n_base):
    """Count every way to deal the pooled passes between the arms: P(new gets <= c_new)."""
    pooled = [True] * (c_new + c_base) + [False] * (n_new + n_base - c_new - c_base)
    deals = list(combinations(range(len(pooled)), n_new))
    return sum(sum(pooled[i] for i in deal) <= c_new for deal in deals) / len(deals)


def test_fisher_exact_less_matches_brute_force_on_small_tables():
    for n_new in range(0, 6):
        for n_base in range(0, 6):
            for c_new in range(n_new + 1):
                for c_base in range(n_base + 1):
                    args = (c_new, n_new, c_base, n_base)
                    assert math.isclose(fisher_exact_less(*args), brute_fisher_less(*args),
                                        abs_tol=1e-12), args


def test_fisher_exact_less_hand_values():
    assert fisher_exact_less(0, 3, 3, 3) == pytest.approx(1 / 20)
    assert fisher_exact_less(7, 10, 10, 10) == pytest.approx(19448 / 184756)
    assert fisher_exact_less(0, 10, 10, 10) == pytest.approx(1 / 184756)
    assert fisher_exact_less(10, 10, 0, 10) == 1.0  # better than baseline: no evidence of worse
    assert fisher_exact_less(3, 10, 3, 10) > 0.5
    with pytest.raises(ValueError):
        fisher_exact_less(4, 3, 1, 3)


def test_percentile_linear_interpolation():
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4], 25) == pytest.approx(1.75)
    assert percentile([10, 20, 30, 40, 50], 90) == pytest.approx(46.0)
    assert percentile([10, 20, 30, 40, 50], 0) == 10
    assert percentile([10, 20, 30, 40, 50], 100) == 50
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1, 2], 101)


def test_coefficient_of_variation():
    assert coefficient_of_variation([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(2 / 5)
    assert coefficient_of_variation([3, 3, 3]) == 0.0
    assert coefficient_of_variation([0, 0]) == 0.0  # zero mean: documented 0.0
    with pytest.raises(ValueError):
        coefficient_of_variation([])


def test_brier_score():
    assert brier_score([1.0, 0.0], [T, F]) == 0.0
    assert brier_score([0.5] * 4, [T, F, T, F]) == pytest.approx(0.25)
    assert brier_score([0.9, 0.2], [F, F]) == pytest.approx((0.81 + 0.04) / 2)
    with pytest.raises(ValueError):
        brier_score([0.5], [T, F])
    with pytest.raises(ValueError):
        brier_score([1.2], [T])


def test_calibration_buckets():
    conf = [0.1, 0.15, 0.2, 0.5, 0.9, 1.0]
    outc = [F, T, F, T, T, F]
    rows = calibration_buckets(conf, outc)
    assert [(r["lo"], r["hi"]) for r in rows] == [(0, .2), (.2, .4), (.4, .6), (.6, .8), (.8, 1.0)]
    assert [r["count"] for r in rows] == [2, 1, 1, 0, 2]
    assert rows[0]["mean_confidence"] == pytest.approx(0.125)
    assert rows[0]["success_rate"] == pytest.approx(0.5)
    assert rows[1]["success_rate"] == 0.0  # 0.2 opens the second bucket
    assert rows[3]["mean_confidence"] is None and rows[3]["success_rate"] is None
    assert rows[4]["mean_confidence"] == pytest.approx(0.95)  # 1.0 closes the last bucket
    assert sum(r["count"] for r in calibration_buckets(conf, outc, edges=(0, 0.5, 1))) == len(conf)
    with pytest.raises(ValueError):
        calibration_buckets(conf, outc, edges=(0, 0.5, 0.5, 1))
