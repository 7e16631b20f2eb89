"""The audit document: every claim through its rule, the family step over the claims judged
from sampled runs (Holm), every arithmetic check, the summary counts (schema prh.audit/1)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from harness.audit import setting
from harness.audit.claims import (
    Claim,
    Registry,
)
from harness.audit.decide import DESIGN, P_DIFFERS, at_chance, differs_advice
from harness.audit.looks import apply_look, earlier, empty_ledger, levels, look_index
from harness.audit.paths import ELSEWHERE, path_of, rerun_paths
from harness.audit.printed import check_derived
from harness.audit.relations import RELATIONS, check_relation
from harness.audit.rules import RULES, Context
from harness.records.schemas import Results
from harness.records.study import Ledger, PlanDoc
from harness.records.verdicts import (
    AUDIT,
    COUNT_CHECK,
    GAP_CHECK,
    MEAN_CHECK,
    STATUSES,
    VERDICTS,
)
from harness.stats.equivalence import ALPHA, holm
from prh.io import ContractError


def arithmetic_checks(ctx: Context) -> list[dict[str, Any]]:
    """Every derived claim's formula, every relation, and the rerun's own numbers checked
    against each other (`_rerun_checks`)."""
    out = [check_derived(c, ctx.claims) for c in ctx.claims.values()
           if c.formula and c.kind == "derived_arithmetic"]
    out += [check_relation(r, ctx.claims) for r in ctx.relations]
    return out + (_rerun_checks(ctx.results, ctx.claims) if ctx.results else [])


# Two float64 means of the same S <= 10^6 numbers in [0, 1] summed in other orders differ by at
# most S * 2^-52 < 3e-10; one test pair out of 1,000 moves an R@1 by 1e-3.
SAME = 1e-9


def _rerun_checks(results: Results, claims: Mapping[str, Claim]
                  ) -> list[dict[str, Any]]:
    """results.json against itself: an R@k over n test pairs is a count out of n; an arm's mean
    is the mean of its seeds' values; a paired gap is the difference of the two arms' means
    (each arm's mean and the gap average the same seeds and pairs). Each check names the claims
    that read that number (`claims`; `audit` keeps those it judged from it)."""
    n = int(results.get("n_test", 0))
    arms = results.get("arms", {})
    out = []
    for arm, block in sorted(arms.items()):
        for metric, m in sorted(block.get("metrics", {}).items()):
            values = m.get("values") or {}
            readers = _readers(claims, {arm}, metric)
            for seed, v in sorted(values.items()) if metric in ("r_at_1", "r_at_5") else ():
                ok = n > 0 and abs(v * n - round(v * n)) < 1e-6
                out.append({"id": f"results:{arm}-s{seed}:{metric}", "check": COUNT_CHECK,
                            "value": v, "n": n, "status": "holds" if ok else "fails",
                            "detail": f"{v} * {n} = {v * n:.6g}", "claims": readers})
            if values and "mean" in m:
                seeds_mean = sum(values.values()) / len(values)
                out.append({"id": f"results:{arm}:{metric}", "check": MEAN_CHECK,
                            "value": m["mean"], "status": _same(m["mean"], seeds_mean),
                            "detail": f"mean {m['mean']:.6g}, seeds' mean {seeds_mean:.6g}",
                            "claims": readers})
    for gap in results.get("gaps", []):
        a, b, metric = gap["a"], gap["b"], gap["metric"]
        ma, mb = (arms.get(x, {}).get("metrics", {}).get(metric, {}).get("mean") for x in (a, b))
        if ma is None or mb is None or "diff" not in gap:
            continue
        out.append({"id": f"results:{a}-{b}:{metric}", "check": GAP_CHECK,
                    "value": gap["diff"], "status": _same(gap["diff"], ma - mb),
                    "detail": f"gap {gap['diff']:.6g}, {a} - {b} means {ma - mb:.6g}",
                    "claims": _readers(claims, {a, b}, metric, both=True)})
    return out


def _same(x: float, y: float) -> str:
    return "holds" if abs(x - y) <= SAME else "fails"


def _readers(claims: Mapping[str, Claim], arms: set[str], metric: str, both: bool = False
             ) -> list[str]:
    """The claims whose verdict reads `metric` of `arms`: a measured claim on one of them, an
    ordering on them (with `both`, an ordering of exactly these two)."""
    out = []
    for c in claims.values():
        if c.check is not None and c.check.a and c.check.key == metric:
            pair = {c.check.a, c.check.b}
            if (pair == arms) if both else (pair & arms):
                out.append(c.id)
        elif not both and c.metric == metric and c.setup.get("arm") in arms:
            out.append(c.id)
    return sorted(out)


def evidence_for(claim: Claim, verdict: str, ctx: Context) -> str:
    """What a verdict is evidence for, in words (the scope a reader may quote it with)."""
    data = claim.setup.get("dataset", "the claim's setup")
    if verdict.startswith("pattern"):
        return (f"whether the pipeline shows the pattern on the {ctx.profile} profile; nothing "
                f"about {data}")
    if verdict.startswith("arithmetic"):
        return "the internal consistency of the articles' printed numbers"
    if verdict in ("not rerun", "not comparable"):
        return f"nothing yet: the {ctx.profile} run does not measure this"
    if verdict == "informational":
        return "nothing judged: the run's own number shown beside the article's"
    if claim.kind == "theory":
        return "the theorem's numbers on the finite worlds this run draws"
    if claim.rule == "evaluated":
        return (f"the number of {claim.setup.get('model')} on {data}, from the reference stage's "
                "scores of the same model on the same items")
    if claim.rule == "pairfree_bound":
        return (f"{claim.setup.get('model')} on pair-free pools of Flickr30k's train photos, "
                "from the reference stage's scores, on the benchmark's setting only (assumed: "
                f"{setting.pairfree_assumed()})")
    if claim.rule == "web_text":
        return (f"the claim's number on {data} from the recap runs trained as the claim says "
                "(its texts, images and samples), over their seeds and the benchmark's items")
    seeds = (ctx.results or {}).get("arms", {}).get(claim.setup.get("arm", ""), {}).get("seeds")
    return (f"the claim's number on {data}, from the {ctx.profile} run"
            + (f" ({len(seeds)} seed(s))" if seeds else ""))


def summarize(claim_rows: list[dict[str, Any]], checks: list[dict[str, Any]]) -> dict[str, int]:
    """Every verdict and every check status, zeros included: `relation <status>` for the
    relations across claims and `check <status>` for the other arithmetic checks."""
    counts = Counter(r["verdict"] for r in claim_rows)
    counts.update(("relation " if c["check"] in RELATIONS else "check ") + c["status"]
                  for c in checks if c["check"] != "formula")
    keys = [*VERDICTS, *(f"relation {s}" for s in STATUSES), *(f"check {s}" for s in STATUSES)]
    return {k: counts.get(k, 0) for k in keys}


# The rules whose verdicts rest on sampled runs (seeds, test pairs): their "differs" form one
# family per audit document. Deterministic evaluations and theory identities stay out.
FAMILY_RULES = ("measured", "ordering", "sts_arm", "web_text")


def family(rows: list[dict[str, Any]], alpha: float = ALPHA, k: int | None = None,
           advise: bool = True) -> dict[str, Any]:
    """Holm's step-down at family-wise `alpha` over every claim of `rows` whose rule is sampled
    and that was tested (its evidence holds a `P_DIFFERS`; a claim under 3 seeds, at chance or
    not comparable was not); with `k`, over a family of k fixed in advance (a sequential plan's),
    whose members not tested here count with p = 1 (a claim decided at an earlier look: Holm's
    error bound holds whatever the p of the others). Each member's evidence gains its adjusted
    p; a "differs" whose
    adjusted p exceeds alpha becomes "inconclusive" ("(underpowered)" when no estimate at
    these seeds could show equivalence) and says so; with `advise`, every member left
    undecided says how many seeds "differs" would take (`differs_advice`; a sequential look
    short of the cap says where the study goes next instead). Holm 1979 holds the error under any
    dependence: the claims share arms, seeds and test pairs. Returns the family block of the
    audit document."""
    tested = {r["id"]: r for r in rows
              if r["rule"] in FAMILY_RULES and r["evidence"].get(P_DIFFERS) is not None}
    k = len(tested) if k is None else k
    if k < len(tested):
        raise ValueError(f"a family of {k} cannot hold the {len(tested)} claims tested")
    untested = {f"\0untested {i}": 1.0 for i in range(k - len(tested))}
    adjusted = holm({**{cid: float(r["evidence"][P_DIFFERS]) for cid, r in tested.items()},
                     **untested})
    beyond = 0
    for cid, row in tested.items():
        p, q = float(row["evidence"][P_DIFFERS]), adjusted[cid]
        row["evidence"] = {**row["evidence"], "p_differs_holm": q}
        design = row["evidence"].get(DESIGN)
        advice = f"; {differs_advice(design, k, alpha)}" if design and advise else ""
        if row["verdict"] == "differs":
            beyond += 1
            if q <= alpha:
                row["reason"] = f"{row['reason']}; Holm over {k} claims: adjusted p = {q:.3g}"
                continue
            row["verdict"] = ("inconclusive" if row["evidence"].get("reachable", True)
                              else "inconclusive (underpowered)")
            row["reason"] = (f"\"differs\" at the claim's own level (p = {p:.3g}), not after "
                             f"Holm over {k} claims at {alpha:.3g} (adjusted p = {q:.3g}): "
                             f"{row['reason']}")
        if row["verdict"].startswith("inconclusive"):
            row["reason"] += advice
    members = [{"id": cid, "rule": r["rule"], "p": float(r["evidence"][P_DIFFERS]),
                "p_adjusted": adjusted[cid], "verdict": r["verdict"]}
               for cid, r in tested.items()]
    return {"method": "holm", "alpha": alpha, "k": k, "members": members,
            "differs": sum(m["verdict"] == "differs" for m in members),
            "beyond_unadjusted": beyond}


def _compares(claim: Claim) -> dict[str, str] | None:
    """What an ordering claim compares (arm a against b on a metric, `order` or
    `inseparable`): the report shows the claims about one comparison together."""
    if claim.check is None or not claim.check.a:
        return None
    return {"a": claim.check.a, "b": claim.check.b, "key": claim.check.key,
            "type": claim.check.type}


def run_seeds(results: Results) -> tuple[int, bool]:
    """(the fewest seeds an arm of the run has, whether every arm has as many): a look of a
    plan runs every arm it holds at the look's seeds."""
    counts = {len(b.get("seeds", [])) for b in results.get("arms", {}).values()}
    return min(counts, default=0), len(counts) <= 1


def judge_look(rows: list[dict[str, Any]], plan: PlanDoc, ledger: Ledger, seeds: int,
               even: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """The study's step over rows judged at the look's levels (harness.audit.looks.levels): a
    sampled claim the plan leaves out gives no verdict; Holm over the plan's family at the
    look's alpha, the claims decided at earlier looks counting with p = 1; each planned claim's
    status (`apply_look`); arms with uneven seeds (`even` false) are no look. Returns (the
    family block, the sequential block)."""
    look = look_index(plan, seeds) if even else None
    planned = {c["id"] for c in plan["claims"]}
    before = earlier(ledger, look) if look else {}
    for row in rows:  # a sampled claim the plan leaves out gives no verdict in its study
        if row["id"] not in planned and row["rule"] in FAMILY_RULES \
                and row["evidence"].get(P_DIFFERS) is not None:
            row["verdict"] = "inconclusive"
            row["reason"] = ("not in the registered plan (runs/plan.json): no verdict in its "
                             f"study; {row['reason']}")
    members = [r for r in rows if r["id"] in planned and r["id"] not in before]
    fam = (family(members, plan["alpha_differs"][look - 1], plan["family_k"], advise=False)
           if look is not None else family([]))
    return fam, apply_look(rows, plan, ledger, seeds, look, fam)


def audit(registry: Registry | Mapping[str, Claim], ctx: Context, plan: PlanDoc | None = None,
          ledger: Ledger | None = None) -> dict[str, Any]:
    """The audit document (prh.audit/1) without `inputs`. Given a Registry, its relations are
    checked too. Under a registered `plan` (and the `ledger` of the looks taken), the run is a
    look of a sequential study (harness.audit.looks): its planned claims are judged at the
    look's levels, the family is the plan's, and the document gains a `sequential` block."""
    if isinstance(registry, Registry):
        ctx = replace(ctx, claims=registry.claims, relations=registry.relations)
    seeds = look = None
    even = True
    ledger = ledger or empty_ledger()  # type: ignore[assignment]
    assert ledger is not None
    if plan is not None and ctx.results is not None:
        seeds, even = run_seeds(ctx.results)
        look = look_index(plan, seeds) if even else None
        if look is not None and look > len(ledger["looks"]) + 1:
            raise ContractError(
                f"results.json is look {look} of the plan ({seeds} seeds per arm), but "
                f"runs/looks.json records {len(ledger['looks'])} look(s): record each look "
                "with `harness next` after its audit")
        if look is not None:
            ctx = replace(ctx, levels=levels(plan, look))
    rows = []
    for c in ctx.claims.values():
        v = RULES[c.rule](c, ctx)
        rows.append({"id": c.id, "statement": c.statement, "kind": c.kind, "source": c.source,
                     "where": c.where, "reported_by": c.reported_by, "section": c.section,
                     "metric": c.metric, "setup": dict(c.setup), "printed": c.printed,
                     "rule": c.rule, "verdict": v.verdict, "reason": v.reason,
                     "evidence_for": evidence_for(c, v.verdict, ctx), "registry_line": c.line,
                     "evidence": dict(v.evidence),
                     "rerun_path": path_of(c) if v.verdict in ELSEWHERE else None,
                     "compares": _compares(c)})
    sequential = None
    if plan is not None and seeds is not None:
        fam, sequential = judge_look(rows, plan, ledger, seeds, even)
    else:
        fam = family(rows)
    checks = arithmetic_checks(ctx)
    judged = {r["id"] for r in rows if r["verdict"] not in ("not rerun", "not comparable")}
    for check in checks:  # a rerun check's readers: the claims this audit judged from it
        if "claims" in check:
            check["claims"] = [cid for cid in check["claims"] if cid in judged]
    doc = {"schema": str(AUDIT), "profile": ctx.profile, "claims": rows,
           "arithmetic": checks, "at_chance": at_chance(ctx.results),
           "rerun_paths": rerun_paths(ctx.claims, rows), "family": fam,
           "summary": summarize(rows, checks)}
    if sequential is not None:
        doc["sequential"] = sequential
    return doc
