"""The claims audit: one verdict per registry claim, with its evidence.

Verdicts (docs/contracts.md): reproduced, differs, inconclusive, not comparable, not rerun,
arithmetic holds, arithmetic fails. The rules live in one table, `RULES`, and claims name
theirs in harness/claims.yaml (`rule:`, defaulting by kind):

| rule       | claim kinds         | verdict                                                       |
|------------|---------------------|---------------------------------------------------------------|
| measured   | flickr_measurable   | rerun inside the paper's spread AND paper value inside the   |
|            |                     | rerun's 95% CI: reproduced; neither: differs; one only:       |
|            |                     | inconclusive (the rerun article's "Our rerun" two checks)     |
| ordering   | ordering            | paired CI of a - b: > 0 reproduced, contains 0 inconclusive, |
|            |                     | < 0 differs (Flickr-scale orderings run on every profile)     |
| arithmetic | derived_arithmetic  | rounding-aware recomputation (statcheck): holds / fails       |
| theory     | theory              | runs/theory.json key compared with the claim's bound          |
| not_rerun  | web_scale           | not rerun, with the reason (data, scale, compute)             |
| metadata   | metadata            | not rerun: a description of the setup, nothing to measure     |

A setup that differs from the run's (data set, n_test) gives "not comparable", naming the field.
Besides the verdicts, `arithmetic_checks` runs every derived relation, a GRIM-style granularity
check of recalls (k / n, scrutiny's `grim`; harness-anchors.md 2.5) and a point-inside-its-
interval check of every printed CI.
"""

from __future__ import annotations

import ast
import math
import operator
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.claims import (
    RULE_NAMES,
    Claim,
    decimals,
    printed_interval,
)
from prh.io import ContractError

VERDICTS = ("reproduced", "differs", "inconclusive", "not comparable", "not rerun",
            "arithmetic holds", "arithmetic fails")
EPS = 1e-9  # float slack in comparisons of printed numbers (.193 - .191 is 0.0020000000000000018)
GRIM_METRICS = {"r_at_1": 1, "r_at_5": 1, "control_random_map_r_at_1": 1,
                "control_shuffled_r_at_1": 1, "mknn10": 10, "wit_mknn10": 10}
_OPS: dict[str, Callable[[float, float], bool]] = {
    "eq": lambda a, b: abs(a - b) <= EPS, "ge": lambda a, b: a >= b - EPS,
    "le": lambda a, b: a <= b + EPS, "gt": lambda a, b: a > b + EPS, "lt": lambda a, b: a < b - EPS}
_WHY = {"data": "needs data this pipeline does not have",
        "scale": "web-scale training, beyond this pipeline",
        "compute": "pretrained large models or extra runs, beyond this pipeline's compute"}


class AuditError(ContractError):
    """An input of the audit is inconsistent (e.g. a params hash that is not the expected one)."""


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str
    evidence: Mapping[str, Any]


@dataclass(frozen=True)
class Context:
    """What the rules read: the registry (for formulas) and the run's outputs (None if absent)."""

    claims: Mapping[str, Claim]
    profile: str
    results: Mapping[str, Any] | None = None
    theory: Mapping[str, Any] | None = None


# ------------------------------------------------------------------ rounding-aware arithmetic
@dataclass(frozen=True)
class Span:
    """A number and the range its printed inputs allow (interval arithmetic)."""

    point: float
    lo: float
    hi: float


def _span_of(claim: Claim) -> Span | list[Span]:
    if isinstance(claim.value, Mapping):
        return [Span(v, *printed_interval(claim.printed[k]))  # type: ignore[index]
                for k, v in claim.value.items()]
    lo, hi = printed_interval(str(claim.printed))
    return Span(claim.value, lo, hi)


def _binop(op: ast.operator, a: Span, b: Span) -> Span:
    f = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
         ast.Div: operator.truediv}[type(op)]
    if isinstance(op, ast.Div) and b.lo <= 0.0 <= b.hi:
        raise ZeroDivisionError("divisor's range contains 0")
    corners = [f(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return Span(f(a.point, b.point), min(corners), max(corners))


def _flatten(args: list[Span | list[Span]]) -> list[Span]:
    out: list[Span] = []
    for a in args:
        out.extend(a if isinstance(a, list) else [a])
    return out


def _call(name: str, args: list[Span]) -> Span:
    if name == "abs":
        (a,) = args
        lo = 0.0 if a.lo <= 0.0 <= a.hi else min(abs(a.lo), abs(a.hi))
        return Span(abs(a.point), lo, max(abs(a.lo), abs(a.hi)))
    if name == "mean":
        n = len(args)
        return Span(sum(a.point for a in args) / n, sum(a.lo for a in args) / n,
                    sum(a.hi for a in args) / n)
    pick = min if name == "min" else max
    return Span(pick(a.point for a in args), pick(a.lo for a in args), pick(a.hi for a in args))


def evaluate(formula: str, claims: Mapping[str, Claim]) -> Span:
    """Evaluate a registry formula on the claims' values, and on the ranges their printed forms
    stand for (statcheck: '.184' is any value in [.1835, .1845))."""

    def ev(node: ast.AST) -> Span | list[Span]:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            v = float(node.value)
            return Span(v, v, v)
        if isinstance(node, ast.Name):
            return _span_of(claims[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            a = ev(node.operand)
            assert isinstance(a, Span)
            return Span(-a.point, -a.hi, -a.lo)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            assert isinstance(a, Span) and isinstance(b, Span)
            return _binop(node.op, a, b)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return _call(node.func.id, _flatten([ev(a) for a in node.args]))
        raise ValueError(f"unsupported formula element {ast.dump(node)}")

    out = ev(ast.parse(formula, mode="eval"))
    assert isinstance(out, Span)
    return out


def check_relation(claim: Claim, claims: Mapping[str, Claim]) -> dict[str, Any]:
    """Recompute a derived claim. status: 'holds' (the recomputation rounds to the printed
    value, or satisfies the comparison), 'holds within input rounding' (only some values the
    printed inputs stand for do), 'fails' (none do)."""
    span = evaluate(claim.formula, claims)
    target = claim.scalar()
    if claim.op == "eq":
        lo, hi = printed_interval(str(claim.printed))
        point_ok = lo - EPS <= span.point < hi + EPS
        range_ok = span.lo <= hi + EPS and span.hi >= lo - EPS
        stands_for = [lo, hi]
    else:
        cmp = _OPS[claim.op]
        t_lo, t_hi = printed_interval(str(claim.printed))
        point_ok = cmp(span.point, target)
        range_ok = (cmp(span.hi, t_lo) if claim.op in ("ge", "gt") else cmp(span.lo, t_hi))
        stands_for = None
    status = "holds" if point_ok else "holds within input rounding" if range_ok else "fails"
    return {"id": claim.id, "check": "relation", "formula": claim.formula, "op": claim.op,
            "printed": claim.printed, "value": target, "recomputed": span.point,
            "recomputed_range": [span.lo, span.hi], "printed_stands_for": stands_for,
            "status": status}


def grim(printed: str, n: int, per_item: int = 1) -> bool:
    """GRIM for recalls: is some k / (n * per_item) within the rounding of `printed`?"""
    lo, hi = printed_interval(printed)
    denom = n * per_item
    k = math.ceil(lo * denom - EPS)  # the smallest count whose ratio reaches the interval
    return k / denom <= hi + EPS


def arithmetic_checks(claims: Mapping[str, Claim],
                      results: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every derived relation, GRIM on recalls with a known n, CI point-inside checks, and GRIM
    on the rerun's own per-seed recalls (value * n_test must be an integer)."""
    out = [check_relation(c, claims) for c in claims.values() if c.formula
           and c.kind == "derived_arithmetic"]
    for c in claims.values():
        n = c.setup.get("n_test")
        if n and c.metric in GRIM_METRICS and isinstance(c.printed, str):
            seeds = int(c.setup.get("seeds", 1))
            ok = grim(c.printed, int(n) * seeds, GRIM_METRICS[c.metric])
            out.append({"id": c.id, "check": "grim", "printed": c.printed, "n": int(n),
                        "seeds": seeds, "per_item": GRIM_METRICS[c.metric],
                        "status": "holds" if ok else "fails"})
        if c.spread.kind == "ci":
            ok = c.spread.lo - EPS <= c.scalar() <= c.spread.hi + EPS
            out.append({"id": c.id, "check": "point inside its interval", "value": c.scalar(),
                        "ci": [c.spread.lo, c.spread.hi], "status": "holds" if ok else "fails"})
    out.extend(_grim_results(results) if results else [])
    return out


def _grim_results(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    n = int(results.get("n_test", 0))
    out = []
    for arm, block in sorted(results.get("arms", {}).items()):
        for metric in ("r_at_1", "r_at_5"):
            values = block.get("metrics", {}).get(metric, {}).get("values", {})
            for seed, v in sorted(values.items()):
                ok = n > 0 and abs(v * n - round(v * n)) < 1e-6
                out.append({"id": f"results:{arm}-s{seed}:{metric}", "check": "grim (rerun)",
                            "value": v, "n": n, "status": "holds" if ok else "fails"})
    return out


# ------------------------------------------------------------------ rules
def _setup_mismatch(claim: Claim, ctx: Context) -> str:
    """'' when the run's setup matches the claim's; else which field differs."""
    assert ctx.results is not None
    dataset = claim.setup.get("dataset")
    if dataset and dataset != ctx.profile:
        return f"setup.dataset: claim {dataset}, run profile {ctx.profile}"
    n = claim.setup.get("n_test")
    if n and int(n) != int(ctx.results.get("n_test", -1)):
        return f"setup.n_test: claim {n}, run {ctx.results.get('n_test')}"
    return ""


def _missing(what: str, fix: str) -> Verdict:
    return Verdict("not rerun", f"compute: {what} absent; {fix}", {})


def rule_measured(claim: Claim, ctx: Context) -> Verdict:
    """Rerun inside the paper's spread, and paper value inside the rerun's 95% interval."""
    if claim.setup.get("variant"):
        return Verdict("not rerun", f"compute: a variant of the recipe "
                       f"({claim.setup['variant']}); the pipeline runs the default recipe", {})
    if ctx.results is None:
        return _missing("runs/results.json", "run `dvc repro aggregate`")
    mismatch = _setup_mismatch(claim, ctx)
    if mismatch:
        return Verdict("not comparable", mismatch, {"profile": ctx.profile})
    arm = claim.setup.get("arm", "")
    m = ctx.results.get("arms", {}).get(arm, {}).get("metrics", {}).get(claim.metric)
    if m is None or "ci" not in m:
        return Verdict("not rerun", f"data: results.json has no {claim.metric} with an interval "
                       f"for arm {arm!r}", {})
    run, (lo, hi), paper = float(m["mean"]), m["ci"], claim.scalar()
    spread = _paper_range(claim)
    rounded = round(run, decimals(str(claim.printed)))
    in_spread = None if spread is None else spread[0] - EPS <= rounded <= spread[1] + EPS
    in_ci = lo - EPS <= paper <= hi + EPS
    evidence = {"claim": paper, "claim_range": spread, "run": run, "run_rounded": rounded,
                "run_ci": [lo, hi], "ci_method": m.get("ci_method"), "n": m.get("n"),
                "seeds": m.get("values"), "run_in_claim_range": in_spread,
                "claim_in_run_ci": in_ci}
    if in_ci and in_spread is not False:
        return Verdict("reproduced", "claim value inside the rerun's interval"
                       + ("" if spread is None else " and rerun inside the claim's spread"),
                       evidence)
    if not in_ci and in_spread is not True:
        return Verdict("differs", "claim value outside the rerun's interval"
                       + ("" if spread is None else " and rerun outside the claim's spread"),
                       evidence)
    which = "inside the rerun's interval but the rerun is outside the claim's spread" if in_ci \
        else "outside the rerun's interval though the rerun is inside the claim's spread"
    return Verdict("inconclusive", f"claim value {which}", evidence)


def _paper_range(claim: Claim) -> list[float] | None:
    s, v = claim.spread, claim.scalar()
    if s.kind == "half_range":
        return [v - s.half_range, v + s.half_range]
    if s.kind == "ci":
        return [s.lo, s.hi]
    if s.kind == "seeds" and isinstance(claim.value, Mapping):
        return [min(claim.value.values()), max(claim.value.values())]
    return None


def _find_gap(results: Mapping[str, Any], a: str, b: str, metric: str) -> dict[str, Any] | None:
    for g in results.get("gaps", []):
        if g.get("metric") != metric:
            continue
        if (g.get("a"), g.get("b")) == (a, b):
            return dict(g)
        if (g.get("a"), g.get("b")) == (b, a):
            lo, hi = g["ci"]
            return {**g, "a": a, "b": b, "diff": -g["diff"], "ci": [-hi, -lo]}
    return None


def rule_ordering(claim: Claim, ctx: Context) -> Verdict:
    """The paired interval of a - b: above 0 reproduced, around 0 inconclusive, below differs."""
    assert claim.check is not None, f"{claim.id}: ordering claims need check: {{a, b, key}}"
    scale = str(claim.setup.get("scale", ""))
    if scale != "flickr":
        return rule_not_rerun(claim, ctx)
    if ctx.results is None:
        return _missing("runs/results.json", "run `dvc repro aggregate`")
    a, b, metric = claim.check.a, claim.check.b, claim.check.key
    gap = _find_gap(ctx.results, a, b, metric)
    if gap is None:
        return Verdict("not rerun", f"data: results.json has no paired gap {a} - {b} on {metric}",
                       {})
    lo, hi = gap["ci"]
    evidence = {"a": a, "b": b, "metric": metric, "diff": gap["diff"], "ci": [lo, hi],
                "ci_method": gap.get("ci_method"), "n": gap.get("n"),
                "n_resamples": gap.get("n_resamples"), "profile": ctx.profile,
                "claim_dataset": claim.setup.get("dataset")}
    where = (f"{a} - {b} on {metric} = {gap['diff']:+.4f}, 95% [{lo:+.4f}, {hi:+.4f}] on the "
             f"{ctx.profile} profile (n={gap.get('n')} test pairs; the claim is on "
             f"{claim.setup.get('dataset')}: the order is checked, not the value)")
    if lo > 0:
        return Verdict("reproduced", f"{where} excludes 0 in the claimed direction", evidence)
    if hi < 0:
        return Verdict("differs", f"{where} excludes 0 in the other direction", evidence)
    return Verdict("inconclusive", f"{where} contains 0", evidence)


def rule_arithmetic(claim: Claim, ctx: Context) -> Verdict:
    """Rounding-aware recomputation from the registry's own numbers."""
    rel = check_relation(claim, ctx.claims)
    ok = rel["status"] != "fails"
    reason = (f"{claim.formula} = {rel['recomputed']:.6g} (range {rel['recomputed_range'][0]:.6g}"
              f" to {rel['recomputed_range'][1]:.6g}); claim {claim.op} {claim.printed}: "
              f"{rel['status']}")
    return Verdict("arithmetic holds" if ok else "arithmetic fails", reason, rel)


def lookup(doc: Mapping[str, Any], key: str) -> Any:
    """A dotted key into nested JSON; through a list, the values of every element."""
    cur: Any = doc
    for part in key.split("."):
        if isinstance(cur, list):
            cur = [x.get(part) if isinstance(x, Mapping) else None for x in cur]
        elif isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        else:
            return None
    return cur


def rule_theory(claim: Claim, ctx: Context) -> Verdict:
    """A runs/theory.json value against the claim's bound (any profile: no data involved)."""
    assert claim.check is not None, f"{claim.id}: theory claims need check: {{key, op, bound}}"
    if ctx.theory is None:
        return _missing("runs/theory.json", "run `harness theory`")
    for key, want in claim.check.requires.items():
        got = lookup(ctx.theory, key)
        if got != want:
            return Verdict("not comparable", f"{key}: claim {want:g}, run {got}", {})
    got = lookup(ctx.theory, claim.check.key)
    if got is None or got == []:
        return Verdict("not rerun", f"data: runs/theory.json has no {claim.check.key}", {})
    values = [float(v) for v in (got if isinstance(got, list) else [got])]
    ok = all(_OPS[claim.check.op](v, claim.check.bound) for v in values)
    evidence = {"key": claim.check.key, "run": got, "op": claim.check.op,
                "bound": claim.check.bound, "claim": claim.scalar()}
    reason = f"{claim.check.key} = {got} ({claim.check.op} {claim.check.bound:g} required)"
    return Verdict("reproduced" if ok else "differs", reason, evidence)


def rule_not_rerun(claim: Claim, ctx: Context) -> Verdict:
    why = claim.why_not_rerun or "scale"
    setup = ", ".join(f"{k}={v}" for k, v in claim.setup.items())
    return Verdict("not rerun", f"{why}: {_WHY[why]}" + (f" ({setup})" if setup else ""), {})


def rule_metadata(claim: Claim, ctx: Context) -> Verdict:
    return Verdict("not rerun", "metadata: describes a setup or a count; nothing to measure", {})


RULES: dict[str, Callable[[Claim, Context], Verdict]] = {
    "measured": rule_measured, "ordering": rule_ordering, "arithmetic": rule_arithmetic,
    "theory": rule_theory, "not_rerun": rule_not_rerun, "metadata": rule_metadata,
}
assert set(RULES) == set(RULE_NAMES), "harness.claims.RULE_NAMES and audit.RULES disagree"


# ------------------------------------------------------------------ driver
def audit(claims: Mapping[str, Claim], ctx: Context) -> dict[str, Any]:
    """The audit document (prh.audit/1) without `inputs`."""
    rows = []
    for c in claims.values():
        v = RULES[c.rule](c, ctx)
        rows.append({"id": c.id, "statement": c.statement, "kind": c.kind, "source": c.source,
                     "where": c.where, "reported_by": c.reported_by, "section": c.section,
                     "printed": c.printed, "rule": c.rule, "verdict": v.verdict,
                     "reason": v.reason, "evidence": dict(v.evidence)})
    summary = Counter(r["verdict"] for r in rows)
    return {"schema": "prh.audit/1", "profile": ctx.profile, "claims": rows,
            "arithmetic": arithmetic_checks(claims, ctx.results),
            "summary": {k: summary.get(k, 0) for k in VERDICTS}}


def check_params_hash(results: Mapping[str, Any], expected: str, path: str) -> None:
    """Refuse a metrics file produced under other params than the ones being audited."""
    got = results.get("params_hash")
    if got != expected:
        raise AuditError(f"{path}: params hash {got} differs from the expected {expected} "
                         "(params.yaml); rerun the pipeline (`dvc repro`) or pass the params "
                         "file the results were produced with")
