"""Generic statistics for the evaluator: intervals, exact tests, multiplicity, spread, calibration.

Standard library only (math, statistics), so the evaluator runs wherever the run directory is read.
Every function states its formula; bad input raises ValueError rather than returning a
number that looks real.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, repeat
from operator import sub
from statistics import NormalDist


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
    # Squared deviations iterated in C: a report squares a million of them at a time.
    return _cv(math.fsum(values), len(values), lambda mean: map(pow, map(sub, values, repeat(mean)), repeat(2)))


def counted_coefficient_of_variation(counts: Mapping[float, int]) -> float:
    """coefficient_of_variation of the values, each repeated its count times: each distinct
    value's deviation is squared once (fsum is exact, so the order of the terms does not matter)."""
    if not any(counts.values()):
        raise ValueError("coefficient of variation of no values")
    total = math.fsum(chain.from_iterable(repeat(x, n) for x, n in counts.items()))
    return _cv(total, sum(counts.values()),
               lambda mean: chain.from_iterable(repeat((x - mean) ** 2, n) for x, n in counts.items()))


def _cv(total: float, m: int, squared_deviations: Callable[[float], Iterable[float]]) -> float:
    """σ / |μ| from the values' sum, their number, and their squared deviations from a mean."""
    mean = total / m
    if mean == 0:
        return 0.0
    return math.sqrt(math.fsum(squared_deviations(mean)) / m) / abs(mean)


def _check_pairs(confidences: Sequence[float], outcomes: Sequence[bool]) -> None:
    if len(confidences) != len(outcomes):
        raise ValueError(f"{len(confidences)} confidences but {len(outcomes)} outcomes")
    if not confidences:
        raise ValueError("no confidences")
    if any(map(math.isnan, confidences)) or not 0 <= min(confidences) <= max(confidences) <= 1:
        raise ValueError("confidences must lie in [0, 1]")


def brier_score(confidences: Sequence[float], outcomes: Sequence[bool]) -> float:
    """Brier score = (1/m)·Σ (pᵢ − oᵢ)², oᵢ ∈ {0, 1}. 0 is perfect, 0.25 is always saying 0.5."""
    _check_pairs(confidences, outcomes)
    return math.fsum(map(pow, map(sub, confidences, map(float, outcomes)), repeat(2))) / len(outcomes)


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
    if not edges[0] <= min(confidences) <= max(confidences) <= edges[-1]:
        raise ValueError(f"a confidence lies outside [{edges[0]}, {edges[-1]}]")
    # Each distinct (confidence, outcome) once, with its count: a million episodes report few of
    # them. fsum is exact whatever the order, so the means are those of the episodes one by one.
    members: list[list[tuple[float, bool, int]]] = [[] for _ in edges[1:]]
    for (p, o), m in Counter(zip(confidences, outcomes)).items():
        # Index of the last edge ≤ p; p == the top edge belongs to the last bucket.
        i = next(j for j in range(len(edges) - 2, -1, -1) if edges[j] <= p)
        members[i].append((p, bool(o), m))
    rows = []
    for lo, hi, items in zip(edges, edges[1:], members):
        m = sum(count for _, _, count in items)
        rows.append({
            "lo": lo, "hi": hi, "count": m,
            "mean_confidence": math.fsum(chain.from_iterable(repeat(p, n) for p, _, n in items)) / m if m else None,
            "success_rate": sum(n for _, o, n in items if o) / m if m else None,
        })
    return rows


def binary_entropy(p: float) -> float:
    """H(p) = −p·log₂p − (1 − p)·log₂(1 − p) in bits, with 0·log 0 = 0 (so H(0) = H(1) = 0)."""
    if not 0 <= p <= 1:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    return -math.fsum(x * math.log2(x) for x in (p, 1 - p) if x > 0)


def _hypergeometric_pmf(population: int, marked: int, draws: int) -> tuple[int, list[float]]:
    """(lo, [P(X = lo), P(X = lo + 1), …]) for X ~ Hypergeometric(N, K, n), from log-gammas so
    that a 1000-trial arm does not overflow a float: log C(a, b) = lgamma(a+1) − lgamma(b+1) −
    lgamma(a−b+1)."""
    lo, hi = max(0, draws - (population - marked)), min(marked, draws)

    def log_comb(a: int, b: int) -> float:
        return math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)

    whole = log_comb(population, draws)
    return lo, [math.exp(log_comb(marked, i) + log_comb(population - marked, draws - i) - whole)
                for i in range(lo, hi + 1)]


def stratified_exact_less(tables: Sequence[tuple[int, int, int, int]]) -> float:
    """One-sided exact p-value that the new arm passes less often, pooled over strata (tasks).

    Each stratum is (c_new, n_new, c_base, n_base). Conditioning on every stratum's margins (as
    Fisher's test does for one), under H0 "no stratum's rate changed" the new arm's passes are
    independent Xᵢ ~ Hypergeometric(Nᵢ = n_newᵢ + n_baseᵢ, Kᵢ = c_newᵢ + c_baseᵢ, nᵢ = n_newᵢ),
    and the statistic is their sum T = Σ Xᵢ (the exact form of the Cochran–Mantel–Haenszel test):
        p = P(T ≤ Σ c_newᵢ) = Σ_{t ≤ t_obs} (pmf₁ ∗ pmf₂ ∗ … )(t).
    Strata whose margins allow one value only (3/3 against 3/3) carry no evidence and drop out;
    partial sums above t_obs − Σ loᵢ (each Xᵢ counted from its least value loᵢ) are never
    needed, so the convolution stops there. With one stratum
    this is fisher_exact_less.
    """
    bound, pmfs = 0, []
    for c_new, n_new, c_base, n_base in tables:
        _check_count(c_new, n_new)
        _check_count(c_base, n_base)
        lo, pmf = _hypergeometric_pmf(n_new + n_base, c_new + c_base, n_new)
        bound += c_new - lo
        if len(pmf) > 1:
            pmfs.append(pmf)
    dist = [1.0]
    for pmf in pmfs:
        dist = _convolve_upto(dist, pmf, bound)
    return min(1.0, math.fsum(dist[: bound + 1]))


def _convolve_upto(a: list[float], b: list[float], top: int) -> list[float]:
    """(a ∗ b)(t) for t = 0 … top only."""
    out = [0.0] * (min(len(a) + len(b) - 1, top + 1))
    for i, x in enumerate(a[: top + 1]):
        if x:
            for j, y in enumerate(b[: top + 1 - i]):
                out[i + j] += x * y
    return out


def weighted_holm(p_values: Sequence[float], weights: Sequence[float]) -> list[float]:
    """Holm's weighted step-down adjusted p-values (Holm 1979): reject hypothesis j at level α
    iff the returned value is ≤ α, and the chance of rejecting any true hypothesis is ≤ α
    whatever their number and dependence (strong family-wise error control).

    Order the hypotheses by pⱼ / wⱼ. At step s, Wₛ is the total weight of the hypotheses not yet
    rejected (the s-th and those after it);
        adjₛ = min(1, max_{r ≤ s} (p₍ᵣ₎ / w₍ᵣ₎) · Wᵣ).
    With equal weights this is ordinary Holm: adj₍ₛ₎ = max_{r ≤ s} (m − r + 1) · p₍ᵣ₎. A zero
    weight means the hypothesis is never tested (adjusted p = 1).
    """
    if len(p_values) != len(weights):
        raise ValueError(f"{len(p_values)} p-values but {len(weights)} weights")
    if any(w < 0 for w in weights) or any(not 0 <= p <= 1 for p in p_values):
        raise ValueError("weights must be ≥ 0 and p-values in [0, 1]")
    order = sorted((j for j in range(len(p_values)) if weights[j] > 0),
                   key=lambda j: p_values[j] / weights[j])
    remaining = math.fsum(weights[j] for j in order)
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for j in order:
        running = max(running, min(1.0, p_values[j] / weights[j] * remaining))
        adjusted[j] = running
        remaining -= weights[j]
    return adjusted


def smoothed_rate(successes: int, n: int) -> float:
    """(c + 1) / (n + 2), Laplace's rule of succession: a rate whose variance p(1 − p) is never 0,
    so 3/3 still reads as uncertain."""
    _check_count(successes, n)
    return (successes + 1) / (n + 2)


def mean_rate_change(tables: Sequence[tuple[int, int, int, int]]) -> tuple[float, float]:
    """Change in mean pass rate over strata, new minus base, and its standard error.

        Δ̂ = (1/T)·Σᵢ (c_newᵢ/n_newᵢ − c_baseᵢ/n_baseᵢ)
        SE = (1/T)·√Σᵢ [p̃ᵢ(1 − p̃ᵢ)/n_newᵢ + q̃ᵢ(1 − q̃ᵢ)/n_baseᵢ],  p̃, q̃ = smoothed_rate of each arm.
    The strata are fixed (the same tasks on both sides), so only the trials vary: a sum of
    independent binomial variances. Every arm needs n ≥ 1.
    """
    if not tables or any(n_new < 1 or n_base < 1 for _, n_new, _, n_base in tables):
        raise ValueError("need at least one stratum, each with trials on both sides")
    delta = math.fsum(c / n - b / m for c, n, b, m in tables) / len(tables)
    variance = math.fsum(smoothed_rate(c, n) * (1 - smoothed_rate(c, n)) / n
                         + smoothed_rate(b, m) * (1 - smoothed_rate(b, m)) / m for c, n, b, m in tables)
    return delta, math.sqrt(variance) / len(tables)


def detectable_drop(tables: Sequence[tuple[int, int, int, int]], alpha: float, power: float = 0.8) -> float:
    """The smallest drop in mean pass rate, spread evenly over the strata, that a one-sided test at
    level α finds with the given power (normal approximation):
        δ = (z₁₋α + z_power) · SE₀,  SE₀ = (1/T)·√Σᵢ p̄ᵢ(1 − p̄ᵢ)(1/n_newᵢ + 1/n_baseᵢ),
    p̄ᵢ = smoothed_rate of both arms pooled (the rate under "no change").
    """
    normal = NormalDist()
    return (normal.inv_cdf(1 - alpha) + normal.inv_cdf(power)) * null_se(tables)


def null_se(tables: Sequence[tuple[int, int, int, int]], n_new: int | None = None) -> float:
    """SE₀ = (1/T)·√Σᵢ p̄ᵢ(1 − p̄ᵢ)(1/n_newᵢ + 1/n_baseᵢ), the standard error of the change in mean
    pass rate when nothing changed; p̄ᵢ = smoothed_rate of both arms pooled. With n_new, every
    stratum's new arm is taken to have n_new trials instead (the SE of a design with that k)."""
    if not tables or any(n < 1 or m < 1 for _, n, _, m in tables):
        raise ValueError("need at least one stratum, each with trials on both sides")
    variance = math.fsum(smoothed_rate(c + b, n + m) * (1 - smoothed_rate(c + b, n + m))
                         * (1 / (n_new or n) + 1 / m) for c, n, b, m in tables)
    return math.sqrt(variance) / len(tables)


def power_spending(alpha: float, t: float, rho: float) -> float:
    """α spent by information fraction t ∈ [0, 1], the power family of Kim & DeMets (1987):
        α(t) = α · t^ρ.
    ρ = 1 spends evenly over the trials (close to Pocock's boundaries), ρ = 3 keeps most of α
    for the end (close to O'Brien–Fleming's)."""
    if not 0 <= t <= 1 or rho <= 0:
        raise ValueError(f"need t in [0, 1] and rho > 0, got t={t}, rho={rho}")
    return alpha * t ** rho


def look_levels(alpha: float, looks: Sequence[int], rho: float) -> list[float]:
    """Each declared look's share of α, by trials per task kⱼ (increasing; K = the last):
        αⱼ = α(kⱼ/K) − α(kⱼ₋₁/K),  α(·) = power_spending,  so Σⱼ αⱼ = α.
    A test run at level αⱼ at look j rejects a true hypothesis with probability ≤ αⱼ, so by the
    union bound (Bonferroni over looks) the chance that any look does is ≤ Σⱼ αⱼ = α, whatever
    the correlation between looks and whichever look the run stops at."""
    if not looks or any(a >= b for a, b in zip(looks, looks[1:])) or looks[0] < 1:
        raise ValueError(f"looks must be increasing trial counts ≥ 1, got {list(looks)}")
    spent = [power_spending(alpha, k / looks[-1], rho) for k in looks]
    return [now - before for before, now in zip([0.0, *spent], spent)]


def fixed_k_equivalent(tables: Sequence[tuple[int, int, int, int]], drop: float, alpha: float,
                       last_alpha: float, max_k: int) -> int:
    """Trials per task a single-look design at level α needs for the power a sequential design has
    at its last look (max_k trials, level last_alpha) against a drop spread over the strata,
    by the normal approximation with SE₀ = null_se at each k:
        π = Φ(drop/SE₀(max_k) − z₁₋last_alpha),   k = min{k ≥ 1 : Φ(drop/SE₀(k) − z₁₋α) ≥ π}.
    The sequential design's power is at least π (its earlier looks only add), so this is what it
    would cost to get the same power without looking early; at most max_k, as α ≥ last_alpha."""
    normal = NormalDist()
    target = drop / null_se(tables, max_k) - normal.inv_cdf(1 - last_alpha)
    return next((k for k in range(1, max_k) if drop / null_se(tables, k) - normal.inv_cdf(1 - alpha) >= target),
                max_k)


def least_attainable_less(tables: Sequence[tuple[int, int, int, int]]) -> float:
    """The smallest p-value stratified_exact_less (or, for one stratum, fisher_exact_less) could
    give with these margins: Πᵢ P(Xᵢ = loᵢ), every stratum at its least possible count.

    Tarone (1990): a test whose least attainable p exceeds its threshold can never reject, so
    leaving it out of a multiplicity correction keeps the family-wise error rate (the choice
    depends on the margins only, on which the conditional tests already condition) and gives the
    tests that can reject a larger share of α. 8/8 against 8/8, or 8/8 against 7/8 (0.5), are such.
    """
    least = 1.0
    for c_new, n_new, c_base, n_base in tables:
        _check_count(c_new, n_new)
        _check_count(c_base, n_base)
        least *= _hypergeometric_pmf(n_new + n_base, c_new + c_base, n_new)[1][0]
    return least
