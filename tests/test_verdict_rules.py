"""The verdict rules on Flickr30k-shaped results built from per-seed, per-pair outcomes (the
real estimators, the real registry): a rerun a quarter margin from the paper is never
"differs", 2 seeds never give a sampled "reproduced", and "at chance" reads the interval over
seeds and test pairs (a separation inside the gap margin is said in words: tests/
test_verdict_mends.py, C7)."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.audit.claims import load_registry
from harness.audit.decide import at_chance
from harness.audit.judge import FAMILY_RULES, audit
from harness.audit.rules import Context
from harness.stats.estimators import two_level_gap, two_level_mean

REG = load_registry()
ARMS = ("good", "bad", "ntp")
N = 1000
PAPER_R1 = {"good": 0.246, "bad": 0.133, "ntp": 0.118}  # paper_*_r1
PAPER_MKNN = {"good": 0.171, "bad": 0.132, "ntp": 0.120}  # paper_bad_mknn10 and its order


def outcomes(mean: float, seeds: int, seed_sd: float, rng: np.random.Generator) -> np.ndarray:
    """(seeds, N) per-pair outcomes whose truth on these pairs is `mean`: a pair effect (mean
    exactly 0), a seed's shift and its flips, one seed's mean with sd `seed_sd`."""
    pairs = rng.normal(0, 0.4, N)
    pairs -= pairs.mean()
    return (mean + pairs + rng.normal(0, seed_sd / np.sqrt(2), (seeds, 1))
            + rng.normal(0, seed_sd * np.sqrt(N / 2), (seeds, N)))


def block(x: np.ndarray) -> dict[str, Any]:
    est = two_level_mean(x)
    iv = est.interval()
    return {"values": {str(s): float(v) for s, v in enumerate(x.mean(axis=1))},
            "mean": est.estimate, "ci": [iv.lo, iv.hi], "n": N, "two_level": est.to_dict()}


def results(r1: dict[str, float], mknn: dict[str, float], seeds: int = 3,
            seed_sd: float = 0.0064) -> dict[str, Any]:
    """results.json's arms and paired gaps on the same pairs (a shared pair effect per metric)."""
    rng = np.random.default_rng(11)
    runs = {m: {a: outcomes(v[a], seeds, seed_sd / (3 if m == "mknn10" else 1), rng)
                for a in ARMS} for m, v in (("r_at_1", r1), ("mknn10", mknn))}
    arms = {a: {"seeds": list(range(seeds)),
                "metrics": {m: block(runs[m][a]) for m in runs},
                "controls": {"chance_r_at_1": {"mean": 0.001}, "chance_mknn10": {"mean": 0.01}}}
            for a in ARMS}
    gaps = []
    for i, a in enumerate(ARMS):
        for b in ARMS[i + 1:]:
            for m in runs:
                est = two_level_gap(runs[m][a], runs[m][b])
                iv = est.interval()
                gaps.append({"a": a, "b": b, "metric": m, "diff": est.estimate, "n": N,
                             "ci": [iv.lo, iv.hi], "two_level": est.to_dict()})
    return {"schema": "prh.results/2", "profile": "flickr30k", "n_test": N, "k": 10, "arms": arms,
            "gaps": gaps}


def judged(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in audit(REG, Context(REG.claims, "flickr30k", res))["claims"]}


def shifted(values: dict[str, float], by: float) -> dict[str, float]:
    return {a: v + by for a, v in values.items()}


def test_a_rerun_a_quarter_margin_off_never_differs() -> None:
    rows = judged(results(shifted(PAPER_R1, 0.0075), shifted(PAPER_MKNN, 0.0025)))
    differs = {cid: r["reason"] for cid, r in rows.items() if r["verdict"] == "differs"
               and r["rule"] in FAMILY_RULES}
    assert differs == {}
    assert rows["paper_good_r1"]["verdict"] == "reproduced"


def test_two_seeds_give_no_sampled_reproduction() -> None:
    rows = judged(results(PAPER_R1, PAPER_MKNN, seeds=2))
    sampled = {cid: r["verdict"] for cid, r in rows.items() if r["rule"] in FAMILY_RULES}
    assert "reproduced" not in sampled.values()
    assert rows["paper_good_r1"]["verdict"] == "inconclusive (underpowered)"
    assert rows["paper_order_good_bad_r1"]["verdict"] == "inconclusive (underpowered)"


def test_at_chance_reads_the_interval_over_seeds_and_test_pairs() -> None:
    """An arm whose seeds agree closely but whose test pairs leave its level uncertain: the
    fixed-pairs interval clears chance, the population interval does not, and the arm is at
    chance (the claim about the arm is about its recipe, not these pairs)."""
    rng = np.random.default_rng(3)
    pairs = np.zeros(N)
    pairs[[5, 500, 900]] = 1.0  # 3 hits in 1,000 test pairs, the same under each seed
    est = two_level_mean(np.vstack([pairs] * 3) + rng.normal(0, 1e-4, (3, N)))
    entry = est.to_dict()
    assert entry["ci"][0] > 0.001 >= entry["ci_population"][0]
    res = {"arms": {"bad": {"metrics": {"r_at_1": {"ci": entry["ci"], "two_level": entry}},
                            "controls": {"chance_r_at_1": {"mean": 0.001}}}}}
    assert at_chance(res) == {"bad": {"r_at_1": {"ci": entry["ci_population"],
                                                 "chance": 0.001}}}
