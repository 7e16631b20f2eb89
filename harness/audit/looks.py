"""Sequential looks under a registered plan (harness.audit.plan): which look a run is, the level
each claim is judged at there, what each claim's verdict means for the study (decided, stopped,
continues, at the cap), and the ledger of the looks taken (runs/looks.json, appended by
`harness next`).

A look is the run's seeds per arm: the plan's looks list them, and a run whose count is no look
judges no planned claim. At look l a claim not decided before is judged at the alphas the plan
spends there (`Level`: "reproduced", an order or a pattern seen at alpha_reproduced[l];
"differs" at alpha_differs[l] with Holm over the plan's family, its members decided earlier
counting with p = 1) and with the plan's margin, never the registry's of the day. Decided
(reproduced, differs, pattern seen) stops the claim; so does a claim that more seeds cannot
decide (not comparable, at chance, a test-pair floor that fills the margin). Every other claim
continues to the next look, and keeps the arms it reads running when it can be confirmed by the
cap, or caught by it while its estimate lies beyond its boundary (`holds_arms`); the others are
judged while their arms run for other claims and stop with them. At the cap a claim reads
"inconclusive at N seeds (the plan's cap)" with the seeds that would decide it. A claim
decided at an earlier look keeps that verdict: its later data are not looked at.

The ledger holds each look's verdicts and the plan they were taken under; a plan whose hash is
not the ledger's is refused by `harness plan` (`refuse_new_plan`), and an audit under it reads
"plan changed after data" for every planned claim, with what changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.audit.decide import DESIGN, differs_advice, seeds_advice
from harness.audit.plan import DIFFERS_TESTS
from harness.audit.verdict import Level
from harness.records.study import LOOKS, Ledger, PlanDoc
from harness.stats.estimators import MIN_SEEDS_FOR_TRAINING_VARIANCE
from prh.io import ContractError, read_json

DECIDED = ("reproduced", "differs", "pattern seen on another profile")
STOPPED = ("not comparable", "not rerun", "informational")  # no sampled verdict to wait for
STATUSES = ("decided", "decided earlier", "stopped", "stopped earlier", "continues",
            "at the cap", "off plan", "plan changed")




def empty_ledger() -> dict[str, Any]:
    return {"schema": str(LOOKS), "plan_hash": None, "plan": None, "looks": []}


def read_ledger(path: Path) -> Ledger:
    """runs/looks.json, checked (a missing file: no look taken yet)."""
    if not path.exists():
        return empty_ledger()  # type: ignore[return-value]
    return LOOKS.check(read_json(path), str(path), fix="restore it from git (`git checkout "
                       f"{path}`); `harness next` is the only writer")


def look_index(plan: PlanDoc, seeds: int) -> int | None:
    """The look (1-based) a run of `seeds` seeds per arm is, or None."""
    return plan["looks"].index(seeds) + 1 if seeds in plan["looks"] else None


def levels(plan: PlanDoc, look: int) -> dict[str, Level]:
    """Each planned claim's level at `look`: the alphas the plan spends there, its margin."""
    return {c["id"]: Level(c["alpha_reproduced"][look - 1], plan["alpha_differs"][look - 1],
                           c["margin"]) for c in plan["claims"]}


def plan_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between two plans, one phrase per top-level field or claim."""
    out = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
           if k not in ("claims", "hash", "schema") and old.get(k) != new.get(k)]
    before = {c["id"]: c for c in old.get("claims", [])}
    after = {c["id"]: c for c in new.get("claims", [])}
    out += [f"claim {c} dropped" for c in sorted(set(before) - set(after))]
    out += [f"claim {c} added" for c in sorted(set(after) - set(before))]
    out += [f"claim {c}: " + ", ".join(f"{k} {before[c].get(k)!r} -> {after[c].get(k)!r}"
                                       for k in sorted(set(before[c]) | set(after[c]))
                                       if before[c].get(k) != after[c].get(k))
            for c in sorted(set(before) & set(after)) if before[c] != after[c]]
    return out


def refuse_new_plan(plan: Mapping[str, Any], ledger: Ledger, where: str) -> None:
    """ContractError when looks were taken under another plan: a plan changed after data."""
    if ledger["looks"] and ledger["plan_hash"] != plan["hash"]:
        changed = "; ".join(plan_diff(ledger["plan"] or {}, plan)[:6])
        raise ContractError(
            f"{where}: {len(ledger['looks'])} look(s) were taken under plan "
            f"{ledger['plan_hash']}; this plan ({plan['hash']}) changes {changed}. A plan is "
            "registered before its data: keep the registered one (`git checkout` params.yaml's "
            "plan), or start a new study with a fresh ledger (move runs/looks.json away)")


def earlier(ledger: Ledger, look: int) -> dict[str, dict[str, Any]]:
    """Claim -> its ledger entry, for claims decided or stopped before `look`."""
    out: dict[str, dict[str, Any]] = {}
    for entry in ledger["looks"][:look - 1]:
        for cid, c in entry["claims"].items():
            if c["status"] in ("decided", "stopped") and cid not in out:
                out[cid] = {**c, "look": entry["look"], "seeds": entry["seeds"]}
    return out


def history_entry(row: Mapping[str, Any], look: int, seeds: int, level: Level) -> dict[str, Any]:
    """What the report shows of a claim at one look: its interval and the level it was read
    at, the boundary it was held to, the look's alphas and the verdict."""
    e = row.get("evidence") or {}
    interval = e.get("difference_interval") or e.get("ci")
    level_of = e.get("tost_level") or e.get("ci_level")
    bound = e.get("min_gap") if "min_gap" in e else e.get("margin")
    return {"look": look, "seeds": seeds, "verdict": row["verdict"], "interval": interval,
            "interval_level": level_of, "bound": bound, "alpha": level.alpha,
            "alpha_differs": level.alpha_differs, "p_differs_holm": e.get("p_differs_holm")}


def _stops(row: Mapping[str, Any]) -> str | None:
    """Why more seeds cannot decide the claim, or None."""
    e = row.get("evidence") or {}
    if row["verdict"] in STOPPED:
        return f"{row['verdict']}: no sampled verdict to wait for"
    if e.get("at_chance"):
        return "an arm at chance: more seeds do not make it evidence"
    if row["verdict"] == "inconclusive (underpowered)" and e.get("pair_floor") is not None \
            and e.get("margin") is not None and e["pair_floor"] >= e["margin"]:
        return "the test pairs alone fill the margin: no seed count decides it"
    return None


def apply_look(rows: list[dict[str, Any]], plan: PlanDoc, ledger: Ledger, seeds: int,
               look: int | None, family_block: Mapping[str, Any]) -> dict[str, Any]:
    """The audit's rows under the plan at `look` (None: the run's `seeds` per arm are no look;
    judged at `levels`, the family step run): each planned claim's status, verdict and reason
    for the study, with its history over the looks; returns the audit document's
    `sequential` block."""
    planned = {c["id"]: c for c in plan["claims"]}
    by_id = {r["id"]: r for r in rows}
    cap = plan["looks"][-1]
    block: dict[str, Any] = {
        "plan_hash": plan["hash"], "looks": plan["looks"], "look": look, "seeds": seeds,
        "final": look == len(plan["looks"]), "family_k": plan["family_k"],
        "alpha_differs": None if look is None else plan["alpha_differs"][look - 1],
        "plan_changed": None, "claims": {}, "continuing_arms": [], "next_seeds": None,
        "family": dict(family_block)}
    if ledger["looks"] and ledger["plan_hash"] != plan["hash"]:
        block["plan_changed"] = {"from": ledger["plan_hash"], "to": plan["hash"],
                                 "diff": plan_diff(ledger["plan"] or {}, plan)}
    before = earlier(ledger, look) if look else {}
    history = _ledger_history(ledger, look)
    for cid, c in planned.items():
        row = by_id[cid]
        status, why = _status(row, c, look, cap, before, block)
        past = history.get(cid, [])
        if status in ("decided earlier", "stopped earlier"):
            e = before[cid]
            row.update({"verdict": e["verdict"], "reason": f"{e['status']} at look {e['look']} "
                        f"({e['seeds']} seeds per arm): {e['reason']}",
                        "evidence": {**e.get("evidence", {}), f"{e['status']}_at_look": e["look"]}})
        elif look is not None and status not in ("off plan", "plan changed"):
            past = [*past, history_entry(row, look, seeds, levels(plan, look)[cid])]
        if why:
            row["reason"] = why(row)
        block["claims"][cid] = {"status": status, "verdict": row["verdict"], "history": past,
                                "arms": c["arms"], "test": c["test"],
                                "seeds_planned": cap}
    continuing = sorted({a for cid, s in block["claims"].items() if s["status"] == "continues"
                         and holds_arms(planned[cid], by_id[cid]) for a in planned[cid]["arms"]})
    for cid, s in block["claims"].items():  # undecided, holding no arm, its arms stopping
        if s["status"] == "continues" and not set(planned[cid]["arms"]) <= set(continuing):
            s["status"] = "stopped"
            row, c = by_id[cid], planned[cid]
            row["reason"] = (f"stops at look {look} ({seeds} seeds per arm) with its arms, none "
                             f"of which it holds open ({_why_not_held(c)}); "
                             + row["reason"].split("; ", 1)[-1])
    block["continuing_arms"] = continuing
    if continuing and look is not None and look < len(plan["looks"]):
        block["next_seeds"] = plan["looks"][look]
    return block


def beyond(row: Mapping[str, Any]) -> bool:
    """Whether the look's estimate lies on the "differs" side of the claim's boundary: a
    number or a gap off by more than its margin, an order below its smallest material gap."""
    e = row.get("evidence") or {}
    if "difference" in e and e.get("margin") is not None:
        return abs(e["difference"]) > e["margin"]
    if "min_gap" in e and e.get("run") is not None:
        return e["run"] < e["min_gap"]
    if e.get("run") is not None and e.get("margin") is not None:
        return abs(e["run"]) > e["margin"]
    return False


def holds_arms(claim: Mapping[str, Any], row: Mapping[str, Any]) -> bool:
    """Whether an undecided claim keeps its arms running to the next look: it can be confirmed
    by the cap (80% power for "reproduced"), or it can be caught (80% for "differs") and its
    estimate lies beyond its boundary. A non-binding futility rule (Jennison & Turnbull 2000,
    ch. 10): stopping a claim early only removes chances to reject, so the error rates hold."""
    return bool(claim["can_confirm"] or (claim["can_catch"] and beyond(row)))


def _why_not_held(c: Mapping[str, Any]) -> str:
    if not c["can_catch"]:
        return (f"the plan gives it under 80% power either way by the cap: seeds for "
                f"\"reproduced\" {c['seeds_reproduced'] or 'none'}, for \"differs\" "
                f"{c['seeds_differs'] or 'none'}")
    return (f"it cannot be confirmed by the cap (seeds for \"reproduced\" "
            f"{c['seeds_reproduced'] or 'none'}) and its estimate lies inside its boundary, "
            "where no miss is in sight")


def _ledger_history(ledger: Ledger, look: int | None) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for entry in ledger["looks"][:(look or 1) - 1]:
        for cid, c in entry["claims"].items():
            out.setdefault(cid, []).extend(h for h in c.get("history", [])
                                           if h["look"] == entry["look"])
    return out


def _status(row: dict[str, Any], claim: Mapping[str, Any], look: int | None, cap: int,
            before: Mapping[str, Any], block: Mapping[str, Any]) -> tuple[str, Any]:
    """The claim's status at this look and, where the verdict's words change, a function of
    the row giving its new reason (the row's verdict is set here too)."""
    if block["plan_changed"]:
        diff = "; ".join(block["plan_changed"]["diff"][:4])
        row["verdict"] = "inconclusive"
        return "plan changed", lambda r: (
            f"plan changed after data: the ledger's looks were taken under plan "
            f"{block['plan_changed']['from']}, runs/plan.json is {block['plan_changed']['to']} "
            f"({diff}); no verdict under a changed plan")
    if look is None:
        if block["seeds"] < MIN_SEEDS_FOR_TRAINING_VARIANCE:  # no sampled verdict anyway
            return "off plan", None
        row["verdict"] = "inconclusive"
        return "off plan", lambda r: (
            f"{block['seeds']} seeds per arm (the fewest of an arm) is no look of the registered "
            f"plan (looks {block['looks']}, every arm at a look's seeds): no verdict off the "
            "plan; run a look's seeds (`harness next` sets them)")
    if claim["id"] in before:
        return f"{before[claim['id']]['status']} earlier", None
    if row["verdict"] in DECIDED:
        return "decided", None
    stop = _stops(row)
    if stop:
        return "stopped", lambda r: f"{r['reason']} (stops here: {stop})"
    if look == len(block["looks"]):
        final = ("pattern not seen on another profile" if claim["test"] == "pattern"
                 else "inconclusive")
        row["verdict"] = final
        return "at the cap", lambda r: _at_cap(r, cap, claim, block)
    nxt = block["looks"][look]
    row["verdict"] = "inconclusive"
    return "continues", lambda r: (f"undecided at look {look} ({block['seeds']} seeds per "
                                   f"arm): continues to look {look + 1} ({nxt} seeds); "
                                   f"{r['reason']}")


def _at_cap(row: Mapping[str, Any], cap: int, claim: Mapping[str, Any],
            block: Mapping[str, Any]) -> str:
    design = (row.get("evidence") or {}).get(DESIGN)
    advice = ""
    if design and claim["test"] in DIFFERS_TESTS:
        advice = (f"; {seeds_advice(design)}; "
                  f"{differs_advice(design, int(block['family_k']))}")
    word = "pattern not seen" if claim["test"] == "pattern" else "inconclusive"
    return f"{word} at {cap} seeds (the plan's cap): {row['reason']}{advice}"


def record(ledger: Ledger, plan: PlanDoc, audit: Mapping[str, Any], when: str,
           run_id: str | None) -> dict[str, Any]:
    """The ledger with the audit's look appended (`harness next`); ContractError when the audit
    is no look of this plan, the plan changed, or the look is recorded already."""
    seq = audit.get("sequential")
    if not seq:
        raise ContractError("reports/audit.json has no sequential block: rerun the audit "
                            "under runs/plan.json (`dvc repro audit`)")
    if seq["plan_hash"] != plan["hash"]:
        raise ContractError(f"reports/audit.json was judged under plan {seq['plan_hash']}, "
                            f"runs/plan.json is {plan['hash']}: rerun `dvc repro audit`")
    if seq["plan_changed"]:
        refuse_new_plan(plan, ledger, "runs/plan.json")
    if seq["look"] is None:
        raise ContractError(f"reports/audit.json judged {seq['seeds']} seeds per arm, no look of "
                            f"the plan {plan['looks']}: run a look's seeds")
    taken = [e["look"] for e in ledger["looks"]]
    if seq["look"] in taken:
        raise ContractError(f"look {seq['look']} is recorded already in runs/looks.json (looks "
                            f"{taken}); its audit is final for the study")
    if seq["look"] != len(taken) + 1:
        raise ContractError(f"the audit is look {seq['look']}, but runs/looks.json records "
                            f"{taken}: record the looks in order")
    rows = {r["id"]: r for r in audit["claims"]}
    entry = {"look": seq["look"], "seeds": seq["seeds"], "plan_hash": plan["hash"],
             "recorded": when, "mlflow_run_id": run_id,
             "continuing_arms": seq["continuing_arms"], "next_seeds": seq["next_seeds"],
             "claims": {cid: {"status": s["status"], "verdict": s["verdict"],
                              "reason": rows[cid]["reason"], "history": s["history"],
                              "evidence": rows[cid].get("evidence", {})}
                        for cid, s in seq["claims"].items()
                        if not s["status"].endswith(" earlier")}}
    return {"schema": str(LOOKS), "plan_hash": plan["hash"],
            "plan": ledger["plan"] or dict(plan), "looks": [*ledger["looks"], entry]}


def summary(block: Mapping[str, Any]) -> dict[str, int]:
    """How many planned claims have each status at this look."""
    out = {s: 0 for s in STATUSES}
    for c in block.get("claims", {}).values():
        out[c["status"]] += 1
    return out
