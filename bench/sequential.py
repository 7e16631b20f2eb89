"""Benchmark: the GPU-hours of the flickr30k seed plan's sequential looks against a fixed
design of the same power (harness.audit.plan, harness.audit.simulate).

Run: `.venv/bin/python bench/sequential.py [--claims table|all] [--sd plan|paper] [--reps N]
[--out FIGURES.json]`.

The claims: `table` (the default), the paper's Flickr30k table (its three R@1 numbers, bad
views' mutual 10-NN and the three orders between the arms: what the rerun article's table
checks), or `all`, the 26 a Flickr30k audit judges from sampled runs. The seed sd: `plan` (the
default), params.yaml's flickr30k plan (R@1 .0068 from the audit article's seed-to-seed .0096),
or `paper`, the spreads the rerun article quotes from the paper (R@1 .118 +- .002 and mutual
10-NN .132 +- .001 over three seeds, 2 h / d2(3): .0024 and .0012). Every study is simulated by
harness.audit.simulate with the real audit at each look, arms sharing their draws across their
claims.

Prints, for the sequential plan (params.yaml's looks and spending) and for fixed designs of n
seeds (one look, alpha .05) from 3 to the cap: when every claim holds, each claim's P(reproduced)
and the mean arm-seeds run; when paper_good_r1 and paper_bad_mknn10 are 2 margins off (the good
arm's R@1 and the bad arm's mutual 10-NN moved; the claims reading the same numbers move with
them), their P(differs) and the arm-seeds. The fixed design of equal power is the fewest seeds
whose every such rate is at least the sequential plan's (within 2 Monte Carlo se); the GPU-hours
are arm-seeds x the plan's cost of one (the rerun article's 3 h 50 min for three arms on one
A100). The issue's target: the sequential plan at least 40% below that fixed design when every
claim holds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

from harness.audit import simulate
from harness.audit.claims import load_registry
from harness.audit.plan import build_plan
from harness.config.params import PlanConfig, load_params

TABLE = ("paper_good_r1", "paper_bad_r1", "paper_ntp_r1", "paper_bad_mknn10",
         "paper_order_good_bad_r1", "paper_order_good_ntp_r1", "paper_order_bad_ntp_r1")
MISSING = {"paper_good_r1": ("good", "metrics.r_at_1"),
           "paper_bad_mknn10": ("bad", "metrics.mknn10")}
PAPER_SD = {"r_at_1": (0.0024, "the paper's .118 +- .002 over 3 seeds, quoted by the rerun "
                                "article"),
            "mknn": (0.0012, "the paper's .132 +- .001 over 3 seeds, quoted by the rerun article")}


def config(base: PlanConfig, claims: str, sd: str, looks: tuple[int, ...] | None = None
           ) -> PlanConfig:
    cfg = dataclasses.replace(base, claims=TABLE if claims == "table" else ())
    if sd == "paper":
        cfg = dataclasses.replace(cfg, **{f: dataclasses.replace(getattr(cfg, f), sd=v, source=s)
                                          for f, (v, s) in PAPER_SD.items()})
    return dataclasses.replace(cfg, looks=looks) if looks else cfg


def scenario(plan: Any, reg: Any, margins: Any, reps: int, miss: bool, seed: int
             ) -> dict[str, Any]:
    truths = simulate.holding_truths(plan, reg)
    if miss:
        margin = {c["id"]: c["margin"] for c in plan["claims"]}
        truths = simulate.shifted(truths, {key: 2 * margin[cid] for cid, key in MISSING.items()})
    return simulate.simulate(plan, reg, truths, margins, reps, seed)


def rates(got: dict[str, Any], plan: Any, miss: bool) -> dict[str, float]:
    """The rates equal power is judged on: P(differs) of the two missing claims, or each claim
    that holds arms' P(reproduced)."""
    if miss:
        return {c: got["verdicts"][c].get("differs", 0.0) for c in MISSING}
    return {c["id"]: got["verdicts"][c["id"]].get("reproduced", 0.0) for c in plan["claims"]
            if c["can_confirm"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--claims", choices=("table", "all"), default="table")
    p.add_argument("--sd", choices=("plan", "paper"), default="plan")
    p.add_argument("--reps", type=int, default=400)
    p.add_argument("--out", type=Path, default=None, help="the figures as JSON")
    args = p.parse_args()
    reg = load_registry()
    params = load_params("params.yaml", "flickr30k")
    base = params.plan_config()
    plan = build_plan(config(base, args.claims, args.sd), reg, "flickr30k", params.margins)
    cost = plan["cost"]["arm_seed"]
    print(f"plan {plan['hash']}: {len(plan['claims'])} claims ({args.claims}), seed sd "
          f"{args.sd} (R@1 {plan['spreads']['r_at_1']['sd']}, mutual 10-NN "
          f"{plan['spreads']['mknn']['sd']}), looks {plan['looks']}, {args.reps} studies each; "
          f"one arm-seed {cost} {plan['cost']['unit']}")
    start = time.time()
    seq = {m: scenario(plan, reg, params.margins, args.reps, m, 1) for m in (False, True)}
    print(f"sequential: every claim holds {seq[False]['arm_seeds']:.2f} arm-seeds "
          f"({seq[False]['arm_seeds'] * cost:.1f} {plan['cost']['unit']}); two miss "
          f"{seq[True]['arm_seeds']:.2f} ({seq[True]['arm_seeds'] * cost:.1f})")
    want = {m: rates(seq[m], plan, m) for m in (False, True)}
    figures: dict[str, Any] = {"plan": plan["hash"], "claims": args.claims, "sd": args.sd,
                               "reps": args.reps, "cost_unit": plan["cost"]["unit"],
                               "arm_seed_cost": cost, "sequential": {
                                   "holds": seq[False]["arm_seeds"],
                                   "two_miss": seq[True]["arm_seeds"], "rates": {
                                       "holds": want[False], "two_miss": want[True]}},
                               "fixed": [], "equal_seeds": None, "saved": None}
    print("  P(reproduced | every claim holds): " + ", ".join(
        f"{c} {r:.3f}" for c, r in want[False].items()))
    print("  P(differs | 2 margins off): " + ", ".join(f"{c} {r:.3f}"
                                                      for c, r in want[True].items()))
    equal = None
    for n in range(3, plan["looks"][-1] + 1):
        fixed = build_plan(config(base, args.claims, args.sd, (n,)), reg, "flickr30k",
                           params.margins)
        got = {m: rates(scenario(fixed, reg, params.margins, args.reps, m, 2), plan, m)
               for m in (False, True)}
        short = [f"{c} {got[m][c]:.3f} < {r:.3f}" for m in (False, True)
                 for c, r in want[m].items()
                 if got[m][c] < r - 2 * math.sqrt(max(r * (1 - r), 0.01) / args.reps)]
        print(f"fixed {n} seeds: {3 * n} arm-seeds ({3 * n * cost:.1f}); "
              + ("power at least the sequential plan's" if not short else
                 "short of the sequential plan's power: " + "; ".join(short)))
        figures["fixed"].append({"seeds": n, "arm_seeds": 3 * n, "short": short})
        if not short:
            equal = n
            break
    if equal is None:
        print("no fixed design up to the cap has the sequential plan's power")
    else:
        saved = 1 - seq[False]["arm_seeds"] / (3 * equal)
        figures.update(equal_seeds=equal, saved=saved)
        print(f"every claim holds: the sequential plan runs {seq[False]['arm_seeds']:.2f} "
              f"arm-seeds against {3 * equal} for the fixed design of equal power ({equal} "
              f"seeds per arm): {saved:.0%} fewer GPU-hours "
              f"({'meets' if saved >= 0.4 else 'misses'} the 40% target); two miss: "
              f"{1 - seq[True]['arm_seeds'] / (3 * equal):.0%}")
    print(f"({time.time() - start:.0f} s)")
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
