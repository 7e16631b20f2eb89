"""A sequential study simulated under its plan, to see before training what it costs and how
often it decides (bench/sequential.py prints it for the flickr30k plan).

Each arm's numbers are drawn from the model the verdicts assume (harness.stats.estimators.
TwoLevel): every seed of an arm scores a metric on the fixed test pairs at its truth plus
N(0, sd^2), sd the plan's one-seed sd of that metric; a gap adds the plan's test-pair variance
to the population interval (what seeds cannot shrink). A study draws each arm's seeds once, up
to the cap, so every look reads the first n of them; each look is a results.json of the arms
still running, judged by the real audit under the plan and the ledger of the looks before
(harness.audit.judge.audit), and recorded as `harness next` records it. Arms share their draws
across the claims that read them, as in a real run.

Truths: `holding_truths` puts each arm's number at the mean of the planned claims that state
it, so that every claim holds, and an order no number states at the plan's assumed gap;
`shifted` moves arms' numbers by a number of margins.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.audit.claims import Registry
from harness.audit.judge import audit
from harness.audit.looks import empty_ledger, record
from harness.audit.plan import ASSUMED_ORDER_GAP
from harness.audit.verdict import Context
from harness.records.study import PlanDoc
from harness.stats.equivalence import welch_df
from harness.stats.estimators import TwoLevel

N_PAIRS = 1000
Key = tuple[str, str]  # (arm, where): "metrics.r_at_1", "curve.peak.r_at_1", ...


def _where(claim: Any) -> str:
    measure = claim.setup.get("measure")
    return measure or f"metrics.{claim.metric}"


def holding_truths(plan: PlanDoc, registry: Registry) -> dict[Key, float]:
    """Each arm's number at the mean of the planned claims that state it; a metric only an
    order reads, at the plan's gap above the arm it is ordered against (ASSUMED_ORDER_GAP
    margins when no number states it)."""
    stated: dict[Key, list[float]] = {}
    for c in plan["claims"]:
        claim = registry.claims[c["id"]]
        if claim.check is None:
            stated.setdefault((claim.setup["arm"], _where(claim)), []).append(claim.scalar())
    out = {k: sum(v) / len(v) for k, v in stated.items()}
    for c in plan["claims"]:
        claim = registry.claims[c["id"]]
        if claim.check is None:
            continue
        a, b = (claim.check.a, f"metrics.{c['metric']}"), (claim.check.b, f"metrics.{c['metric']}")
        gap = c.get("gap")
        gap = ASSUMED_ORDER_GAP * c["margin"] if gap is None else gap
        if a not in out and b in out:
            out[a] = out[b] + gap
        elif b not in out and a in out:
            out[b] = out[a] - gap
        elif a not in out and b not in out:
            out[b], out[a] = 0.5, 0.5 + gap
    return out


def shifted(truths: Mapping[Key, float], by: Mapping[Key, float]) -> dict[Key, float]:
    return {k: v + by.get(k, 0.0) for k, v in truths.items()}


def _spread(plan: PlanDoc, where: str) -> tuple[float, float]:
    """(one seed's sd, a gap's test-pair se) of the metric `where` names, from the plan."""
    spread = plan["spreads"]["mknn" if where.rsplit(".", 1)[-1].startswith("mknn")
                             else "r_at_1"]
    return float(spread["sd"]), float(spread["gap_pair_se"])


def _estimate(x: np.ndarray, pair_var: float, y: np.ndarray | None = None) -> TwoLevel:
    """The TwoLevel of per-seed means x (minus y's, a gap), with `pair_var` the test-pair
    part of the population interval."""
    s = len(x)
    var = float(np.var(x, ddof=1)) + (float(np.var(y, ddof=1)) if y is not None else 0.0)
    est = float(x.mean() - (y.mean() if y is not None else 0.0))
    se = math.sqrt(var / s)
    pop = math.sqrt(var / s + pair_var)
    df_pop = welch_df([(var / s, s - 1.0), (pair_var, N_PAIRS - 1.0)])
    method = "simulated: seeds on these test pairs"
    return TwoLevel(est, se, float(s - 1), s, N_PAIRS, 0, var, pair_var, method, pop,
                    min(df_pop, 1e6), "simulated: seeds and test pairs")


def _entry(est: TwoLevel, values: np.ndarray) -> dict[str, Any]:
    return {"values": {str(i): float(v) for i, v in enumerate(values)}, "mean": est.estimate,
            "ci": [est.estimate - 2 * est.se, est.estimate + 2 * est.se], "n": N_PAIRS,
            "two_level": est.to_dict()}


@dataclass
class Draws:
    """Every arm's per-seed numbers for one study, up to the cap."""

    values: dict[Key, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, rng: np.random.Generator, plan: PlanDoc, truths: Mapping[Key, float],
           cap: int) -> Draws:
        return cls({k: v + rng.normal(0, _spread(plan, k[1])[0], cap)
                    for k, v in truths.items()})

    def results(self, plan: PlanDoc, arms: list[str], n: int) -> dict[str, Any]:
        """results.json of the first n seeds of `arms`."""
        doc: dict[str, Any] = {"schema": "prh.results/2", "profile": plan["profile"],
                               "n_test": N_PAIRS, "k": 10, "arms": {}, "gaps": []}
        for (arm, where), v in self.values.items():
            if arm not in arms:
                continue
            block = doc["arms"].setdefault(arm, {"seeds": list(range(n)), "metrics": {}})
            part, *rest = where.split(".")
            if part == "curve":
                entry, name = rest
                block.setdefault("curve", {}).setdefault(entry, {})[name] = {
                    "values": {str(i): float(x) for i, x in enumerate(v[:n])}}
            else:
                pair = _spread(plan, where)[1] ** 2 / 2  # one arm's half of a gap's
                block["metrics"][rest[0]] = _entry(_estimate(v[:n], pair), v[:n])
        for c in plan["claims"]:
            if c["test"] == "number" or not set(c["arms"]) <= set(arms):
                continue
            a, b = c["arms"]
            key = f"metrics.{c['metric']}"
            if any(g["a"] == a and g["b"] == b and g["metric"] == c["metric"]
                   for g in doc["gaps"]):
                continue
            x, y = self.values[a, key][:n], self.values[b, key][:n]
            est = _estimate(x, y=y, pair_var=c["floor_var"])
            doc["gaps"].append({"a": a, "b": b, "metric": c["metric"], "diff": est.estimate,
                                **{k: v for k, v in _entry(est, x - y).items()
                                   if k in ("ci", "n", "two_level")}})
        return doc


@dataclass
class Outcome:
    """One study: each planned claim's final verdict and status, the seeds each arm ran."""

    verdicts: dict[str, str]
    statuses: dict[str, str]
    seeds: dict[str, int]


def study(plan: PlanDoc, registry: Registry, draws: Draws, margins: Mapping[str, float]
          ) -> Outcome:
    """Look after look under `plan` until no arm continues, judged by the real audit."""
    ledger = empty_ledger()
    arms = list(plan["arms"])
    seeds = dict.fromkeys(arms, 0)
    final: dict[str, Any] = {}
    for n in plan["looks"]:
        ctx = Context(registry.claims, plan["profile"], draws.results(plan, arms, n),
                      margins=margins)
        doc = audit(registry, ctx, plan, ledger)  # type: ignore[arg-type]
        seq = doc["sequential"]
        ledger = record(ledger, plan, doc, "simulated", None)  # type: ignore[assignment]
        for arm in arms:
            seeds[arm] = n
        final = seq["claims"]
        arms = seq["continuing_arms"]
        if not seq["next_seeds"]:
            break
    return Outcome({c: s["verdict"] for c, s in final.items()},
                   {c: s["status"] for c, s in final.items()}, seeds)


def simulate(plan: PlanDoc, registry: Registry, truths: Mapping[Key, float],
             margins: Mapping[str, float], reps: int, seed: int = 0) -> dict[str, Any]:
    """`reps` studies: per claim the share of each verdict, and the arm-seeds run (mean, and
    the share of studies that reach each look)."""
    rng = np.random.default_rng(seed)
    cap = plan["looks"][-1]
    verdicts: dict[str, dict[str, int]] = {c["id"]: {} for c in plan["claims"]}
    arm_seeds = []
    for _ in range(reps):
        out = study(plan, registry, Draws.of(rng, plan, truths, cap), margins)
        for cid, v in out.verdicts.items():
            verdicts[cid][v] = verdicts[cid].get(v, 0) + 1
        arm_seeds.append(sum(out.seeds.values()))
    return {"reps": reps, "arm_seeds": float(np.mean(arm_seeds)),
            "verdicts": {c: {v: n / reps for v, n in d.items()} for c, d in verdicts.items()}}
