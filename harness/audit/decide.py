"""The statistics of one verdict: the rerun's estimate of a metric or gap read from
results.json; a printed number judged by equivalence within its margin and a miss beyond it
(`decide`); an order of two arms (`decide_order`), with a printed gap (`decide_printed_order`);
"cannot be separated" (`decide_inseparable`); which arms sit at chance; how many seeds would
decide a claim (`seeds_advice`, `differs_advice`). The tests themselves are
harness.stats.equivalence's.

Every sampled verdict needs 3 seeds (below, no training variance: "inconclusive
(underpowered)"), and every test of a miss or a reversed order records its p under
`P_DIFFERS`: "differs" here is at the claim's own level (`alpha_differs`, 5% unless a
sequential look spends less); the audit then adjusts the p of every claim it judged from
sampled runs by Holm's step-down (harness.audit.judge, `family`), and a "differs" whose
adjusted p exceeds that level becomes "inconclusive", saying so. Each margin-based verdict
records its `DESIGN` (the seed sd it measured, its df, the claim's noise) for the advice."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from scipy import stats as sps

from harness.records import names
from harness.records.schemas import Results
from harness.stats.equivalence import (
    ADVICE_LEVEL,
    ALPHA,
    DIFFERS_MISS,
    Design,
    margin_test,
    order_test,
    sd_interval,
    seeds_for,
    welch_df,
)
from harness.stats.estimators import MIN_SEEDS_FOR_TRAINING_VARIANCE, TwoLevel

P_DIFFERS = "p_differs"  # evidence key: the p of "differs" before the family's adjustment
DESIGN = "design"  # evidence key: what `differs_advice` plans from (`_design`)


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


def pct(level: float) -> str:
    """A level as a percentage to 3 significant digits: 90%, or a look's 90.8%."""
    return f"{100 * level:.3g}%"


def too_few(est: TwoLevel) -> str:
    return (f"{est.n_seeds} seed(s) per arm, fewer than {MIN_SEEDS_FOR_TRAINING_VARIANCE}: no "
            f"training variance is estimated, so no verdict; run {MIN_SEEDS_FOR_TRAINING_VARIANCE}"
            " or more")


def _design(est: TwoLevel, margin: float, claim_seeds: int | None, claim_sd: float | None,
            floor_var: float = 0.0) -> dict[str, Any]:
    """What the seeds advice plans from: the rerun's one-seed sd and its df, the claim's noise
    and a floor no seed count shrinks (evidence `DESIGN`)."""
    return {"seed_sd": math.sqrt(est.seed_var or 0.0), "seed_df": est.n_seeds - 1,
            "margin": margin, "claim_seeds": claim_seeds, "claim_sd": claim_sd,
            "floor_var": floor_var}


def _sig2(x: float) -> float:
    return float(f"{x:.2g}")


GRID = 40  # steps per decade of the sd grid the advice is computed on (6% apart)


def _on_grid(x: float, up: bool) -> float:
    """`x` moved to the sd grid, up or down (seeds_for rises with the sd: the advice's span
    only widens, and its cache answers the next claim)."""
    if x <= 0:
        return 0.0
    step = (math.ceil if up else math.floor)(math.log10(x) * GRID)
    return 10 ** (step / GRID)


def _needed(design: Mapping[str, Any], sd: float, miss: float, alpha: float, test: str,
            up: bool) -> int | None:
    """seeds_for in units of the margin, the seed sd on the grid (`_on_grid`; a seed sd read
    off a few seeds is uncertain by far more), the claim's own sd and the floor to two
    significant digits."""
    margin = float(design["margin"])
    claim_sd = design.get("claim_sd")
    return seeds_for(Design(_on_grid(sd / margin, up), 1.0, design.get("claim_seeds"),
                            None if claim_sd is None else _sig2(claim_sd / margin),
                            _sig2(float(design.get("floor_var") or 0.0) / margin ** 2)),
                     miss, _sig2(alpha), test)


def seeds_span(design: Mapping[str, Any], miss: float, alpha: float, test: str
               ) -> tuple[int | None, int | None]:
    """The seeds that reach 80% power (`seeds_for`) at the two ends of the ADVICE_LEVEL
    interval of the measured seed sd (chi-square on its df): (fewest, most); None where no seed
    count does (the most: "or more"; the fewest: none at all)."""
    sd, df = float(design["seed_sd"]), int(design["seed_df"])
    lo, hi = sd_interval(sd, df) if df >= 1 and sd > 0 else (sd, sd)
    return (_needed(design, lo, miss, alpha, test, False),
            _needed(design, hi, miss, alpha, test, True))


def _span(design: Mapping[str, Any], miss: float, alpha: float, test: str) -> str:
    """`seeds_span` in words: "N", "N to M", "N or more"; "" when no seed count does."""
    few, many = seeds_span(design, miss, alpha, test)
    if few is None:
        return ""
    if many is None:
        return f"{few} or more"
    return str(few) if few == many else f"{few} to {many}"


def _sd_said(design: Mapping[str, Any]) -> str:
    sd, df = float(design["seed_sd"]), int(design["seed_df"])
    if df < 1 or sd == 0:
        return f"seed sd {sd:.4f}"
    lo, hi = sd_interval(sd, df)
    return (f"seed sd {sd:.4f} from {df + 1} seeds, {ADVICE_LEVEL:.0%} interval {lo:.4f} to "
            f"{hi:.4f}")


def seeds_advice(design: Mapping[str, Any], alpha: float = ALPHA) -> str:
    """How many seeds per arm would show equivalence with 80% power if the true miss were 0,
    over the ADVICE_LEVEL interval of the measured seed sd (read off 3 seeds it spans a factor
    of 4.7: a point answer would be confidently wrong)."""
    span = _span(design, 0.0, alpha, "equivalent")
    if not span:
        return (f"no seed count gives 80% power to show equivalence ({_sd_said(design)}): "
                + ("the claim's own seed noise" if design.get("claim_seeds") else
                   "the test pairs' variance") + " alone leaves too little room inside the "
                "margin")
    return (f"about {span} seeds per arm would give 80% power to show equivalence if the true "
            f"miss were 0 ({_sd_said(design)})")


def differs_advice(design: Mapping[str, Any], k: int, alpha: float = ALPHA) -> str:
    """How many seeds per arm would carry a miss of DIFFERS_MISS margins to "differs" with 80%
    power through Holm over k claims (its first step, alpha / k), over the same sd interval."""
    span = _span(design, DIFFERS_MISS, alpha / max(k, 1), "beyond")
    what = (f"\"differs\" for a miss of {DIFFERS_MISS:g} margins through Holm over {k} claims "
            "would take")
    if not span:
        return f"{what} more than the seeds any plan runs ({_sd_said(design)})"
    return f"{what} about {span} seeds per arm ({_sd_said(design)})"


def claim_noise(est: TwoLevel, m_seeds: int, claim_sd: float | None) -> tuple[float, float, str]:
    """The se and df of rerun - claim on the claim's test pairs, and what they are: with the
    claim's printed seed sd, Welch's two-sample t (the rerun's seeds-on-these-pairs variance
    over S, the claim's sd^2 over its m seeds, Welch-Satterthwaite df); without it the claim's
    noise is one seed's variance of the rerun over m (`TwoLevel.prediction_se`, the rerun's
    df)."""
    if claim_sd is None or est.seed_var is None or m_seeds < 2:
        return (est.prediction_se(m_seeds), est.df,
                f"seeds on these test pairs plus the claim's {m_seeds}-seed noise, t with "
                f"{est.df:.3g} df")
    rerun, claim = est.se ** 2, claim_sd ** 2 / m_seeds
    df = welch_df([(rerun, est.df), (claim, m_seeds - 1.0)])
    return (math.sqrt(rerun + claim), df,
            f"Welch: seeds on these test pairs plus the claim's printed seed sd {claim_sd:.4f} "
            f"over its {m_seeds} seeds, t with {df:.3g} df")


def decide(est: TwoLevel, claim: float, margin: float, m_seeds: int,
           alpha: float = ALPHA, claim_sd: float | None = None,
           alpha_differs: float | None = None) -> tuple[str, str, dict[str, Any]]:
    """The verdict on one number measured on the rerun's own test pairs (a paper's number on
    the same 1,000 pairs is the mean of an m-seed replication of the recipe there; a printed
    gap likewise): d = rerun - claim, se^2 the rerun's seeds-on-these-pairs variance plus the
    claim's own seed noise (`claim_noise`: Welch with the claim's printed seed sd, else the
    rerun's one-seed variance over m).

    reproduced iff the (1 - 2 alpha) interval of d lies inside (-margin, +margin) (TOST,
    Schuirmann 1987); differs iff the minimal-effect p (d beyond the nearer margin) is at most
    `alpha_differs` (alpha unless given), at the claim's own level (Holm across the audit
    follows: harness.audit.judge); inconclusive (underpowered) below 3 seeds or when t * se >=
    margin (no estimate could show equivalence), with the seeds that would give 80% power; else
    inconclusive. A difference that is significant but within the margin is a flag in the
    reason, never a verdict. tests/test_verdict_simulation.py holds the operating
    characteristics."""
    alpha_d = alpha if alpha_differs is None else alpha_differs
    evidence: dict[str, Any] = {
        "claim": claim, "run": est.estimate, "margin": margin, "claim_seeds": m_seeds,
        "claim_sd": claim_sd, "seeds": est.n_seeds, "n": est.n_pairs, "method": est.method,
        "note": est.note(), "training_variance_estimated": est.training_variance,
        P_DIFFERS: None}
    if not est.training_variance:
        return "inconclusive (underpowered)", (f"rerun {est.estimate:.4f} against the claim "
                                               f"{claim:.4f}: {too_few(est)}"), evidence
    se, df, how = claim_noise(est, m_seeds, claim_sd)
    test = margin_test(est.estimate - claim, se, df, margin, alpha)
    design = _design(est, margin, m_seeds, claim_sd)
    evidence.update({"difference": test.d, "difference_interval": [test.lo, test.hi],
                     "tost_interval": [claim + test.lo, claim + test.hi],
                     "tost_level": test.level, P_DIFFERS: test.p_beyond, "df": df,
                     "distinguishable": test.distinguishable, "reachable": test.reachable,
                     DESIGN: design})
    shown = (f"rerun {est.estimate:.4f} - claim {claim:.4f} = {test.d:+.4f}, {pct(test.level)} "
             f"[{test.lo:+.4f}, {test.hi:+.4f}] ({how}), margin +-{margin:g}")
    if test.equivalent:
        flag = (f"; distinguishable from the printed number by {test.d:+.4f}, less than the "
                "margin") if test.distinguishable else ""
        return "reproduced", f"equals the claim within the margin: {shown}{flag}", evidence
    if test.p_beyond <= alpha_d:
        return "differs", (f"misses the claim by more than the margin: {shown}; one-sided p = "
                           f"{test.p_beyond:.3g}"), evidence
    if not test.reachable:
        return "inconclusive (underpowered)", (
            f"t x se = {test.hi - test.d:.4f} >= the margin: no estimate from "
            f"{est.n_seeds} seeds could show equivalence ({shown}); "
            f"{seeds_advice(design, alpha)}"), evidence
    return "inconclusive", f"neither within the margin nor beyond it: {shown}", evidence


def _arms_evidence(est: TwoLevel, **extra: float) -> dict[str, Any]:
    """The evidence every claim about arms starts from (the population interval's method)."""
    return {"run": est.estimate, **extra, "seeds": est.n_seeds,
            "method": est.method_population, "note": est.note(), P_DIFFERS: None}


def decide_order(est: TwoLevel, what: str, min_gap: float = 0.0, alpha: float = ALPHA,
                 alpha_differs: float | None = None, label: str = "order only (no gap printed)"
                 ) -> tuple[str, str, dict[str, Any]]:
    """"a beats b": a claim about the arms, read on the population interval of a - b (seeds and
    test pairs). reproduced iff its one-sided (1 - alpha) lower bound is above `min_gap` (0
    unless the claim states a material gap); differs iff the p of "a - b >= min_gap" is at
    most `alpha_differs` (the reversed order, or a gap shown smaller than the claim needs; Holm
    across the audit follows); from 3 seeds per arm; else inconclusive. The two one-sided
    bounds are a (1 - 2 alpha) two-sided interval, and `ci_level` says so."""
    alpha_d = alpha if alpha_differs is None else alpha_differs
    evidence = _arms_evidence(est, min_gap=min_gap)
    if not est.training_variance:
        return "inconclusive (underpowered)", (f"{label}: {what} = {est.estimate:+.4f}; "
                                               f"{too_few(est)}"), evidence
    test = order_test(est.estimate, est.se_population, est.df_population, min_gap, alpha)
    evidence.update({"one_sided": [test.lower, test.upper], "one_sided_level": 1 - alpha,
                     P_DIFFERS: test.p_below, "p_order": test.p_above,
                     "ci": [test.lower, test.upper], "ci_level": 1 - 2 * alpha,
                     "df": est.df_population})
    shown = (f"{label}: {what} = {est.estimate:+.4f}, one-sided {pct(1 - alpha)} bounds "
             f"{test.lower:+.4f} and {test.upper:+.4f} against {min_gap:g} "
             f"({est.method_population}, t with {est.df_population:.3g} df)")
    if test.lower > min_gap:
        return "reproduced", f"the order holds: {shown}", evidence
    if test.p_below <= alpha_d:
        return "differs", (f"the order does not hold: {shown}; one-sided p = "
                           f"{test.p_below:.3g}"), evidence
    return "inconclusive", f"neither order shown: {shown}", evidence


def decide_printed_order(est: TwoLevel, what: str, gap: float, margin: float, m_seeds: int,
                         min_gap: float = 0.0, alpha: float = ALPHA,
                         claim_sd: float | None = None, alpha_differs: float | None = None
                         ) -> tuple[str, str, dict[str, Any]]:
    """"a beats b by the printed gap": the gap by `decide` on the claim's test pairs, and the
    order it states by `decide_order`: reproduced only when both are (an order claim is an
    order wherever it is judged: a printed gap inside its margin of 0 would otherwise read
    "reproduced" with the order reversed); differs as the gap's test says (its p enters the
    family)."""
    verdict, reason, evidence = decide(est, gap, margin, m_seeds, alpha, claim_sd, alpha_differs)
    order, order_reason, order_evidence = decide_order(est, what, min_gap, alpha, alpha_differs,
                                                       "the order it states")
    evidence = {**evidence, "order": {k: order_evidence[k] for k in
                                      ("ci", "ci_level", "one_sided_level", "p_order")
                                      if k in order_evidence}, "order_verdict": order}
    reason = f"{what}: {reason}"
    if verdict == "reproduced" and order != "reproduced":
        return "inconclusive", (f"{reason}; but the order the claim states is not shown: "
                                f"{order_reason}"), evidence
    return verdict, reason, evidence


def decide_inseparable(est: TwoLevel, what: str, margin: float, alpha: float = ALPHA,
                       alpha_differs: float | None = None) -> tuple[str, str, dict[str, Any]]:
    """"a and b cannot be separated": the gap equivalent to 0 within the claim's own gap margin,
    on the population interval (seeds and test pairs; the 0 is hypothesised, not measured, so
    no claim noise). reproduced iff the (1 - 2 alpha) interval lies inside (-margin, +margin);
    differs iff the minimal-effect p is at most `alpha_differs` (a material separation; Holm
    across the audit follows); inconclusive (underpowered) below 3 seeds, when t * se >=
    margin, and, said so, when the test pairs' part alone (which no seed count shrinks) leaves
    no room inside the margin; else inconclusive. A gap whose 95% interval excludes 0 is said
    to be separated "by less than the gap margin", never a bare "reproduced"."""
    alpha_d = alpha if alpha_differs is None else alpha_differs
    evidence = _arms_evidence(est, margin=margin)
    if not est.training_variance:
        return "inconclusive (underpowered)", (f"{what} = {est.estimate:+.4f}: "
                                               f"{too_few(est)}"), evidence
    test = margin_test(est.estimate, est.se_population, est.df_population, margin, alpha)
    floor = float(sps.norm.ppf(1 - alpha)) * math.sqrt(est.pair_var)
    design = _design(est, margin, None, None, est.pair_var)
    evidence.update({"ci": [test.lo, test.hi], "ci_level": test.level,
                     "tost_interval": [test.lo, test.hi], "tost_level": test.level,
                     P_DIFFERS: test.p_beyond, "distinguishable": test.distinguishable,
                     "pair_floor": floor, "reachable": test.reachable and floor < margin,
                     "df": est.df_population, DESIGN: design})
    shown = (f"{what} = {est.estimate:+.4f}, {pct(test.level)} [{test.lo:+.4f}, {test.hi:+.4f}] "
             f"against the gap margin +-{margin:g} ({est.method_population})")
    flag = (f"; the rerun separates them, by {est.estimate:+.4f}: less than the gap margin"
            if test.distinguishable else "")
    if test.equivalent:
        return "reproduced", f"inseparable within the gap margin: {shown}{flag}", evidence
    if test.p_beyond <= alpha_d:
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
            f"{seeds_advice(design, alpha)}{flag}"), evidence
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
