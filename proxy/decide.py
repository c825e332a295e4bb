"""Fault decisions as keyed hashes.

A decision is a pure function of (scenario seed, episode key, rule name, call index), so an
episode gets the same faults whatever runs beside it and in whatever order episodes run.
There is deliberately no random generator anywhere in the proxy.
"""

from __future__ import annotations

import hashlib
import math
from statistics import NormalDist

_UNIT = float(2**64)


def decision_value(seed: str, episode: str, rule: str, index: int, stream: str = "fire") -> float:
    """Map (seed, episode, rule, index) to a number in [0, 1).

    `stream` separates independent draws for the same call (whether a rule fires, how long a
    delay lasts) so that tuning one never shifts the other.
    """
    digest = hashlib.blake2b(
        f"{episode}\x1f{rule}\x1f{index}\x1f{stream}".encode(),
        key=str(seed).encode()[:64],
        digest_size=8,
    ).digest()
    return int.from_bytes(digest, "big") / _UNIT


def fires(probability: float, value: float) -> bool:
    return value < probability


def uniform(value: float, low: float, high: float) -> float:
    return low + (high - low) * value


def lognormal(value: float, median: float, sigma: float) -> float:
    # Clamp away from 0 and 1, where the inverse normal CDF is infinite.
    clamped = min(max(value, 1e-12), 1 - 1e-12)
    return median * math.exp(sigma * NormalDist().inv_cdf(clamped))
