"""Uncertainty for the audit: bootstrap intervals over test pairs and spread over seeds.

Two levels, kept apart (harness-anchors.md, section 2.4):

- within one run, per-query outcomes are resampled over the test pairs (`bootstrap_ci`,
  `paired_bootstrap_diff`): the rerun article's "Our rerun" section reports 95% bootstrap
  intervals over the 1,000 Flickr30k test pairs and paired intervals on the gaps between arms;
- across seeds, the values are shown as they are with their mean, half-range and std, and
  outlier seeds are flagged (`seed_spread`); the audit article's seed section turns on a
  fourth seed at .121 against .191 / .181 / .179.

Every interval carries its method, its n and its number of resamples, so that whatever prints
it can say what the interval is. Randomness comes only from `numpy.random.default_rng(seed)`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

METHODS = ("percentile", "bca")
STATISTICS: dict[str, Callable[..., np.ndarray]] = {"mean": np.mean, "median": np.median}
# Outlier seeds: Iglewicz & Hoaglin's modified z-score, |x - median| / (1.4826 * MAD) > 3.5;
# when MAD is 0, the mean absolute deviation scaled by 1.2533 replaces it (the usual fallback).
OUTLIER_Z = 3.5
OUTLIER_RULE = ("modified z-score |x - median| / (1.4826 MAD) > 3.5 (Iglewicz & Hoaglin); "
                "1.2533 x mean absolute deviation when MAD = 0; needs at least 3 seeds")
_CHUNK = 2_000_000  # resampled entries per chunk in the paired bootstrap (bounded memory)


@dataclass(frozen=True)
class Interval:
    """A confidence interval with what produced it (method, n items, resamples, caveats)."""

    lo: float
    hi: float
    level: float
    method: str
    n: int
    n_resamples: int
    note: str = ""

    def contains(self, value: float) -> bool:
        return self.lo <= value <= self.hi

    def label(self) -> str:
        """E.g. '95% percentile bootstrap, n=1000, 10000 resamples'."""
        resamples = f", {self.n_resamples} resamples" if self.n_resamples else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.level:.0%} {self.method}, n={self.n}{resamples}{note}"

    def to_dict(self) -> dict[str, object]:
        return {"ci": [self.lo, self.hi], "ci_level": self.level, "ci_method": self.method,
                "n": self.n, "n_resamples": self.n_resamples, "note": self.note}


def _as_sample(x: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"{name}: need a 1-d array of at least 2 outcomes, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name}: {int((~np.isfinite(arr)).sum())} NaN/inf outcomes; "
                         "drop or fix those queries before bootstrapping")
    return arr


def _check_common(level: float, n_resamples: int) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")


def bootstrap_ci(x: np.ndarray, *, statistic: str = "mean", level: float = 0.95,
                 n_resamples: int = 10_000, method: str = "percentile", seed: int = 0) -> Interval:
    """Bootstrap interval of `statistic` over the items of `x` (scipy.stats.bootstrap, vectorised).

    `method` is "percentile" or "bca". BCa is undefined when the resampled statistic does not
    vary (all-equal data) or its jackknife is flat; then the percentile interval is returned and
    `note` says so (harness-anchors.md 2.4: scipy gives NaN plus DegenerateDataWarning there).
    """
    arr = _as_sample(x, "bootstrap_ci")
    _check_common(level, n_resamples)
    if statistic not in STATISTICS:
        raise ValueError(f"statistic {statistic!r} unknown; choose from {sorted(STATISTICS)}")
    if method not in METHODS:
        raise ValueError(f"method {method!r} unknown; choose from {list(METHODS)}")
    func = STATISTICS[statistic]
    note = ""
    used = method
    if method == "bca":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sps.DegenerateDataWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi = _scipy_interval(arr, func, level, n_resamples, "BCa", seed)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            used = "percentile"
            note = "BCa degenerate (resampled statistic does not vary); percentile used instead"
    if used == "percentile":
        lo, hi = _scipy_interval(arr, func, level, n_resamples, "percentile", seed)
    label = "BCa bootstrap" if used == "bca" else "percentile bootstrap"
    return Interval(lo, hi, level, f"{label} of the {statistic} over items", arr.size, n_resamples,
                    note)


def _scipy_interval(arr: np.ndarray, func: Callable[..., np.ndarray], level: float,
                    n_resamples: int, method: str, seed: int) -> tuple[float, float]:
    res = sps.bootstrap((arr,), func, n_resamples=n_resamples, vectorized=True, axis=-1,
                        confidence_level=level, method=method, batch=max(1, _CHUNK // arr.size),
                        rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return float(ci.low), float(ci.high)


def paired_bootstrap_diff(a: np.ndarray, b: np.ndarray, *, level: float = 0.95,
                          n_resamples: int = 10_000, seed: int = 0) -> tuple[float, Interval]:
    """Mean of `a - b` and its percentile bootstrap interval over the shared test pairs.

    `a[i]` and `b[i]` are two arms' outcomes on the same test pair i (e.g. R@1 hits), so one
    set of resampled indices serves both arms, which is resampling the per-pair difference.
    Vectorised: indices are drawn in chunks of about 2M entries, means taken row-wise.
    """
    arr_a = _as_sample(a, "paired_bootstrap_diff a")
    arr_b = _as_sample(b, "paired_bootstrap_diff b")
    if arr_a.shape != arr_b.shape:
        raise ValueError(f"paired_bootstrap_diff: arms have {arr_a.size} and {arr_b.size} "
                         "outcomes; both must be scored on the same test pairs in the same order")
    _check_common(level, n_resamples)
    d = arr_a - arr_b
    n = d.size
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    rows = max(1, _CHUNK // n)
    for start in range(0, n_resamples, rows):
        stop = min(start + rows, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n), dtype=np.int32)
        means[start:stop] = d[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    interval = Interval(float(lo), float(hi), level, "paired percentile bootstrap over test pairs",
                        n, n_resamples)
    return float(d.mean()), interval


def outlier_seeds(values: Mapping[int | str, float]) -> list[str]:
    """Seeds whose value is far from the others' median (rule in OUTLIER_RULE)."""
    if len(values) < 3:
        return []
    keys = [str(k) for k in values]
    x = np.array([float(v) for v in values.values()])
    med = np.median(x)
    dev = np.abs(x - med)
    scale = 1.4826 * np.median(dev)
    if scale == 0.0:
        scale = 1.2533 * dev.mean()
    if scale == 0.0:
        return []
    return [k for k, z in zip(keys, dev / scale, strict=True) if z > OUTLIER_Z]


def seed_spread(values: Mapping[int | str, float]) -> dict[str, object]:
    """Mean, half-range ((max - min) / 2), std (ddof=1; None for one seed), min, max, median,
    per-seed values (keys as strings) and outlier seeds of one metric across seeds."""
    if not values:
        raise ValueError("seed_spread: no seed values given")
    x = np.array([float(v) for v in values.values()])
    if not np.isfinite(x).all():
        raise ValueError(f"seed_spread: non-finite values {dict(values)}; rerun those seeds")
    return {
        "values": {str(k): float(v) for k, v in values.items()},
        "n": int(x.size),
        "mean": float(x.mean()),
        "median": float(np.median(x)),
        "half_range": float((x.max() - x.min()) / 2.0),
        "std": float(x.std(ddof=1)) if x.size > 1 else None,
        "min": float(x.min()),
        "max": float(x.max()),
        "outliers": outlier_seeds(values),
    }


def seed_t_interval(values: Mapping[int | str, float], *, level: float = 0.95) -> Interval:
    """Student-t interval of the mean across seeds (n = number of seeds, df = n - 1)."""
    x = np.array([float(v) for v in values.values()])
    if x.size < 2:
        raise ValueError(f"seed_t_interval: need at least 2 seeds, got {x.size}")
    _check_common(level, 1)
    half = sps.t.ppf(0.5 + level / 2.0, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return Interval(float(x.mean() - half), float(x.mean() + half), level,
                    "t-interval of the mean over seeds", int(x.size), 0)
