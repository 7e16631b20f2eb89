"""The proof of the audit's statistics: the verdict rules run 500 times on per-seed, per-pair
outcomes drawn from a known truth, and their error rates stay within the nominal level plus
Monte Carlo error (3 binomial standard errors of a 500-draw rate).

- no difference (the rerun's truth is the claim's): a claimed value drawn as the mean of an
  independent 3-seed replication; "differs" is a false alarm, nominal 5%;
- a real difference at the margin (the worst case for equivalence): "reproduced" is a false
  reproduction, nominal 5% (two one-sided tests at 5%);
- power: with no difference, "reproduced" must come often, or the rules could pass the two
  checks above by never saying anything.

Outcomes are R@1-like hits: pair difficulty shared by every seed (the test pairs are fixed),
a seed effect per training run, and Bernoulli noise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.audit import ALPHA, decide
from harness.stats import two_level_mean

REPS, PAIRS, RESAMPLES = 500, 200, 300
MU, SEED_SD, PAIR_SD, MARGIN = 0.25, 0.015, 0.15, 0.08
LIMIT = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / REPS)  # 0.05 + 0.029


def hits(rng: np.random.Generator, mu: float, seeds: int) -> np.ndarray:
    p = mu + rng.normal(0, SEED_SD, (seeds, 1)) + rng.normal(0, PAIR_SD, (1, PAIRS))
    return (rng.random((seeds, PAIRS)) < np.clip(p, 0, 1)).astype(float)


def rates(seeds: int) -> dict[str, float]:
    rng = np.random.default_rng(2026 + seeds)
    false_differs = false_reproduced = power = 0
    for r in range(REPS):
        same = two_level_mean(hits(rng, MU, seeds), n_resamples=RESAMPLES, seed=r)
        claim = hits(rng, MU, 3).mean()  # the paper's own 3-seed mean, from the same truth
        false_differs += decide(same, claim, MARGIN, 3)[0] == "differs"
        power += decide(same, MU, MARGIN, 3)[0] == "reproduced"
        off = two_level_mean(hits(rng, MU + MARGIN, seeds), n_resamples=RESAMPLES, seed=r)
        false_reproduced += decide(off, MU, MARGIN, 3)[0] == "reproduced"
    return {"false differs": false_differs / REPS, "false reproduced": false_reproduced / REPS,
            "power": power / REPS}


@pytest.mark.parametrize("seeds", [3, 1])
def test_error_rates_stay_within_nominal_level(seeds: int) -> None:
    got = rates(seeds)
    print(f"{seeds} seed(s): {got}")  # the closing note quotes these
    assert got["false differs"] <= LIMIT
    assert got["false reproduced"] <= LIMIT
    assert got["power"] >= 0.5
