"""The seed plan, registered before training (`harness plan`, the pipeline's `plan` stage).

For every claim the profile judges from sampled runs (`planned_test`): its test, margin, the
seed sd it assumes and where that comes from (params.yaml's `PROFILE.plan`, which names an
article or the paper, a pilot's own seeds, or the claim's printed spread for its own noise),
the seeds per arm a fixed design needs for 80% power to read "reproduced" when the truth equals
the claim and "differs" when it misses by `differs_miss` margins after Holm over the plan's
family (harness.stats.equivalence.seeds_for), whether it keeps its arms running (`can_confirm`:
80% power for "reproduced" by the cap; `can_catch`: for "differs", which keeps its arms only
while its estimate lies beyond its boundary, harness.audit.looks; a claim that can do neither
is judged while its arms run for others), then the look schedule: the seeds per arm at each
look, the cap, and the alpha each verdict spends at each look.

Spending (Lan & DeMets 1983, Biometrika 70(3)), a schedule fixed before any data:
Pocock-type alpha ln(1 + (e - 1) t) for "reproduced" (most of it early, so claims that hold stop
early), on each claim's own information fraction t = I(n) / I(cap) (its claim noise or test-pair
floor does not shrink with seeds, so t is not n / cap), and O'Brien-Fleming-type 2 - 2
Phi(z_(1-alpha/2) / sqrt t) for "differs" (little early, close to alpha at the cap) on t =
n / cap, common to the family so that Holm runs at one level per look. Each look tests at the
alpha its function adds there: P(a false verdict at any look) <= the sum of the looks' alphas
= alpha by the union bound, under any dependence between looks (Bonferroni over looks: it gives
up the correlation a group-sequential boundary would exploit, and with it needs no joint normal
model of estimates whose variance part does not shrink with seeds). "differs" is Holm over the
plan's whole family at each look (harness.audit.looks).

The plan's hash (sha256 of its canonical JSON, without `hash` and `created`) is what the audit,
the looks' ledger and MLflow name; a plan that differs from the one the ledger's looks were
taken under is refused by `harness plan` and flagged by the audit (harness.audit.looks).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scipy import stats as sps

from harness.audit.claims import Claim, Registry
from harness.audit.rules import RUNNABLE_SCALE
from harness.audit.verdict import claim_sd, claim_seeds
from harness.config.params import PlanConfig, SeedSpread
from harness.records import names
from harness.records.study import PLAN, PlanDoc, PlannedClaim
from harness.stats.equivalence import ALPHA, Design, seeds_for
from prh.io import ContractError, read_json

# Lan & DeMets 1983's spending functions: the alpha spent by information fraction t
SPENT = {
    "pocock": lambda t, a: a * math.log(1 + (math.e - 1) * t),
    "obrien_fleming": lambda t, a: 2 - 2 * float(sps.norm.cdf(sps.norm.ppf(1 - a / 2)
                                                              / math.sqrt(t))),
}
TESTS = ("number", "gap", "order", "inseparable", "pattern")  # what a planned claim's rule tests
DIFFERS_TESTS = ("number", "gap", "order", "inseparable")  # those with a "differs": the family
ASSUMED_ORDER_GAP = 2.0  # margins: an order whose gap no number states is planned at this gap
SCALAR = names.Metric("", "", "quantity")  # a metric the table does not hold: no outcome


class PlanError(ContractError):
    """A plan that cannot govern a study: a claim not in the registry or not judged from
    sampled runs on the profile, a pilot whose seeds are not in its results.json."""




def look_alphas(looks: Sequence[int], kind: str, alpha: float = ALPHA) -> list[float]:
    """The alpha each look spends: the spending function's increments at t = n_l / cap."""
    cap = looks[-1]
    spent = [0.0, *(SPENT[kind](n / cap, alpha) for n in looks)]
    return [b - a for a, b in zip(spent, spent[1:], strict=False)]


def planned_test(claim: Claim, profile: str, margins: Mapping[str, float]) -> str | None:
    """What the audit's rules test of `claim` from sampled runs on `profile` (None: nothing:
    a run of this profile does not judge it from seeds), as harness.audit.rules reads it: a
    number or a curve point of the claim's own data set (`rule_measured`, a margin for its
    metric, no variant without a measure), an ordering of the Flickr30k scale (`rule_ordering`:
    printed gap, order, cannot be separated; on another profile's data, a pattern)."""
    if claim.rule == "measured":
        measure = claim.setup.get("measure")
        if claim.setup.get("dataset") != profile or (claim.setup.get("variant")
                                                    and not measure):
            return None
        scored = measure or names.rows().get(claim.metric, SCALAR).group == "score"
        return "number" if scored and (claim.margin or margins.get(claim.metric)) else None
    if claim.rule != "ordering" or claim.check is None \
            or claim.setup.get("scale") != RUNNABLE_SCALE:
        return None
    if claim.setup.get("dataset") != profile:
        return "pattern"
    if claim.check.type == "inseparable":
        return "inseparable"
    return "gap" if claim.metric == "difference" and not claim.check.of else "order"


def _spread_of(metric: str, cfg: PlanConfig, pilot: Mapping[str, SeedSpread]) -> SeedSpread:
    family = "mknn" if metric.startswith("mknn") else "r_at_1"
    return pilot.get(family) or getattr(cfg, family)


def information_alphas(design: Design, looks: Sequence[int], kind: str) -> list[float]:
    """A claim's own spending of "reproduced": the increments at its information fractions
    t = I(n) / I(cap), I(n) = 1 / Var(d) at n seeds under its design (the claim's own noise or a
    test-pair floor does not shrink with seeds, so t is not n / cap: Lan & DeMets 1983)."""
    def info(n: int) -> float:
        coef, known = design.parts(n)
        return 1.0 / (design.seed_sd ** 2 * coef + known)

    cap = info(looks[-1])
    spent = [0.0, *(SPENT[kind](min(info(n) / cap, 1.0), ALPHA) for n in looks)]
    return [b - a for a, b in zip(spent, spent[1:], strict=False)]


def _planned(claim: Claim, test: str, cfg: PlanConfig, margins: Mapping[str, float],
             pilot: Mapping[str, SeedSpread], claims: Mapping[str, Claim], k: int
             ) -> PlannedClaim:
    """The claim's planning numbers in its own units, the seeds of a fixed design and its
    alpha of "reproduced" at each look."""
    key = claim.check.key if claim.check is not None else claim.metric
    margin = float(claim.margin or margins[key])
    spread = _spread_of(key, cfg, pilot)
    arms = ([claim.setup["arm"]] if claim.check is None else [claim.check.a, claim.check.b])
    out: PlannedClaim = {
        "id": claim.id, "test": test, "arms": arms, "metric": key, "margin": margin,
        "claim_seeds": None, "claim_sd": None, "seed_sd": spread.sd,
        "seed_sd_source": spread.source, "floor_var": 0.0, "seeds_reproduced": None,
        "seeds_differs": None, "alpha_reproduced": []}
    alpha_k = ALPHA / max(k, 1)
    gap_sd = math.sqrt(2) * spread.sd / margin  # a gap's one-seed sd: one seed per arm
    floor = (spread.gap_pair_se / margin) ** 2
    if test == "number":
        csd = claim_sd(claim)
        design = Design(spread.sd / margin, 1.0, claim_seeds(claim),
                        None if csd is None else csd / margin)
        out.update({"claim_seeds": claim_seeds(claim), "claim_sd": csd,
                    "seeds_reproduced": seeds_for(design),
                    "seeds_differs": seeds_for(design, cfg.differs_miss, alpha_k, "beyond")})
    elif test == "inseparable":
        design = Design(gap_sd, 1.0, None, None, floor)
        out.update({"floor_var": spread.gap_pair_se ** 2, "seeds_reproduced": seeds_for(design),
                    "seeds_differs": seeds_for(design, cfg.differs_miss, alpha_k, "beyond"),
                    "gap_pair_source": spread.gap_pair_source})
    else:
        assert claim.check is not None
        gap, source = _order_gap(claim, claims)
        design = Design(gap_sd, 1.0, None, None, floor)
        above = ASSUMED_ORDER_GAP if gap is None else (gap - claim.check.min_gap) / margin
        need = seeds_for(design, above, ALPHA, "above")
        out.update({"min_gap": claim.check.min_gap, "gap": gap, "gap_source": source,
                    "floor_var": spread.gap_pair_se ** 2, "seeds_reproduced": need,
                    "gap_pair_source": spread.gap_pair_source})
        if test == "order":  # "differs": the order shown reversed by differs_miss margins
            out["seeds_differs"] = seeds_for(design, cfg.differs_miss, alpha_k, "above")
        if test == "gap":  # the printed gap on the claim's pairs, and the order it states
            csd = claim_sd(claim)
            printed = Design(gap_sd, 1.0, claim_seeds(claim),
                             None if csd is None else csd / margin)
            both = (need, seeds_for(printed))
            out.update({"claim_seeds": claim_seeds(claim), "claim_sd": csd,
                        "seeds_reproduced": None if None in both else max(both),  # type: ignore
                        "seeds_differs": seeds_for(printed, cfg.differs_miss, alpha_k,
                                                   "beyond")})
            design = printed
    out["alpha_reproduced"] = information_alphas(design, cfg.looks, cfg.spend_reproduced)
    cap = cfg.looks[-1]
    out["can_confirm"] = out["seeds_reproduced"] is not None and out["seeds_reproduced"] <= cap
    out["can_catch"] = out["seeds_differs"] is not None and out["seeds_differs"] <= cap
    return out


def _order_gap(claim: Claim, claims: Mapping[str, Claim]) -> tuple[float | None, str]:
    """The gap an order claim is planned at: the printed gap, the difference of the two
    printed numbers `check.of` names, else none (ASSUMED_ORDER_GAP margins, said so)."""
    assert claim.check is not None
    if claim.check.of:
        a, b = (claims[c] for c in claim.check.of)
        return a.scalar() - b.scalar(), f"{a.id} - {b.id} (printed)"
    if claim.metric == "difference":
        return claim.scalar(), "the printed gap"
    return None, f"assumed: no gap printed, planned at {ASSUMED_ORDER_GAP:g} margins"


def pilot_spreads(cfg: PlanConfig, where: str) -> dict[str, SeedSpread]:
    """The one-seed sd per metric family from a pilot's results.json (its `pilot_seeds`, every
    one in each arm's seeds): the root mean of the arms' one-seed variances on the fixed test
    pairs (results.json's two_level seed_var; a gap's is two seeds', halved per arm). Empty
    without a pilot; PlanError naming the file and the seeds it lacks."""
    if not cfg.pilot:
        return {}
    path = Path(cfg.pilot)
    if not path.is_file():
        raise PlanError(f"{where}.pilot: {path} does not exist; name a results.json of pilot "
                        "runs (`dvc exp show` lists the experiments whose runs/results.json "
                        "holds them)")
    doc = read_json(path)
    arms = doc.get("arms") or {}
    want = {int(s) for s in cfg.pilot_seeds}
    for arm, block in sorted(arms.items()):
        have = {int(s) for s in block.get("seeds", [])}
        if want - have:
            raise PlanError(f"{where}.pilot_seeds: {sorted(want - have)} not among {path}'s "
                            f"{arm} seeds {sorted(have)}; list seeds the pilot ran")
    if len(want) < 3:
        raise PlanError(f"{where}.pilot_seeds: {len(want)} seed(s); a pilot's spread needs 3 "
                        "or more")
    out: dict[str, SeedSpread] = {}
    said = f"pilot {path} (seeds {sorted(want)}, {len(arms)} arm(s))"
    for family, metric in (("r_at_1", "r_at_1"), ("mknn", None)):
        variances = []
        for block in arms.values():
            for name, m in (block.get("metrics") or {}).items():
                if (name == metric or (metric is None and name.startswith("mknn"))) \
                        and (m.get("two_level") or {}).get("seed_var") is not None:
                    variances.append(float(m["two_level"]["seed_var"]))
        if variances:
            base = getattr(cfg, family)
            out[family] = SeedSpread(math.sqrt(sum(variances) / len(variances)), said,
                                     base.gap_pair_se, base.gap_pair_source)
    return out


def build_plan(cfg: PlanConfig, registry: Registry, profile: str,
               margins: Mapping[str, float], where: str = "plan") -> PlanDoc:
    """The plan document (module docstring) for `profile`; PlanError for a claim named in
    `cfg.claims` that is not in the registry or not judged from sampled runs here."""
    claims = registry.claims
    tests = {cid: t for cid, c in claims.items()
             if (t := planned_test(c, profile, margins)) is not None}
    if cfg.claims:
        for cid in cfg.claims:
            if cid not in claims:
                raise PlanError(f"{where}.claims: {cid!r} is not in the registry "
                                f"(harness/audit/claims.yaml){_did_you_mean(cid, claims)}")
            if cid not in tests:
                raise PlanError(f"{where}.claims: {cid!r} is not judged from sampled runs on "
                                f"the {profile} profile; plan claims of "
                                f"{sorted(tests)[:3]}...")
        tests = {cid: tests[cid] for cid in cfg.claims}
    pilot = pilot_spreads(cfg, where)
    k = sum(t in DIFFERS_TESTS for t in tests.values())
    planned = [_planned(claims[cid], t, cfg, margins, pilot, claims, k)
               for cid, t in tests.items()]
    arms = sorted({a for p in planned for a in p["arms"]})
    need = [n for p in planned for n in ((p["seeds_reproduced"], p["seeds_differs"])
                                         if p["test"] in DIFFERS_TESTS
                                         else (p["seeds_reproduced"],))]
    fixed = None if not need or None in need else max(n for n in need if n is not None)
    looks = list(cfg.looks)
    doc: dict[str, Any] = {
        "schema": str(PLAN), "profile": profile, "alpha": ALPHA, "power": cfg.power,
        "differs_miss": cfg.differs_miss, "looks": looks,
        "spending": {"reproduced": cfg.spend_reproduced, "differs": cfg.spend_differs},
        "alpha_differs": look_alphas(looks, cfg.spend_differs),
        "family_k": k, "claims": planned, "arms": arms, "fixed_seeds": fixed,
        "spreads": {f: dict(vars(pilot.get(f) or getattr(cfg, f))) for f in ("r_at_1", "mknn")},
        "cost": {"arm_seed": cfg.arm_seed_cost, "unit": cfg.cost_unit,
                 "source": cfg.cost_source,
                 "fixed": None if fixed is None else fixed * len(arms) * cfg.arm_seed_cost,
                 "looks": [n * len(arms) * cfg.arm_seed_cost for n in looks]}}
    doc["hash"] = plan_hash(doc)
    return doc  # type: ignore[return-value]


def _did_you_mean(cid: str, claims: Mapping[str, Claim]) -> str:
    from prh.config import did_you_mean

    return did_you_mean(cid, list(claims))


def plan_hash(doc: Mapping[str, Any]) -> str:
    """sha256 (first 16 hex) of the plan's canonical JSON without `hash` and `created`."""
    blob = json.dumps({k: v for k, v in doc.items() if k not in ("hash", "created")},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def check_plan(doc: Any, where: str) -> PlanDoc:
    """runs/plan.json read back: its schema and shape, and its hash against its content (a
    hand-edited plan no longer matches its own hash)."""
    plan = PLAN.check(doc, where)
    if plan_hash(plan) != plan["hash"]:
        raise ContractError(f"{where}: its content no longer hashes to its hash {plan['hash']} "
                            "(edited by hand?); rerun `harness plan` (a plan changed after a look "
                            "is refused there)")
    return plan


def plan_table(plan: Mapping[str, Any]) -> str:
    """The plan as a markdown table, one row per claim, and its schedule and cost."""
    looks = plan["looks"]
    lines = [f"# Seed plan {plan['hash']} ({plan['profile']} profile)", "",
             f"Looks at {', '.join(map(str, looks))} seeds per arm (cap {looks[-1]}); "
             f"alpha {plan['alpha']:g} per verdict spent over the looks: \"reproduced\" "
             f"({plan['spending']['reproduced']}, on each claim's information) as listed per "
             f"claim; \"differs\" ({plan['spending']['differs']}, on n / cap, Holm over the "
             f"family of {plan['family_k']}) "
             + ", ".join(f"{a:.4f}" for a in plan["alpha_differs"]) + ".", "",
             "| claim | test | margin | seed sd assumed | from | seeds: reproduced | seeds: "
             f"differs ({plan['differs_miss']:g} margins) | alpha of reproduced by look |",
             "|---|---|---|---|---|---|---|---|"]
    for c in plan["claims"]:
        lines.append(f"| {c['id']} | {c['test']} | {c['margin']:g} | {c['seed_sd']:.4g} | "
                     f"{c['seed_sd_source']} | {c['seeds_reproduced'] or 'none'} | "
                     f"{c['seeds_differs'] or ('-' if c['test'] == 'pattern' else 'none')} | "
                     + ", ".join(f"{a:.4f}" for a in c["alpha_reproduced"]) + " |")
    cost = plan["cost"]
    fixed = plan["fixed_seeds"]
    lines += ["", f"A fixed design of the same power: {fixed or 'no seed count'} seeds per arm"
              + (f", {cost['fixed']:.3g} {cost['unit']}" if fixed and cost["unit"] else "")
              + f". The plan's arms ({', '.join(plan['arms'])}) at each look, if every arm "
              "continues: " + ", ".join(f"{c:.3g}" for c in cost["looks"])
              + (f" {cost['unit']} ({cost['source']})" if cost["unit"] else "") + "."]
    return "\n".join(lines) + "\n"
