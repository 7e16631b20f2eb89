"""prh.metrics against brute-force references, hand-made ties and platonic-rep's numbers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from prh import metrics

FAST = settings(max_examples=40, deadline=None)


def small_ints(n_min: int = 2, n_max: int = 12, d_max: int = 4):
    """Integer-valued float matrices: exact products, so ties are frequent and exact."""
    return st.tuples(st.integers(n_min, n_max), st.integers(1, d_max)).flatmap(
        lambda s: st.tuples(arrays(np.float64, s, elements=st.integers(-3, 3).map(float)),
                            arrays(np.float64, s, elements=st.integers(-3, 3).map(float))))


def nonzero_rows(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x[~x.any(axis=1), 0] = 1.0
    return x


# ----------------------------------------------------------------------------- retrieval
@FAST
@given(small_ints())
def test_ranks_match_brute_force_with_ties_against_the_true_pair(ab):
    q, c = ab
    s = q @ c.T
    brute = [sum(s[i, j] >= s[i, i] for j in range(len(q))) - 1 for i in range(len(q))]
    assert metrics.retrieval_ranks(q, c, chunk=3).tolist() == brute
    for k in (1, len(q)):
        assert metrics.recall_at_k(q, c, k).tolist() == [float(r < k) for r in brute]


def test_ties_count_against_the_true_pair_by_hand():
    q = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    c = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])
    # row 0: scores 1, 2, 0 -> one strictly better -> rank 1; row 1: 1, 2, 0 -> rank 0;
    # row 2: scores 0, 0, 1 -> rank 0
    assert metrics.retrieval_ranks(q, c).tolist() == [1, 0, 0]
    tied = np.ones((4, 3))
    assert metrics.retrieval_ranks(tied, tied).tolist() == [3, 3, 3, 3]
    assert metrics.recall_at_k(tied, tied, 1).sum() == 0.0


def test_collapsed_candidates_rank_last_even_after_rounding():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((300, 384)).astype(np.float32)
    c = np.tile(rng.standard_normal(384).astype(np.float32) / 7, (300, 1))
    assert metrics.retrieval_ranks(q, c, chunk=64).tolist() == [299] * 300


# ----------------------------------------------------------------------------- mutual k-NN
def brute_mutual_knn(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """Huh et al.'s definition with a stable sort: the reference for ties by lowest index."""
    def sets(x):
        x = metrics.l2_normalize(x)
        s = x @ x.T
        np.fill_diagonal(s, -np.inf)
        return [set(row[:k]) for row in np.argsort(-s, axis=1, kind="stable")]
    return np.array([len(sa & sb) / k for sa, sb in zip(sets(a), sets(b), strict=True)])


@FAST
@given(small_ints(n_min=3, n_max=14, d_max=3), st.integers(1, 12))
def test_mutual_knn_matches_stable_sort_reference(ab, k):
    a, b = map(nonzero_rows, ab)
    k = min(k, len(a) - 1)
    np.testing.assert_array_equal(metrics.mutual_knn(a, b, k), brute_mutual_knn(a, b, k))


def test_mutual_knn_chunked_equals_unchunked():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((257, 16)), rng.standard_normal((257, 8))
    np.testing.assert_array_equal(metrics.mutual_knn(a, b, 10, chunk=50),
                                  brute_mutual_knn(a, b, 10))


def test_mutual_knn_chance_is_k_over_n_minus_1():
    rng = np.random.default_rng(2)
    n, k = 1000, 10
    score = metrics.mutual_knn(rng.standard_normal((n, 32)), rng.standard_normal((n, 32)), k)
    # per-item overlap ~ Binomial(k, k/(n-1)) / k: sd of the mean ~ 0.001
    assert abs(score.mean() - k / (n - 1)) < 0.003


def test_mutual_knn_identical_spaces_score_one():
    x = np.random.default_rng(3).standard_normal((50, 5))
    assert metrics.mutual_knn(x, 3 * x, 10).tolist() == [1.0] * 50


# ----------------------------------------------------------------------------- CKA
def brute_hsic(k_mat: np.ndarray, l_mat: np.ndarray, unbiased: bool) -> float:
    n = len(k_mat)
    if not unbiased:
        h = np.eye(n) - 1.0 / n
        return float(np.trace(k_mat @ h @ l_mat @ h))
    kt, lt = k_mat - np.diag(np.diag(k_mat)), l_mat - np.diag(np.diag(l_mat))
    one = np.ones(n)
    return float((np.trace(kt @ lt) + (one @ kt @ one) * (one @ lt @ one) / ((n - 1) * (n - 2))
                  - 2 / (n - 2) * one @ kt @ lt @ one) / (n * (n - 3)))


@FAST
@given(st.integers(6, 30), st.integers(1, 6), st.integers(1, 6), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_cka_matches_kernel_form(n, da, db, unbiased, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, da))
    b = a[:, :1] @ rng.standard_normal((1, db)) + rng.standard_normal((n, db))
    k_mat, l_mat = a @ a.T, b @ b.T
    hs = [brute_hsic(x, y, unbiased) for x, y in ((k_mat, l_mat), (k_mat, k_mat), (l_mat, l_mat))]
    if unbiased and min(hs[1:]) <= 0:
        with pytest.raises(ValueError, match="not positive"):
            metrics.cka(a, b, unbiased=True)
        return
    assert metrics.cka(a, b, unbiased=unbiased) == pytest.approx(hs[0] / np.sqrt(hs[1] * hs[2]),
                                                                 rel=1e-9, abs=1e-12)


def test_cka_invariances_and_guards():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((40, 6))
    rot = np.linalg.qr(rng.standard_normal((6, 6)))[0]
    assert metrics.cka(a, 5 * a @ rot + 2) == pytest.approx(1.0, abs=1e-12)
    assert metrics.cka(a, a @ rot, unbiased=True) == pytest.approx(1.0, abs=1e-12)
    assert metrics.cka(a, np.ones((40, 3))) == 0.0
    with pytest.raises(ValueError, match="n > 3"):
        metrics.cka(a[:3], a[:3], unbiased=True)


# ----------------------------------------------------------------------------- parity
def parity_mats() -> tuple[np.ndarray, np.ndarray]:
    """Fixed matrices for the golden values of platonic-rep `metrics.py` at
    dcd76ba3c950c1b197a2ae8b1c6713535c94ecf9, produced once outside the repo with this
    project's venv (torch 2.14.1, float64 tensors):

        git -C <fetched mirror of minyoungg/platonic-rep> show HEAD:metrics.py > prh_metrics.py
        python golden.py  # stubs the unused torchaudio/sklearn imports, builds these two
                          # matrices, L2-normalises rows as `compute_score` does (An, Bn),
                          # prints AlignmentMetrics.mutual_knn(An, Bn, topk=k) for k = 1, 5, 10,
                          # .cka(A, B), .unbiased_cka(A, B), .cka(An, Bn), .unbiased_cka(An, Bn)
    """
    rng = np.random.default_rng(20261129)
    a = rng.standard_normal((100, 24))
    b = a @ rng.standard_normal((24, 12)) + 0.5 * rng.standard_normal((100, 12))
    return a, b


@pytest.mark.parametrize("k, golden", [(1, 0.14000000059604645), (5, 0.30799999833106995),
                                       (10, 0.4169999957084656)])
def test_mutual_knn_parity_with_platonic_rep(k, golden):
    """platonic-rep builds float32 masks, hence the 1e-8 offsets (0.14 is 14/100 exactly)."""
    a, b = parity_mats()
    assert metrics.mutual_knn(a, b, k).mean() == pytest.approx(golden, abs=1e-7)


@pytest.mark.parametrize("normalise, unbiased, golden", [
    (False, False, 0.6333835400849399), (False, True, 0.5976813426012908),
    (True, False, 0.6449383682160849), (True, True, 0.6053225045831147)])
def test_cka_parity_with_platonic_rep(normalise, unbiased, golden):
    """platonic-rep divides by sqrt(HSIC_kk HSIC_ll) + 1e-6; undoing that epsilon, the values
    agree to 1e-12."""
    a, b = parity_mats()
    if normalise:
        a, b = metrics.l2_normalize(a), metrics.l2_normalize(b)
    denom = np.sqrt(metrics._hsic_terms(a, a, unbiased) * metrics._hsic_terms(b, b, unbiased))
    ours = metrics.cka(a, b, unbiased=unbiased)
    assert ours * denom / (denom + 1e-6) == pytest.approx(golden, abs=1e-12)


# ----------------------------------------------------------------------------- FOSCTTM
def brute_foscttm(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The benchmark's definition, one query at a time, exact arithmetic on integer inputs."""
    n = len(q)
    out = []
    for i in range(n):
        s = [float(q[i] @ k[j]) for j in range(n)]
        higher = sum(v > s[i] for v in s)
        tied = sum(v == s[i] for j, v in enumerate(s) if j != i)
        out.append((higher + 0.5 * tied) / (n - 1))
    return np.array(out)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.integers(2, 30), st.integers(1, 4), st.integers(1, 3))
def test_foscttm_midranks_match_brute_force(seed, n, d, levels):
    """Small integer vectors tie often; the midrank count matches brute force exactly, chunked
    or not."""
    rng = np.random.default_rng(seed)
    q, k = rng.integers(-levels, levels + 1, (2, n, d)).astype(float)
    want = brute_foscttm(q, k)
    np.testing.assert_array_equal(metrics.foscttm(q, k, chunk=3), want)
    np.testing.assert_array_equal(metrics.foscttm(q, k), want)


def test_foscttm_by_hand_perfect_and_random():
    x = metrics.l2_normalize(np.random.default_rng(2).standard_normal((300, 8)))
    assert metrics.foscttm(x, x).mean() == 0.0
    y = metrics.l2_normalize(np.random.default_rng(3).standard_normal((300, 8)))
    assert metrics.foscttm(x, y).mean() == pytest.approx(0.5, abs=0.03)
    q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    k = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    # q0: s = 1, 1, 0 -> one tie: .25; q1: s = 0, 0, 1, true 0 -> one higher, one tie: .75;
    # q2: s = 1, 1, 1 -> two ties: .5
    assert metrics.foscttm(q, k).tolist() == [0.25, 0.75, 0.5]


def test_foscttm_chunked_equals_unchunked_and_ties_survive_rounding():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((300, 16)), rng.standard_normal((300, 16))
    np.testing.assert_array_equal(metrics.foscttm(a, b, chunk=7), metrics.foscttm(a, b))
    c = np.tile(rng.standard_normal(16) / 7, (300, 1))  # one point: rounding must not break ties
    assert metrics.foscttm(a, c).tolist() == [0.5] * 300


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("func", [metrics.mutual_knn, metrics.retrieval_ranks, metrics.cka,
                                  metrics.foscttm])
def test_nan_rows_are_named(func):
    a = np.ones((6, 2)) + np.arange(6)[:, None]
    b = a.copy()
    b[[2, 4], 1] = [np.nan, np.inf]
    with pytest.raises(ValueError, match=r"(b|candidates|keys).*rows \[2, 4\]"):
        func(a, b)


def test_zero_vectors_mismatched_rows_and_k_are_refused():
    a = np.random.default_rng(6).standard_normal((8, 3))
    z = a.copy()
    z[5] = 0
    with pytest.raises(ValueError, match=r"zero vectors \(rows \[5\]\)"):
        metrics.mutual_knn(a, z, 2)
    with pytest.raises(ValueError, match="8 rows, b has 7"):
        metrics.mutual_knn(a, a[:7], 2)
    with pytest.raises(ValueError, match="k=8 with n=8"):
        metrics.mutual_knn(a, a, 8)
    assert metrics.mutual_knn(a, a, k=3).mean() == 1.0
