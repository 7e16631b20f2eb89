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
- `tost_power` / `seeds_for_power`: the probability that the equivalence test says equivalent
  under the normal model of per-seed means (the estimated variance a scaled chi-square with
  S - 1 df), integrated exactly; the seeds that give 80% power.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from scipy import integrate
from scipy import stats as sps

ALPHA = 0.05  # equivalence at 5% a side (a 90% interval); the miss beyond the margin at 5%
POWER = 0.80  # the power the seeds advice aims at
MAX_SEEDS = 200  # seeds_for_power searches up to this many


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


def tost_power(seeds: int, seed_sd: float, margin: float, claim_seeds: int | None = None,
               floor_var: float = 0.0, miss: float = 0.0, alpha: float = ALPHA) -> float:
    """P(equivalent) at a true miss: d ~ N(miss, v) with v = seed_sd^2 (1 / S + 1 / m) +
    floor_var (m the claim's seeds, none: no claim noise; floor_var a part that does not
    shrink with seeds, as the test pairs' variance of a population interval, taken as known);
    the estimated seed variance is seed_sd^2 chi^2_(S-1) / (S - 1), t with S - 1 df."""
    if seeds < 2:
        return 0.0
    df, c2 = seeds - 1, 1 / seeds + (1 / claim_seeds if claim_seeds else 0.0)
    t_e, sd = t_quantile(1 - alpha, df), math.sqrt(seed_sd ** 2 * c2 + floor_var)
    if sd == 0:
        return float(abs(miss) < margin)

    def given(x: float) -> float:  # x ~ chi^2_df; the estimated seed variance is sd^2 x / df
        half = t_e * math.sqrt(seed_sd ** 2 * c2 * x / df + floor_var)
        if half >= margin:
            return 0.0
        return float(sps.norm.cdf((margin - half - miss) / sd)
                     - sps.norm.cdf((half - margin - miss) / sd))

    if seed_sd == 0:
        return given(df)
    top = max(0.0, ((margin / t_e) ** 2 - floor_var) / (seed_sd ** 2 * c2) * df)
    if top == 0:
        return 0.0
    value, _ = integrate.quad(lambda x: given(x) * sps.chi2.pdf(x, df), 0, top, limit=200)
    return float(value)


def seeds_for_power(seed_sd: float, margin: float, claim_seeds: int | None = None,
                    floor_var: float = 0.0, alpha: float = ALPHA, power: float = POWER
                    ) -> int | None:
    """The fewest seeds (3 at least) whose equivalence test reaches `power` at a true miss of 0
    (`tost_power`); None when no seed count up to MAX_SEEDS does (the claim's own seed noise or
    `floor_var` alone leaves no room inside the margin)."""
    limit = math.sqrt(seed_sd ** 2 / claim_seeds if claim_seeds else 0.0) if seed_sd else 0.0
    if sps.norm.ppf(1 - alpha) * math.hypot(limit, math.sqrt(floor_var)) >= margin:
        return None
    lo, hi = 3, MAX_SEEDS
    if tost_power(hi, seed_sd, margin, claim_seeds, floor_var, 0.0, alpha) < power:
        return None
    while lo < hi:  # the power rises with the seeds
        mid = (lo + hi) // 2
        if tost_power(mid, seed_sd, margin, claim_seeds, floor_var, 0.0, alpha) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo
