"""The sequential study's error rates and power, on the real family of a Flickr30k audit under
the shipped flickr30k plan (params.yaml: its looks, its spending), against bounds fixed by the
design; and four mutants of the design, each breaking one bound.

Design (ADEMP, Morris, White & Crowther 2019). The family: the 26 claims a 3-seed Flickr30k
audit judges from sampled runs (tests/flickr_audit.py, checked against the real audit), each
through its own rule, drawn independently (no shared arm can put every claim at its margin at
once) with one seed's sd .21 of its margin; a claim's seeds and test pairs are drawn once for
the study and each look reads the first n of them. Every look is judged by the real pieces:
the plan's levels (harness.audit.looks.levels), Holm over the plan's family with the claims
decided earlier counted at p = 1 (harness.audit.judge.judge_look), each claim's status
(apply_look) and the ledger (record); a claim decided at a look stops, and only the claims
still undecided are drawn at the next.

Bounds, literals of this file (REPS 2,000: a Monte Carlo se of .0049 at a rate of .05, TOL =
3 se = .0146; at a power of .8, 3 se = .038 over POWER_REPS 1,000):
- S1 every claim at the boundary of its "differs" (a number or printed gap off by exactly its
     margin, an order at its smallest material gap, "cannot be separated" at its gap margin):
     P(any "differs" at any look) <= .05 + TOL.
- S2 the same draws are each claim's boundary of "reproduced": for every claim,
     P("reproduced" at any look) <= .05 + TOL, with params.yaml's margins doubled after the
     first look (the plan's registered margins govern every look).
- S3 paper_good_r1 2 margins off, the other 25 as they say: P("differs" by the cap) >= .80 -
     .038, and the cap at most 12 seeds per arm.
Mutants: the fixed-n rule at every look (no spending) breaks S2; the cap ignored (two more
looks at the last look's alpha, to 20 seeds) breaks S3's cap; the registry's margins, doubled
after the first look, read in place of the plan's breaks S2; Holm dropped across looks breaks S1.
All slow (.ci/run's pipeline section).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest
from flickr_audit import REG, ClaimDraw, family_members, judge_one

import harness.audit.judge as judge_mod
from harness.audit.judge import judge_look
from harness.audit.looks import empty_ledger, levels, record
from harness.audit.plan import build_plan
from harness.audit.verdict import Level
from harness.config.params import load_params

pytestmark = pytest.mark.slow

REPS, POWER_REPS = 2000, 1000
TOL = 0.0146  # 3 Monte Carlo se of a rate of .05 over 2,000 studies
POWER_TOL = 0.038  # 3 Monte Carlo se of a rate of .8 over 1,000 studies
SD = 0.21  # one seed's sd, in margins
PARAMS = load_params("params.yaml", "flickr30k")


def shipped_plan() -> dict[str, Any]:
    return dict(build_plan(PARAMS.plan_config(), REG, "flickr30k", PARAMS.margins))


@dataclass
class Study:
    """How each claim ended: its verdict, the look it was decided at, the most seeds run."""

    verdicts: dict[str, str] = field(default_factory=dict)
    decided_at: dict[str, int | None] = field(default_factory=dict)
    seeds: int = 0


def run_study(plan: Mapping[str, Any], draws: Mapping[str, ClaimDraw],
              margins_after_first: Mapping[str, float] | None = None,
              levels_of: Callable[[Mapping[str, Any], int], dict[str, Level]] = levels
              ) -> Study:
    """One study: look after look until every claim is decided or the cap, as `harness next`
    would run it, on each claim's own draw."""
    ledger = empty_ledger()
    out = Study()
    undecided = set(draws)
    for look, n in enumerate(plan["looks"], start=1):
        level = levels_of(plan, look)
        margins = margins_after_first if look > 1 and margins_after_first else None
        rows = [judge_one(REG.claims[cid], draws[cid].results(n), level, margins)
                if cid in undecided else
                {"id": cid, "rule": REG.claims[cid].rule, "verdict": "", "reason": "",
                 "evidence": {}} for cid in draws]
        _, block = judge_look(rows, plan, ledger, n)  # type: ignore[arg-type]
        ledger = record(ledger, plan, {"claims": rows, "sequential": block}, "t", None)  # type: ignore[arg-type]
        out.seeds = n
        for cid, s in block["claims"].items():
            out.verdicts[cid] = s["verdict"]
            if s["status"] == "decided":
                out.decided_at[cid] = look
        undecided = {cid for cid, s in block["claims"].items() if s["status"] == "continues"}
        if not block["next_seeds"]:
            break
    return out


def draws_at(rng: np.random.Generator, plan: Mapping[str, Any], miss: float,
             overrides: Mapping[str, float] | None = None) -> dict[str, ClaimDraw]:
    """Every planned claim drawn `miss` margins off what it says (harness-independent: the
    truth by flickr_audit.target), `overrides` in margins for named claims."""
    cap = plan["looks"][-1] + 10  # room for a mutant that looks past the cap
    out = {}
    for c in plan["claims"]:
        claim = REG.claims[c["id"]]
        m = (overrides or {}).get(c["id"], miss)
        out[c["id"]] = ClaimDraw(claim, rng, m, SD * c["margin"], cap, c["margin"])
    return out


def holding(rng: np.random.Generator, plan: Mapping[str, Any], off: str, miss: float
            ) -> dict[str, ClaimDraw]:
    """`off` missing by `miss` margins; every other claim as it says (a number at its value,
    an order at its planned gap, "cannot be separated" at 0)."""
    cap = plan["looks"][-1] + 10
    out = {}
    for c in plan["claims"]:
        claim = REG.claims[c["id"]]
        if c["id"] == off:
            out[c["id"]] = ClaimDraw(claim, rng, miss, SD * c["margin"], cap, c["margin"])
        elif c["test"] == "order":
            gap = c["gap"] if c["gap"] is not None else 2 * c["margin"]
            out[c["id"]] = ClaimDraw(claim, rng, 0.0, SD * c["margin"], cap, c["margin"], gap)
        else:
            out[c["id"]] = ClaimDraw(claim, rng, 0.0, SD * c["margin"], cap, c["margin"])
    return out


def boundary_rates(plan: Mapping[str, Any], reps: int = REPS, seed: int = 1,
                   **kw: Any) -> tuple[float, dict[str, float]]:
    """(P(any differs), per claim P(reproduced)) over `reps` studies at every boundary."""
    rng = np.random.default_rng(seed)
    any_differs, repro = 0, dict.fromkeys((c["id"] for c in plan["claims"]), 0)
    for _ in range(reps):
        study = run_study(plan, draws_at(rng, plan, 1.0), **kw)
        any_differs += any(v == "differs" for v in study.verdicts.values())
        for cid, v in study.verdicts.items():
            repro[cid] += v == "reproduced"
    return any_differs / reps, {cid: n / reps for cid, n in repro.items()}


def power(plan: Mapping[str, Any], reps: int = POWER_REPS, seed: int = 2) -> tuple[float, int]:
    """(P(paper_good_r1 reads "differs" by the cap) when it is 2 margins off, the most seeds
    per arm any study ran)."""
    rng = np.random.default_rng(seed)
    hit, most = 0, 0
    for _ in range(reps):
        study = run_study(plan, holding(rng, plan, "paper_good_r1", 2.0))
        hit += study.verdicts["paper_good_r1"] == "differs"
        most = max(most, study.seeds)
    return hit / reps, most


def s1_s2(rates: tuple[float, dict[str, float]]) -> list[str]:
    fwer, repro = rates
    out = [f"S1: P(any differs) {fwer:.4f}"] if fwer > 0.05 + TOL else []
    return out + [f"S2: P(reproduced) of {cid} {r:.4f}" for cid, r in repro.items()
                  if r > 0.05 + TOL]


def s3(got: tuple[float, int]) -> list[str]:
    p, most = got
    out = [f"S3: P(differs | paper_good_r1 2 margins off) {p:.4f}"] if p < 0.80 - POWER_TOL \
        else []
    return out + ([f"S3: {most} seeds per arm, past 12"] if most > 12 else [])


def test_the_family_is_the_real_audit_s_and_the_cap_is_the_design_s() -> None:
    plan = shipped_plan()
    assert [c["id"] for c in plan["claims"]] == [c.id for c in family_members()]
    assert plan["family_k"] == 26 and plan["looks"][-1] <= 12


DOUBLED = {k: 2 * v for k, v in PARAMS.margins.items()}


@pytest.fixture(scope="module")
def at_the_boundary() -> tuple[float, dict[str, float]]:
    """S1 and S2's studies, params.yaml's margins doubled after the first look (the plan's
    registered margins must still govern)."""
    return boundary_rates(shipped_plan(), margins_after_first=DOUBLED)


def test_error_rates_over_all_looks(at_the_boundary: tuple[float, dict[str, float]]) -> None:
    fwer, repro = at_the_boundary
    print(f"\nP(any differs over all looks | every claim at its boundary) = {fwer:.4f}; "
          f"largest P(reproduced) {max(repro.values()):.4f} ({max(repro, key=repro.get)})")
    assert s1_s2(at_the_boundary) == []


def test_a_claim_two_margins_off_is_caught_by_the_cap() -> None:
    got = power(shipped_plan())
    print(f"\nP(differs by the cap | paper_good_r1 2 margins off) = {got[0]:.4f}, at most "
          f"{got[1]} seeds per arm")
    assert s3(got) == []


def no_spending(plan: Mapping[str, Any]) -> dict[str, Any]:
    """The fixed-n rule at every look: alpha .05 for both verdicts at each."""
    n = len(plan["looks"])
    return {**plan, "alpha_differs": [0.05] * n,
            "claims": [{**c, "alpha_reproduced": [0.05] * n} for c in plan["claims"]]}


def cap_ignored(plan: Mapping[str, Any]) -> dict[str, Any]:
    """Two looks past the cap (15 and 20 seeds), each at the last look's alphas."""
    return {**plan, "looks": [*plan["looks"], 15, 20],
            "alpha_differs": [*plan["alpha_differs"], *plan["alpha_differs"][-1:] * 2],
            "claims": [{**c, "alpha_reproduced": [*c["alpha_reproduced"],
                                                  *c["alpha_reproduced"][-1:] * 2]}
                       for c in plan["claims"]]}


def registry_margins(plan: Mapping[str, Any], look: int) -> dict[str, Level]:
    """Levels without the plan's margins: the rules fall back to params.yaml's of the day."""
    return {cid: replace(level, margin=None) for cid, level in levels(plan, look).items()}


def test_no_spending_breaks_s2() -> None:
    assert s1_s2(boundary_rates(no_spending(shipped_plan()), reps=600, seed=3))


def test_the_cap_ignored_breaks_s3() -> None:
    assert s3(power(cap_ignored(shipped_plan()), reps=200, seed=4))


def test_the_registry_margins_after_the_first_look_break_s2() -> None:
    assert s1_s2(boundary_rates(shipped_plan(), reps=200, seed=5, levels_of=registry_margins,
                                margins_after_first=DOUBLED))


def test_holm_dropped_across_looks_breaks_s1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(judge_mod, "holm", lambda p: dict(p))
    assert s1_s2(boundary_rates(shipped_plan(), reps=200, seed=6))

