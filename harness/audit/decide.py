"""The statistics of one verdict: the rerun's estimate of a metric or gap read from
results.json, equivalence against a claimed value, and which arms sit at chance."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from scipy import stats as sps

from harness.stats.estimators import MIN_SEEDS_FOR_TRAINING_VARIANCE, TwoLevel

ALPHA = 0.05  # TOST at 5% per side (a 90% interval); "differs" at a 95% prediction interval


def estimate_of(block: Mapping[str, Any]) -> TwoLevel:
    """The rerun's estimate of a metric or a gap from results.json: its two-level entry (an
    entry written before the population fields existed reads them as the seeds-only ones), or,
    when results.json has none, one rebuilt from its test-pair interval (no training variance)."""
    tl = block.get("two_level")
    if tl:
        se, df, method = float(tl["se"]), float(tl["df"]), str(tl["method"])
        return TwoLevel(float(tl["estimate"]), se, df, int(tl["n_seeds"]), int(tl["n_pairs"]),
                        int(tl["n_resamples"]), tl["seed_var"], float(tl["pair_var"]), method,
                        float(tl.get("se_population", se)), float(tl.get("df_population", df)),
                        str(tl.get("method_population", method)), tl.get("noise_var"))
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


def decide(est: TwoLevel, claim: float, margin: float, m_seeds: int,
           alpha: float = ALPHA) -> tuple[str, str, dict[str, Any]]:
    """The verdict on one claimed value measured on the rerun's own test pairs (a paper's
    number on the same 1,000 pairs is the mean of an m-seed replication of the recipe there).

    Both intervals are `est.prediction_interval(m_seeds, level)`: the rerun's seeds-on-these-pairs
    variance plus the claim's own seed noise (one seed's variance / m), so a test on
    rerun - claim. differs: the claim outside the (1 - alpha) interval; reproduced: the claim
    inside the (1 - 2 alpha) interval (no difference at 2 alpha) and that interval inside
    claim +- margin (two one-sided tests at alpha each, Schuirmann 1987, J. Pharmacokinet.
    Biopharm. 15(6)), from at least 3 seeds; inconclusive (underpowered): that interval wider
    than 2 * margin, or equivalent from fewer than 3 seeds (no training variance: never
    "reproduced"); else inconclusive. tests/test_verdict_simulation.py measures the error rates
    and power at the shipped margins, 1,000 pairs and 3 seeds."""
    tost, pi = est.prediction_interval(m_seeds, 1 - 2 * alpha), \
        est.prediction_interval(m_seeds, 1 - alpha)
    evidence = {"claim": claim, "run": est.estimate, "margin": margin,
                "tost_interval": [tost.lo, tost.hi], "tost_level": 1 - 2 * alpha,
                "prediction_interval": [pi.lo, pi.hi], "claim_seeds": m_seeds,
                "method": pi.method, "seeds": est.n_seeds, "n": est.n_pairs,
                "training_variance_estimated": est.training_variance, "note": est.note()}
    shown = (f"rerun {est.estimate:.4f}, {1 - 2 * alpha:.0%} [{tost.lo:.4f}, {tost.hi:.4f}] "
             f"for a {m_seeds}-seed claim, claim {claim:.4f} +- margin {margin:g}")
    note = f"; {est.note()}" if est.note() else ""
    if not pi.lo <= claim <= pi.hi:
        return "differs", (f"claim outside the rerun's {1 - alpha:.0%} prediction interval "
                           f"[{pi.lo:.4f}, {pi.hi:.4f}] for a {m_seeds}-seed replication ("
                           f"{shown}){note}"), evidence
    if tost.lo <= claim <= tost.hi and claim - margin <= tost.lo and tost.hi <= claim + margin:
        if not est.training_variance:  # equivalence over test pairs says nothing about training
            return "inconclusive (underpowered)", (f"equivalent over test pairs only ({shown})"
                                                   f"{note}"), evidence
        return "reproduced", f"equivalent within the margin ({shown}){note}", evidence
    if tost.hi - tost.lo > 2 * margin:
        return "inconclusive (underpowered)", (f"the interval is wider than the margin allows "
                                               f"({shown}){note}"), evidence
    return "inconclusive", f"neither equivalent nor outside the prediction interval ({shown})" \
        f"{note}", evidence


def at_chance(results: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Arm -> {metric: evidence} for every arm metric whose interval reaches its chance level
    (controls `chance_<metric>` in results.json)."""
    out: dict[str, dict[str, Any]] = {}
    for arm, block in sorted((results or {}).get("arms", {}).items()):
        for metric, m in block.get("metrics", {}).items():
            chance = block.get("controls", {}).get(f"chance_{metric}", {}).get("mean")
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
