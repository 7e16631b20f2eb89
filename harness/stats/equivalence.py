"""The tests behind the audit's verdicts: equivalence within a margin, a miss beyond it, an
order, Holm's step-down over a family, and the seeds an equivalence needs.

- `margin_test`: an estimate d of rerun - target with its se and t df against a margin D.
  Equivalent iff the (1 - 2 alpha) interval lies inside (-D, +D): two one-sided tests at alpha
  each (Schuirmann 1987, J. Pharmacokinet. Biopharm. 15(6); an intersection-union test of size
  alpha, Berger & Hsu 1996, Statist. Sci. 11(4)). Beyond the margin: the minimal-effect test,
  p = P(T > (|d| - D) / se), one-sided against the nearer bound (Lakens 2017, Soc. Psychol.
  Personal. Sci. 8(4); TOSTER's `hypothesis = "MET"`), which is the (1 - 2 alpha) interval
  wholly outside [-D, +D] at p <= alpha. Distinguishable (a flag, never a verdict): the
  two-sided (1 - alpha) interval excludes 0 (Lakens, Scheel & Isager 2018, "statistically
  different from zero but practically insignificant").
- `order_test`: a gap g against a smallest material gap d_o (0 unless a claim states one):
  shown above it when the one-sided (1 - alpha) lower bound exceeds it, shown below it when the
  one-sided upper bound falls short (p of the reversed order).
- `holm`: Holm's (1979, Scand. J. Statist. 6(2)) step-down adjusted p-values, which hold the
  family-wise error at alpha under any dependence (the audit's claims share arms, seeds and
  test pairs).
- `Design` / `power` / `seeds_for`: the probability that the equivalence test says
  equivalent, or that the minimal-effect test says beyond, at a true miss, under the normal
  model of per-seed means (the rerun's estimated seed variance a scaled chi-square with S - 1
  df; the claim's printed seed sd and a test-pair floor taken as known), integrated over the
  chi-square by Gauss-Legendre quadrature; the fewest seeds that reach a power.
- `welch_df`: Welch (1947) - Satterthwaite (1946) df of a sum of variance estimates.
- `sd_interval`: the chi-square interval of a normal sd from its estimate.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

ALPHA = 0.05  # equivalence at 5% a side (a 90% interval); the miss beyond the margin at 5%
POWER = 0.80  # the power the seeds advice aims at
MAX_SEEDS = 200  # seeds_for searches up to this many (WELCH_GRID ends there)
ADVICE_LEVEL = 0.80  # the interval of a seed sd read off a few seeds that the seeds advice spans
WELCH_GRID = (*range(3, 13), 15, 20, 25, 30, 40, 50, 70, 100, 140, 200)  # seeds_for's scan
DIFFERS_MISS = 2.0  # the miss, in margins, that the seeds for "differs" are planned to catch


@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, df: float) -> float:
    """Student t's q quantile at df (cached: the audit and its simulations ask few distinct)."""
    return float(sps.t.ppf(q, df))


@dataclass(frozen=True)
class MarginTest:
    """d = rerun - target against +- margin (`margin_test`)."""

    d: float
    se: float
    df: float
    margin: float
    alpha: float
    lo: float  # the (1 - 2 alpha) interval of d
    hi: float
    p_beyond: float  # minimal-effect p: d beyond the nearer margin
    equivalent: bool
    reachable: bool  # t * se < margin: some estimate could show equivalence
    distinguishable: bool  # the two-sided (1 - alpha) interval excludes 0

    @property
    def level(self) -> float:
        return 1 - 2 * self.alpha


def margin_test(d: float, se: float, df: float, margin: float, alpha: float = ALPHA
                ) -> MarginTest:
    """Equivalence (TOST) and the minimal-effect test of d against +- margin (module doc)."""
    if not margin > 0:
        raise ValueError(f"margin must be above 0, got {margin}")
    t_e = t_quantile(1 - alpha, df)
    half = t_e * se
    if se > 0:
        p_beyond = float(sps.t.sf((abs(d) - margin) / se, df))
        distinguishable = abs(d) > t_quantile(1 - alpha / 2, df) * se
    else:
        p_beyond, distinguishable = (0.0 if abs(d) > margin else 1.0), d != 0
    return MarginTest(d, se, df, margin, alpha, d - half, d + half, p_beyond,
                      -margin < d - half and d + half < margin, half < margin, distinguishable)


@dataclass(frozen=True)
class OrderTest:
    """g against a smallest material gap `min_gap` (`order_test`)."""

    g: float
    se: float
    df: float
    min_gap: float
    alpha: float
    lower: float  # one-sided (1 - alpha) bounds of g
    upper: float
    p_above: float  # p of "g <= min_gap"
    p_below: float  # p of "g >= min_gap" (the reversed order)


def order_test(g: float, se: float, df: float, min_gap: float = 0.0, alpha: float = ALPHA
               ) -> OrderTest:
    """One-sided tests of g > min_gap and g < min_gap at alpha each (module doc)."""
    half = t_quantile(1 - alpha, df) * se
    if se > 0:
        z = (g - min_gap) / se
        p_above, p_below = float(sps.t.sf(z, df)), float(sps.t.cdf(z, df))
    else:
        p_above, p_below = float(g <= min_gap), float(g >= min_gap)
    return OrderTest(g, se, df, min_gap, alpha, g - half, g + half, p_above, p_below)


def holm(p: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values: the i-th smallest of K times (K - i + 1), made
    non-decreasing, capped at 1. Reject a member at family-wise alpha iff its adjusted p <=
    alpha."""
    order = sorted(p, key=lambda k: (p[k], k))
    out, running = {}, 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * p[key]))
        out[key] = running
    return out


def welch_df(parts: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite df of a sum of independent variance estimates, each (its value, its
    df): (sum v)^2 / sum (v^2 / df); a part with no df (inf) or no variance adds nothing."""
    total = sum(v for v, _ in parts)
    denom = sum(v * v / df for v, df in parts if v > 0 and math.isfinite(df))
    return math.inf if denom == 0 else total * total / denom


def sd_interval(sd: float, df: float, level: float = ADVICE_LEVEL) -> tuple[float, float]:
    """The two-sided `level` interval of a normal sd from its estimate `sd` on `df` df:
    sd * sqrt(df / chi^2 quantile) at the two tails."""
    lo, hi = _sd_factors(df, level)
    return sd * lo, sd * hi


@functools.lru_cache(maxsize=256)
def _sd_factors(df: float, level: float) -> tuple[float, float]:
    hi_q, lo_q = sps.chi2.ppf([0.5 + level / 2, 0.5 - level / 2], df)
    return math.sqrt(df / hi_q), math.sqrt(df / lo_q)


@dataclass(frozen=True)
class Design:
    """The variance of d = rerun - target, in one unit (a margin, or the metric's own).

    `seed_sd` is one seed's sd, estimated from the rerun's seeds (S - 1 df). The claim's own
    noise is `claim_sd`^2 / `claim_seeds` where the registry prints the claim's seed spread
    (Welch: its value fixed, its m - 1 df entering the Welch-Satterthwaite df), else one seed's
    variance over `claim_seeds` from the rerun's estimate (the two-sample t whose common
    variance comes from the rerun, t with S - 1 df), none without `claim_seeds`. `floor_var` is
    a part no seed count shrinks (a population interval's test-pair variance), taken as known.
    """

    seed_sd: float
    margin: float
    claim_seeds: int | None = None
    claim_sd: float | None = None
    floor_var: float = 0.0

    @property
    def welch(self) -> bool:
        return self.claim_sd is not None and bool(self.claim_seeds) and self.claim_seeds > 1

    def parts(self, seeds: int) -> tuple[float, float]:
        """(the estimated part's coefficient of seed_sd^2, the known part)."""
        pooled = self.claim_sd is None and self.claim_seeds
        coef = 1 / seeds + (1 / self.claim_seeds if pooled else 0.0)
        known = self.floor_var + (self.claim_sd ** 2 / self.claim_seeds
                                  if self.claim_sd is not None and self.claim_seeds else 0.0)
        return coef, known

    def df(self, seeds: int, estimated: np.ndarray) -> np.ndarray:
        """The test's t df given the estimated part of the variance: S - 1, or Welch's with
        the claim's printed spread (m - 1 df)."""
        if not self.welch:
            return np.full_like(estimated, seeds - 1.0)
        assert self.claim_sd is not None and self.claim_seeds
        claim = self.claim_sd ** 2 / self.claim_seeds
        return ((estimated + claim) ** 2
                / (estimated ** 2 / (seeds - 1) + claim ** 2 / (self.claim_seeds - 1)))


_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(96)
TESTS = ("equivalent", "beyond", "above")


def _half(design: Design, seeds: int, alpha: float, x: np.ndarray) -> np.ndarray:
    """The (1 - alpha) one-sided half-width t x se at chi-square draws x of the seed variance."""
    coef, known = design.parts(seeds)
    estimated = design.seed_sd ** 2 * coef * x / (seeds - 1)
    t = sps.t.ppf(1 - alpha, design.df(seeds, estimated))
    return t * np.sqrt(estimated + known)


def _inside(design: Design, seeds: int, alpha: float) -> list[tuple[float, float]]:
    """The chi-square quantiles (as probabilities) where the equivalence interval is narrower
    than the margin: below a closed-form bound with S - 1 df; under Welch (the df move with
    the draw, so the half-width need not rise with it) the runs of a 256-point grid, each end
    bisected 12 times (to 1e-6)."""
    coef, known = design.parts(seeds)
    dfs, margin = seeds - 1, design.margin
    if not design.welch:
        t = t_quantile(1 - alpha, dfs)
        if t * math.sqrt(known) >= margin:
            return []
        return [(0.0, float(sps.chi2.cdf(((margin / t) ** 2 - known)
                                         / (design.seed_sd ** 2 * coef) * dfs, dfs)))]

    def narrow(u: np.ndarray) -> np.ndarray:
        return _half(design, seeds, alpha, sps.chi2.ppf(u, dfs)) < margin

    grid = np.linspace(0.0, 1.0, 257)
    grid[-1] = 1.0 - 1e-12
    inside = narrow(grid)

    def edge(a: float, b: float, inside_at_a: bool) -> float:
        for _ in range(12):
            mid = (a + b) / 2
            if bool(narrow(np.array([mid]))[0]) == inside_at_a:
                a = mid
            else:
                b = mid
        return (a + b) / 2

    runs, start = [], None
    for i, now in enumerate(inside):
        if now and start is None:
            start = 0.0 if i == 0 else edge(float(grid[i - 1]), float(grid[i]), False)
        if not now and start is not None:
            runs.append((start, edge(float(grid[i - 1]), float(grid[i]), True)))
            start = None
    if start is not None:
        runs.append((start, 1.0))
    return runs


def power(design: Design, seeds: int, miss: float = 0.0, alpha: float = ALPHA,
          test: str = "equivalent") -> float:
    """P(the test says `test` at a true miss) from `seeds` rerun seeds: "equivalent" (the
    (1 - 2 alpha) interval inside +-margin), "beyond" (the minimal-effect test at alpha) or
    "above" (an order: the one-sided (1 - alpha) lower bound of d above 0; the margin unused).
    d ~ N(miss, v), v = seed_sd^2 coef + known (`Design.parts`); the estimated seed variance is
    seed_sd^2 X / (S - 1), X ~ chi^2_(S-1), and t's df follow it (`Design.df`); integrated
    over X's quantiles by 96-point Gauss-Legendre, for equivalence over the quantiles where
    the interval fits inside the margin (`_inside`)."""
    if test not in TESTS:
        raise ValueError(f"test must be one of {TESTS}, got {test!r}")
    if seeds < 2:
        return 0.0
    coef, known = design.parts(seeds)
    s2, margin, dfs = design.seed_sd ** 2 * coef, design.margin, seeds - 1
    sd = math.sqrt(s2 + known)
    if sd == 0:
        return float({"equivalent": abs(miss) < margin, "beyond": abs(miss) > margin,
                      "above": miss > 0}[test])
    if s2 == 0:
        pieces = [(np.full(1, float(dfs)), np.ones(1))]
    else:
        spans = _inside(design, seeds, alpha) if test == "equivalent" else [(0.0, 1.0)]
        pieces = [(sps.chi2.ppf(a + (_NODES + 1) / 2 * (b - a), dfs), _WEIGHTS / 2 * (b - a))
                  for a, b in spans]
    total = 0.0
    for x, weights in pieces:
        half = _half(design, seeds, alpha, x)
        if test == "equivalent":
            p = (sps.norm.cdf((margin - half - miss) / sd)
                 - sps.norm.cdf((half - margin - miss) / sd))
            p = np.where(half < margin, p, 0.0)
        elif test == "beyond":
            p = (sps.norm.cdf((miss - margin - half) / sd)
                 + sps.norm.cdf((-miss - margin - half) / sd))
        else:
            p = sps.norm.cdf((miss - half) / sd)
        total += float(np.dot(weights, p))
    return total


def unreachable(design: Design, alpha: float = ALPHA) -> bool:
    """No seed count shows equivalence: the known part of the variance (the claim's own noise,
    the test-pair floor) alone gives the interval a half-width of the margin or more (on the
    normal scale, the limit as the seeds grow)."""
    limit = design.floor_var + (design.seed_sd ** 2 if design.claim_sd is None else
                                design.claim_sd ** 2) / (design.claim_seeds or math.inf)
    return float(sps.norm.ppf(1 - alpha)) * math.sqrt(limit) >= design.margin


@functools.lru_cache(maxsize=8192)
def seeds_for(design: Design, miss: float = 0.0, alpha: float = ALPHA, test: str = "equivalent",
              target: float = POWER) -> int | None:
    """The fewest seeds (3 at least) whose test reaches `target` power at a true miss
    (`power`); None when no seed count up to MAX_SEEDS does (for equivalence, the claim's own
    noise or the floor alone leaves no room inside the margin: `unreachable`). The power rises
    with the seeds, so a bisection finds it, except under Welch: there the df fall back towards
    the claim's m - 1 as the rerun grows precise, the power rises to a broad peak and falls, and
    the seeds are scanned on WELCH_GRID, then one by one up to the first grid point that
    reaches the target."""
    if test == "equivalent" and unreachable(design, alpha):
        return None
    if design.welch:
        below = 2
        for s in WELCH_GRID:
            if power(design, s, miss, alpha, test) >= target:
                return next(n for n in range(below + 1, s + 1)
                            if power(design, n, miss, alpha, test) >= target)
            below = s
        return None
    lo, hi = 3, MAX_SEEDS
    if power(design, hi, miss, alpha, test) < target:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if power(design, mid, miss, alpha, test) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo
