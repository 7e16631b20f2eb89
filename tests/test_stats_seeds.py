"""harness.stats two-level bootstrap: the variance components it recovers from data drawn with
known seed and test-pair variances, the fall-back below 3 seeds, the paired gap, and bad shapes.
The verdict error rates built on it are proven in tests/test_verdict_simulation.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.stats import two_level_gap, two_level_mean


def crossed(rng: np.random.Generator, seeds: int, pairs: int, mu: float, seed_sd: float,
            pair_sd: float, noise_sd: float) -> np.ndarray:
    """x[s, i] = mu + seed effect + pair effect + noise (a crossed seeds x pairs design)."""
    return (mu + rng.normal(0, seed_sd, (seeds, 1)) + rng.normal(0, pair_sd, (1, pairs))
            + rng.normal(0, noise_sd, (seeds, pairs)))


def test_standard_error_tracks_the_true_sd_of_the_grand_mean() -> None:
    # true var of the grand mean: seed_sd^2 / S + (pair_sd^2 + noise_sd^2 / S) / n
    rng = np.random.default_rng(0)
    seeds, pairs, s_sd, p_sd, e_sd = 5, 400, 0.02, 0.2, 0.3
    truth = np.sqrt(s_sd**2 / seeds + (p_sd**2 + e_sd**2 / seeds) / pairs)
    ses = [two_level_mean(crossed(rng, seeds, pairs, 0.3, s_sd, p_sd, e_sd), n_resamples=400,
                          seed=k).se for k in range(40)]
    # the crossed bootstrap counts the noise at both levels, so it errs on the wide side only
    assert truth * 0.9 < np.median(ses) < truth * 1.5


def test_seed_variance_is_reported_only_from_three_seeds() -> None:
    rng = np.random.default_rng(1)
    three = two_level_mean(crossed(rng, 3, 300, 0.2, 0.05, 0.1, 0.1), n_resamples=300)
    two = two_level_mean(crossed(rng, 2, 300, 0.2, 0.05, 0.1, 0.1), n_resamples=300)
    assert three.training_variance and three.seed_var > 0 and three.note() == ""
    assert not two.training_variance and two.seed_var is None
    assert "training variance not estimated (2 seed(s) < 3)" in two.note()
    assert "test pairs of the seed-mean outcome" in two.method
    assert "seeds, then test pairs; 3 seeds, 300 pairs" in three.method
    # below 3 seeds the prediction interval can only add test-pair variance
    pi = two.prediction_interval(3)
    assert pi.hi - pi.lo == pytest.approx(2 * (two.interval().hi - two.estimate) * np.sqrt(
        1 + two.pair_var / two.se**2), rel=1e-9)


def test_paired_gap_cancels_shared_pair_difficulty() -> None:
    rng = np.random.default_rng(2)
    difficulty = rng.normal(0, 0.3, (1, 500))
    a = 0.30 + difficulty + rng.normal(0, 0.01, (3, 500))
    b = 0.25 + difficulty + rng.normal(0, 0.01, (3, 500))
    gap = two_level_gap(a, b, n_resamples=500)
    assert gap.estimate == pytest.approx(0.05, abs=0.005)
    assert gap.se < 0.003  # the 0.3 pair sd cancels; unpaired it would be about 0.3 / sqrt(500)
    assert "paired gap" in gap.method and "3/3 seeds" in gap.method
    with pytest.raises(ValueError, match="same test pairs"):
        two_level_gap(a, b[:, :400])


@pytest.mark.parametrize("shape", [(500,), (3, 1), (0, 10)])
def test_bad_shapes_are_refused(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"shape \(n_seeds, n_pairs\)"):
        two_level_mean(np.zeros(shape))


@settings(max_examples=25, deadline=None)
@given(seeds=st.integers(1, 5), pairs=st.integers(2, 60), shift=st.floats(-5, 5))
def test_interval_moves_with_the_data_and_contains_the_estimate(seeds: int, pairs: int,
                                                                 shift: float) -> None:
    x = np.random.default_rng(seeds * 100 + pairs).random((seeds, pairs))
    base, moved = two_level_mean(x, n_resamples=50), two_level_mean(x + shift, n_resamples=50)
    assert moved.estimate == pytest.approx(base.estimate + shift)
    assert moved.se == pytest.approx(base.se, rel=1e-6, abs=1e-12)
    iv = base.interval(0.9)
    assert iv.lo <= base.estimate <= iv.hi
    assert base.prediction_interval(3).lo <= iv.lo


def test_aggregate_runs_carries_two_level_entries_for_metrics_and_gaps() -> None:
    from harness.stats import aggregate_runs

    rng = np.random.default_rng(3)
    arms, seeds = ("good", "bad"), (0, 1, 2)
    per_query = {(a, s): {"r_at_1_hit": (rng.random(120) < (0.4 if a == "good" else 0.2))
                          .astype(float)} for a in arms for s in seeds}
    out = aggregate_runs(per_query, {k: {} for k in per_query}, arms, seeds, k=10, level=0.95,
                         n_resamples=200, seed=0)
    block = out["arms"]["good"]["metrics"]["r_at_1"]
    assert block["two_level"]["estimate"] == pytest.approx(block["mean"])
    assert block["two_level"]["n_seeds"] == 3 and block["two_level"]["training_variance"]
    (gap,) = out["gaps"]
    assert gap["two_level"]["estimate"] == pytest.approx(gap["diff"])
    assert "paired gap" in gap["two_level"]["method"]
