"""harness.stats.curves (the numbers read off a run's per-epoch curve) and the audit's judgement of
the claims they answer (harness.audit.rules.rule_measured with `setup.measure`), on hand-made
curves and a Flickr30k-shaped results file."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.audit.claims import load_claims
from harness.audit.decide import seeds_estimate
from harness.audit.rules import Context, rule_measured
from harness.stats.curves import arm_curve, run_curve
from harness.stats.estimators import seed_spread

# the claims the pipeline's own Flickr30k run answers, and where results.json holds each
CURVE_CLAIMS = {
    "rerun_epoch1_good_r1": "curve.epoch1.r_at_1", "rerun_epoch1_bad_r1": "curve.epoch1.r_at_1",
    "rerun_epoch1_ntp_r1": "curve.epoch1.r_at_1", "rerun_good_peak_r1": "curve.peak.r_at_1",
    "rerun_good_peak_epoch": "curve.peak.epoch", "rerun_ntp_peak_r1": "curve.peak.r_at_1",
    "rerun_ntp_peak_epochs": "curve.peak.epoch",
    "paper_ntp_early_stop_r1": "curve.early_stop.r_at_1",
    "paper_ntp_best_on_test_r1": "curve.peak.r_at_1",
    "paper_ntp_val_loss_min": "curve.val_loss.min",
    "paper_ntp_val_loss_min_epoch": "curve.val_loss.min_epoch",
    "paper_ntp_val_loss_end": "curve.val_loss.last",
    "paper_fit30k_good_r1": "metrics.r_at_1_trainval",
    "paper_fit30k_bad_r1": "metrics.r_at_1_trainval",
    "paper_fit30k_ntp_r1": "metrics.r_at_1_trainval"}


def curve(r1: dict[int, float], losses: list[float] | None = None) -> list[dict]:
    """curve.json records: every epoch has a loss, the evaluated ones R@1, NTP a val_loss."""
    n = len(losses) if losses else max(r1)
    return [{"epoch": e, "loss": 1.0 / e, **({"r_at_1_test": r1[e], "r_at_1_fit": 0.9}
                                             if e in r1 else {}),
             **({"val_loss": losses[e - 1]} if losses else {})} for e in range(1, n + 1)]


def test_run_curve_equals_brute_force_over_the_evaluated_epochs() -> None:
    """Epochs 1, 3, 6, 9, 10 evaluated (eval_every 3 over 10 epochs); the loss is lowest at
    epoch 5, which is not evaluated, so early stopping takes epoch 6, the evaluated epoch
    with the lowest loss; the peak ties at epochs 6 and 9 and goes to the earlier."""
    r1 = {1: 0.04, 3: 0.10, 6: 0.15, 9: 0.15, 10: 0.12}
    losses = [5.0, 4.0, 3.5, 3.2, 3.0, 3.1, 3.4, 3.9, 4.2, 4.5]
    got = run_curve(curve(r1, losses))
    assert got == {"evaluated_epochs": [1, 3, 6, 9, 10],
                   "epoch1": {"epoch": 1, "r_at_1": 0.04},
                   "peak": {"epoch": 6, "r_at_1": 0.15},
                   "last": {"epoch": 10, "r_at_1": 0.12},
                   "val_loss": {"min": 3.0, "min_epoch": 5, "last": 4.5, "last_epoch": 10},
                   "early_stop": {"epoch": 6, "r_at_1": 0.15, "val_loss": 3.1}}
    jepa = run_curve(curve({2: 0.1, 4: 0.2}))  # an old run: epoch 1 never evaluated
    assert "epoch1" not in jepa and "val_loss" not in jepa and "early_stop" not in jepa
    with pytest.raises(ValueError, match="no evaluated epoch"):
        run_curve([{"epoch": 1, "loss": 1.0}])


def test_arm_curve_spreads_every_number_over_seeds_and_lists_the_cadence() -> None:
    runs = {"0": run_curve(curve({1: 0.04, 2: 0.2}, [3.0, 3.5])),
            "1": run_curve(curve({1: 0.05, 2: 0.1}, [2.9, 3.1]))}
    arm = arm_curve(runs)
    assert arm["epoch1"]["r_at_1"] == seed_spread({"0": 0.04, "1": 0.05})
    assert arm["peak"]["epoch"]["values"] == {"0": 2, "1": 2}
    assert arm["early_stop"]["r_at_1"]["values"] == {"0": 0.04, "1": 0.05}
    assert arm["early_stop"]["evaluated_epochs"] == [1, 2] and "test pairs" in arm["peak"]["what"]
    assert arm["runs"] == runs
    with pytest.raises(ValueError, match="different epochs"):
        arm_curve({**runs, "2": run_curve(curve({1: 0.04, 3: 0.1}))})


def test_seeds_estimate_is_the_seed_t_interval_and_the_binomial_below_three_seeds() -> None:
    """Three seeds: se^2 = var(values, ddof 1) / 3 with 2 df (the value on these test pairs;
    with no per-pair values the population interval is the same). Two seeds: the binomial
    p (1 - p) / n alone, no training variance; a loss from two seeds: no estimate."""
    values = {"0": 0.24, "1": 0.25, "2": 0.26}
    est = seeds_estimate(seed_spread(values), 1000, proportion=True)
    seed_var, pair_var = np.var(list(values.values()), ddof=1), 0.25 * 0.75 / 1000
    assert est.estimate == pytest.approx(0.25) and est.seed_var == pytest.approx(seed_var)
    assert (est.se, est.df) == (pytest.approx(math.sqrt(seed_var / 3)), 2.0)
    assert (est.se_population, est.df_population) == (est.se, est.df)
    two = seeds_estimate(seed_spread({"0": 0.24, "1": 0.26}), 1000, proportion=True)
    assert two.seed_var is None and two.se == pytest.approx(math.sqrt(pair_var))
    assert seeds_estimate(seed_spread({"0": 3.0, "1": 3.1}), 1000, proportion=False) is None


def flickr_results(epoch1: float, peak: float, stop: float, trainval: float) -> dict:
    """A Flickr30k-shaped results.json: three arms, three seeds, each arm's curve from
    harness.stats.curves and its train + val map R@1 with a two-level interval."""
    seeds = ("0", "1", "2")
    jitter = dict(zip(seeds, (-0.004, 0.0, 0.004), strict=True))
    arms = {}
    for arm in ("good", "bad", "ntp"):
        runs = {}
        for s in seeds:
            r1 = {1: epoch1 + jitter[s], 30: stop + jitter[s], 140: peak + jitter[s],
                  200: peak - 0.01 + jitter[s]}
            losses = [4.0 - 0.03 * e if e <= 30 else 3.1 + 0.007 * (e - 30)
                      for e in range(1, 201)] if arm == "ntp" else None
            runs[s] = run_curve(curve(r1, losses))
        tl = {"estimate": trainval, "se": 0.006, "df": 300.0, "n_seeds": 3, "n_pairs": 1000,
              "n_resamples": 2000, "seed_var": 1e-5, "pair_var": 3e-5, "method": "test"}
        arms[arm] = {"seeds": [0, 1, 2], "curve": arm_curve(runs), "controls": {},
                     "metrics": {"r_at_1_trainval": {"mean": trainval, "ci": [trainval - 0.012,
                                                                              trainval + 0.012],
                                                     "two_level": tl}}}
    return {"schema": "prh.results/2", "profile": "flickr30k", "n_test": 1000, "k": 10,
            "arms": arms,
            "gaps": []}


def test_flickr_curve_claims_get_a_verdict_and_the_world_profile_none() -> None:
    """On a Flickr30k results file every claim the run answers is judged: R@1 points that
    match within the .03 margin from three seeds are reproduced, far ones differ; epochs and
    losses have no margin (inconclusive, with the run's values). On the world profile every
    one of them stays not comparable (their setup.dataset is flickr30k)."""
    claims = load_claims()
    near = flickr_results(epoch1=0.04, peak=0.20, stop=0.134, trainval=0.25)
    got = {cid: rule_measured(claims[cid], Context(claims, "flickr30k", near))
           for cid in CURVE_CLAIMS}
    assert {cid: v.evidence.get("measure") for cid, v in got.items()} == CURVE_CLAIMS
    assert not [cid for cid, v in got.items() if v.verdict == "not rerun"]
    verdicts = {cid: v.verdict for cid, v in got.items()}
    assert {verdicts[c] for c in ("rerun_epoch1_good_r1", "rerun_epoch1_bad_r1",
                                  "rerun_epoch1_ntp_r1", "paper_ntp_early_stop_r1")} == {
        "reproduced"}
    assert verdicts["rerun_good_peak_r1"] == "differs"  # .20 against .254
    assert verdicts["paper_fit30k_good_r1"] == "differs"  # .25 against .346
    assert {verdicts[c] for c in ("rerun_good_peak_epoch", "paper_ntp_val_loss_min",
                                  "paper_ntp_val_loss_min_epoch")} == {"informational"}
    stop = got["paper_ntp_early_stop_r1"].evidence
    assert stop["run"] == pytest.approx(0.134) and stop["seeds"] == 3
    assert got["paper_ntp_val_loss_min"].evidence["values"] == {"0": 3.1, "1": 3.1, "2": 3.1}
    world = {**near, "profile": "world"}
    assert {rule_measured(claims[c], Context(claims, "world", world)).verdict
            for c in CURVE_CLAIMS} == {"not comparable"}
    gone = {**near, "arms": {a: {**b, "curve": {}} for a, b in near["arms"].items()}}
    assert rule_measured(claims["rerun_epoch1_good_r1"],
                         Context(claims, "flickr30k", gone)).verdict == "not rerun"
