"""The report's section on the seed plan and its looks: the registered plan (runs/plan.json:
each claim's test, margin, the seed sd it assumes and where from, the seeds a fixed design
needs, the schedule and its cost), and each planned claim's history over the looks from the
audit's `sequential` block (harness.audit.looks): per look the interval it was read on, the
boundary it was held to, the alphas spent, the verdict, and the seeds run against the cap."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _num(x: Any, digits: int = 4) -> str:
    return "—" if x is None else f"{x:.{digits}g}".replace("-", "−")


def _interval(h: Mapping[str, Any]) -> str:
    iv = h.get("interval")
    if not iv:
        return "no interval"
    level = h.get("interval_level")
    return (f"[{_num(iv[0])}, {_num(iv[1])}]" + (f" ({level:.0%})" if level else ""))


def look_cell(h: Mapping[str, Any]) -> str:
    """One look of a claim in words: seeds, interval, boundary, alphas, verdict."""
    bound = h.get("bound")
    return (f"look {h['look']} ({h['seeds']} seeds): {_interval(h)}"
            + (f" against {_num(bound)}" if bound is not None else "")
            + f"; alpha {_num(h['alpha'], 2)} / {_num(h['alpha_differs'], 2)}: {h['verdict']}")


def section_study(plan: Mapping[str, Any] | None, audit: Mapping[str, Any] | None
                  ) -> dict[str, Any]:
    """The plan's rows (each with the claim's history and status when the audit judged it
    under this plan), its schedule and its cost; {} without a plan."""
    if not plan:
        return {}
    seq = (audit or {}).get("sequential") or {}
    same = seq.get("plan_hash") == plan["hash"]
    claims = seq.get("claims", {}) if same else {}
    rows = []
    for c in plan["claims"]:
        s = claims.get(c["id"], {})
        history: Sequence[Mapping[str, Any]] = s.get("history", [])
        used = max((h["seeds"] for h in history), default=None)
        rows.append({
            "id": c["id"], "test": c["test"], "margin": _num(c["margin"], 3),
            "sd": _num(c["seed_sd"], 3), "source": c["seed_sd_source"],
            "seeds_reproduced": c["seeds_reproduced"] or "none",
            "seeds_differs": c["seeds_differs"] or ("—" if c["test"] == "pattern" else "none"),
            "can_confirm": c["can_confirm"], "can_catch": c["can_catch"],
            "status": s.get("status", "not judged yet"),
            "verdict": s.get("verdict"), "looks": [look_cell(h) for h in history],
            "seeds": f"{used} of {plan['looks'][-1]}" if used else "—"})
    cost = plan["cost"]
    unit = f" {cost['unit']}" if cost.get("unit") else ""
    return {
        "hash": plan["hash"], "profile": plan["profile"], "looks": plan["looks"],
        "spending": plan["spending"], "alpha_differs": [_num(a, 2) for a in plan["alpha_differs"]],
        "family_k": plan["family_k"], "differs_miss": plan["differs_miss"], "rows": rows,
        "fixed": plan["fixed_seeds"],
        "cost": {"fixed": None if cost["fixed"] is None else f"{cost['fixed']:.3g}{unit}",
                 "looks": [f"{c:.3g}{unit}" for c in cost["looks"]], "source": cost["source"]},
        "audit_under": ("this plan" if same else
                        f"another plan ({seq['plan_hash']})" if seq else "no plan"),
        "look": seq.get("look") if same else None, "next_seeds": seq.get("next_seeds"),
        "continuing": seq.get("continuing_arms", []),
        "plan_changed": seq.get("plan_changed") if same else None}
