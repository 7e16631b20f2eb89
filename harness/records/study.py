"""A sequential study's two files: the registered seed plan (runs/plan.json, written by the plan
stage: harness.audit.plan) and the ledger of the looks taken under it (runs/looks.json,
appended by `harness next`: harness.audit.looks), as the records their readers check (the
audit, `harness next`, the report)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from harness.records.schemas import Schema


class PlannedClaim(TypedDict):
    """One claim of the plan: what its rule tests and what the seeds are planned from."""

    id: str
    test: str
    arms: list[str]
    metric: str
    margin: float
    min_gap: NotRequired[float]
    gap: NotRequired[float | None]  # an order's planned gap (None: ASSUMED_ORDER_GAP margins)
    gap_source: NotRequired[str]
    claim_seeds: int | None
    claim_sd: float | None
    seed_sd: float
    seed_sd_source: str
    floor_var: float
    gap_pair_source: NotRequired[str]
    seeds_reproduced: int | None
    seeds_differs: int | None
    alpha_reproduced: list[float]  # its own spending over the looks (information_alphas)
    can_confirm: bool  # 80% power for "reproduced" by the cap: it keeps its arms running
    can_catch: bool  # 80% power for "differs" by the cap: it keeps them while it looks missed


class PlanDoc(TypedDict):
    """runs/plan.json."""

    profile: str
    hash: str
    alpha: float
    power: float
    differs_miss: float
    looks: list[int]
    spending: dict[str, str]
    alpha_differs: list[float]
    family_k: int
    spreads: dict[str, dict[str, Any]]  # per metric family: sd, source, gap_pair_se, ...
    claims: list[PlannedClaim]
    arms: list[str]
    fixed_seeds: int | None
    cost: dict[str, Any]


PLAN = Schema("prh.plan", 1, "plan", PlanDoc)  # runs/plan.json


class Ledger(TypedDict):
    """runs/looks.json: the looks taken, each with its verdicts; the plan of the first."""

    plan_hash: str | None
    plan: dict[str, Any] | None
    looks: list[dict[str, Any]]


LOOKS = Schema("prh.looks", 1, "`harness next`", Ledger)  # runs/looks.json
