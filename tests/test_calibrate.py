"""prh.calibrate: equal to the reference package on the same permutations, hand-checked cases,
valid p-values under no alignment, and the calibrated block through align and aggregate."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from calibrated_similarity import calibrate as reference
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config.params import EvalConfig
from harness.records.results import aggregate_calibrated
from prh import align, calibrate, metrics


def scores_k(k: int) -> dict[str, calibrate.Score]:
    return {"mknn": lambda a, b: metrics.mutual_knn(a, b, k).mean(), "cka": metrics.cka}


def ours(a, b, scores, n_permutations: int, seed: int) -> dict[str, dict[str, float]]:
    null = calibrate.null_scores(a, b, scores, calibrate.permutations(len(a), n_permutations,
                                                                      seed))
    return {name: calibrate.calibrate(f(a, b), null[name]) for name, f in scores.items()}


def theirs(a, b, score, n_permutations: int, seed: int, alpha: float):
    """The package's calibrate on torch copies of a, b, fed our permutations in order."""
    perms = calibrate.permutations(len(a), n_permutations, seed)
    return reference(torch.from_numpy(a), torch.from_numpy(b),
                     lambda x, y: score(x.numpy(), y.numpy()), K=n_permutations, alpha=alpha,
                     perm_fn=lambda n, device: torch.from_numpy(next(perms)))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(12, 40), da=st.integers(2, 8), db=st.integers(2, 8), k=st.integers(1, 5),
       n_permutations=st.integers(1, 60), seed=st.integers(0, 2**16), signal=st.floats(0, 2))
def test_equals_the_reference_on_the_same_permutations(n, da, db, k, n_permutations, seed,
                                                       signal):
    """The package works in float32: its threshold and quantiles are ours rounded to float32
    (rounding keeps the order), its p-value ours rounded once, its calibrated score ours up to
    float32 arithmetic."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, da))
    b = signal * a[:, :1] @ rng.standard_normal((1, db)) + rng.standard_normal((n, db))
    scores = scores_k(k)
    got = ours(a, b, scores, n_permutations, seed)
    for name, score in scores.items():
        for key, alpha in {**calibrate.QUANTILES, "threshold": calibrate.ALPHA}.items():
            scal, p, tau = theirs(a, b, score, n_permutations, seed, alpha)
            assert np.float32(got[name][key]) == tau.item(), (name, key)
        assert np.float32(got[name]["p_value"]) == p.item(), name
        assert got[name]["calibrated"] == pytest.approx(scal.item(), abs=1e-5)
        assert got[name]["n_permutations"] == n_permutations


def test_a_hand_computed_null():
    """Observed .9 against 19 nulls 0, .01, ..., .18: the threshold is order statistic
    ceil(.95 x 20) = 19 of the 20 scores, .18; p = 1/20; calibrated (.9 - .18) / (1 - .18).
    The median is order statistic 10 (.09); the 99th percentile, 20, is the observed score
    itself: 19 permutations cannot place it below."""
    got = calibrate.calibrate(0.9, np.arange(19) / 100)
    assert got == pytest.approx({"raw": 0.9, "null_q50": 0.09, "null_q95": 0.18, "null_q99": 0.9,
                                 "threshold": 0.18, "alpha": 0.05, "p_value": 0.05,
                                 "calibrated": 0.72 / 0.82, "n_permutations": 19})
    # ties count against the observed score: .3 against .1, .3, .5 gives p = (1 + 2) / 4
    tied = calibrate.calibrate(0.3, np.array([0.1, 0.3, 0.5]))
    assert tied["p_value"] == 0.75 and tied["threshold"] == 0.5 and tied["calibrated"] == 0.0
    assert tied["null_q50"] == 0.3  # order statistic ceil(.5 x 4) = 2 of .1, .3, .3, .5
    # the same score summed in another order is a tie: .1 + .2 is .3 plus one bit in float64
    assert 0.1 + 0.2 > 0.3
    summed = calibrate.calibrate(0.1 + 0.2, np.full(19, 0.3))
    assert summed["p_value"] == 1.0 and summed["calibrated"] == 0.0


@settings(max_examples=10, deadline=None)
@given(n=st.integers(20, 60), d=st.integers(3, 12), seed=st.integers(0, 2**16))
def test_a_rotated_copy_beats_every_permutation(n, d, seed):
    """b = a Q (Q orthogonal): every permuted score is below the observed one, so p = 1/(K+1),
    and with K = 19 the threshold is the largest null score, so the calibrated score is
    (observed - max null) / (1 - max null) > 0."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, d))
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    scores = scores_k(3)
    null = calibrate.null_scores(a, a @ q, scores, calibrate.permutations(n, 19, seed))
    for name, score in scores.items():
        observed = score(a, a @ q)
        got = calibrate.calibrate(observed, null[name])
        top = null[name].max()
        assert observed > top and got["p_value"] == 1 / 20
        assert got["threshold"] == top
        assert got["calibrated"] == pytest.approx((observed - top) / (1 - top), abs=1e-15)
        assert got["calibrated"] > 0
    assert score(a, a @ q) == pytest.approx(1.0)  # CKA of a rotated copy


def test_independent_pairs_give_uniform_p_values_and_a_calibrated_score_near_zero():
    """400 independent draws (n = 40, K = 19): under no alignment the observed score is one
    more permutation, so P(p <= j / 20) = j / 20; CKA (continuous) hits each level within 3
    Monte Carlo standard errors, mutual k-NN (whose ties count against it) at .05 too."""
    draws, n_permutations, n = 400, 19, 40
    rng = np.random.default_rng(123)
    results = [ours(rng.standard_normal((n, 6)), rng.standard_normal((n, 6)), scores_k(5),
                    n_permutations, seed) for seed in range(draws)]
    for name, levels in (("cka", (0.05, 0.25, 0.5)), ("mknn", (0.05,))):
        p = np.array([r[name]["p_value"] for r in results])
        cal = np.array([r[name]["calibrated"] for r in results])
        for level in levels:
            se = math.sqrt(level * (1 - level) / draws)
            assert abs(np.mean(p <= level) - level) <= 3 * se, (name, level, np.mean(p <= level))
        assert np.all(cal[p > calibrate.ALPHA] == 0)  # only a significant score is above 0
        assert cal.mean() < 0.005 and cal.max() < 0.1


def test_a_collapsed_side_calibrates_to_zero():
    """Every text the same point: CKA is 0 for the pairing and every permutation; mutual k-NN
    takes the lowest-indexed neighbours on the collapsed side, the same sets under every
    permutation, so its raw score is whatever it is but never beats the null."""
    a = np.random.default_rng(0).standard_normal((50, 8))
    b = np.tile(np.linspace(-1, 1, 4), (50, 1))
    got = ours(a, b, scores_k(5), 19, seed=0)
    assert got["cka"]["raw"] == 0.0 and got["cka"]["threshold"] == 0.0
    for name in ("cka", "mknn"):
        assert got[name]["calibrated"] == 0.0 and got[name]["p_value"] == 1.0
        assert got[name]["null_q50"] == got[name]["raw"] == got[name]["null_q99"]


def test_score_alignment_carries_the_calibrated_block():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((260, 16))
    y = x[:, :8] + 0.5 * rng.standard_normal((260, 8))
    off = align.score_alignment(x[:160], y[:160], x[160:], y[160:], k=10, seed=3)
    on = align.score_alignment(x[:160], y[:160], x[160:], y[160:], k=10, seed=3,
                               n_permutations=19)
    assert off.calibrated == {} and on.metrics == off.metrics
    assert on.calibrated == ours(x[160:], y[160:], {"mknn10": scores_k(10)["mknn"],
                                                    "cka_linear": metrics.cka}, 19, seed=3)
    assert on.calibrated["mknn10"]["raw"] == on.metrics["mknn10"]
    assert on.calibrated["cka_linear"]["raw"] == on.metrics["cka_linear"]
    assert on.calibrated["mknn10"]["p_value"] == 1 / 20 < on.calibrated["mknn10"]["calibrated"]
    with pytest.raises(ValueError, match="n_permutations = -1"):
        align.score_alignment(x[:160], y[:160], x[160:], y[160:], n_permutations=-1)


def test_eval_config_refuses_a_null_too_small_to_reach_alpha():
    EvalConfig(n_permutations=0).validate()
    EvalConfig(n_permutations=calibrate.MIN_PERMUTATIONS).validate()
    for bad in (calibrate.MIN_PERMUTATIONS - 1, 1, -1):
        with pytest.raises(ValueError, match=f"n_permutations = {bad}: use 0"):
            EvalConfig(n_permutations=bad).validate()
    assert 1 / (calibrate.MIN_PERMUTATIONS + 1) <= calibrate.ALPHA
    assert 1 / calibrate.MIN_PERMUTATIONS > calibrate.ALPHA


def block(raw: float, p: float) -> dict[str, float]:
    return {"raw": raw, "null_q50": 0.1, "null_q95": 0.2, "null_q99": 0.3, "threshold": 0.2,
            "alpha": 0.05, "p_value": p, "calibrated": (raw - 0.2) / 0.8, "n_permutations": 99}


def test_aggregate_calibrated_spreads_every_field_over_seeds():
    runs = {("good", 0): {"mknn10": block(0.6, 0.01)}, ("good", 1): {"mknn10": block(1.0, 0.03)},
            ("bad", 0): {}, ("bad", 1): {}}
    out = aggregate_calibrated(runs, ["good", "bad"], [0, 1])
    assert out["bad"] == {}
    m = out["good"]["mknn10"]
    assert m["n_permutations"] == 99 and m["alpha"] == 0.05
    assert m["raw"]["values"] == {"0": 0.6, "1": 1.0} and m["raw"]["mean"] == pytest.approx(0.8)
    assert m["calibrated"]["mean"] == pytest.approx(0.75)
    assert m["calibrated"]["std"] == pytest.approx(math.sqrt(2) * 0.25)
    assert m["p_value"]["mean"] == pytest.approx(0.02) and m["null_q95"]["half_range"] == 0.0
    assert set(m) == set(block(0, 0))
    runs["good", 1] = {"mknn10": {**block(1.0, 0.03), "n_permutations": 19}}
    with pytest.raises(ValueError, match="good: seed 1 was calibrated on other"):
        aggregate_calibrated(runs, ["good", "bad"], [0, 1])
