"""harness.stats: bootstrap intervals against scipy, the paired bootstrap on known answers, and
seed spread on the audit article's four WIT seeds (.191 / .181 / .179 / .121)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from harness.stats.estimators import (
    Interval,
    bootstrap_ci,
    paired_bootstrap_diff,
    seed_spread,
    seed_t_interval,
)

SEEDS = {0: 0.191, 1: 0.181, 2: 0.179, 3: 0.121}


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_bootstrap_matches_scipy_within_monte_carlo_error(method: str) -> None:
    x = (np.random.default_rng(7).random(1000) < 0.25).astype(float)
    ours = bootstrap_ci(x, method=method, n_resamples=4000, seed=0)
    ref = sps.bootstrap((x,), np.mean, n_resamples=4000, method=method.replace("bca", "BCa"),
                        rng=np.random.default_rng(12345)).confidence_interval
    # standard error of the mean is 0.0137; 4000 resamples put the 2.5% quantile within ~.002
    assert abs(ours.lo - ref.low) < 0.004 and abs(ours.hi - ref.high) < 0.004
    assert ours.n == 1000 and ours.n_resamples == 4000 and ours.note == ""
    # and close to the normal-theory interval mean +- 1.96 se
    se = x.std(ddof=1) / math.sqrt(x.size)
    assert abs(ours.lo - (x.mean() - 1.96 * se)) < 0.004


def test_bca_degenerate_falls_back_to_percentile_and_says_so() -> None:
    iv = bootstrap_ci(np.full(50, 0.3), method="bca", n_resamples=200)
    assert (iv.lo, iv.hi) == pytest.approx((0.3, 0.3))
    assert iv.method.startswith("percentile") and "BCa degenerate" in iv.note
    assert "n=50" in iv.label() and "200 resamples" in iv.label()


def test_bootstrap_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci(np.array([1.0, np.nan, 0.0]))
    with pytest.raises(ValueError, match="statistic"):
        bootstrap_ci(np.ones(5), statistic="mode")


def test_paired_diff_known_answers() -> None:
    a = np.r_[np.ones(300), np.zeros(700)]
    diff, iv = paired_bootstrap_diff(a, a.copy(), n_resamples=500)
    assert diff == 0.0 and (iv.lo, iv.hi) == (0.0, 0.0)
    # constant per-pair difference: every resample has the same mean
    diff, iv = paired_bootstrap_diff(a + 0.25, a, n_resamples=500)
    assert diff == pytest.approx(0.25) and iv.lo == pytest.approx(0.25)
    assert iv.hi == pytest.approx(0.25)
    # d = +1 on 200 pairs, -1 on 100, 0 on 700: mean .1, sd of d = sqrt(.3 - .01)
    d = np.r_[np.ones(200), -np.ones(100), np.zeros(700)]
    diff, iv = paired_bootstrap_diff(np.maximum(d, 0), np.maximum(-d, 0), n_resamples=5000)
    se = math.sqrt(0.29) / math.sqrt(1000)
    assert diff == pytest.approx(0.1)
    assert iv.lo == pytest.approx(0.1 - 1.96 * se, abs=0.004)
    assert iv.hi == pytest.approx(0.1 + 1.96 * se, abs=0.004)
    assert iv.method == "paired percentile bootstrap over test pairs" and iv.n == 1000


def test_paired_diff_is_paired_not_independent() -> None:
    """Strongly correlated arms: the paired interval is far narrower than an unpaired one."""
    rng = np.random.default_rng(0)
    b = (rng.random(1000) < 0.5).astype(float)
    a = b.copy()
    a[:30] = 1.0 - a[:30]
    _, iv = paired_bootstrap_diff(a, b, n_resamples=2000)
    unpaired_se = math.sqrt(2 * 0.25 / 1000)
    assert iv.hi - iv.lo < unpaired_se  # unpaired 95% width would be ~ 4 * .022


def test_paired_diff_rejects_mismatched_arms() -> None:
    with pytest.raises(ValueError, match="same test pairs"):
        paired_bootstrap_diff(np.ones(10), np.ones(11))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=5, max_size=60),
       st.lists(st.integers(0, 1), min_size=5, max_size=60), st.floats(-5, 5))
def test_paired_diff_identities(xa: list[int], xb: list[int], shift: float) -> None:
    n = min(len(xa), len(xb))
    a, b = np.array(xa[:n], float), np.array(xb[:n], float)
    d1, i1 = paired_bootstrap_diff(a, b, n_resamples=200, seed=3)
    d2, i2 = paired_bootstrap_diff(a + shift, b + shift, n_resamples=200, seed=3)
    d3, i3 = paired_bootstrap_diff(b, a, n_resamples=200, seed=3)
    assert d2 == pytest.approx(d1, abs=1e-9) and d3 == pytest.approx(-d1, abs=1e-12)
    assert (i2.lo, i2.hi) == pytest.approx((i1.lo, i1.hi), abs=1e-9)
    assert (i3.lo, i3.hi) == pytest.approx((-i1.hi, -i1.lo), abs=1e-12)
    assert i1.lo <= i1.hi


def test_seed_spread_flags_the_fourth_wit_seed() -> None:
    s = seed_spread(SEEDS)
    assert s["mean"] == pytest.approx(0.168)
    assert s["half_range"] == pytest.approx(0.035)
    assert s["std"] == pytest.approx(np.std(list(SEEDS.values()), ddof=1))
    assert (s["min"], s["max"], s["median"]) == pytest.approx((0.121, 0.191, 0.180))
    assert s["values"] == {"0": 0.191, "1": 0.181, "2": 0.179, "3": 0.121}
    assert s["outliers"] == ["3"]
    # the first three alone: mean .1837 (printed .184), no outlier
    three = seed_spread({k: v for k, v in SEEDS.items() if k != 3})
    assert three["mean"] == pytest.approx(0.18367, abs=1e-5) and three["outliers"] == []


def test_seed_spread_edge_cases() -> None:
    assert seed_spread({0: 0.2})["std"] is None
    assert seed_spread({0: 0.2, 1: 0.9})["outliers"] == []  # two seeds: nothing to flag
    assert seed_spread({0: 0.2, 1: 0.2, 2: 0.2})["outliers"] == []
    # MAD = 0: the mean-absolute-deviation fallback still finds a far seed
    assert seed_spread({0: 0.2, 1: 0.2, 2: 0.2, 3: 0.2, 4: 0.9})["outliers"] == ["4"]
    with pytest.raises(ValueError, match="no seed"):
        seed_spread({})


def test_seed_t_interval_by_hand() -> None:
    iv = seed_t_interval(SEEDS)
    x = np.array(list(SEEDS.values()))
    half = sps.t.ppf(0.975, 3) * x.std(ddof=1) / 2.0
    assert isinstance(iv, Interval) and iv.n == 4 and iv.n_resamples == 0
    assert (iv.lo, iv.hi) == pytest.approx((x.mean() - half, x.mean() + half))
