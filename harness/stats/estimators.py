"""Uncertainty for the audit: bootstrap intervals over test pairs and spread over seeds.

Two levels, kept apart (with 3 to 5 seeds a bootstrap across seeds is unreliable, so the
rerun resamples within a seed and reports the spread across seeds on its own):

- within one run, per-query outcomes are resampled over the test pairs (`bootstrap_ci`,
  `paired_bootstrap_diff`): the rerun article's "Our rerun" section reports 95% bootstrap
  intervals over the 1,000 Flickr30k test pairs and paired intervals on the gaps between arms;
- across seeds, the values are shown as they are with their mean, half-range and std, and
  outlier seeds are flagged (`seed_spread`); the audit article's seed section turns on a
  fourth seed at .121 against .191 / .181 / .179.

The audit's verdicts read `two_level_mean` / `two_level_gap` (`TwoLevel`): a crossed
random-effects model of seeds x test pairs with moment estimators, giving the variance on the
fixed test pairs a paper's number shares (seeds only) and the variance over test pairs too,
with a prediction interval for a replication on the same pairs; below 3 seeds both cover test
pairs only and say that training variance is not estimated.

Every interval carries its method, its n and its number of resamples, so that whatever prints
it can say what the interval is. Randomness comes only from `numpy.random.default_rng(seed)`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

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
    `note` says so (scipy.stats.bootstrap returns NaN with a DegenerateDataWarning there:
    SciPy PRs #14351 and #16377, issue #15883).
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


# ------------------------------------------------------------------ seeds and test pairs together
MIN_SEEDS_FOR_TRAINING_VARIANCE = 3  # below it, a between-seed variance is not estimated


@dataclass(frozen=True)
class TwoLevel:
    """A seeds x test pairs estimate of one arm's mean or of a paired gap between two arms.

    Model, per arm: a crossed two-way random-effects design without replication,
    x[s, i] = mu + a_s + b_i + e_si, with seed effects a_s (variance s_a^2), test-pair effects
    b_i (s_b^2) and a seed x pair residual e_si (s_e^2; it holds which pairs a given training run
    gets right, so it is training variance too). Two targets, two variances:

    - on these test pairs (`se`, `df`, `interval`, `prediction_interval`): what a training run
      of the recipe scores on the very pairs scored, which is what a paper's number on the same
      1,000 Flickr30k test pairs is. The pair effects are shared by claim and rerun, so
      Var = (s_a^2 + s_e^2 / n) / S, the variance of one seed's mean over S, estimated by the
      variance (ddof 1) of the S per-seed means: Student t with S - 1 df (for a gap,
      Welch-Satterthwaite over both arms). Unbiased for independent seeds whatever the pairs.
    - over test pairs too (`se_population`, `df_population`, `population_interval`): for a
      statement meant to hold beyond these pairs. Var = s_a^2 / S + s_b^2 / n + s_e^2 / (S n)
      = (MS_seed + MS_pair - MS_resid) / (S n) from the ANOVA mean squares, with each variance
      component truncated at 0 and Satterthwaite (1946, Biometrics Bull. 2(6)) df from the mean
      squares that enter (Searle, Casella & McCulloch 1992, Variance Components, ch. 4).

    Below 3 seeds no training variance is estimated: both intervals are over test pairs only
    (the per-pair outcome averaged over seeds, df n - 1) and `note()` says so. `seed_var`: the
    variance of one seed's mean on these pairs (for a gap, of one seed per arm); `pair_var`: the
    test-pair component s_b^2 / n (below 3 seeds, the whole test-pair variance); `noise_var`: the
    residual part s_e^2 / (S n) of se^2 (None with one seed). No resampling: `n_resamples` is 0.
    """

    estimate: float
    se: float
    df: float
    n_seeds: int
    n_pairs: int
    n_resamples: int
    seed_var: float | None
    pair_var: float
    method: str
    se_population: float
    df_population: float
    method_population: str
    noise_var: float | None = None

    @property
    def training_variance(self) -> bool:
        return self.seed_var is not None

    def note(self) -> str:
        if self.training_variance:
            return ""
        return (f"training variance not estimated ({self.n_seeds} seed(s) < "
                f"{MIN_SEEDS_FOR_TRAINING_VARIANCE}): the interval covers test pairs only")

    def _interval(self, se: float, df: float, level: float, method: str) -> Interval:
        _check_common(level, 1)
        half = float(sps.t.ppf(0.5 + level / 2.0, df)) * se
        return Interval(self.estimate - half, self.estimate + half, level, method,
                        self.n_pairs, self.n_resamples, self.note())

    def interval(self, level: float = 0.95) -> Interval:
        """estimate +- t(df) * se: the value on these test pairs (seeds vary, pairs fixed)."""
        return self._interval(self.se, self.df, level, self.method)

    def population_interval(self, level: float = 0.95) -> Interval:
        """estimate +- t(df_population) * se_population: seeds and test pairs both vary."""
        return self._interval(self.se_population, self.df_population, level,
                              self.method_population)

    def prediction_se(self, m_seeds: int) -> float:
        """The se of rerun - (the mean of an independent m-seed replication on these same test
        pairs; a paper's number is one): se^2 + one seed's variance / m (a two-sample t whose
        common per-seed variance comes from the rerun alone, with the rerun's df). Below 3
        seeds one seed's variance is stood in for by n_seeds * se^2 = (S s_pair^2 + s_noise^2)
        / n (se^2 there is the test-pair variance of the seed-mean outcome): it holds pair
        effects a shared-pairs replication does not add, so it is wider than needed unless
        training variance exceeds it."""
        if m_seeds < 1:
            raise ValueError(f"m_seeds must be >= 1, got {m_seeds}")
        one_seed = self.seed_var if self.seed_var is not None else self.n_seeds * self.se ** 2
        return math.sqrt(self.se ** 2 + one_seed / m_seeds)

    def prediction_interval(self, m_seeds: int, level: float = 0.95) -> Interval:
        """Where the mean of an independent m-seed replication on these same test pairs falls:
        estimate +- t(df) * `prediction_se(m_seeds)`."""
        return self._interval(self.prediction_se(m_seeds), self.df, level,
                              f"prediction interval for a {m_seeds}-seed replication on the "
                              f"same test pairs ({self.method})")

    def to_dict(self, level: float = 0.95) -> dict[str, object]:
        iv, pop = self.interval(level), self.population_interval(level)
        return {"estimate": self.estimate, "se": self.se, "df": self.df, "ci": [iv.lo, iv.hi],
                "ci_level": level, "method": self.method, "n_seeds": self.n_seeds,
                "n_pairs": self.n_pairs, "n_resamples": self.n_resamples,
                "seed_var": self.seed_var, "pair_var": self.pair_var,
                "training_variance": self.training_variance, "note": self.note(),
                "se_population": self.se_population, "df_population": self.df_population,
                "ci_population": [pop.lo, pop.hi], "method_population": self.method_population,
                "noise_var": self.noise_var}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TwoLevel:
        """The estimate `to_dict` wrote (its intervals are recomputed, not read); an entry
        written before the population fields existed reads them as the seeds-only ones."""
        se, df, method = float(d["se"]), float(d["df"]), str(d["method"])
        return cls(float(d["estimate"]), se, df, int(d["n_seeds"]), int(d["n_pairs"]),
                   int(d["n_resamples"]), d["seed_var"], float(d["pair_var"]), method,
                   float(d.get("se_population", se)), float(d.get("df_population", df)),
                   str(d.get("method_population", method)), d.get("noise_var"))


def _as_runs(x: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 2:
        raise ValueError(f"{name}: need shape (n_seeds, n_pairs) with n_pairs >= 2, "
                         f"got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name}: {int((~np.isfinite(arr)).sum())} NaN/inf outcomes")
    return arr


def _residual_ms(x: np.ndarray) -> float:
    """The two-way ANOVA residual mean square of x (S >= 2 seeds x n pairs): E = s_e^2."""
    r = x - x.mean(axis=1, keepdims=True) - x.mean(axis=0, keepdims=True) + x.mean()
    return float((r ** 2).sum()) / ((x.shape[0] - 1) * (x.shape[1] - 1))


def _satterthwaite(terms: list[tuple[float, float]]) -> float:
    """df of a sum of scaled mean squares, given (term, its df) pairs (Satterthwaite 1946);
    the smallest df when every term is 0 (nothing varies: any df gives a zero-width interval)."""
    denom = sum(v ** 2 / d for v, d in terms)
    return sum(v for v, _ in terms) ** 2 / denom if denom > 0 else min(d for _, d in terms)


def _two_level(arms: list[np.ndarray], signs: list[float]) -> TwoLevel:
    """sum_k sign_k * mean(arm_k) with both variances of `TwoLevel` (moment estimators). Arms
    are trained separately (independent seeds) and scored on the same test pairs (paired)."""
    n = arms[0].shape[1]
    if any(a.shape[1] != n for a in arms):
        raise ValueError(f"arms are scored on {[a.shape[1] for a in arms]} test pairs; a paired "
                         "gap needs the same test pairs in the same order")
    seeds = [a.shape[0] for a in arms]
    per_pair = sum(s * a.mean(axis=0) for a, s in zip(arms, signs, strict=True))
    pair_total = float(np.var(per_pair, ddof=1)) / n  # (s_b^2 + sum_k s_e,k^2 / S_k) / n
    resid = [_residual_ms(a) / (s * n) if s > 1 else None for a, s in zip(arms, seeds,
                                                                           strict=True)]
    noise = None if None in resid else float(sum(resid))
    what, shown = ("paired gap" if len(arms) == 2 else "mean"), "/".join(map(str, seeds))
    if min(seeds) < MIN_SEEDS_FOR_TRAINING_VARIANCE:
        label = (f"test pairs only: {what} of the per-pair outcome averaged over {shown} "
                 f"seed(s), {n} pairs, t with {n - 1} df; training variance not estimated")
        se = math.sqrt(pair_total)
        return TwoLevel(float(per_pair.mean()), se, float(n - 1), min(seeds), n, 0, None,
                        pair_total, label, se, float(n - 1), label, noise)
    seed_mean_var = [float(np.var(a.mean(axis=1), ddof=1)) for a in arms]
    fixed = [(v / s, float(s - 1)) for v, s in zip(seed_mean_var, seeds, strict=True)]
    assert noise is not None
    # Var = sum_k [seed_k + resid_k] + pair, each component a difference of mean-square terms:
    # seed_k = fixed_k - resid_k (s_a,k^2 / S_k) and pair = pair_total - sum_k resid_k
    # (s_b^2 / n); a component estimated below 0 is dropped with its terms, so every term
    # enters with coefficient 1, 0 or -1 and the df come from exactly those that enter
    use_seed = [v > r for (v, _), r in zip(fixed, resid, strict=True)]
    use_pair = pair_total > noise
    population = [(v * u, d) for (v, d), u in zip(fixed, use_seed, strict=True)]
    population += [(r * (1 - u - use_pair), float((s - 1) * (n - 1)))
                   for r, u, s in zip(resid, use_seed, seeds, strict=True)]
    population.append((pair_total * use_pair, float(n - 1)))
    seeds_label = (f"seeds on these test pairs: {what}, t on the variance of the {shown} "
                   f"per-seed means ({n} pairs held fixed, "
                   + (f"df {seeds[0] - 1})" if len(arms) == 1 else "Welch-Satterthwaite df)"))
    return TwoLevel(float(per_pair.mean()), math.sqrt(sum(v for v, _ in fixed)),
                    _satterthwaite(fixed), min(seeds), n, 0, float(sum(seed_mean_var)),
                    max(pair_total - noise, 0.0), seeds_label,
                    math.sqrt(sum(v for v, _ in population)), _satterthwaite(population),
                    f"seeds and test pairs: {what}, crossed random-effects ANOVA ({shown} seeds "
                    f"x {n} pairs, moment estimator), t with Satterthwaite df", noise)


def two_level_mean(x: np.ndarray) -> TwoLevel:
    """One arm's metric over seeds and test pairs (`TwoLevel`). `x[s, i]`: the outcome of test
    pair i under seed s (e.g. an R@1 hit), shape (n_seeds, n_pairs)."""
    return _two_level([_as_runs(x, "two_level_mean")], [1.0])


def two_level_gap(a: np.ndarray, b: np.ndarray) -> TwoLevel:
    """mean(a) - mean(b) over seeds and test pairs (`TwoLevel`): seeds independent per arm,
    test pairs shared (paired). Shapes (n_seeds_a, n_pairs) and (n_seeds_b, n_pairs)."""
    return _two_level([_as_runs(a, "two_level_gap a"), _as_runs(b, "two_level_gap b")],
                      [1.0, -1.0])
