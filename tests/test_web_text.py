"""The web-text claims judged on recap runs (harness.audit.web_text): which runs a claim is read
on, the verdicts on per-item outcomes with a known truth, Appendix C's subsample interval, and
the simulation behind borrowing the paper's seed spread below three seeds."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from harness.audit.claims import ClaimsError, load_registry
from harness.audit.verdict import Context
from harness.audit.web_text import rule_web_text
from harness.records.names import default_margins

ROOT = Path(__file__).resolve().parents[1]
REG = load_registry(ROOT / "harness/audit/claims.yaml")
N = 1024
TABLE7 = (2_240_000, ["alt", "recap"])  # t7_captioner_good's images and texts


def outcomes(mean: float, seeds: int, rng: np.random.Generator, seed_sd: float = 0.002
             ) -> list[np.ndarray]:
    """Per-item mutual 10-NN overlaps (multiples of .1) of `seeds` runs scoring `mean` on
    average: shared item difficulty plus each seed's shift."""
    base = rng.beta(2.0, 2.0 / mean - 2.0, N)
    return [np.clip(np.round(10 * (base + rng.normal(0, seed_sd))) / 10, 0, 1)
            for _ in range(seeds)]


def doc(runs: dict[str, tuple], draws: int = 200) -> dict:
    """A prh.recap_scores/4 document: name -> (arm, seed, images, sources, [(samples,
    per_item)])."""
    rng = np.random.default_rng(0)
    out = {"schema": "prh.recap_scores/4", "benchmarks": ["wit1024"], "setups": {}, "runs": {},
           "wit1024": {"k": 10, "n": N, "subsamples": {"size": 800, "draws": draws}}}
    for name, (arm, seed, images, sources, points) in runs.items():
        out["setups"][name] = {"arm": arm, "seed": seed, "images": images,
                               "sources": sources, "samples": [s for s, _ in points]}
        out["runs"][name] = [{"samples": s, "wit1024": {
            "best": float(x.mean()), "per_item": x.tolist(),
            "subsamples": (x.mean() + rng.normal(0, 0.002, draws)).tolist()}}
            for s, x in points]
    return out


def judge(cid: str, scores: dict | None, **change: object):
    claim = dataclasses.replace(REG.claims[cid], **change) if change else REG.claims[cid]
    return rule_web_text(claim, Context(REG.claims, "recap", web_text=scores))


def arm_runs(arm: str, xs: list[np.ndarray], images: int = TABLE7[0],
             sources: list[str] = TABLE7[1], samples: int = 21_600_000) -> dict[str, tuple]:
    return {f"{arm}-s{s}": (arm, s, images, sources, [(samples // 10, x * 0.5), (samples, x)])
            for s, x in enumerate(xs)}


def test_without_scored_runs_the_claim_is_not_rerun_in_its_own_category():
    got = judge("t7_captioner_good", None)
    assert got.verdict == "not rerun" and got.reason.startswith("data: no recap run scored")
    assert judge("ci_2m_good_bad", None).reason.startswith("scale: ")


def test_a_run_on_other_images_texts_or_length_is_not_comparable_naming_each_difference():
    rng = np.random.default_rng(1)
    small = doc(arm_runs("good", outcomes(0.107, 1, rng), images=9, sources=["alt"]))
    got = judge("t7_captioner_good", small)
    assert got.verdict == "not comparable"
    assert "images: claim 2.24M, run 9" in got.reason and "texts: claim alt+recap, run alt" \
        in got.reason
    # 2.24 as printed stands for 2,235,000 to 2,244,999 images
    assert judge("t7_captioner_good", doc(arm_runs("good", outcomes(0.107, 1, rng),
                                                   images=2_244_999))).verdict \
        != "not comparable"
    short = doc(arm_runs("good", outcomes(0.108, 1, rng), samples=10_000_000))
    got = judge("fixed21m_good", short)
    assert got.verdict == "not comparable" and "samples: claim 21.6M, no scored checkpoint" \
        in got.reason
    assert judge("t7_captioner_good", doc(arm_runs("ntp", outcomes(0.1, 1, rng)))).verdict \
        == "not rerun"  # no run of the claim's arm at all


def test_three_seeds_at_the_claims_number_reproduce_it_and_a_far_number_differs():
    rng = np.random.default_rng(2)
    same = judge("t7_captioner_good", doc(arm_runs("good", outcomes(0.107, 3, rng))))
    assert same.verdict == "reproduced", same.reason
    assert same.evidence["runs"] == {"good": ["good-s0", "good-s1", "good-s2"]}
    assert "claim states no run length: read at each run's last checkpoint" in same.reason
    far = judge("t7_captioner_good", doc(arm_runs("good", outcomes(0.07, 3, rng))))
    assert far.verdict == "differs", far.reason


def test_one_seed_never_reproduces_and_flags_only_a_large_difference():
    """The paper's seed sd (.0059, 2 df) makes a one-seed 95% interval about +- .03 wide."""
    rng = np.random.default_rng(3)
    same = judge("t7_captioner_good", doc(arm_runs("good", outcomes(0.107, 1, rng))))
    assert same.verdict.startswith("inconclusive") and same.evidence["seed_variance_borrowed"]
    assert "borrowed" in same.reason
    assert judge("t7_captioner_good", doc(arm_runs("good", outcomes(0.05, 1, rng)))).verdict \
        == "differs"


def test_an_ordering_pairs_the_items_and_reads_the_printed_gap():
    """Next-token's items score the printed +.037 below good views' (each seed shifted apart
    by .002): the paired gap reproduces; the arms swapped, it differs."""
    rng = np.random.default_rng(4)
    good = outcomes(0.108, 3, rng)
    ntp = [x - 0.037 + rng.normal(0, 0.002) for x in good]
    runs = {**arm_runs("good", good), **arm_runs("ntp", ntp)}
    got = judge("ci_2m_good_ntp", doc(runs))
    assert got.verdict == "reproduced", got.reason
    assert got.evidence["run"] == pytest.approx(np.mean(good) - np.mean(ntp), abs=1e-12)
    flipped = {**arm_runs("good", ntp), **arm_runs("ntp", good)}
    assert judge("ci_2m_good_ntp", doc(flipped)).verdict == "differs"


def test_appendix_c_interval_is_the_percentiles_of_the_paired_subsample_gaps():
    rng = np.random.default_rng(5)
    scores = doc({**arm_runs("good", outcomes(0.108, 3, rng)),
                  **arm_runs("ntp", outcomes(0.071, 3, rng))})
    got = judge("ci_2m_good_ntp", scores)
    last = {n: e[-1]["wit1024"]["subsamples"] for n, e in scores["runs"].items()}
    gaps = np.mean([last[f"good-s{s}"] for s in range(3)], axis=0) \
        - np.mean([last[f"ntp-s{s}"] for s in range(3)], axis=0)
    assert got.evidence["appendix_c_interval"] == pytest.approx(
        [np.percentile(gaps, 2.5), np.percentile(gaps, 97.5)], abs=1e-12)
    assert got.evidence["claim_interval"] == [0.025, 0.049]


def test_an_arm_at_chance_is_evidence_of_nothing():
    """Unrelated neighbour sets: each of the 10 neighbours shared with chance 10 / (N - 1)."""
    rng = np.random.default_rng(6)
    noise = [rng.binomial(10, 10 / (N - 1), N) / 10 for _ in range(3)]
    got = judge("t7_captioner_good", doc(arm_runs("good", noise)))
    assert got.verdict == "inconclusive" and "at chance" in got.reason


def test_a_web_text_claim_must_name_images_and_texts(tmp_path: Path):
    text = (ROOT / "harness/audit/claims.yaml").read_text()
    broken = text.replace("rule: web_text, setup: {scale: web_2m, arm: good, images: 2.24, "
                          "sources: [alt, recap]}", "rule: web_text, setup: {scale: web_2m, "
                          "arm: good, images: 2.24}", 1)
    assert broken != text
    (tmp_path / "claims.yaml").write_text(broken)
    with pytest.raises(ClaimsError, match=r"t7_captioner_good.*rule web_text matches runs by "
                       r"setup.images .* missing or malformed: \['sources'\]"):
        load_registry(tmp_path / "claims.yaml")


def mknn_runs(rng: np.random.Generator, latent: np.ndarray, shift: float, seed_sd: float,
              seeds: int) -> np.ndarray:
    """Per-item mutual 10-NN overlaps out of 10 on fixed items: latent_i + shift + a_s +
    .1 e_si, counted against ten thresholds (about .13, the bad arm's level)."""
    u = latent + shift + rng.normal(0, seed_sd, (seeds, 1)) \
        + 0.1 * rng.standard_normal((seeds, latent.size))
    return ((u[:, :, None] >= (np.arange(1, 11) - 0.5) / 10) * 0.1).sum(axis=2)


def test_one_seed_borrows_the_papers_seed_spread_because_the_item_level_stand_in_fails():
    """A one-seed run whose truth misses the paper's by the margin (.01), with a seed sd of one
    run's mean about .0058 (the paper's 50M-image seeds: .129, .118, .127): judged by the rule,
    which borrows that spread, it says "differs" at most .05 + .033 (3 Monte Carlo se at 400
    reps) of the time and never "reproduced". The item-level variance standing in for the
    seeds' (about .004 here, the Flickr30k estimator's mode below 3 seeds) would say it more
    often than that: that is why the seed spread is borrowed."""
    from harness.stats.equivalence import margin_test
    from harness.stats.estimators import two_level_mean

    reps, margin = 400, default_margins()["mknn10"]
    rng = np.random.default_rng(7)
    latent = np.random.default_rng(2026).beta(2.0, 13.4, N)
    tau = math.hypot(0.006, 0.1)

    def truth(shift: float) -> float:
        thresholds = (np.arange(1, 11) - 0.5) / 10
        return float((sps.norm.cdf((latent[:, None] + shift - thresholds) / tau) * 0.1)
                     .sum(axis=1).mean())

    lo, hi = 0.0, 0.5  # the shift that moves the truth by the margin (bisection)
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if truth(mid) - truth(0.0) < margin else (lo, mid)
    claim = REG.claims["t7_captioner_good"]
    borrowed, stand_in = Counter(), Counter()
    for _ in range(reps):
        x = mknn_runs(rng, latent, lo, 0.006, 1)
        paper = float(mknn_runs(rng, latent, 0.0, 0.006, 3).mean())
        scores = doc(arm_runs("good", [x[0]]), draws=2)
        got = rule_web_text(dataclasses.replace(claim, value=paper, printed=f"{paper:.4f}"),
                            Context(REG.claims, "recap", web_text=scores))
        borrowed[got.verdict] += 1
        est = two_level_mean(x)
        stand = margin_test(est.estimate - paper, est.prediction_se(3), est.df, margin)
        stand_in[stand.p_beyond <= 0.05] += 1
    assert borrowed["differs"] / reps <= 0.05 + 0.033, borrowed
    assert borrowed["reproduced"] == 0
    assert stand_in[True] / reps > 0.05 + 0.033, stand_in  # the stand-in over-rejects
    assert math.isclose(sum(borrowed.values()), reps)
