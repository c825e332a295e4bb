"""Generic statistics for the evaluator: intervals, an exact test, spread, calibration.

Standard library only (math), so the evaluator runs wherever the run directory is read.
Every function states its formula; bad input raises ValueError rather than returning a
number that looks real.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _check_count(successes: int, n: int) -> None:
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion p̂ = successes / n.

    centre = (p̂ + z²/2n) / (1 + z²/n)
    half   = z / (1 + z²/n) · √(p̂(1 − p̂)/n + z²/4n²)
    interval = (centre − half, centre + half), clamped to [0, 1].
    With n = 0 nothing is known, so the interval is (0.0, 1.0).
    """
    _check_count(successes, n)
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def hypergeometric_cdf(x: int, population: int, marked: int, draws: int) -> float:
    """P(X ≤ x) for X ~ Hypergeometric(population N, marked K, draws n).

    P(X ≤ x) = Σ_{i=lo..x} C(K, i)·C(N − K, n − i) / C(N, n),  lo = max(0, n − (N − K)).
    The numerators are summed as integers and divided once, so the result is the exact
    ratio rounded to the nearest float.
    """
    if not (0 <= marked <= population and 0 <= draws <= population):
        raise ValueError(f"bad hypergeometric parameters N={population}, K={marked}, n={draws}")
    lo = max(0, draws - (population - marked))
    hits = sum(math.comb(marked, i) * math.comb(population - marked, draws - i)
               for i in range(lo, min(x, marked, draws) + 1))
    return hits / math.comb(population, draws)


def fisher_exact_less(c_new: int, n_new: int, c_base: int, n_base: int) -> float:
    """One-sided Fisher exact p-value that the new pass rate is lower than the baseline's.

    Table [[c_new, n_new − c_new], [c_base, n_base − c_base]]. Conditioning on the margins,
    under H0 (same rate) the passes of the new arm are X ~ Hypergeometric(N = n_new + n_base,
    K = c_new + c_base, n = n_new), and p = P(X ≤ c_new).
    The regression gate uses this per task instead of an absolute threshold: 7/10 against
    10/10 is weak evidence (p ≈ 0.105), 0/10 against 10/10 is strong (p ≈ 5.4e-6).
    An empty arm carries no evidence and gives p = 1.
    """
    _check_count(c_new, n_new)
    _check_count(c_base, n_base)
    return hypergeometric_cdf(c_new, n_new + n_base, c_new + c_base, n_new)


def percentile(values: Sequence[float], q: float) -> float:
    """q-th percentile (q in [0, 100]) by linear interpolation, as numpy's default.

    With the values sorted as v₀ ≤ … ≤ v_{m−1}, position h = (m − 1)·q/100 and
    result = v_⌊h⌋ + (h − ⌊h⌋)·(v_⌈h⌉ − v_⌊h⌋).
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    ordered = sorted(values)
    h = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(h), math.ceil(h)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


def coefficient_of_variation(values: Sequence[float]) -> float:
    """CV = σ / |μ| with the population standard deviation σ = √(Σ(x − μ)²/m).

    A zero mean returns 0.0: the ratio is undefined there, and for the non-negative
    quantities this is used on (latency, tokens, cost) a zero mean means every value is
    zero, i.e. no spread. Callers with signed data should not rely on that case.
    """
    if not values:
        raise ValueError("coefficient of variation of no values")
    mean = math.fsum(values) / len(values)
    if mean == 0:
        return 0.0
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / len(values))
    return sd / abs(mean)


def _check_pairs(confidences: Sequence[float], outcomes: Sequence[bool]) -> None:
    if len(confidences) != len(outcomes):
        raise ValueError(f"{len(confidences)} confidences but {len(outcomes)} outcomes")
    if not confidences:
        raise ValueError("no confidences")
    if any(not 0 <= p <= 1 for p in confidences):
        raise ValueError("confidences must lie in [0, 1]")


def brier_score(confidences: Sequence[float], outcomes: Sequence[bool]) -> float:
    """Brier score = (1/m)·Σ (pᵢ − oᵢ)², oᵢ ∈ {0, 1}. 0 is perfect, 0.25 is always saying 0.5."""
    _check_pairs(confidences, outcomes)
    return math.fsum((p - float(o)) ** 2 for p, o in zip(confidences, outcomes)) / len(outcomes)


def calibration_buckets(confidences: Sequence[float], outcomes: Sequence[bool],
                        edges: Sequence[float] = (0, .2, .4, .6, .8, 1.0)) -> list[dict]:
    """Reliability-diagram rows: for each bucket [eᵢ, eᵢ₊₁) (the last one closed at 1.0),
    count, mean confidence and success rate (fraction of outcomes that were true).

    Each row is {"lo", "hi", "count", "mean_confidence", "success_rate"}; an empty bucket
    has None for both means, since 0.0 would read as a measurement.
    """
    _check_pairs(confidences, outcomes)
    if len(edges) < 2 or any(a >= b for a, b in zip(edges, edges[1:])):
        raise ValueError(f"edges must be strictly increasing with at least two, got {edges}")
    if any(not edges[0] <= p <= edges[-1] for p in confidences):
        raise ValueError(f"a confidence lies outside [{edges[0]}, {edges[-1]}]")
    members: list[list[tuple[float, bool]]] = [[] for _ in edges[1:]]
    for p, o in zip(confidences, outcomes):
        # Index of the last edge ≤ p; p == the top edge belongs to the last bucket.
        i = next(j for j in range(len(edges) - 2, -1, -1) if edges[j] <= p)
        members[i].append((p, o))
    rows = []
    for lo, hi, items in zip(edges, edges[1:], members):
        m = len(items)
        rows.append({
            "lo": lo, "hi": hi, "count": m,
            "mean_confidence": math.fsum(p for p, _ in items) / m if m else None,
            "success_rate": sum(bool(o) for _, o in items) / m if m else None,
        })
    return rows


def binary_entropy(p: float) -> float:
    """H(p) = −p·log₂p − (1 − p)·log₂(1 − p) in bits, with 0·log 0 = 0 (so H(0) = H(1) = 0)."""
    if not 0 <= p <= 1:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    return -math.fsum(x * math.log2(x) for x in (p, 1 - p) if x > 0)
