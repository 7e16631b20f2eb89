"""The verdict rules where a referee found them applied wrongly, each held by a check that reads
the real registry and the real rules and family step, and each check shown able to fail: a
mutant of the rule (the referee's list) breaks it.

Checks (bounds are literals of this file, from the design, never read from the code):
- C1 an order claim is an order: `paper_order_bad_ntp_r1` ("bad views sit above next-token")
  reads "reproduced" at most .05 + 3 MC se of the time when next-token is in truth .005 above.
- C2 a pattern on another profile needs 3 seeds: at a true gap of 0, no "pattern seen" from 2
  seeds, and at most .05 + 3 MC se from 3.
- C3 Holm's adjusted p equal the textbook's on four real claims (p .01, .04, .03, .005 give .03,
  .06, .06, .02), and a brute-force closed test with Bonferroni local tests on any p-values.
- C4 the underpowered threshold is the margin: t x se between D and 1.1 D reads underpowered.
- C5 an order's smallest material gap counts: a lower bound between 0 and min_gap is no order.
- C6 the seeds for 80% power: the power at the answer is at least .80, one seed fewer below
  .80, both by brute-force Monte Carlo; the power itself matches Monte Carlo within 4 MC se.
- C7 "the rerun separates them" is said whenever an inseparable gap's 95% interval excludes 0.
- C8 an order is read with the population interval's own df (Satterthwaite), not the seeds'.
- C9 the paper's printed seed spread enters by Welch: at a rerun seed sd of .08 D and a paper
  seed sd of .5 D, a rerun off by exactly D reads "reproduced" and "differs" each at most .06.
- C10 the seeds advice spans the 80% interval of the seed sd read off 3 seeds: it contains the
  true answer (4 seeds where 4 suffice; 6 for "differs" at 2 D through Holm over 26) at least
  .80 - 3 MC se of the time.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from flickr_audit import REG, claim_results, family_members, judge_one
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

import harness.audit.decide as decide_mod
import harness.audit.judge as judge_mod
import harness.audit.rules as rules_mod
import harness.audit.verdict as verdict_mod
import harness.stats.equivalence as eq
from harness.audit.decide import P_DIFFERS, decide
from harness.audit.judge import family
from harness.audit.rules import Context
from harness.stats.estimators import TwoLevel, two_level_gap

D = 0.03  # R@1's margin in params.yaml: only a scale here
SEEDS_FOR = eq.seeds_for  # the cached function itself, whatever a mutant puts in its place
SEEDS = 3


def mc_tol(reps: int, rate: float = 0.05) -> float:
    return 3 * math.sqrt(rate * (1 - rate) / reps)


# ----------------------------------------------------------------------------------- C1, C2
def order_rate(reps: int = 600) -> float:
    claim = REG.claims["paper_order_bad_ntp_r1"]
    rng = np.random.default_rng(1)
    got = 0
    for _ in range(reps):
        doc = claim_results(claim, rng, 0.0, 0.21 * D, SEEDS, D, truth=-0.005)
        got += judge_one(claim, doc)["verdict"] == "reproduced"
    return got / reps


def check_order_is_an_order() -> list[str]:
    rate = order_rate()
    return [] if rate <= 0.05 + mc_tol(600) else [f"C1: P(reproduced | ntp .005 above) {rate}"]


def pattern_rate(seeds: int, reps: int) -> float:
    claim = REG.claims["paper_order_good_bad_r1"]
    rng = np.random.default_rng(2 + seeds)
    seen = 0
    for _ in range(reps):
        doc = claim_results(claim, rng, 1.0, 0.21 * D, seeds, D)  # miss 1: gap = min_gap = 0
        doc["profile"] = "world"
        v = rules_mod.RULES["ordering"](claim, Context(REG.claims, "world", doc))
        seen += v.verdict == "pattern seen on another profile"
    return seen / reps


def check_pattern_needs_three_seeds() -> list[str]:
    two, three = pattern_rate(2, 400), pattern_rate(3, 600)
    out = [f"C2: pattern seen from 2 seeds at gap 0: {two}"] if two > 0 else []
    return out + ([f"C2: P(seen | gap 0) from 3 seeds {three}"]
                  if three > 0.05 + mc_tol(600) else [])


# ---------------------------------------------------------------------------------------- C3
TEXTBOOK = {"p": (0.01, 0.04, 0.03, 0.005), "holm": (0.03, 0.06, 0.06, 0.02)}


def check_holm_textbook() -> list[str]:
    """Four real family members with the textbook's p-values, every one "differs" at its own
    level: the real family step's adjusted p and which stay "differs" (the first and last)."""
    members = family_members()[:4]
    rows = []
    for claim, p in zip(members, TEXTBOOK["p"], strict=True):
        rows.append({"id": claim.id, "rule": claim.rule, "verdict": "differs",
                     "reason": "beyond", "evidence": {P_DIFFERS: p, "reachable": True}})
    family(rows)
    got = tuple(round(r["evidence"]["p_differs_holm"], 10) for r in rows)
    stay = [r["verdict"] == "differs" for r in rows]
    out = [] if got == TEXTBOOK["holm"] else [f"C3: Holm's adjusted p {got}"]
    return out + ([] if stay == [True, False, False, True] else [f"C3: kept {stay}"])


def closed_test(p: list[float]) -> list[float]:
    """Holm's adjusted p as the closed test it shortcuts (Marcus, Peritz & Gabriel 1976): the
    largest, over every subset holding i, of its Bonferroni p (size x its smallest p)."""
    k = len(p)
    out = []
    for i in range(k):
        worst = 0.0
        for size in range(1, k + 1):
            for subset in itertools.combinations(range(k), size):
                if i in subset:
                    worst = max(worst, min(1.0, size * min(p[j] for j in subset)))
        out.append(worst)
    return out


def check_holm_closed(p: list[float]) -> list[str]:
    rows = [{"id": f"c{i}", "rule": "measured", "verdict": "inconclusive", "reason": "",
             "evidence": {P_DIFFERS: v}} for i, v in enumerate(p)]
    family(rows)
    got = [r["evidence"]["p_differs_holm"] for r in rows]
    want = closed_test(p)
    return [] if np.allclose(got, want, rtol=0, atol=1e-12) else [f"C3: {got} != {want}"]


# ------------------------------------------------------------------------------ C4, C5, C7, C8
def estimate(d: float, se: float, df: float = 2.0, pop_df: float | None = None) -> TwoLevel:
    """A 3-seed estimate with its fixed-pairs se and (the same) population se."""
    return TwoLevel(d, se, df, 3, 1000, 0, 3 * se ** 2, 0.0, "test", se,
                    df if pop_df is None else pop_df, "test")


def check_underpowered_threshold() -> list[str]:
    """A claim at d = 0 whose 90% half-width t x se is 1.05 D (t with 2 df; one seed's
    variance 3 se^2 over the claim's 3 seeds makes the se of rerun - claim se x sqrt 2):
    underpowered."""
    t = float(sps.t.ppf(0.95, 2))
    se = 1.05 * D / t / math.sqrt(2)
    verdict = decide(estimate(0.0, se), 0.0, D, 3)[0]
    return [] if verdict == "inconclusive (underpowered)" else [f"C4: {verdict}"]


def check_min_gap() -> list[str]:
    claim = REG.claims["paper_order_good_bad_r1"]
    assert claim.check is not None
    needs = dataclasses.replace(claim, check=dataclasses.replace(claim.check, min_gap=0.02))
    t = float(sps.t.ppf(0.95, 9.0))
    verdict = verdict_mod.judge_order(needs, estimate(0.03, 0.015 / t, 2.0, 9.0), D,
                                      REG.claims)[0]
    return [] if verdict == "inconclusive" else [f"C5: lower bound .015 < min_gap .02: {verdict}"]


def check_separated_flag() -> list[str]:
    """Arms .01 apart whose interval over seeds and pairs is tight: inseparable within .03,
    and said to be separated by less than the gap margin."""
    verdict, reason, _ = decide_mod.decide_inseparable(estimate(0.01, 0.002, 2.0, 40.0),
                                                       "bad - ntp", D)
    ok = verdict == "reproduced" and "the rerun separates them" in reason
    return [] if ok else [f"C7: {verdict}: {reason}"]


def check_order_df() -> list[str]:
    """A 3-seed gap on test pairs with arm-specific effects: its one-sided bounds use the
    population interval's Satterthwaite df, recomputed here from the mean squares as Var =
    sum_k MS_seed,k / (S n) + MS_pair / n - sum_k MS_resid,k / (S n) (every component above 0
    in this draw; Searle, Casella & McCulloch 1992, ch. 4), never the seeds' S - 1 = 2."""
    rng = np.random.default_rng(5)
    n, s = 1000, 3
    common = rng.normal(0, 0.4, n)
    a = 0.02 + common + rng.normal(0, 0.2, n) + rng.normal(0, 0.3, (s, n)) \
        + rng.normal(0, 0.02, (s, 1))
    b = common + rng.normal(0, 0.3, (s, n)) + rng.normal(0, 0.02, (s, 1))
    seed_part = [(float(np.var(x.mean(1), ddof=1)) / s, s - 1.0) for x in (a, b)]
    resid = [(-float(((x - x.mean(1, keepdims=True) - x.mean(0) + x.mean()) ** 2).sum())
              / ((s - 1) * (n - 1)) / (s * n), (s - 1.0) * (n - 1)) for x in (a, b)]
    per_pair = a.mean(0) - b.mean(0)
    terms = [*seed_part, *resid, (float(np.var(per_pair, ddof=1)) / n, n - 1.0)]
    assert all(v > -r for (v, _), (r, _) in zip(seed_part, resid, strict=True))
    assert terms[-1][0] > -sum(r for r, _ in resid)
    df = sum(v for v, _ in terms) ** 2 / sum(v * v / d for v, d in terms)
    se = math.sqrt(sum(v for v, _ in terms))
    _, _, ev = decide_mod.decide_order(two_level_gap(a, b), "a - b")
    t = float(sps.t.ppf(0.95, df))
    want = [per_pair.mean() - t * se, per_pair.mean() + t * se]
    ok = abs(ev["df"] - df) < 1e-6 * df and np.allclose(ev["ci"], want, rtol=0, atol=1e-9)
    return [] if ok else [f"C8: df {ev['df']} against {df}, bounds {ev['ci']} against {want}"]


# ---------------------------------------------------------------------------------------- C6
def mc_power(design: eq.Design, seeds: int, miss: float, test: str, alpha: float,
             reps: int = 200_000) -> float:
    """The test's rejection rate on draws of the model itself: S per-seed means with sd
    seed_sd, the claim's mean of m seeds (the pooled or the Welch t), in units of the margin."""
    rng = np.random.default_rng([seeds, int(miss * 10), int(alpha * 1e6)])
    x = rng.normal(miss, design.seed_sd, (reps, seeds))
    m = design.claim_seeds
    s2 = x.var(axis=1, ddof=1)
    if design.claim_sd is None:
        d = x.mean(axis=1) - rng.normal(0, design.seed_sd / math.sqrt(m), reps)
        se, df = np.sqrt(s2 * (1 / seeds + 1 / m)), seeds - 1.0
    else:
        d = x.mean(axis=1) - rng.normal(0, design.claim_sd / math.sqrt(m), reps)
        a, b = s2 / seeds, design.claim_sd ** 2 / m
        se, df = np.sqrt(a + b), (a + b) ** 2 / (a * a / (seeds - 1) + b * b / (m - 1))
    t = sps.t.ppf(1 - alpha, df)
    if test == "equivalent":
        return float(np.mean(np.abs(d) + t * se < 1))
    return float(np.mean(np.abs(d) - t * se > 1))


POWER_CELLS = [(eq.Design(0.33, 1.0, 3), 0.0, "equivalent", 0.05),
               (eq.Design(0.5, 1.0, 3), 0.0, "equivalent", 0.05),
               (eq.Design(0.21, 1.0, 3), 2.0, "beyond", 0.05 / 26),
               (eq.Design(0.5, 1.0, 3, 0.1), 2.0, "beyond", 0.05 / 26),
               (eq.Design(0.6, 1.0, 3, 0.1), 0.0, "equivalent", 0.05)]


def check_seeds_for_power() -> list[str]:
    out = []
    for design, miss, test, alpha in POWER_CELLS:
        need = eq.seeds_for(design, miss, alpha, test)
        if need is None:
            out.append(f"C6: {design} {test}: no seed count")
            continue
        at, below = (mc_power(design, s, miss, test, alpha) for s in (need, need - 1))
        if not (at >= 0.80 - 0.0027 and below < 0.80 + 0.0027):  # 3 MC se at 200,000
            out.append(f"C6: {design} {test}: {need} seeds, power {at} there, {below} below")
        for s in (3, need):
            model, mc = eq.power(design, s, miss, alpha, test), mc_power(design, s, miss, test,
                                                                          alpha)
            if abs(model - mc) > 4 * math.sqrt(max(mc * (1 - mc), 1e-4) / 200_000):
                out.append(f"C6: power {model} against Monte Carlo {mc} ({design}, {s} seeds)")
    return out


# ---------------------------------------------------------------------------------------- C9
def welch_rates(reps: int = 3000) -> tuple[float, float]:
    """paper_ntp_r1 (its printed half-range over 3 seeds enters the test) against a rerun of
    3 seeds off by exactly D, the rerun's seed sd .08 D, the paper's .5 D: the paper's number
    and its half-range drawn from its own 3 seeds each time."""
    claim = REG.claims["paper_ntp_r1"]
    rng = np.random.default_rng(9)
    got = {"reproduced": 0, "differs": 0}
    for _ in range(reps):
        paper = rng.normal(0, 0.5 * D, 3)
        drawn = dataclasses.replace(
            claim, value=float(claim.scalar() + paper.mean()),
            spread=dataclasses.replace(claim.spread, half_range=float(np.ptp(paper) / 2)))
        doc = claim_results(drawn, rng, 0.0, 0.08 * D, SEEDS, D, truth=claim.scalar() + D)
        v = judge_one(drawn, doc)["verdict"]
        if v in got:
            got[v] += 1
    return got["reproduced"] / reps, got["differs"] / reps


def check_welch() -> list[str]:
    repro, differs = welch_rates()
    return [] if repro <= 0.06 and differs <= 0.06 else [f"C9: {repro}, {differs}"]


# --------------------------------------------------------------------------------------- C10
def advice_cover(design: eq.Design, want: int, miss: float, k: int, reps: int = 600
                 ) -> float:
    """How often the span the audit advises (from a 3-seed sd) contains `want`."""
    rng = np.random.default_rng(int(design.seed_sd * 100) + k)
    hit = 0
    for _ in range(reps):
        sd = design.seed_sd * math.sqrt(rng.chisquare(2) / 2)
        said = {"seed_sd": sd, "seed_df": 2, "margin": 1.0, "claim_seeds": 3,
                "claim_sd": design.claim_sd, "floor_var": 0.0}
        few, many = decide_mod.seeds_span(said, miss, 0.05 / k,
                                          "equivalent" if miss == 0 else "beyond")
        hit += few is not None and few <= want and (many is None or want <= many)
    return hit / reps


def check_advice() -> list[str]:
    out = []
    for design, want, miss, k in ((eq.Design(0.33, 1.0, 3), 4, 0.0, 1),
                                  (eq.Design(0.21, 1.0, 3), 6, 2.0, 26)):
        assert eq.seeds_for(design, miss, 0.05 / k, "equivalent" if miss == 0 else
                            "beyond") == want
        cover = advice_cover(design, want, miss, k)
        if cover < 0.80 - 3 * math.sqrt(0.16 / 600):
            out.append(f"C10: the advice holds {want} seeds {cover} of the time")
    return out


FAST: dict[str, Callable[[], list[str]]] = {
    "C3": check_holm_textbook, "C4": check_underpowered_threshold, "C5": check_min_gap,
    "C7": check_separated_flag, "C8": check_order_df}
SLOW: dict[str, Callable[[], list[str]]] = {
    "C1": check_order_is_an_order, "C2": check_pattern_needs_three_seeds,
    "C6": check_seeds_for_power, "C9": check_welch, "C10": check_advice}


# ----------------------------------------------------------------------------------- mutants
Mutant = Callable[[pytest.MonkeyPatch], None]


def holm_variant(multiplier: Callable[[int, int], int], running_max: bool = True
                 ) -> Callable[[dict[str, float]], dict[str, float]]:
    def adjusted(p: dict[str, float]) -> dict[str, float]:
        order = sorted(p, key=lambda k: (p[k], k))
        out, running = {}, 0.0
        for i, key in enumerate(order):
            value = min(1.0, multiplier(len(order), i) * p[key])
            running = max(running, value) if running_max else value
            out[key] = running
        return out
    return adjusted


def patch_margin_test(**change: Callable[[eq.MarginTest], Any]) -> Mutant:
    def apply(mp: pytest.MonkeyPatch) -> None:
        real = eq.margin_test

        def mutated(*args: Any, **kwargs: Any) -> eq.MarginTest:
            test = real(*args, **kwargs)
            return dataclasses.replace(test, **{k: f(test) for k, f in change.items()})
        mp.setattr(decide_mod, "margin_test", mutated)
    return apply


def order_min_gap_ignored(mp: pytest.MonkeyPatch) -> None:
    real = decide_mod.decide_order
    mp.setattr(verdict_mod, "decide_order", lambda est, what, min_gap=0.0, *a, **k:
               real(est, what, 0.0, *a, **k))


def order_with_seeds_df(mp: pytest.MonkeyPatch) -> None:
    real = decide_mod.decide_order
    mp.setattr(decide_mod, "decide_order", lambda est, *a, **k: real(
        dataclasses.replace(est, df_population=est.df), *a, **k))


def seeds_off_by(step: int) -> Mutant:
    def apply(mp: pytest.MonkeyPatch) -> None:
        real = eq.seeds_for
        mp.setattr(eq, "seeds_for", lambda *a, **k: (lambda n: None if n is None else n + step)(
            real(*a, **k)))
    return apply


def power_with_seeds_df(mp: pytest.MonkeyPatch) -> None:
    real = eq.Design.df
    SEEDS_FOR.cache_clear()
    mp.setattr(eq.Design, "df", lambda self, seeds, estimated: real(self, seeds, estimated) + 1)


def pattern_from_two_seeds(mp: pytest.MonkeyPatch) -> None:
    """The old `_scope`: the population interval of a 2-seed run (test pairs only) read as if
    it held training variance."""
    real = rules_mod._scope
    mp.setattr(rules_mod, "_scope", lambda claim, est, margin, ctx: real(
        claim, est if est.training_variance else dataclasses.replace(est, seed_var=0.0),
        margin, ctx))


def order_as_printed_gap(mp: pytest.MonkeyPatch) -> None:
    """The old reading: an order whose gap two printed numbers imply, judged as that gap."""
    def judge(claim: Any, est: TwoLevel, margin: float, claims: Any, *a: Any, **k: Any) -> Any:
        if claim.check.of:
            gap = claims[claim.check.of[0]].scalar() - claims[claim.check.of[1]].scalar()
            return decide(est, gap, margin, verdict_mod.claim_seeds(claim))
        return verdict_mod.judge_order(claim, est, margin, claims, *a, **k)
    mp.setattr(rules_mod, "judge_order", judge)


def advice_at_the_point(mp: pytest.MonkeyPatch) -> None:
    SEEDS_FOR.cache_clear()
    mp.setattr(decide_mod, "sd_interval", lambda sd, df, level=0.8: (sd, sd))


MUTANTS: dict[str, tuple[Mutant, str]] = {
    "bonferroni": (lambda mp: mp.setattr(judge_mod, "holm", holm_variant(lambda k, i: k)), "C3"),
    "holm-no-running-max": (lambda mp: mp.setattr(
        judge_mod, "holm", holm_variant(lambda k, i: k - i, running_max=False)), "C3"),
    "holm-k-minus-i": (lambda mp: mp.setattr(
        judge_mod, "holm", holm_variant(lambda k, i: max(k - i - 1, 1))), "C3"),
    "underpowered-at-1.1-D": (patch_margin_test(
        reachable=lambda t: t.hi - t.d < 1.1 * t.margin), "C4"),
    "min-gap-ignored": (order_min_gap_ignored, "C5"),
    "separated-flag-dropped": (patch_margin_test(distinguishable=lambda t: False), "C7"),
    "order-with-seeds-df": (order_with_seeds_df, "C8"),
    "seeds-for-power-plus-1": (seeds_off_by(1), "C6"),
    "seeds-for-power-minus-1": (seeds_off_by(-1), "C6"),
    "power-with-S-df": (power_with_seeds_df, "C6"),
    "order-as-printed-gap": (order_as_printed_gap, "C1"),
    "pattern-from-two-seeds": (pattern_from_two_seeds, "C2"),
    "welch-dropped": (lambda mp: mp.setattr(rules_mod, "claim_sd", lambda claim: None), "C9"),
    "advice-at-the-point": (advice_at_the_point, "C10"),
}


@pytest.mark.parametrize("check", sorted(FAST))
def test_the_rules_pass_each_fast_check(check: str) -> None:
    assert FAST[check]() == []


@given(st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=7))
@settings(max_examples=60, deadline=None)
def test_holm_is_the_closed_test_of_bonferroni_local_tests(p: list[float]) -> None:
    assert check_holm_closed(p) == []


@pytest.mark.slow
@pytest.mark.parametrize("check", sorted(SLOW))
def test_the_rules_pass_each_simulated_check(check: str) -> None:
    assert SLOW[check]() == []


def _run_mutant(name: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    mutant, check = MUTANTS[name]
    mutant(monkeypatch)
    try:
        return {**FAST, **SLOW}[check]()
    finally:
        SEEDS_FOR.cache_clear()


@pytest.mark.parametrize("name", [n for n, (_, c) in MUTANTS.items() if c in FAST])
def test_each_fast_mutant_breaks_its_check(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = _run_mutant(name, monkeypatch)
    print(name, broken[:2])
    assert broken, f"{name} passes {MUTANTS[name][1]}: the check is blind to it"


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n, (_, c) in MUTANTS.items() if c in SLOW])
def test_each_simulated_mutant_breaks_its_check(name: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    broken = _run_mutant(name, monkeypatch)
    print(name, broken[:2])
    assert broken, f"{name} passes {MUTANTS[name][1]}: the check is blind to it"
