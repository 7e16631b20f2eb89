"""Null calibration of alignment scores against a permutation null.

Gröger, Wen & Brbić (ICML 2026, arXiv 2602.14486) show that mutual k-NN and CKA have a
non-zero score under no alignment that depends on n, the widths and the metric, so a raw score
cannot be read alone. Their Algorithm 1 (the `calibrated-similarity` package, version 0.1.1,
`calibration.calibrate`; docs/sources.md) breaks the pairing by permuting the rows of the second
side K times and scores each permutation:

- threshold tau: order statistic ceil((1 - alpha)(K + 1)) of the K null scores together with
  the observed one (under no alignment the observed pairing is one more permutation);
- add-one p-value: (1 + #{null >= observed}) / (K + 1);
- calibrated score: clip((observed - tau) / (smax - tau), 0, 1) with smax = 1, the most either
  metric attains; 0 unless the observed score beats the threshold.

The null quantiles reported beside them use the same order-statistic rule at other levels, so
`null_q95` is the threshold at alpha = .05. A null score within TIE_ATOL of the observed one
is the observed score (a tie, counted against it): mutual k-NN is a mean of multiples of 1/k,
and the float64 sum of the same values in another row order can differ in its last bits.

The package computes in float32 on torch; this module computes in float64 on numpy with the
same permutations (tests/test_calibrate.py checks both agree). With K permutations the
smallest p-value is 1 / (K + 1), so K >= 19 is needed for a score to pass at alpha = .05, and
K >= 99 for `null_q99` to be below the largest score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping

import numpy as np

ALPHA = 0.05  # the package's default significance level
SMAX = 1.0  # the package's default: the largest score (mutual k-NN and CKA are in [0, 1])
EPSILON = 1e-12  # the package's floor on smax - tau
# Scores in [0, 1] summed in float64 over n <= 1e5 rows differ by order alone by at most about
# n eps = 2e-11; distinct mutual k-NN scores differ by at least 1 / (n k) >= 1e-7 (k <= 100).
TIE_ATOL = 1e-9
# reported quantile -> the upper-tail alpha whose threshold it is
QUANTILES = {"null_q50": 0.5, "null_q95": 0.05, "null_q99": 0.01}
MIN_PERMUTATIONS = math.ceil(1 / ALPHA) - 1  # 19: the smallest K whose p-value reaches ALPHA

Score = Callable[[np.ndarray, np.ndarray], float]


def permutations(n: int, n_permutations: int, seed: int) -> Iterator[np.ndarray]:
    """`n_permutations` permutations of range(n), drawn one at a time from
    numpy.random.default_rng(seed)."""
    rng = np.random.default_rng(seed)
    for _ in range(n_permutations):
        yield rng.permutation(n)


def null_scores(a: np.ndarray, b: np.ndarray, scores: Mapping[str, Score],
                perms: Iterable[np.ndarray]) -> dict[str, np.ndarray]:
    """score(a, b[pi]) for every permutation pi and score: float64 [K] per score name. One
    permutation serves every score, as the package's layer-wise algorithm shares it."""
    b = np.asarray(b)
    null: dict[str, list[float]] = {name: [] for name in scores}
    for pi in perms:
        shuffled = b[pi]
        for name, score in scores.items():
            null[name].append(float(score(a, shuffled)))
    return {name: np.asarray(values, dtype=np.float64) for name, values in null.items()}


def critical_value(observed: float, null: np.ndarray, alpha: float) -> float:
    """The package's threshold: the ceil((1 - alpha)(K + 1))-th smallest of the K null scores
    and the observed one (index clamped to [1, K + 1])."""
    combined = np.sort(np.append(np.asarray(null, dtype=np.float64), observed))
    k = combined.size - 1
    idx = min(max(math.ceil((1.0 - alpha) * (k + 1)) - 1, 0), k)
    return float(combined[idx])


def calibrate(observed: float, null: np.ndarray, *, alpha: float = ALPHA,
              smax: float = SMAX) -> dict[str, float]:
    """Raw score, null quantiles, threshold, add-one p-value and calibrated score of one
    observed score against its permutation null (formulas in the module docstring)."""
    null = np.asarray(null, dtype=np.float64)
    if null.ndim != 1 or null.size < 1:
        raise ValueError(f"need a 1-d null of at least 1 permuted score, got shape {null.shape}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    null = np.where(np.abs(null - observed) <= TIE_ATOL, observed, null)
    tau = critical_value(observed, null, alpha)
    return {
        "raw": float(observed),
        **{key: critical_value(observed, null, q) for key, q in QUANTILES.items()},
        "threshold": tau,
        "alpha": alpha,
        "p_value": (1.0 + np.count_nonzero(null >= observed)) / (null.size + 1),
        "calibrated": float(np.clip((observed - tau) / max(smax - tau, EPSILON), 0.0, 1.0)),
        "n_permutations": int(null.size),
    }
