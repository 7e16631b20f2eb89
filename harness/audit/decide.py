"""The statistics of one verdict: the rerun's estimate of a metric or gap read from
results.json; a printed number judged by equivalence within its margin and a miss beyond it
(`decide`); an order of two arms (`decide_order`); "cannot be separated" (`decide_inseparable`);
which arms sit at chance. The tests themselves are harness.stats.equivalence's.

Every sampled verdict needs 3 seeds (below, no training variance: "inconclusive
(underpowered)"), and every test of a miss or a reversed order records its p under
`P_DIFFERS`: "differs" here is at the claim's own 5% level; the audit then adjusts the p of
every claim it judged from sampled runs by Holm's step-down (harness.audit.judge, `family`),
and a "differs" whose adjusted p exceeds 5% becomes "inconclusive", saying so."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

from scipy import stats as sps

from harness.records import names
from harness.records.schemas import Results
from harness.stats.equivalence import (
    ALPHA,
    margin_test,
    order_test,
    seeds_for_power,
)
from harness.stats.estimators import MIN_SEEDS_FOR_TRAINING_VARIANCE, TwoLevel

P_DIFFERS = "p_differs"  # evidence key: the p of "differs" before the family's adjustment


def estimate_of(block: Mapping[str, Any]) -> TwoLevel:
    """The rerun's estimate of a metric or a gap from results.json: its two-level entry (an
    entry written before the population fields existed reads them as the seeds-only ones), or,
    when results.json has none, one rebuilt from its test-pair interval (no training variance)."""
    tl = block.get("two_level")
    if tl:
        return TwoLevel.from_dict(tl)
    lo, hi = block["ci"]
    level = float(block.get("ci_level", 0.95))
    n = int(block.get("n") or 2)
    se = (hi - lo) / (2 * float(sps.norm.ppf(0.5 + level / 2)))
    method = (f"{block.get('ci_method', 'test-pair interval')}; se read from its {level:.0%} "
              "interval (results.json has no two-level entry)")
    return TwoLevel(float(block["mean"] if "mean" in block else block["diff"]), se,
                    float(max(n - 1, 1)), len(block.get("values", {})) or 1, n,
                    int(block.get("n_resamples") or 0), None, se ** 2, method, se,
                    float(max(n - 1, 1)), method)


def _too_few(est: TwoLevel) -> str:
    return (f"{est.n_seeds} seed(s) per arm, fewer than {MIN_SEEDS_FOR_TRAINING_VARIANCE}: no "
            f"training variance is estimated, so no verdict; run {MIN_SEEDS_FOR_TRAINING_VARIANCE}"
            " or more")


@functools.lru_cache(maxsize=1024)
def _seeds_needed(sd_in_margins: float, claim_seeds: int | None, floor_in_margins: float
                  ) -> int | None:
    """seeds_for_power in units of the margin, to two significant digits (a seed sd read off
    3 seeds is uncertain by far more), cached: each answer integrates numerically."""
    return seeds_for_power(sd_in_margins, 1.0, claim_seeds, floor_in_margins)


def seeds_advice(seed_var: float | None, margin: float, claim_seeds: int | None = None,
                 floor_var: float = 0.0) -> str:
    """How many seeds would show equivalence with 80% power if the true miss were 0, at the
    measured one-seed variance (harness.stats.equivalence.seeds_for_power)."""
    if seed_var is None:
        return f"at least {MIN_SEEDS_FOR_TRAINING_VARIANCE} seeds per arm"
    sd = math.sqrt(seed_var)
    need = _seeds_needed(float(f"{sd / margin:.2g}"), claim_seeds,
                         float(f"{floor_var / margin ** 2:.2g}"))
    if need is None:
        return (f"no seed count gives 80% power at the measured seed sd {sd:.4f}: "
                + (f"the claim's own {claim_seeds}-seed noise" if claim_seeds else
                   "the test pairs' variance") + " alone leaves too little room inside the "
                "margin")
    return (f"about {need} seeds per arm would give 80% power to show equivalence if the true "
            f"miss were 0 (measured seed sd {sd:.4f})")


def decide(est: TwoLevel, claim: float, margin: float, m_seeds: int,
           alpha: float = ALPHA) -> tuple[str, str, dict[str, Any]]:
    """The verdict on one number measured on the rerun's own test pairs (a paper's number on
    the same 1,000 pairs is the mean of an m-seed replication of the recipe there; a printed
    gap likewise): d = rerun - claim, se^2 the rerun's seeds-on-these-pairs variance plus the
    claim's own seed noise (`TwoLevel.prediction_se`), t with the rerun's df.

    reproduced iff the 90% interval of d lies inside (-margin, +margin) (TOST, Schuirmann 1987);
    differs iff the minimal-effect p (d beyond the nearer margin) is at most alpha, at the
    claim's own level (Holm across the audit follows: harness.audit.judge); inconclusive
    (underpowered) below 3 seeds or when t * se >= margin (no estimate could show
    equivalence), with the seeds that would give 80% power; else inconclusive. A difference
    that is significant but within the margin is a flag in the reason, never a verdict.
    tests/test_verdict_simulation.py holds the operating characteristics."""
    evidence: dict[str, Any] = {
        "claim": claim, "run": est.estimate, "margin": margin, "claim_seeds": m_seeds,
        "seeds": est.n_seeds, "n": est.n_pairs, "method": est.method, "note": est.note(),
        "training_variance_estimated": est.training_variance, P_DIFFERS: None}
    if not est.training_variance:
        return "inconclusive (underpowered)", (f"rerun {est.estimate:.4f} against the claim "
                                               f"{claim:.4f}: {_too_few(est)}"), evidence
    test = margin_test(est.estimate - claim, est.prediction_se(m_seeds), est.df, margin, alpha)
    evidence.update({"difference": test.d, "difference_interval": [test.lo, test.hi],
                     "tost_interval": [claim + test.lo, claim + test.hi],
                     "tost_level": test.level, P_DIFFERS: test.p_beyond,
                     "distinguishable": test.distinguishable})
    shown = (f"rerun {est.estimate:.4f} - claim {claim:.4f} = {test.d:+.4f}, {test.level:.0%} "
             f"[{test.lo:+.4f}, {test.hi:+.4f}] (seeds on these test pairs plus the claim's "
             f"{m_seeds}-seed noise, t with {est.df:.3g} df), margin +-{margin:g}")
    if test.equivalent:
        flag = (f"; distinguishable from the printed number by {test.d:+.4f}, less than the "
                "margin") if test.distinguishable else ""
        return "reproduced", f"equals the claim within the margin: {shown}{flag}", evidence
    if test.p_beyond <= alpha:
        return "differs", (f"misses the claim by more than the margin: {shown}; one-sided p = "
                           f"{test.p_beyond:.3g}"), evidence
    if not test.reachable:
        return "inconclusive (underpowered)", (
            f"t x se = {test.hi - test.d:.4f} >= the margin: no estimate from "
            f"{est.n_seeds} seeds could show equivalence ({shown}); "
            f"{seeds_advice(est.seed_var, margin, m_seeds)}"), evidence
    return "inconclusive", f"neither within the margin nor beyond it: {shown}", evidence


def _arms_evidence(est: TwoLevel, **extra: float) -> dict[str, Any]:
    """The evidence every claim about arms starts from (the population interval's method)."""
    return {"run": est.estimate, **extra, "seeds": est.n_seeds,
            "method": est.method_population, "note": est.note(), P_DIFFERS: None}


def decide_order(est: TwoLevel, what: str, min_gap: float = 0.0, alpha: float = ALPHA
                 ) -> tuple[str, str, dict[str, Any]]:
    """"a beats b" with no gap printed: a claim about the arms, read on the population interval
    of a - b (seeds and test pairs). reproduced iff its one-sided (1 - alpha) lower bound is
    above `min_gap` (0 unless the claim states a material gap); differs iff the one-sided upper
    bound is below it (the reversed order, or a gap shown smaller than the claim needs; Holm
    across the audit follows); from 3 seeds per arm; else inconclusive."""
    evidence = _arms_evidence(est, min_gap=min_gap)
    if not est.training_variance:
        return "inconclusive (underpowered)", (f"order only: {what} = {est.estimate:+.4f}; "
                                               f"{_too_few(est)}"), evidence
    test = order_test(est.estimate, est.se_population, est.df_population, min_gap, alpha)
    evidence.update({"one_sided": [test.lower, test.upper], "level": 1 - alpha,
                     P_DIFFERS: test.p_below, "p_order": test.p_above,
                     "ci": [test.lower, test.upper]})
    shown = (f"order only (no gap printed): {what} = {est.estimate:+.4f}, one-sided "
             f"{1 - alpha:.0%} bounds {test.lower:+.4f} and {test.upper:+.4f} against "
             f"{min_gap:g} ({est.method_population})")
    if test.lower > min_gap:
        return "reproduced", f"the order holds: {shown}", evidence
    if test.p_below <= alpha:
        return "differs", (f"the order does not hold: {shown}; one-sided p = "
                           f"{test.p_below:.3g}"), evidence
    return "inconclusive", f"neither order shown: {shown}", evidence


def decide_inseparable(est: TwoLevel, what: str, margin: float, alpha: float = ALPHA
                       ) -> tuple[str, str, dict[str, Any]]:
    """"a and b cannot be separated": the gap equivalent to 0 within the claim's own gap margin,
    on the population interval (seeds and test pairs; the 0 is hypothesised, not measured, so
    no claim noise). reproduced iff the 90% interval lies inside (-margin, +margin); differs
    iff the minimal-effect p is at most alpha (a material separation; Holm across the audit
    follows); inconclusive (underpowered) below 3 seeds, when t * se >= margin, and, said so,
    when the test pairs' part alone (which no seed count shrinks) leaves no room inside the
    margin; else inconclusive. A gap whose 95% interval excludes 0 is said to be separated "by
    less than the gap margin", never a bare "reproduced"."""
    evidence = _arms_evidence(est, margin=margin)
    if not est.training_variance:
        return "inconclusive (underpowered)", (f"{what} = {est.estimate:+.4f}: "
                                               f"{_too_few(est)}"), evidence
    test = margin_test(est.estimate, est.se_population, est.df_population, margin, alpha)
    floor = float(sps.norm.ppf(1 - alpha)) * math.sqrt(est.pair_var)
    evidence.update({"ci": [test.lo, test.hi], "tost_interval": [test.lo, test.hi],
                     "tost_level": test.level, P_DIFFERS: test.p_beyond,
                     "distinguishable": test.distinguishable, "pair_floor": floor})
    shown = (f"{what} = {est.estimate:+.4f}, {test.level:.0%} [{test.lo:+.4f}, {test.hi:+.4f}] "
             f"against the gap margin +-{margin:g} ({est.method_population})")
    flag = (f"; the rerun separates them, by {est.estimate:+.4f}: less than the gap margin"
            if test.distinguishable else "")
    if test.equivalent:
        return "reproduced", f"inseparable within the gap margin: {shown}{flag}", evidence
    if test.p_beyond <= alpha:
        return "differs", (f"separated by more than the gap margin: {shown}; one-sided p = "
                           f"{test.p_beyond:.3g}"), evidence
    if floor >= margin:
        return "inconclusive (underpowered)", (
            f"unreachable on these {est.n_pairs} test pairs: their variance alone gives the "
            f"gap a 90% half-width of {floor:.4f} >= {margin:g} at any seed count ({shown})"
            f"{flag}"), evidence
    if not test.reachable:
        return "inconclusive (underpowered)", (
            f"t x se = {test.hi - est.estimate:.4f} >= the gap margin ({shown}); "
            f"{seeds_advice(est.seed_var, margin, None, est.pair_var)}{flag}"), evidence
    return "inconclusive", f"neither inseparable nor separated: {shown}{flag}", evidence


def at_chance(results: Results | None) -> dict[str, dict[str, Any]]:
    """Arm -> {metric: evidence} for every arm metric whose interval reaches its chance level
    (controls `chance_<metric>` in results.json)."""
    out: dict[str, dict[str, Any]] = {}
    for arm, block in sorted((results or {}).get("arms", {}).items()):
        for metric, m in block.get("metrics", {}).items():
            chance = block.get("controls", {}).get(names.chance(metric), {}).get("mean")
            if chance is None or "ci" not in m:
                continue
            tl = m.get("two_level") or m  # at chance is about the arm: seeds and test pairs
            lo, hi = tl.get("ci_population", tl["ci"])
            if lo <= chance:
                out.setdefault(arm, {})[metric] = {"ci": [lo, hi], "chance": chance}
    return out




def seeds_estimate(block: Mapping[str, Any], n_pairs: int, proportion: bool) -> TwoLevel | None:
    """The estimate of a number results.json keeps once per seed with no per-pair outcomes (a curve
    point, harness.stats.curves), from its seed spread, under harness.stats.estimators.TwoLevel's
    model. From MIN_SEEDS_FOR_TRAINING_VARIANCE seeds up the value on these test pairs varies with
    the seed only: se^2 is the variance (ddof 1) of the per-seed values over S, t with S - 1 df, as
    TwoLevel's own (its population interval is the same: with no per-pair values the test-pair
    level cannot be split off; `decide` reads only the fixed-pairs one). Below that no
    training variance: an R@1 over `n_pairs` test pairs gets the binomial p (1 - p) / n, an
    upper bound of the test-pair variance of the seed-mean outcome (per-pair values in [0, 1]
    with mean p), as its test-pair-only variance (TwoLevel's mode below 3 seeds), a loss
    (fixed val captions, no per-caption values kept) None."""
    values = [float(v) for v in block["values"].values()]
    n_seeds, mean = len(values), sum(values) / len(values)
    pair_var = mean * (1 - mean) / n_pairs if proportion and n_pairs > 1 else 0.0
    method = (f"t interval of the mean of {n_seeds} per-seed values (no per-pair outcomes per "
              "epoch)")
    if n_seeds >= MIN_SEEDS_FOR_TRAINING_VARIANCE:
        seed_var = sum((v - mean) ** 2 for v in values) / (n_seeds - 1)
        se, df = math.sqrt(seed_var / n_seeds), float(n_seeds - 1)
        return TwoLevel(estimate=mean, se=se, df=df, n_seeds=n_seeds, n_pairs=n_pairs,
                        n_resamples=0, seed_var=seed_var, pair_var=pair_var, method=method,
                        se_population=se, df_population=df, method_population=method)
    if pair_var == 0:
        return None
    method = f"binomial test-pair interval of the mean of {n_seeds} per-seed value(s)"
    return TwoLevel(estimate=mean, se=math.sqrt(pair_var), df=float(n_pairs - 1),
                    n_seeds=n_seeds, n_pairs=n_pairs, n_resamples=0, seed_var=None,
                    pair_var=pair_var, method=method, se_population=math.sqrt(pair_var),
                    df_population=float(n_pairs - 1), method_population=method)
