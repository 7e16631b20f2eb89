"""Relations (`relation_checks`, statuses `STATUSES`): a printed difference against the difference
of the printed means, comparisons, a bound stated for every seed against the means, a bound
stated for one quantity read against another, "the same order as" between two rankings, an
interval against its own seeds' spread, an interval against the binomial minimum for its n,
mean +- half-range feasible for its seeds (GRIMMER, Anaya 2016, PeerJ Preprints 4:e2400v1), a
chance level against its candidate pool, a printed number against the number it is read from
under a reading's rounding (rounded, or written without its decimals). A relation with two
readings of the text is "ambiguous" when they disagree; both readings and their results are
listed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scipy import stats as sps

from harness.audit.claims import (
    Claim,
    Relation,
    decimals,
    printed_interval,
)
from harness.audit.printed import EPS, SYMBOLS, compare_status, evaluate, rounded_status
from harness.records import names
from harness.records.verdicts import STATUSES


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
    return {"status": status,
            "detail": f"{a.id} ({a.printed}) {SYMBOLS[f['op']]} {b.id} ({b.printed})"}


def rel_per_seed_bound(f: Mapping[str, Any], claims: Mapping[str, Claim]) -> dict[str, Any]:
    """A bound stated for every seed: a mean over seeds lies between its extreme seeds, so each
    printed mean must satisfy the bound too."""
    bound = evaluate(f["bound"], claims)
    rows = {m: compare_status(evaluate(m, claims), f["op"], bound) for m in f["means"]}
    bad = [f"{m} = {claims[m].printed}" for m, s in rows.items() if s != "holds"]
    return {"status": _worst(rows.values()), "per_mean": rows,
            "detail": f"every seed {SYMBOLS[f['op']]} {claims[f['bound']].printed}, so every "
                      "mean too; "
                      + (f"not so for {', '.join(bad)}" if bad else "all means satisfy it")}


def rel_bound(f: Mapping[str, Any], claims: Mapping[str, Claim]) -> dict[str, Any]:
    """A bound stated for one quantity, read against another (`quantity` is a formula)."""
    q, bound = evaluate(f["quantity"], claims), evaluate(f["bound"], claims)
    status = compare_status(q, f["op"], bound)
    return {"status": status, "recomputed": q.point, "recomputed_range": [q.lo, q.hi],
            "detail": f"{f['quantity']} = {_fmt(q.point)} (range {_fmt(q.lo)} to "
                      f"{_fmt(q.hi)}) {SYMBOLS[f['op']]} {claims[f['bound']].printed}"}


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
    # the paper's mutual k-NN counts k neighbours per item
    per_item = names.PAPER_K if c.metric == names.mknn(names.PAPER_K) else 1
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


READ_AS = {"nearest": "when rounded", "down": "when written without its decimals",
           "exact": "when exact"}


def rel_printed_as(f: Mapping[str, Any], claims: Mapping[str, Claim]) -> dict[str, Any]:
    """A printed number against the quantity it is read from, under the reading's rounding
    ('nearest': the quantity rounds to it; 'down': it is the quantity without its decimals)."""
    p, mode = claims[f["printed"]], f["rounding"]
    span = evaluate(f["quantity"], claims)
    status = rounded_status(span, str(p.printed), p.scale, mode)
    lo, hi = (x * p.scale for x in printed_interval(str(p.printed), mode))
    return {"status": status, "recomputed": span.point, "recomputed_range": [span.lo, span.hi],
            "printed_stands_for": [lo, hi],
            "detail": f"{f['quantity']} = {_fmt(span.point)} (range {_fmt(span.lo)} to "
                      f"{_fmt(span.hi)}) against printed {p.printed}, which stands for "
                      f"[{_fmt(lo)}, {_fmt(hi)}) {READ_AS[mode]}"}


RELATIONS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Claim]], dict[str, Any]]] = {
    "difference": rel_difference, "compare": rel_compare, "per_seed_bound": rel_per_seed_bound,
    "bound": rel_bound, "same_order": rel_same_order, "interval_vs_seeds": rel_interval_vs_seeds,
    "binomial_min": rel_binomial_min, "grimmer": rel_grimmer, "chance_pool": rel_chance_pool,
    "printed_as": rel_printed_as,
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
