"""The report's first page: which of the paper's headline claims hold, in plain words.

A table of the headline claims (the orderings of the three arms, the theorems, the Flickr30k
numbers, the scale claims), each with the paper's value, the rerun's value and interval, and
the audit's verdict qualified by the data it was measured on; a banner when the data is the
generated world; the arms whose interval reaches chance; and the arithmetic findings of the
audit (harness.audit: `fails`, `ambiguous`, `holds within input rounding`) as sentences with
their numbers. Everything is read from reports/audit.json and runs/results.json.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.records import verdicts
from harness.records.schemas import Results
from harness.records.verdicts import Audit

DATA = {"world": "the generated world", "flickr30k": "Flickr30k"}
WORLD_BANNER = (
    "This run used the generated world, a synthetic data set of simple scenes drawn from a "
    "seed (objects, colours, counts, relations; captions in varied wordings; small noisy "
    "images), not Flickr30k. Its numbers show whether the paper's mechanism appears at small "
    "scale; they cannot reproduce, or refute, a number the paper measured on Flickr30k or on "
    "web-scale data. Rerun with `profile: flickr30k` for those.")
# verdict -> order on the page (most important first) and its plain-language gloss
GLOSS = {
    "differs": "differs: the rerun is outside what a replication would give",
    "arithmetic fails": "the printed numbers do not agree with each other",
    "reproduced": "reproduced within the stated margin",
    "inconclusive": "inconclusive: neither equivalent nor clearly different",
    "inconclusive (underpowered)": "inconclusive: too few seeds or pairs to decide",
    "pattern seen on another profile": "the pattern shows on {data}",
    "pattern not seen on another profile": "the pattern does not show on {data}",
    "arithmetic holds": "the printed numbers agree",
    "arithmetic holds within input rounding": "the printed numbers agree within their rounding",
    "not comparable": "not comparable: measured on {data}, the claim is about {claim_data}",
    "not rerun": "not rerun: {why}",
    "informational": "informational: the run's number beside the article's, not judged",
}
STATUS_ORDER = ("fails", "ambiguous", "holds within input rounding")
TOLERANCE_KEY = "grid.identities_over_tolerance."  # theory identities judged in these units
# runs/theory.json's keys that theory claims are judged on, in words for the first page (the
# key itself stays in the audit table's evidence)
THEORY_WORDS = {"bound.all_hold": "every world under its bound",
                "bound.largest_ratio": "largest mismatch as a share of its bound",
                "grid.n_above": "grid points above the threshold",
                "grid.n_under": "grid points under the threshold",
                "grid.threshold_holds": "the threshold rule holds",
                "grid.tie_rows.r": "rows tied at the threshold"}


@dataclass(frozen=True)
class Headline:
    """One row of the first page: plain words, the registry claims behind it, and where the
    rerun's number comes from (`gap:A:B:METRIC`, `arm:ARM:METRIC`, or `evidence`: the audit
    row's own `evidence.run`)."""

    label: str
    ids: tuple[str, ...]
    rerun: str = "evidence"


HEADLINES = (
    Headline("Good views beat bad views (R@1 against DINOv2)", ("paper_order_good_bad_r1",),
             "gap:good:bad:r_at_1"),
    Headline("Good views beat next-token prediction (R@1)", ("paper_order_good_ntp_r1",),
             "gap:good:ntp:r_at_1"),
    Headline("Bad views against next-token: bad slightly above, within noise (R@1)",
             ("paper_order_bad_ntp_r1",), "gap:bad:ntp:r_at_1"),
    Headline("Theorem 1: with good views both modalities learn the same representation "
             "(rotation error 0)", ("theory_good_max_error",)),
    Headline("Each direction lost to bad views costs exactly 2 (error = 2r)",
             ("theory_err_equals_2r",)),
    Headline("Theorem 3: the mismatch stays under its bound in every random world (and how "
             "close it comes)", ("theory_bound_worlds", "theory_bound_max_ratio")),
    Headline("Flickr30k R@1, good views", ("paper_good_r1",), "arm:good:r_at_1"),
    Headline("Flickr30k R@1, bad views", ("paper_bad_r1",), "arm:bad:r_at_1"),
    Headline("Flickr30k R@1, next-token", ("paper_ntp_r1",), "arm:ntp:r_at_1"),
    Headline("At web scale (WIT, 940M images) good views beat next-token, which beats bad "
             "views", ("t3_order_good_ntp_wit", "t3_order_ntp_bad_wit")),
)


def fmt(x: float | None, signed: bool = False) -> str:
    """A number by its kind: a yes/no as a word, a count as an integer, a tiny error in
    scientific notation, any other number to three decimals (a test set of 1,000 pairs
    resolves .001); a true minus sign."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        text = f"{x:+d}" if signed else f"{x:d}"
    elif x != 0 and abs(x) < 5e-4:
        text = f"{x:+.2g}" if signed else f"{x:.2g}"
    else:
        text = f"{x:+.3f}" if signed else f"{x:.3f}"
    return text.replace("-", "−")


def interval(ci: Sequence[float] | None, signed: bool = False) -> str:
    return "" if not ci else f"[{fmt(ci[0], signed)}, {fmt(ci[1], signed)}]"


def rerun_value(source: str, results: Results | None,
                row: Mapping[str, Any] | None) -> dict[str, Any]:
    """The rerun's number behind a headline: the one the audit judged (its evidence `run` and
    `ci`) when there is one, else the results.json number `source` names; value, interval and
    what it is."""
    kind, _, rest = source.partition(":")
    evidence = (row or {}).get("evidence") or {}
    if kind == "gap" and isinstance(evidence.get("run"), int | float) and evidence.get("ci"):
        a, b, _metric = rest.split(":")
        over = "test pairs only (training variance not estimated)" if evidence.get("note") \
            else "seeds and test pairs"
        return {"value": fmt(evidence["run"], True), "ci": interval(evidence["ci"], True),
                "what": f"{a} − {b}, the audit's interval over {over}"}
    if kind == "gap" and results:
        a, b, metric = rest.split(":")
        for g in results.get("gaps", []):
            if (g.get("a"), g.get("b"), g.get("metric")) == (a, b, metric):
                return {"value": fmt(g["diff"], True), "ci": interval(g.get("ci"), True),
                        "what": f"{a} − {b}, paired over test pairs"}
    if kind == "arm" and results:
        arm, metric = rest.split(":")
        m = results.get("arms", {}).get(arm, {}).get("metrics", {}).get(metric)
        if m:
            seeds = results["arms"][arm].get("seeds", [])
            return {"value": fmt(m.get("mean")), "ci": interval(m.get("ci")),
                    "what": f"mean of {len(seeds)} seed(s), interval over test pairs"}
    if kind == "evidence" and str(evidence.get("key", "")).startswith(TOLERANCE_KEY):
        return {"value": f"{evidence['run']:.2g}", "ci": "",
                "what": "largest deviation in units of its rows' attainable accuracy (at most "
                        "1 holds)"}
    if kind == "evidence" and isinstance(evidence.get("run"), int | float):
        key, factor = str(evidence.get("key", "")), evidence.get("factor", 1)
        words, run = THEORY_WORDS.get(key, key), evidence["run"]
        return {"value": fmt(run) if isinstance(run, bool | int) else f"{run:.3g}", "ci": "",
                "what": f"{words}, in %" if factor == 100 else words if factor == 1
                else f"{words} × {factor:g}"}
    return {"value": "—", "ci": "", "what": "not measured by this run"}


def qualify(row: Mapping[str, Any], profile: str | None) -> str:
    """The verdict in plain words, naming the data it was measured on."""
    verdict = row.get("verdict") or ""
    claim_data = DATA.get(str((row.get("setup") or {}).get("dataset")),
                          (row.get("setup") or {}).get("dataset") or "its own setup")
    why = verdicts.gist(str(row.get("reason") or ""))
    text = GLOSS.get(verdict, verdict).format(data=DATA.get(profile or "", profile),
                                              claim_data=claim_data, why=why)
    if row.get("kind") == "theory" and verdict in ("reproduced", "differs"):
        text = ("holds on the finite worlds this run draws" if verdict == "reproduced" else
                f"differs from the printed {row.get('printed')} on the worlds this run draws")
    return text


def headline_rows(audit: Audit, results: Results | None,
                  headlines: Sequence[Headline] = HEADLINES) -> list[dict[str, Any]]:
    """One row per headline: paper value(s), rerun value and interval, verdict in words,
    at-chance arms named. Claims missing from the audit are said to be missing."""
    rows = {r["id"]: r for r in audit.get("claims", [])}
    profile = audit.get("profile")
    chance = audit.get("at_chance") or {}
    out = []
    for h in headlines:
        found = [rows[i] for i in h.ids if i in rows]
        if not found:
            out.append({"label": h.label, "ids": list(h.ids), "paper": "—", "verdict": None,
                        "said": "not in this audit (the registry has no such claim)",
                        "rerun": rerun_value("none", None, None), "chance": [], "also": [],
                        "why": None})
            continue
        first = min(found, key=lambda r: _rank(r.get("verdict"), VERDICT_RANK))
        arms = [p for p in h.rerun.split(":")[1:3] if p in chance] if ":" in h.rerun else []
        reruns = [rerun_value(h.rerun, results, r) for r in found]
        said = list(dict.fromkeys(qualify(r, profile) for r in found))
        out.append({"label": h.label, "ids": [r["id"] for r in found],
                    "paper": "; ".join(str(r.get("printed")).replace(" - ", " vs ")
                                       for r in found),
                    "verdict": first.get("verdict"), "said": "; ".join(said),
                    "evidence_for": first.get("evidence_for"),
                    "rerun": reruns[0] if h.rerun != "evidence" else {
                        k: "; ".join(dict.fromkeys(r[k] for r in reruns if r[k]))
                        for k in ("value", "ci", "what")},
                    "chance": [f"{a} at chance on {m}" for a in arms for m in chance[a]],
                    **same_comparison(found, audit.get("claims", []), profile)})
    return out


def comparison_of(row: Mapping[str, Any]) -> tuple[frozenset[str], str] | None:
    """The comparison an ordering row is about: its two arms (either order) and metric."""
    c = row.get("compares")
    return (frozenset((c["a"], c["b"])), c["key"]) if c else None


SAYS = {"order": "that {a} beats {b}, which needs the interval above 0",
        "inseparable": "that {a} and {b} cannot be separated, which needs the interval "
                       "inside ±{margin:g}, the claim's gap margin"}


def same_comparison(found: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
                    profile: str | None) -> dict[str, Any]:
    """The other claims about the comparison of `found`'s first ordering (`also`, each with its
    verdict in words) and, when their verdicts differ, one sentence on why (`why`): both read
    the same interval and ask different things of it."""
    key = next((k for r in found if (k := comparison_of(r))), None)
    if key is None:
        return {"also": [], "why": None}
    ids = {r["id"] for r in found}
    also = [r for r in rows if comparison_of(r) == key and r["id"] not in ids]
    group = [*[r for r in found if comparison_of(r) == key], *also]
    return {"also": [{"id": r["id"], "statement": r.get("statement"),
                      "said": qualify(r, profile)} for r in also],
            "why": why_verdicts_differ(group)}


def why_verdicts_differ(group: Sequence[Mapping[str, Any]]) -> str | None:
    """One sentence for ordering claims on one comparison whose verdicts differ, or None: the
    interval they were all judged on and what each claim needs of it."""
    judged = [r for r in group if (r.get("evidence") or {}).get("ci")]
    if len({r.get("verdict") for r in judged}) < 2:
        return None
    first = judged[0]
    a, b, metric = (first["compares"][k] for k in ("a", "b", "key"))
    lo, hi = first["evidence"]["ci"]
    needs = [SAYS.get(r["compares"]["type"], "{a} against {b}").format(
        a=r["compares"]["a"], b=r["compares"]["b"],
        margin=(r.get("evidence") or {}).get("margin", 0)) + f" ({r['verdict']})"
             for r in judged]
    return (f"Both verdicts read one interval of {a} − {b} on {metric}, "
            f"[{fmt(lo, True)}, {fmt(hi, True)}]; the claims ask different things of it: "
            + "; ".join(f"{r['id']} says {n}" for r, n in zip(judged, needs, strict=True))
            + ".")


def chance_sentences(audit: Audit) -> list[str]:
    """Every arm whose interval reaches its chance level, as a sentence with the numbers."""
    out = []
    for arm, metrics in sorted((audit.get("at_chance") or {}).items()):
        for metric, e in sorted(metrics.items()):
            lo, hi = e["ci"]
            out.append(f"The {arm} arm is at chance on {metric}: its interval "
                       f"[{fmt(lo)}, {fmt(hi)}] reaches the chance level {e['chance']:.4f}, so "
                       "its orderings against other arms say nothing.")
    return out


def arithmetic_findings(audit: Audit) -> list[dict[str, str]]:
    """The audit's arithmetic checks that are not a plain 'holds', worst first, each as a
    sentence: the statement, the recomputation with its numbers, the status."""
    checks = [c for c in audit.get("arithmetic", []) if c.get("status") in STATUS_ORDER]
    checks.sort(key=lambda c: STATUS_ORDER.index(c["status"]))
    out = []
    for c in checks:
        statement = str(c.get("statement") or c.get("formula") or c.get("id")).rstrip(".")
        detail = check_detail(c)
        out.append({"id": str(c.get("id")), "status": c["status"],
                    "sentence": f"{statement}: {detail}."})
    return out


def findings_by_status(found: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The first page's three lists of arithmetic findings: fails, ambiguous, holds only
    within the rounding of their inputs."""
    return {key: [f for f in found if f["status"] == status] for key, status in (
        ("fails", "fails"), ("ambiguous", "ambiguous"),
        ("rounding", "holds within input rounding"))}


def first_page(audit: Audit | None, results: Results | None,
               profile: str | None) -> dict[str, Any]:
    """Everything the first page shows; without an audit, only the banner."""
    counts = dict((audit or {}).get("summary") or {})
    return {"banner": WORLD_BANNER if profile == "world" else None,
            "data": DATA.get(profile or "", profile),
            "headlines": headline_rows(audit, results) if audit else [],
            "chance": chance_sentences(audit) if audit else [],
            **findings_by_status(arithmetic_findings(audit) if audit else []),
            "counts": {k: v for k, v in counts.items() if v},
            "family": verdicts.family_line(audit),
            "paths": path_rows(audit) if audit else []}


PATH_ORDER = ("wit1024", "flickr30k", "unavailable")  # cheapest first


def path_rows(audit: Audit) -> list[dict[str, Any]]:
    """The audit's rerun paths (harness.audit.paths), cheapest first, each with its claim count
    and the models it would download."""
    paths = audit.get("rerun_paths") or {}
    return [{"name": name, "n": len(p["claims"]), **p,
             "command": None if p.get("command") == "none" else p.get("command")}
            for name, p in sorted(paths.items(), key=lambda kv: _rank(kv[0], PATH_ORDER))]


VERDICT_RANK = ("differs", "arithmetic fails", "inconclusive", "inconclusive (underpowered)",
                "reproduced", "pattern not seen on another profile",
                "pattern seen on another profile", "arithmetic holds within input rounding",
                "arithmetic holds", "informational", "not comparable", "not rerun")
PRINT_BY_ID = ("not rerun", "arithmetic holds")  # verdicts a printed page lists by id only
KIND_RANK = ("ordering", "theory", "flickr_measurable", "derived_arithmetic", "web_scale",
             "metadata")


def check_detail(check: Mapping[str, Any]) -> str:
    """An arithmetic check in words: its own `detail`, or a formula's recomputation (to 6
    significant digits: the float's last digits are no finding)."""
    if check.get("detail"):
        return str(check["detail"])
    value = check.get("recomputed")
    shown = f"{value:.6g}" if isinstance(value, int | float) else value
    return f"{check.get('formula')} = {shown} against printed {check.get('printed')}"


def _rank(value: Any, order: Sequence[str]) -> int:
    return order.index(value) if value in order else len(order)


def rerun_cell(evidence: Mapping[str, Any]) -> str:
    """The rerun's number an audit row was judged on (evidence `run` and `ci`), or ''."""
    run, ci = evidence.get("run"), evidence.get("ci")
    if not isinstance(run, int | float):
        return ""
    signed = isinstance(ci, list) and min(ci) < 0
    return f"{fmt(run, signed)} {interval(ci, signed)}".strip()


def together(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """`rows` in order, each claim about a comparison moved up beside the first claim about
    the same comparison, the sentence on why their verdicts differ on the last of them."""
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    order: list[Any] = []
    for i, r in enumerate(rows):
        key = comparison_of(r) or i
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append(r)
    out: list[Mapping[str, Any]] = []
    for key in order:
        group = groups[key]
        why = why_verdicts_differ(group) if len(group) > 1 else None
        out += [*group[:-1], {**group[-1], "why": why} if why else group[-1]]
    return out


def audit_table(audit: Audit, brief: Any) -> dict[str, Any]:
    """Every claim row, most important first (verdicts that say something before 'not
    comparable' and 'not rerun'; orderings and theorems before single numbers), compact:
    statement, printed, rerun, verdict, with the reason and evidence (`brief`-formatted) to
    fold under the row. The rows a printed page lists by id only (`PRINT_BY_ID`: not rerun,
    by reason; arithmetic that holds) are also grouped, with their ids."""
    rows = together(sorted(audit.get("claims", []), key=lambda c: (
        _rank(c.get("verdict"), VERDICT_RANK), _rank(c.get("kind"), KIND_RANK))))
    by_id: dict[str, list[str]] = {}
    for c in rows:
        if c.get("verdict") in PRINT_BY_ID:
            why = (verdicts.category_of(str(c.get("reason") or ""))
                   if c["verdict"] == "not rerun" else "")
            group = f"{c['verdict']}, {why}" if why else c["verdict"]
            by_id.setdefault(group, []).append(str(c.get("id")))
    checks = sorted(audit.get("arithmetic", []),
                    key=lambda c: _rank(c.get("status"), (*STATUS_ORDER, "holds")))
    return {"rows": [{**c, "rerun": rerun_cell(c.get("evidence") or {}),
                      "listed_by_id": c.get("verdict") in PRINT_BY_ID,
                      "evidence": brief({k: v for k, v in (c.get("evidence") or {}).items()
                                         if v not in ({}, [], None)})} for c in rows],
            "verdicts": {v: n for v in VERDICT_RANK
                         if (n := sum(c.get("verdict") == v for c in rows))},
            "by_id": by_id,
            "checks": [{"id": c.get("id"), "check": c.get("check"), "status": c.get("status"),
                        "holds": c.get("status") == "holds", "detail": check_detail(c)}
                       for c in checks],
            "holds": [c.get("id") for c in checks if c.get("status") == "holds"]}
