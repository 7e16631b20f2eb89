"""bench/pairfree.py --solvers compares scipy's `linear_sum_assignment` on the scores (the
benchmark's solver; prh.pairfree's runs it on `reduced_costs`, tests/test_pairfree.py) with
lap's `lapjv` through the bench's `lapjv_max`: that wrapper must reach scipy's optimum, and
its pairs where the optimum is unique, or the bench's times compare different problems.

Tolerance on the objective f(P) = sum_i s[i, P(i)], n pairs, |s| <= S, float64 (u = eps / 2):
numpy's pairwise sum errs by at most (ceil(log2 n) + 16) u n S per evaluated objective, and each
solver's dual prices (of the order of S) leave its optimum within 12 n u S of the true one, so
|f_lapjv - f_scipy| <= (ceil(log2 n) + 28) n eps S; `tolerance` allows + 32. Distinct
assignments of continuous random scores tie with probability zero and differ by far more, so
the pairs must agree as well.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

pytest.importorskip("lap")

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_pairfree", ROOT / "bench" / "pairfree.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

EPS = np.finfo(np.float64).eps


def tolerance(s: np.ndarray) -> float:
    n = len(s)
    return (math.ceil(math.log2(n)) + 32) * n * EPS * float(np.abs(s).max())


def assert_same_optimum(s: np.ndarray) -> None:
    r0, c0 = linear_sum_assignment(s, maximize=True)
    r1, c1 = bench.lapjv_max(s)
    assert sorted(c1.tolist()) == list(range(len(s)))  # one-to-one
    assert abs(s[r1, c1].sum() - s[r0, c0].sum()) <= tolerance(s)
    np.testing.assert_array_equal(r1, r0)
    np.testing.assert_array_equal(c1, c0)


@pytest.mark.parametrize("kind", ["random", "near", "clustered"])
def test_lapjv_max_reaches_scipys_optimum_on_the_benchs_scores(kind):
    """The bench's own three kinds of scores, at 400 rows."""
    assert_same_optimum(bench.solver_scores(kind, 400, seed=400))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(-200, 200))
def test_lapjv_max_reaches_scipys_optimum_on_square_blocks(seed, n, exponent):
    """Gaussian scores times 10^exponent: any scale goes through the power-of-two scaling."""
    s = np.random.default_rng(seed).standard_normal((n, n)) * 10.0 ** exponent
    assert_same_optimum(s)
