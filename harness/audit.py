"""The claims audit: one verdict per registry claim, and one status per relation across claims,
each with its evidence and what it is evidence for.

Claim verdicts (`VERDICTS`); the rules live in one table, `RULES`, and claims name theirs in
harness/claims.yaml (`rule:`, defaulting by kind):

| rule       | claim kinds       | verdict                                                         |
|------------|-------------------|-----------------------------------------------------------------|
| measured   | flickr_measurable | equivalence (TOST) within `audit.margin`: reproduced; claimed   |
|            |                   | value outside the rerun's prediction interval: differs; an      |
|            |                   | interval wider than the margin: inconclusive (underpowered)     |
| ordering   | ordering          | paired gap a - b: its sign, and the printed gap by the same     |
|            |                   | equivalence rule; "cannot be separated" holds when the interval |
|            |                   | contains 0 and lies within the margin. On a profile whose data  |
|            |                   | is not the claim's: pattern seen / not seen on another profile  |
| arithmetic | derived_arithmetic| rounding-aware recomputation (statcheck): holds / holds within  |
|            |                   | input rounding / fails                                          |
| theory     | theory            | an identity of the theory (Theorem 1, error = 2r, the tie case, |
|            |                   | the threshold rule) on runs/theory.json: reproduced means it    |
|            |                   | holds on the finite worlds this run draws, differs that it fails|
| theory_count | theory          | a count or ratio that depends on which worlds are drawn (545 /  |
|            |                   | 255 points, the 18% ratio): informational, the rerun's own      |
|            |                   | number beside the article's                                     |
| not_rerun  | web_scale         | not rerun, with the reason (data, scale, compute)               |
| metadata   | metadata          | not rerun: a description of the setup, nothing to measure       |

The statistics: the rerun's seeds x test pairs estimate from results.json
(harness.stats.two_level_mean / two_level_gap), on the test pairs the claim was measured on:
the variance of the rerun's per-seed means plus the claim's own seed noise (`decide`);
"reproduced" needs the claimed value inside that 90% interval and the interval inside
[claim - margin, claim + margin] (two one-sided tests at 5%, Schuirmann 1987, J. Pharmacokinet.
Biopharm. 15(6)), from 3 seeds; "differs" needs the claimed value outside its 95% interval.
tests/test_verdict_simulation.py measures both error rates and the power. An arm whose
interval reaches the chance level is flagged as at chance wherever its numbers appear; an
ordering involving it is not evidence that the views matter.

Relations (`relation_checks`, statuses `STATUSES`): a printed difference against the difference
of the printed means, comparisons, a bound stated for every seed against the means, a bound
stated for one quantity read against another, "the same order as" between two rankings, an
interval against its own seeds' spread, an interval against the binomial minimum for its n,
mean +- half-range feasible for its seeds (GRIMMER, Anaya 2016, PeerJ Preprints 4:e2400v1), a
chance level against its candidate pool. A relation with two readings of the text is
"ambiguous" when they disagree; both readings and their results are listed.
"""

from __future__ import annotations

import ast
import math
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scipy import stats as sps

from harness.claims import (
    RULE_NAMES,
    Claim,
    Registry,
    Relation,
    decimals,
    printed_interval,
)
from harness.stats import MIN_SEEDS_FOR_TRAINING_VARIANCE, TwoLevel
from prh.io import ContractError, read_yaml

VERDICTS = ("reproduced", "differs", "inconclusive", "inconclusive (underpowered)",
            "pattern seen on another profile", "pattern not seen on another profile",
            "not comparable", "not rerun", "arithmetic holds",
            "arithmetic holds within input rounding", "arithmetic fails", "informational")
# "informational": a relation whose check is by design no finding (the registry's
# `informational:` says why); it is shown with what its check found (`found`), never counted
STATUSES = ("holds", "informational", "holds within input rounding", "ambiguous", "fails")
ALPHA = 0.05  # TOST at 5% per side (a 90% interval); "differs" at a 95% prediction interval
# Equivalence margins per metric when params.yaml has no `audit.margin` for it: the largest
# miss of a printed number that leaves the paper's conclusions as they are (not a resolution
# or a chance level). R@1 .03: its conclusions rest on between-arm gaps of .113 (good - bad,
# .246 - .133) and .128 (good - next-token); two arms each off by .03 keep the smaller above
# .05, about half of it. No margin on single values protects the .015 bad - next-token gap (it
# would need .0075): that order goes through the `ordering` rule ("cannot be separated"). .03
# is 4 to 12 sds of one seed's R@1 (.0024 from the paper's ± .002 over 3 seeds, .0068 from the
# audit article's .0096 seed-to-seed difference). R@5 and fit-pair R@1: .03 as R@1 (no
# conclusion turns on them). Mutual 10-NN .01: a quarter of the smallest gap the paper draws a
# conclusion from on it (good views +.040 over next-token for every seed, WIT-1024; it prints
# no Flickr30k gap), 4 to 8 seed sds (bad views .132 ± .001: sd about .0012). Controls .005:
# 20 times below the lowest arm (.118), so a control within it still says the score comes from
# the pairing. At 3 seeds against the paper's 3 and 1,000 pairs, tests/test_verdict_simulation
# .py measures power about .8 (seed sd .0064 / .0023) to .9 (.0024 / .0012), false
# "reproduced" at the margin under .005 and false "differs" about .05; below 3 seeds no
# verdict is "reproduced".
DEFAULT_MARGINS = {"r_at_1": 0.03, "r_at_5": 0.03, "r_at_1_fit": 0.03, "mknn10": 0.01,
                   "control_random_map_r_at_1": 0.005, "control_shuffled_r_at_1": 0.005}
FAIL_ON = {  # `--fail-on` names -> the verdicts/statuses that trip it
    "differs": {"differs"},
    "arithmetic": {"arithmetic fails", "relation fails", "check fails"},
    "ambiguous": {"relation ambiguous"},
    "inconclusive": {"inconclusive", "inconclusive (underpowered)"},
    "not-seen": {"pattern not seen on another profile"},
}
EPS = 1e-9  # float slack in comparisons of printed numbers (.193 - .191 is 0.0020000000000000018)
_OPS: dict[str, Callable[[float, float], bool]] = {
    "eq": lambda a, b: abs(a - b) <= EPS, "ge": lambda a, b: a >= b - EPS,
    "le": lambda a, b: a <= b + EPS, "gt": lambda a, b: a > b + EPS, "lt": lambda a, b: a < b - EPS}
_WHY = {"data": "needs data this pipeline does not have",
        "scale": "web-scale training, beyond this pipeline",
        "compute": "pretrained large models or extra runs, beyond this pipeline's compute"}
RUNNABLE_SCALE = "flickr"  # the only claim scale a profile of this pipeline can rerun


class AuditError(ContractError):
    """An input of the audit is inconsistent (e.g. a params hash that is not the expected one)."""


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str
    evidence: Mapping[str, Any]


@dataclass(frozen=True)
class Context:
    """What the rules read: the registry (for formulas), the run's outputs (None if absent),
    the relations across claims and the equivalence margins per metric."""

    claims: Mapping[str, Claim]
    profile: str
    results: Mapping[str, Any] | None = None
    theory: Mapping[str, Any] | None = None
    relations: tuple[Relation, ...] = ()
    margins: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MARGINS))


def load_margins(raw: Any, where: str = "params.yaml audit.margin") -> dict[str, float]:
    """`audit: {margin: {metric: value}}` of params.yaml over DEFAULT_MARGINS; a margin of 0 or
    below, or a metric the audit does not know, raises naming the key."""
    out = dict(DEFAULT_MARGINS)
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        raise AuditError(f"{where}: expected a mapping metric -> margin, got {raw!r}")
    for metric, value in raw.items():
        if metric not in DEFAULT_MARGINS:
            raise AuditError(f"{where}.{metric}: unknown metric; margins exist for "
                             f"{sorted(DEFAULT_MARGINS)}")
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise AuditError(f"{where}.{metric}: margin {value!r} must be a number above 0 "
                             "(an equivalence margin of 0 can never be met)")
        out[metric] = float(value)
    return out


def margins_from_params(path: str | Path) -> dict[str, float]:
    """The margins of a params file's top-level `audit: {margin: ...}` block (load_margins)."""
    raw = read_yaml(path, "run from the repository root or pass --params")
    block = raw.get("audit") if isinstance(raw, Mapping) else None
    return load_margins((block or {}).get("margin"), f"{path}: audit.margin")


# ------------------------------------------------------------------ rounding-aware arithmetic
@dataclass(frozen=True)
class Span:
    """A number and the range its printed inputs allow (interval arithmetic)."""

    point: float
    lo: float
    hi: float


def span_of(claim: Claim) -> Span | list[Span]:
    """The claim's value and the range its printed form stands for, in base units (`scale`)."""
    k, mode = claim.scale, claim.rounding
    if isinstance(claim.value, Mapping):
        return [Span(v * k, *(x * k for x in printed_interval(claim.printed[key], mode)))
                for key, v in claim.value.items()]
    lo, hi = printed_interval(str(claim.printed), mode)
    return Span(claim.value * k, lo * k, hi * k)


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
            return span_of(claims[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            s = ev(node.operand)
            assert isinstance(s, Span)
            return Span(-s.point, -s.hi, -s.lo)
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


def rounded_status(span: Span, printed: str, scale: float = 1.0, rounding: str = "nearest"
                   ) -> str:
    """Does a recomputation match a printed number? 'holds' (its point value rounds to it, or
    truncates to it for rounding 'down'), 'holds within input rounding' (only some values its
    inputs stand for do), else 'fails'."""
    lo, hi = (x * scale for x in printed_interval(printed, rounding))
    if lo - EPS <= span.point < hi + EPS:
        return "holds"
    return "holds within input rounding" if span.lo <= hi + EPS and span.hi >= lo - EPS \
        else "fails"


def compare_status(a: Span, op: str, b: Span) -> str:
    """`a op b` on the point values ('holds'), for some values the printed forms stand for
    ('holds within input rounding'), or for none ('fails')."""
    if _OPS[op](a.point, b.point):
        return "holds"
    best = (a.hi, b.lo) if op in ("ge", "gt") else (a.lo, b.hi) if op in ("le", "lt") \
        else (a.point, b.point)
    if op == "eq":
        return "holds within input rounding" if a.lo <= b.hi + EPS and b.lo <= a.hi + EPS \
            else "fails"
    return "holds within input rounding" if _OPS[op](*best) else "fails"


def check_derived(claim: Claim, claims: Mapping[str, Claim]) -> dict[str, Any]:
    """Recompute a derived claim from its formula, rounding-aware (statcheck)."""
    span = evaluate(claim.formula, claims)
    status = rounded_status(span, str(claim.printed), claim.scale, claim.rounding)
    stands_for = printed_interval(str(claim.printed), claim.rounding)
    return {"id": claim.id, "check": "formula", "formula": claim.formula,
            "printed": claim.printed, "recomputed": span.point,
            "recomputed_range": [span.lo, span.hi], "rounding": claim.rounding,
            "printed_stands_for": [x * claim.scale for x in stands_for], "status": status}


# ------------------------------------------------------------------ relations across claims
def _worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=STATUSES.index, default="holds")


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def rel_difference(f: Mapping[str, Any], claims: Mapping[str, Claim]) -> dict[str, Any]:
    """A printed difference against the difference of the printed values."""
    p, a, b = (claims[f[k]] for k in ("printed", "a", "b"))
    span = evaluate(f"{a.id} - {b.id}", claims)
    status = rounded_status(span, str(p.printed), p.scale)
    return {"status": status, "recomputed": span.point, "recomputed_range": [span.lo, span.hi],
            "detail": f"{a.id} - {b.id} = {a.printed} - {b.printed} = {_fmt(span.point)} "
                      f"(range {_fmt(span.lo)} to {_fmt(span.hi)}) against printed {p.printed}"}


def rel_compare(f: Mapping[str, Any], claims: Mapping[str, Claim]) -> dict[str, Any]:
    """Claim a OP claim b, both sides claim ids (so a correction to either is followed)."""
    a, b = claims[f["a"]], claims[f["b"]]
    sa, sb = evaluate(a.id, claims), evaluate(b.id, claims)
    status = compare_status(sa, f["op"], sb)
    return {"status": status, "detail": f"{a.id} ({a.printed}) {f['op']} {b.id} ({b.printed})"}


def rel_per_seed_bound(f: Mapping[str, Any], claims: Mapping[str, Claim]) -> dict[str, Any]:
    """A bound stated for every seed: a mean over seeds lies between its extreme seeds, so each
    printed mean must satisfy the bound too."""
    bound = evaluate(f["bound"], claims)
    rows = {m: compare_status(evaluate(m, claims), f["op"], bound) for m in f["means"]}
    bad = [f"{m} = {claims[m].printed}" for m, s in rows.items() if s != "holds"]
    return {"status": _worst(rows.values()), "per_mean": rows,
            "detail": f"every seed {f['op']} {claims[f['bound']].printed}, so every mean too; "
                      + (f"not so for {', '.join(bad)}" if bad else "all means satisfy it")}


def rel_bound(f: Mapping[str, Any], claims: Mapping[str, Claim]) -> dict[str, Any]:
    """A bound stated for one quantity, read against another (`quantity` is a formula)."""
    q, bound = evaluate(f["quantity"], claims), evaluate(f["bound"], claims)
    status = compare_status(q, f["op"], bound)
    return {"status": status, "recomputed": q.point, "recomputed_range": [q.lo, q.hi],
            "detail": f"{f['quantity']} = {_fmt(q.point)} (range {_fmt(q.lo)} to "
                      f"{_fmt(q.hi)}) {f['op']} {claims[f['bound']].printed}"}


def _ranking(ids: list[str], claims: Mapping[str, Claim]) -> list[str]:
    return [claims[c].setup.get("arm", c) for c in
            sorted(ids, key=lambda c: -claims[c].scalar() * claims[c].scale)]


def rel_same_order(f: Mapping[str, Any], claims: Mapping[str, Claim]) -> dict[str, Any]:
    """Two rankings of the same arms (by value, highest first) are the same order."""
    ra, rb = _ranking(f["a"], claims), _ranking(f["b"], claims)
    if sorted(ra) != sorted(rb):
        return {"status": "fails", "detail": f"the rankings name different arms: {ra} / {rb}"}
    return {"status": "holds" if ra == rb else "fails",
            "detail": f"{' > '.join(ra)} against {' > '.join(rb)}"}


def rel_interval_vs_seeds(f: Mapping[str, Any], claims: Mapping[str, Claim]) -> dict[str, Any]:
    """An interval about a mean over seeds is at least as wide as those seeds' spread alone
    implies (t interval with n - 1 df on their sd). A narrower one covers test pairs only."""
    iv, seeds = claims[f["interval"]], claims[f["seeds"]]
    values = list(seeds.value.values()) if isinstance(seeds.value, Mapping) else []
    if len(values) < 2:
        return {"status": "fails", "detail": f"{seeds.id} prints fewer than 2 seeds"}
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    need = float(sps.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    half = (iv.spread.hi - iv.spread.lo) / 2
    slack = 0.5 * 10.0 ** -decimals(str(iv.printed))  # its bounds print at its precision
    status = "holds" if half >= need - EPS else \
        "holds within input rounding" if half + slack >= need - EPS else "fails"
    return {"status": status, "needed_half_width": need, "half_width": half,
            "detail": f"half-width {_fmt(half)} against {_fmt(need)} from {n} seeds "
                      f"(sd {_fmt(sd)}): "
                      + {"holds": "wide enough",
                         "holds within input rounding": "wide enough only at its rounding",
                         "fails": "narrower than its own seeds allow, so it covers test pairs "
                                  "only"}[status]}


def rel_binomial_min(f: Mapping[str, Any], claims: Mapping[str, Claim]) -> dict[str, Any]:
    """An interval on a hit rate p (or a paired gap g of hit rates) over n test pairs is at
    least 2 * 1.96 * sqrt(p (1 - p) / n) wide (for a gap: |g| (1 - |g|), the least variance a
    difference of hits in {-1, 0, 1} with mean g can have); 10% slack for bootstrap noise."""
    iv = claims[f["interval"]]
    n = int(iv.setup.get("n_test", 0))
    if n < 1:
        return {"status": "fails", "detail": f"{iv.id} has no setup.n_test"}
    p = abs(iv.scalar())
    need = 0.9 * 2 * 1.959964 * math.sqrt(p * (1 - p) / n)
    width = iv.spread.hi - iv.spread.lo
    status = "holds" if width >= need else "fails"
    return {"status": status, "width": width, "min_width": need,
            "detail": f"width {_fmt(width)} against a binomial minimum of {_fmt(need)} "
                      f"for {_fmt(p)} on n = {n}"}


def grimmer_feasible(mean: str, half_range: str, seeds: int, n: int) -> bool:
    """Can `seeds` per-seed scores, each a count out of n, have a mean that rounds to `mean`
    and a half-range (max - min) / 2 that rounds to `half_range`? (GRIMMER-style.)"""
    m_lo, m_hi = printed_interval(mean)
    h_lo, h_hi = printed_interval(half_range)
    totals = range(math.ceil(seeds * n * m_lo - EPS), math.floor(seeds * n * m_hi - EPS) + 1)
    widths = range(max(0, math.ceil(2 * n * h_lo - EPS)), math.floor(2 * n * h_hi - EPS) + 1)
    for r in widths:
        if seeds == 1 and r:
            continue
        for t in totals:
            # min a, max a + r, the rest anywhere between: seeds*a + r <= t <= seeds*a + (s-1)*r
            lo_a = math.ceil((t - (seeds - 1) * r) / seeds - EPS) if seeds > 1 else t
            hi_a = math.floor((t - r) / seeds + EPS) if seeds > 1 else t
            if max(lo_a, 0) <= min(hi_a, n - r):
                return True
    return False


def rel_grimmer(f: Mapping[str, Any], claims: Mapping[str, Claim]) -> dict[str, Any]:
    """Mean +- half-range feasible for the stated seeds on n test pairs."""
    c = claims[f["mean"]]
    seeds, n = int(c.setup.get("seeds", 0)), int(c.setup.get("n_test", 0))
    if c.spread.kind != "half_range" or seeds < 1 or n < 1:
        return {"status": "fails", "detail": f"{c.id} needs a half_range spread, setup.seeds "
                                             "and setup.n_test"}
    per_item = 10 if c.metric == "mknn10" else 1
    hr = c.spread.printed.replace("±", "").strip() or f"{c.spread.half_range:g}"
    ok = grimmer_feasible(str(c.printed), hr, seeds, n * per_item)
    return {"status": "holds" if ok else "fails",
            "detail": f"{c.printed} ± {hr} over {seeds} seeds of counts out of {n * per_item}: "
                      + ("attainable" if ok else "no set of seeds gives both")}


def rel_chance_pool(f: Mapping[str, Any], claims: Mapping[str, Claim]) -> dict[str, Any]:
    """A chance level against the candidate pool it implies: chance = k / pool."""
    chance, pool = claims[f["chance"]], claims[f["pool"]]
    k = float(f.get("k", 1))
    span = evaluate(f"{k!r} / {pool.id}", claims)
    status = rounded_status(span, str(chance.printed), chance.scale)
    return {"status": status, "recomputed": span.point,
            "detail": f"{k:g} / {pool.printed} = {_fmt(span.point)} against chance "
                      f"{chance.printed} (which implies a pool of about "
                      f"{_fmt(k / (chance.scalar() * chance.scale))})"}


RELATIONS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Claim]], dict[str, Any]]] = {
    "difference": rel_difference, "compare": rel_compare, "per_seed_bound": rel_per_seed_bound,
    "bound": rel_bound, "same_order": rel_same_order, "interval_vs_seeds": rel_interval_vs_seeds,
    "binomial_min": rel_binomial_min, "grimmer": rel_grimmer, "chance_pool": rel_chance_pool,
}


def check_relation(rel: Relation, claims: Mapping[str, Claim]) -> dict[str, Any]:
    """One relation, every reading: 'ambiguous' when one reading fails and another holds;
    otherwise the worst status of its readings."""
    readings = [{"reading": r.text, **r.fields, **RELATIONS[rel.type](r.fields, claims)}
                for r in rel.readings]
    statuses = [r["status"] for r in readings]
    split = "fails" in statuses and any(s != "fails" for s in statuses)
    found = "ambiguous" if split else _worst(statuses)
    detail = readings[0]["detail"] if len(readings) == 1 else "; ".join(
        f"reading {i + 1} ({r['reading']}): {r['status']}, {r['detail']}"
        for i, r in enumerate(readings))
    if rel.informational:
        detail = f"{found}, by design ({rel.informational}): {detail}"
    return {"id": rel.id, "check": rel.type, "statement": rel.statement,
            "reported_by": rel.reported_by, "section": rel.section,
            "registry_line": rel.line, "status": "informational" if rel.informational else found,
            "found": found, "detail": detail, "readings": readings}


def arithmetic_checks(ctx: Context) -> list[dict[str, Any]]:
    """Every derived claim's formula, every relation, and the rerun's own per-seed recalls
    (an R@k over n test pairs is a count out of n)."""
    out = [check_derived(c, ctx.claims) for c in ctx.claims.values()
           if c.formula and c.kind == "derived_arithmetic"]
    out += [check_relation(r, ctx.claims) for r in ctx.relations]
    return out + (_counts_in_results(ctx.results) if ctx.results else [])


def _counts_in_results(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    n = int(results.get("n_test", 0))
    out = []
    for arm, block in sorted(results.get("arms", {}).items()):
        for metric in ("r_at_1", "r_at_5"):
            values = block.get("metrics", {}).get(metric, {}).get("values", {})
            for seed, v in sorted(values.items()):
                ok = n > 0 and abs(v * n - round(v * n)) < 1e-6
                out.append({"id": f"results:{arm}-s{seed}:{metric}", "check": "count out of n",
                            "value": v, "n": n, "status": "holds" if ok else "fails",
                            "detail": f"{v} * {n} = {v * n:.6g}"})
    return out


# ------------------------------------------------------------------ statistics of one verdict
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


# ------------------------------------------------------------------ rules
def _claim_seeds(claim: Claim) -> int:
    return int(claim.setup.get("seeds") or claim.spread.n or 1)


def _margin(claim: Claim, metric: str, ctx: Context) -> float | None:
    return claim.margin or ctx.margins.get(metric)


def _setup_mismatch(claim: Claim, ctx: Context) -> str:
    """'' when the run's setup matches the claim's; else which field differs."""
    assert ctx.results is not None
    dataset = claim.setup.get("dataset")
    if dataset and dataset != ctx.profile:
        return (f"setup.dataset: claim {dataset}, run profile {ctx.profile}: the number is about "
                f"{dataset}, the run is not")
    n = claim.setup.get("n_test")
    if n and int(n) != int(ctx.results.get("n_test", -1)):
        return f"setup.n_test: claim {n}, run {ctx.results.get('n_test')}"
    return ""


def _missing(what: str, fix: str) -> Verdict:
    return Verdict("not rerun", f"compute: {what} absent; {fix}", {})


def _chance_flag(arms: Iterable[str], metric: str, ctx: Context) -> dict[str, Any]:
    flagged = at_chance(ctx.results)
    return {a: flagged[a][metric] for a in arms if metric in flagged.get(a, {})}


def _with_chance(reason: str, flags: Mapping[str, Any]) -> str:
    if not flags:
        return reason
    said = ", ".join(f"{a} at chance ({v['chance']:.4f} inside [{v['ci'][0]:.4f}, "
                     f"{v['ci'][1]:.4f}])" for a, v in flags.items())
    return f"{reason}; {said}"


def _at_chance_verdict(what: str, flags: Mapping[str, Any], evidence: Mapping[str, Any]
                       ) -> Verdict:
    """An arm at chance is evidence of nothing: no verdict rests on it (DESIGN: audit/)."""
    return Verdict("inconclusive", _with_chance(f"{what}: no verdict from an arm at chance",
                                                flags), {**evidence, "at_chance": flags})


def seeds_estimate(block: Mapping[str, Any], n_pairs: int, proportion: bool) -> TwoLevel | None:
    """The estimate of a number results.json keeps once per seed with no per-pair outcomes (a
    curve point, harness.curves), from its seed spread, under harness.stats.TwoLevel's model.
    From MIN_SEEDS_FOR_TRAINING_VARIANCE seeds up the value on these test pairs varies with the
    seed only: se^2 is the variance (ddof 1) of the per-seed values over S, t with S - 1 df, as
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


def rule_measured(claim: Claim, ctx: Context) -> Verdict:
    """A claimed value against the rerun's arm metric (equivalence within the margin), or,
    with `setup.measure`, against the results.json entry it names under the arm (a dotted
    path: `curve.epoch1.r_at_1`, `metrics.r_at_1_trainval`); an entry kept once per seed
    (a curve point) is judged on `seeds_estimate`. A variant of the recipe with no `measure`
    is not rerun."""
    measure = claim.setup.get("measure")
    if claim.setup.get("variant") and not measure:
        return Verdict("not rerun", f"compute: a variant of the recipe "
                       f"({claim.setup['variant']}); the pipeline runs the default recipe", {})
    if ctx.results is None:
        return _missing("runs/results.json", "run `dvc repro aggregate`")
    arm = claim.setup.get("arm", "")
    flags = _chance_flag([arm], claim.metric, ctx)
    mismatch = _setup_mismatch(claim, ctx)
    if mismatch:
        return Verdict("not comparable", _with_chance(mismatch, flags),
                       {"profile": ctx.profile, "at_chance": flags})
    where = measure or f"metrics.{claim.metric}"
    m = lookup(ctx.results.get("arms", {}).get(arm, {}), where)
    margin = _margin(claim, claim.metric, ctx)
    per_seed = bool(measure) and isinstance(m, Mapping) and "ci" not in m and "values" in m
    if not isinstance(m, Mapping) or ("ci" not in m and not per_seed):
        return Verdict("not rerun", f"data: results.json has no {where} with an interval "
                       f"{'or seed values ' if measure else ''}for arm {arm!r}", {})
    est = (seeds_estimate(m, int(ctx.results.get("n_test", 0)), claim.metric.startswith("r_at_"))
           if per_seed else estimate_of(m))
    shown = {"measure": where, "values": m.get("values"), "run": m.get("mean")}
    if est is None:
        return Verdict("inconclusive (underpowered)", f"{where}: {len(m['values'])} seed(s) "
                       f"{m['values']} and no per-pair values: no interval", shown)
    if flags:
        return _at_chance_verdict(f"{arm} on {claim.metric}", flags, {"claim": claim.scalar()})
    if margin is None:  # an epoch or a per-token loss: no difference is argued to matter
        return Verdict("informational", f"no audit.margin for metric {claim.metric}: {where} = "
                       f"{est.estimate:.4g} on the rerun beside the claim's {claim.printed}, "
                       "not judged", shown if measure else {})
    verdict, reason, evidence = decide(est, claim.scalar(), margin, _claim_seeds(claim))
    return Verdict(verdict, reason, {**evidence, "at_chance": {},
                                     **({"measure": where} if measure else {})})


def _find_gap(results: Mapping[str, Any], a: str, b: str, metric: str) -> dict[str, Any] | None:
    """The results.json gap a - b on `metric` (a stored b - a is negated)."""
    for g in results.get("gaps", []):
        if g.get("metric") != metric:
            continue
        if (g.get("a"), g.get("b")) == (a, b):
            return dict(g)
        if (g.get("a"), g.get("b")) == (b, a):
            lo, hi = g["ci"]
            out = {**g, "a": a, "b": b, "diff": -g["diff"], "ci": [-hi, -lo]}
            if g.get("two_level"):
                tl = g["two_level"]
                out["two_level"] = {**tl, "estimate": -tl["estimate"],
                                    "ci": [-tl["ci"][1], -tl["ci"][0]]}
            return out
    return None


def _scope(claim: Claim, est: TwoLevel, margin: float, ctx: Context) -> Verdict:
    """An ordering on a profile whose data is not the claim's: whether the pattern shows,
    never a reproduction."""
    assert claim.check is not None
    iv = est.population_interval(1 - ALPHA)  # a pattern is about the arms, not these pairs
    what = (f"{claim.check.a} - {claim.check.b} on {claim.check.key} = {est.estimate:+.4f}, "
            f"{1 - ALPHA:.0%} [{iv.lo:+.4f}, {iv.hi:+.4f}] on the {ctx.profile} profile; the "
            f"claim is about {claim.setup.get('dataset')}: this shows whether the pipeline sees "
            "the pattern, not whether the claim's number holds")
    if claim.check.type == "inseparable":
        seen = iv.lo <= 0 <= iv.hi and iv.hi - iv.lo <= 2 * margin
    else:
        seen = iv.lo > 0
    verdict = "pattern seen on another profile" if seen else "pattern not seen on another profile"
    evidence = {"run": est.estimate, "ci": [iv.lo, iv.hi], "method": iv.method,
                "profile": ctx.profile, "claim_dataset": claim.setup.get("dataset"),
                "margin": margin, "at_chance": {}, "note": est.note()}
    return Verdict(verdict, what, evidence)


def _inseparable(claim: Claim, est: TwoLevel, margin: float) -> Verdict:
    """"a and b cannot be separated": differs when the rerun's 95% interval of the gap (seeds
    and test pairs) excludes 0; reproduced when its 90% interval lies within +- margin (two
    one-sided tests of 0 at 5% each, on the rerun's own interval: the 0 is hypothesised, not
    measured, so no claim noise is added) from 3 seeds; else inconclusive, underpowered when
    that interval is wider than 2 * margin or training variance is not estimated."""
    assert claim.check is not None
    iv, tost = est.population_interval(1 - ALPHA), est.population_interval(1 - 2 * ALPHA)
    shown = (f"{claim.check.a} - {claim.check.b} on {claim.check.key} = {est.estimate:+.4f}, "
             f"{1 - ALPHA:.0%} [{iv.lo:+.4f}, {iv.hi:+.4f}], {1 - 2 * ALPHA:.0%} "
             f"[{tost.lo:+.4f}, {tost.hi:+.4f}] against +- margin {margin:g}; {iv.method}")
    evidence = {"run": est.estimate, "ci": [iv.lo, iv.hi], "tost_interval": [tost.lo, tost.hi],
                "margin": margin, "method": iv.method, "note": est.note(), "at_chance": {}}
    if not iv.lo <= 0 <= iv.hi:
        return Verdict("differs", f"the rerun separates them: {shown}", evidence)
    within = -margin <= tost.lo and tost.hi <= margin
    if within and est.training_variance:
        return Verdict("reproduced", f"inseparable within the margin: {shown}", evidence)
    if not est.training_variance or tost.hi - tost.lo > 2 * margin:
        return Verdict("inconclusive (underpowered)", f"not separated, {shown}"
                       + (f"; {est.note()}" if est.note() else ""), evidence)
    return Verdict("inconclusive", f"not separated, but not within the margin: {shown}",
                   evidence)


def rule_ordering(claim: Claim, ctx: Context) -> Verdict:
    """Arm a against arm b: the sign of the paired gap, the printed gap by equivalence, or
    "cannot be separated"; on another profile's data, whether the pattern shows."""
    assert claim.check is not None, f"{claim.id}: ordering claims need check: {{a, b, key}}"
    if claim.setup.get("scale") != RUNNABLE_SCALE:
        return rule_not_rerun(claim, ctx)
    if ctx.results is None:
        return _missing("runs/results.json", "run `dvc repro aggregate`")
    a, b, metric = claim.check.a, claim.check.b, claim.check.key
    gap = _find_gap(ctx.results, a, b, metric)
    if gap is None:
        return Verdict("not rerun", f"data: results.json has no paired gap {a} - {b} on {metric}",
                       {})
    margin = _margin(claim, metric, ctx)
    if margin is None:
        return Verdict("inconclusive", f"no audit.margin for metric {metric}", {})
    est, flags = estimate_of(gap), _chance_flag([a, b], metric, ctx)
    if flags:
        return _at_chance_verdict(f"{a} - {b} on {metric} = {est.estimate:+.4f}", flags,
                                  {"run": est.estimate, "profile": ctx.profile})
    if claim.setup.get("dataset") != ctx.profile:
        return _scope(claim, est, margin, ctx)
    # the order of two arms is a claim about the arms, so its sign is read over test pairs as
    # well as seeds; a printed gap is compared on the same test pairs (decide)
    iv = est.population_interval(1 - ALPHA)
    if claim.check.type == "inseparable":
        return _inseparable(claim, est, margin)
    if iv.hi < 0:
        return Verdict("differs", f"{a} - {b} on {metric}: {1 - ALPHA:.0%} [{iv.lo:+.4f}, "
                       f"{iv.hi:+.4f}] excludes 0 in the other direction",
                       {"ci": [iv.lo, iv.hi], "at_chance": flags})
    if claim.metric != "difference":  # the article prints no gap: the order alone
        verdict = "reproduced" if iv.lo > 0 else "inconclusive"
        return Verdict(verdict, f"order only (no gap printed): {a} - {b} on {metric}, "
                       f"{1 - ALPHA:.0%} [{iv.lo:+.4f}, {iv.hi:+.4f}]",
                       {"ci": [iv.lo, iv.hi], "method": iv.method, "note": est.note()})
    verdict, reason, evidence = decide(est, claim.scalar(), margin, _claim_seeds(claim))
    if verdict == "reproduced" and iv.lo <= 0:
        verdict, reason = "inconclusive", f"the interval reaches 0: {reason}"
    return Verdict(verdict, f"{a} - {b} on {metric}: {reason}", {**evidence, "at_chance": flags})


def rule_arithmetic(claim: Claim, ctx: Context) -> Verdict:
    """Rounding-aware recomputation from the registry's own numbers."""
    rel = check_derived(claim, ctx.claims)
    reason = (f"{claim.formula} = {rel['recomputed']:.6g} (range {rel['recomputed_range'][0]:.6g}"
              f" to {rel['recomputed_range'][1]:.6g}); printed {claim.printed}: {rel['status']}")
    return Verdict(f"arithmetic {rel['status']}", reason, rel)


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
    """A runs/theory.json value (times `factor`) against the claim (any profile: no data
    involved). With no explicit bound, `eq` means "rounds to the printed value"."""
    check = claim.check
    assert check is not None, f"{claim.id}: theory claims need check: {{key, op}}"
    if ctx.theory is None:
        return _missing("runs/theory.json", "run `harness theory`")
    for key, want in check.requires.items():
        got = lookup(ctx.theory, key)
        if got != want:
            return Verdict("not comparable", f"{key}: claim {want:g}, run {got}", {})
    got = lookup(ctx.theory, check.key)
    if got is None or got == []:
        return Verdict("not rerun", f"data: runs/theory.json has no {check.key}", {})
    values = [float(v) * check.factor for v in (got if isinstance(got, list) else [got])]
    if check.bound is None and check.op == "eq":
        lo, hi = printed_interval(str(claim.printed))
        ok = all(lo - EPS <= v < hi + EPS for v in values)
        wanted = f"rounds to {claim.printed}"
    else:
        bound = claim.scalar() if check.bound is None else check.bound
        ok = all(_OPS[check.op](v, bound) for v in values)
        wanted = f"{check.op} {bound:g}"
    shown = values if len(values) > 1 else values[0]
    evidence = {"key": check.key, "run": shown, "factor": check.factor, "wanted": wanted,
                "claim": claim.scalar()}
    return Verdict("reproduced" if ok else "differs",
                   f"{check.key} x {check.factor:g} = {shown} ({wanted} required)", evidence)


def rule_theory_count(claim: Claim, ctx: Context) -> Verdict:
    """A runs/theory.json number that depends on the worlds drawn: shown beside the article's,
    never judged (another draw of worlds gives another count; only the identities are
    theorems)."""
    assert claim.check is not None, f"{claim.id}: theory_count claims need check: {{key}}"
    if ctx.theory is None:
        return _missing("runs/theory.json", "run `harness theory`")
    got = lookup(ctx.theory, claim.check.key)
    if got is None or isinstance(got, list):
        return Verdict("not rerun", f"data: runs/theory.json has no {claim.check.key}", {})
    run = float(got) * claim.check.factor
    setting = {k: lookup(ctx.theory, k) for k in claim.check.requires}
    same = all(setting[k] == v for k, v in claim.check.requires.items())
    drawn = ", ".join(f"{k} = {v}" for k, v in setting.items())
    return Verdict("informational", f"{claim.check.key} x {claim.check.factor:g} = {run:.6g} on "
                   f"the worlds this run draws ({drawn}); the article's {claim.printed} comes "
                   f"from its own draw{'' if same else ' of another setting'}: a count that "
                   "depends on the draw, not a property of the theorem",
                   {"key": claim.check.key, "run": run, "claim": claim.scalar(),
                    "factor": claim.check.factor, "setting": setting, "same_setting": same})


def rule_not_rerun(claim: Claim, ctx: Context) -> Verdict:
    why = claim.why_not_rerun or "scale"
    setup = ", ".join(f"{k}={v}" for k, v in claim.setup.items())
    return Verdict("not rerun", f"{why}: {_WHY[why]}" + (f" ({setup})" if setup else ""), {})


def rule_metadata(claim: Claim, ctx: Context) -> Verdict:
    return Verdict("not rerun", "metadata: describes a setup or a count; nothing to measure", {})


RULES: dict[str, Callable[[Claim, Context], Verdict]] = {
    "measured": rule_measured, "ordering": rule_ordering, "arithmetic": rule_arithmetic,
    "theory": rule_theory, "theory_count": rule_theory_count, "not_rerun": rule_not_rerun,
    "metadata": rule_metadata,
}
assert set(RULES) == set(RULE_NAMES), "harness.claims.RULE_NAMES and audit.RULES disagree"


# ------------------------------------------------------------------ driver
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


def audit(registry: Registry | Mapping[str, Claim], ctx: Context) -> dict[str, Any]:
    """The audit document (prh.audit/1) without `inputs`. Given a Registry, its relations are
    checked too."""
    if isinstance(registry, Registry):
        ctx = Context(registry.claims, ctx.profile, ctx.results, ctx.theory, registry.relations,
                      ctx.margins)
    rows = []
    for c in ctx.claims.values():
        v = RULES[c.rule](c, ctx)
        rows.append({"id": c.id, "statement": c.statement, "kind": c.kind, "source": c.source,
                     "where": c.where, "reported_by": c.reported_by, "section": c.section,
                     "metric": c.metric, "setup": dict(c.setup), "printed": c.printed,
                     "rule": c.rule, "verdict": v.verdict, "reason": v.reason,
                     "evidence_for": evidence_for(c, v.verdict, ctx), "registry_line": c.line,
                     "evidence": dict(v.evidence)})
    checks = arithmetic_checks(ctx)
    return {"schema": "prh.audit/1", "profile": ctx.profile, "claims": rows,
            "arithmetic": checks, "at_chance": at_chance(ctx.results),
            "summary": summarize(rows, checks)}


def parse_fail_on(text: str) -> frozenset[str]:
    """`differs,arithmetic` -> the names; an unknown name raises listing the known ones."""
    names = frozenset(x.strip() for x in text.split(",") if x.strip())
    unknown = sorted(names - set(FAIL_ON))
    if unknown:
        raise AuditError(f"--fail-on: unknown name(s) {unknown}; choose from {sorted(FAIL_ON)}")
    return names


def gate(doc: Mapping[str, Any], fail_on: Iterable[str]) -> list[str]:
    """The `--fail-on` names that the audit document trips (for CI: exit non-zero if any)."""
    summary = doc.get("summary", {})
    return sorted(name for name in fail_on if any(summary.get(k, 0) for k in FAIL_ON[name]))


def check_params_hash(results: Mapping[str, Any], expected: str, path: str) -> None:
    """Refuse a metrics file produced under other params than the ones being audited."""
    got = results.get("params_hash")
    if got != expected:
        raise AuditError(f"{path}: params hash {got} differs from the expected {expected} "
                         "(params.yaml); rerun the pipeline (`dvc repro`) or pass the params "
                         "file the results were produced with")

