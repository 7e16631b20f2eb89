"""A Flickr30k run drawn around a stated truth, for the audit's proofs: per-seed, per-pair
outcomes and per-seed curves built into results.json by the real builders
(harness.records.results.aggregate_runs, harness.stats.curves.run_curve / arm_curve) and judged
by the real audit on the real registry (harness.audit.judge.audit). The truth is the rerun
article's and the paper's numbers (TRUTH), or any other the caller gives; a seed's mean on the
fixed 1,000 test pairs has sd `seed_sd` (half a seed's shift, half which pairs it gets right).

`claim_results` draws, for one registry claim, only what its rule reads (an arm's metric, a gap,
a curve point), with the truth a given number of margins off the claim: the family tests draw
claims independently this way (no shared arm can put every claim at its margin at once)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.audit.claims import Claim, load_registry
from harness.audit.judge import FAMILY_RULES, audit, family
from harness.audit.rules import RULES, Context
from harness.audit.verdict import Level
from harness.config.params import load_params
from harness.records.results import aggregate_runs
from harness.stats.curves import arm_curve, run_curve
from harness.stats.estimators import TwoLevel, two_level_gap, two_level_mean

REG = load_registry()
ROOT = Path(__file__).resolve().parents[1]
ARMS = ("good", "bad", "ntp")
N = 1000
# per arm: R@1 and R@5 at the last epoch, mutual 10-NN, R@1 of the 30k-pair map, the curve's
# epoch-1 and peak R@1, next-token's early-stopping R@1 and validation losses (the rerun
# article's and the paper's numbers: claims.yaml)
TRUTH: dict[str, dict[str, float]] = {
    "good": {"r_at_1": 0.246, "r_at_5": 0.5, "mknn10": 0.171, "r_at_1_trainval": 0.346,
             "epoch1": 0.036, "peak": 0.254},
    "bad": {"r_at_1": 0.133, "r_at_5": 0.35, "mknn10": 0.132, "r_at_1_trainval": 0.207,
            "epoch1": 0.043, "peak": 0.14},
    "ntp": {"r_at_1": 0.118, "r_at_5": 0.3, "mknn10": 0.12, "r_at_1_trainval": 0.213,
            "epoch1": 0.039, "peak": 0.148, "early_stop": 0.134, "val_loss_min": 3.04,
            "val_loss_last": 4.49},
}
OUTCOMES = {"r_at_1": "r_at_1_hit", "r_at_5": "r_at_5_hit", "mknn10": "mknn10",
            "r_at_1_trainval": "r_at_1_trainval_hit"}


def outcomes(rng: np.random.Generator, mean: float, seeds: int, seed_sd: float,
             pairs: np.ndarray) -> np.ndarray:
    """(seeds, N) per-pair outcomes whose truth on these pairs is `mean` (`pairs` has mean 0):
    one seed's mean has sd `seed_sd`, half its variance a seed's shift, half its flips."""
    return (mean + pairs + rng.normal(0, seed_sd / math.sqrt(2), (seeds, 1))
            + rng.normal(0, seed_sd * math.sqrt(N / 2), (seeds, N)))


def fixed_pairs(rng: np.random.Generator) -> np.ndarray:
    pairs = rng.normal(0, 0.4, N)
    return pairs - pairs.mean()


def curve(rng: np.random.Generator, truth: Mapping[str, float], last: float, seed_sd: float
          ) -> list[dict[str, Any]]:
    """One run's evaluated epochs: 1, the peak (2), next-token's early stop (3, its lowest
    validation loss), the last; each drawn around its truth with sd `seed_sd`, the peak kept
    the highest."""
    def draw(x: float) -> float:
        return x + float(rng.normal(0, seed_sd))

    points = [draw(truth["epoch1"]), draw(truth["peak"])]
    if "early_stop" in truth:
        points.append(draw(truth["early_stop"]))
    points.append(last)
    points[1] = max(points) + 1e-6 if max(points) > points[1] else points[1]
    rows: list[dict[str, Any]] = [{"epoch": e, "r_at_1_test": v}
                                  for e, v in enumerate(points, start=1)]
    if "early_stop" in truth:
        low, end = draw(truth["val_loss_min"]), draw(truth["val_loss_last"])
        for r, loss in zip(rows, (low + 1.0, low + 0.5, low, max(end, low + 0.1)), strict=True):
            r["val_loss"] = loss
    return rows


def flickr_results(rng: np.random.Generator, seeds: int, seed_sd: float = 0.0064,
                   truth: Mapping[str, Mapping[str, float]] = TRUTH) -> dict[str, Any]:
    """A Flickr30k results.json of `seeds` seeds per arm (the arms' per-pair outcomes share
    the test pairs' effects, per metric), built by the real aggregate and curve code."""
    pairs = {m: fixed_pairs(rng) for m in OUTCOMES}
    per_query, run_metrics, curves = {}, {}, {}
    for arm in ARMS:
        x = {m: outcomes(rng, truth[arm][m], seeds, seed_sd / (3 if m == "mknn10" else 1),
                         pairs[m]) for m in OUTCOMES}
        for s in range(seeds):
            per_query[arm, s] = {OUTCOMES[m]: x[m][s] for m in OUTCOMES}
            run_metrics[arm, s] = {"chance_r_at_1": {"value": 1 / N},
                                   "chance_mknn10": {"value": 10 / (N - 1)}}
        curves[arm] = {str(s): run_curve(curve(rng, truth[arm], float(x["r_at_1"][s].mean()),
                                               seed_sd)) for s in range(seeds)}
    stats = aggregate_runs(per_query, run_metrics, ARMS, list(range(seeds)), k=10, level=0.95,
                           n_resamples=20, seed=0)
    for arm in ARMS:
        stats["arms"][arm]["curve"] = arm_curve(curves[arm])
    return {"schema": "prh.results/2", "profile": "flickr30k", "n_test": N, **stats}


def judged(results: Mapping[str, Any]) -> dict[str, Any]:
    """The real audit of `results` on the real registry."""
    return audit(REG, Context(REG.claims, "flickr30k", results))  # type: ignore[arg-type]


def family_members(seeds: int = 3) -> list[Claim]:
    """The claims of a Flickr30k audit's Holm family at `seeds` seeds per arm."""
    doc = judged(flickr_results(np.random.default_rng(0), seeds))
    return [REG.claims[m["id"]] for m in doc["family"]["members"]]


# ------------------------------------------------------------------ claims drawn one by one
def _entry(est: TwoLevel) -> dict[str, Any]:
    """results.json's two_level entry of `est` as TwoLevel.to_dict writes it, its intervals
    left out (the verdicts recompute theirs from se and df: TwoLevel.from_dict), which spares
    the simulations three t quantiles an estimate."""
    return {"estimate": est.estimate, "se": est.se, "df": est.df, "method": est.method,
            "n_seeds": est.n_seeds, "n_pairs": est.n_pairs, "n_resamples": est.n_resamples,
            "seed_var": est.seed_var, "pair_var": est.pair_var,
            "training_variance": est.training_variance, "note": est.note(),
            "se_population": est.se_population, "df_population": est.df_population,
            "method_population": est.method_population, "noise_var": est.noise_var}


def _arm_block(x: np.ndarray) -> dict[str, Any]:
    est = two_level_mean(x)
    return {"values": {str(s): float(v) for s, v in enumerate(x.mean(axis=1))},
            "mean": est.estimate, "ci": [est.estimate - 2 * est.se, est.estimate + 2 * est.se],
            "n": N, "two_level": _entry(est)}


def _gap(a: str, b: str, metric: str, x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    est = two_level_gap(x, y)
    return {"a": a, "b": b, "metric": metric, "diff": est.estimate, "n": N,
            "ci": [est.estimate - 2 * est.se, est.estimate + 2 * est.se],
            "two_level": _entry(est)}


GAP_PAIR_SE = 0.0125  # the test-pair se of a gap: the rerun article's [-.009, .040] on 1,000 pairs


def target(claim: Claim, miss: float, margin: float) -> float:
    """The truth `miss` margins off what `claim` says: a number or printed gap plus miss x D;
    an order's gap at its smallest material gap minus (miss - 1) x D (miss 1: the boundary of
    both its tests); "cannot be separated": a gap of miss x D."""
    assert claim.check is None or claim.check.type in ("order", "inseparable")
    if claim.check is not None and claim.check.type == "inseparable":
        return miss * margin
    if claim.check is not None and (claim.metric != "difference" or claim.check.of):
        return claim.check.min_gap - (miss - 1) * margin
    return claim.scalar() + miss * margin


class ClaimDraw:
    """What `claim` reads, drawn once for `cap` seeds with its truth `target(claim, miss)` (or
    `truth`): `results(n)` is results.json from the first n of them, so a sequential study's
    looks share their seeds and their test pairs. An arm's metric on fixed pairs, a seed-valued
    curve point, or a gap of two arms on test pairs drawn afresh for the study (claims about
    arms resample the pairs)."""

    def __init__(self, claim: Claim, rng: np.random.Generator, miss: float, seed_sd: float,
                 cap: int, margin: float, truth: float | None = None) -> None:
        self.claim = claim
        self.truth = target(claim, miss, margin) if truth is None else truth
        self.measure = claim.setup.get("measure") if claim.check is None else None
        if self.measure and self.measure.startswith("curve."):
            self.values = self.truth + rng.normal(0, seed_sd, cap)
        elif claim.check is None:
            self.x = outcomes(rng, self.truth, cap, seed_sd, fixed_pairs(rng))
        else:
            common = rng.normal(0.2, 0.4, N)
            own = rng.normal(0, GAP_PAIR_SE * math.sqrt(N / 2), (2, N))
            self.x = outcomes(rng, self.truth, cap, seed_sd, common + own[0] - common.mean())
            self.y = outcomes(rng, 0.0, cap, seed_sd, common + own[1] - common.mean())

    def results(self, n: int) -> dict[str, Any]:
        claim = self.claim
        doc: dict[str, Any] = {"schema": "prh.results/2", "profile": "flickr30k", "n_test": N,
                               "k": 10, "gaps": []}
        seeds = list(range(n))
        if claim.check is None:
            arm = claim.setup["arm"]
            if self.measure and self.measure.startswith("curve."):
                _, entry, field = self.measure.split(".")
                values = {str(s): float(v) for s, v in enumerate(self.values[:n])}
                doc["arms"] = {arm: {"seeds": seeds, "metrics": {},
                                     "curve": {entry: {field: {"values": values}}}}}
                return doc
            metric = self.measure.split(".")[1] if self.measure else claim.metric
            doc["arms"] = {arm: {"seeds": seeds, "metrics": {metric: _arm_block(self.x[:n])}}}
            return doc
        a, b, metric = claim.check.a, claim.check.b, claim.check.key
        doc["arms"] = {arm: {"seeds": seeds, "metrics": {metric: _arm_block(v[:n])}}
                       for arm, v in ((a, self.x), (b, self.y))}
        doc["gaps"] = [_gap(a, b, metric, self.x[:n], self.y[:n])]
        return doc


def claim_results(claim: Claim, rng: np.random.Generator, miss: float, seed_sd: float,
                  seeds: int, margin: float, truth: float | None = None) -> dict[str, Any]:
    """A results.json of `seeds` seeds holding only what `claim` reads (`ClaimDraw`)."""
    return ClaimDraw(claim, rng, miss, seed_sd, seeds, margin, truth).results(seeds)


MARGINS = load_params(ROOT / "params.yaml").margins


def margin_of(claim: Claim) -> float:
    """The margin a claim is judged against: its own, else params.yaml's for its metric."""
    key = claim.check.key if claim.check is not None else claim.metric
    return float(claim.margin or MARGINS[key])


def judge_one(claim: Claim, results: Mapping[str, Any],
              levels: Mapping[str, Level] | None = None,
              margins: Mapping[str, float] | None = None) -> dict[str, Any]:
    """One claim through its real rule (at a sequential look's `levels`, under params.yaml's
    `margins`), as a row of the audit document."""
    ctx = Context(REG.claims, "flickr30k", results, levels=levels or {},  # type: ignore[arg-type]
                  **({"margins": margins} if margins is not None else {}))
    v = RULES[claim.rule](claim, ctx)
    return {"id": claim.id, "rule": claim.rule, "verdict": v.verdict, "reason": v.reason,
            "evidence": dict(v.evidence)}


def judge_family(claims: list[Claim], docs: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every claim on its own results, then the real family step over the rows."""
    rows = [judge_one(c, d) for c, d in zip(claims, docs, strict=True)]
    family(rows)
    return rows


__all__ = ["ARMS", "FAMILY_RULES", "N", "REG", "TRUTH", "ClaimDraw", "claim_results",
           "family_members", "flickr_results", "judge_family", "judge_one", "judged",
           "margin_of", "target"]
