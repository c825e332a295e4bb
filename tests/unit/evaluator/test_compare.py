"""Cross-model metrics and the generic statistics, on hand-made tables and brute force."""

import math
from itertools import combinations, product

import pytest

from faultproxy.evaluator.statistics import (brier_score, calibration_buckets, coefficient_of_variation,
                                             detectable_drop, diagnostic_selection, disagreement, fisher_exact_less,
                                             least_attainable_less, mean_rate_change, pass_at_M, pass_hat_M, percentile,
                                             stratified_exact_less, weighted_holm, wilson_interval)
from faultproxy.evaluator.statistics.stats import binary_entropy, smoothed_rate

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


def brute_stratified_less(tables):
    """Deal every stratum's passes every way at once: P(Σ new-arm passes ≤ observed)."""
    deals = []
    for c_new, n_new, c_base, n_base in tables:
        pooled = [True] * (c_new + c_base) + [False] * (n_new + n_base - c_new - c_base)
        deals.append([sum(pooled[i] for i in d) for d in combinations(range(len(pooled)), n_new)])
    observed = sum(t[0] for t in tables)
    hits = total = 0
    for sums in product(*deals):
        total += 1
        hits += sum(sums) <= observed
    return hits / total


def test_stratified_exact_less_matches_brute_force():
    cases = [[(0, 3, 3, 3)] * 2, [(1, 3, 2, 3), (3, 3, 1, 3), (2, 4, 2, 3)], [(3, 3, 3, 3), (0, 3, 2, 3)],
             [(2, 3, 3, 3), (1, 2, 2, 2), (0, 2, 1, 2)], [(1, 4, 3, 4), (4, 4, 0, 2)]]
    for tables in cases:
        assert math.isclose(stratified_exact_less(tables), brute_stratified_less(tables), abs_tol=1e-12), tables
    # One stratum is Fisher's test; degenerate strata (3/3 against 3/3) change nothing.
    assert stratified_exact_less([(2, 5, 4, 6)]) == pytest.approx(fisher_exact_less(2, 5, 4, 6))
    assert stratified_exact_less([(0, 3, 3, 3)] * 4 + [(3, 3, 3, 3)] * 8) == pytest.approx(1 / 20 ** 4)
    assert stratified_exact_less([(132, 200, 192, 200)]) < 1e-12  # large arms: no float overflow


def test_least_attainable_less():
    assert least_attainable_less([(3, 3, 3, 3)]) == 1.0
    assert least_attainable_less([(0, 3, 3, 3)]) == pytest.approx(1 / 20)
    assert least_attainable_less([(8, 8, 7, 8)]) == pytest.approx(0.5)
    assert least_attainable_less([(1, 3, 2, 3), (0, 3, 3, 3)]) == pytest.approx(
        fisher_exact_less(0, 3, 3, 3) * fisher_exact_less(0, 3, 3, 3))
    for tables in ([(2, 5, 1, 4)], [(1, 3, 2, 3), (2, 2, 0, 3)]):
        assert least_attainable_less(tables) <= stratified_exact_less(tables)


def test_weighted_holm():
    # Equal weights: ordinary Holm, adj_(s) = max_{r ≤ s} (m − r + 1)·p_(r).
    assert weighted_holm([0.01, 0.04, 0.03], [1, 1, 1]) == pytest.approx([0.03, 0.06, 0.06])
    assert weighted_holm([0.5, 0.001], [0.5, 0.5]) == pytest.approx([0.5, 0.002])
    # Weighted: the heavy hypothesis is tested at 0.8·α first, then the rest share what is left.
    adjusted = weighted_holm([0.03, 0.01, 0.2], [0.8, 0.1, 0.1])
    assert adjusted[0] == pytest.approx(0.03 / 0.8)
    assert adjusted[1] == pytest.approx(max(0.03 / 0.8, 0.01 / 0.1 * 0.2))
    assert adjusted[2] == pytest.approx(max(adjusted[1], 0.2 / 0.1 * 0.1))
    assert weighted_holm([0.001, 0.2], [0, 1]) == [1.0, 0.2]  # weight 0: never tested
    with pytest.raises(ValueError):
        weighted_holm([0.1], [1, 1])


def test_mean_rate_change_and_detectable_drop():
    delta, se = mean_rate_change([(0, 3, 3, 3), (3, 3, 3, 3)])
    assert delta == pytest.approx(-0.5)
    p1, p2 = smoothed_rate(0, 3), smoothed_rate(3, 3)
    assert (p1, p2) == (pytest.approx(0.2), pytest.approx(0.8))
    assert se == pytest.approx(math.sqrt(4 * 0.16 / 3) / 2)
    # More trials or more tasks: a smaller drop is detectable.
    few = detectable_drop([(2, 3, 2, 3)] * 4, 0.05)
    assert detectable_drop([(5, 8, 5, 8)] * 4, 0.05) < few
    assert detectable_drop([(2, 3, 2, 3)] * 12, 0.05) < few
    assert few > 0.2  # 4 tasks × 3 trials cannot see a 20-point drop
    with pytest.raises(ValueError):
        mean_rate_change([(1, 0, 1, 3)])
