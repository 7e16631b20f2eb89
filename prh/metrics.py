"""Alignment and retrieval metrics: numpy arrays in, a float or a per-query array out.

One function per metric, no I/O, no device code (platonic-rep `metrics.py` style, without its
unstable argsort, which leaves the order of ties to the device). Every metric computes in
float64 and processes similarities in row chunks, so n = 30,000 runs in bounded memory (never
an n x n matrix).

Tie conventions (platonic-rep's argsort and CLIP_benchmark's topk leave ties in an order the
implementation picks):
- retrieval ranks count ties *against* the true pair (`>=`), so a collapsed encoder scores
  R@1 = 0, never 1 (the rerun article, "The scoring is careful in two places");
- mutual k-NN breaks ties by lowest index, exactly as a stable sort by descending cosine;
- FOSCTTM counts a candidate as close as the true match as one half (midranks, as the
  pair-free benchmark does), so every collapsed or constant scorer scores 0.5, chance.
A score within the float64 rounding error of a dot product (d * eps * |q| |c|) is a tie: a
difference below the rounding error of the product it comes from cannot be a win.
"""

from __future__ import annotations

import numpy as np

CHUNK = 512  # query rows per similarity block: CHUNK x n float64 (123 MB at n = 30,000)


# ----------------------------------------------------------------------------- validation
def check_matrix(x: np.ndarray, name: str) -> np.ndarray:
    """Return `x` as float64 [n, d]; raise ValueError naming rows with NaN or inf."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty [n, d] matrix, got shape {x.shape}")
    bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
    if bad.size:
        raise ValueError(f"{name}: NaN or inf in {bad.size} rows, first rows {bad[:10].tolist()}; "
                         "remove or re-embed them")
    return x


def check_pair(a: np.ndarray, b: np.ndarray, name_a: str = "a",
               name_b: str = "b") -> tuple[np.ndarray, np.ndarray]:
    """Validate two paired matrices (row i of `a` pairs with row i of `b`)."""
    a, b = check_matrix(a, name_a), check_matrix(b, name_b)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{name_a} has {a.shape[0]} rows, {name_b} has {b.shape[0]}; "
                         "paired metrics need one row per pair in both")
    return a, b


def check_k(k: int, n: int, what: str) -> None:
    if not 1 <= k < n:
        raise ValueError(f"{what}: need 1 <= k < n, got k={k} with n={n} rows")


def l2_normalize(x: np.ndarray, name: str = "x") -> np.ndarray:
    """Rows scaled to unit L2 norm; zero rows have no direction and raise, naming them."""
    x = check_matrix(x, name)
    norms = np.linalg.norm(x, axis=1)
    zero = np.flatnonzero(norms == 0)
    if zero.size:
        raise ValueError(f"{name}: {zero.size} zero vectors (rows {zero[:10].tolist()}) have no "
                         "cosine; drop them or fix the encoder")
    return x / norms[:, None]


def is_collapsed(x: np.ndarray, rtol: float = 1e-9) -> bool:
    """True when every row is the same point up to `rtol` of the data's scale."""
    x = np.asarray(x, dtype=np.float64)
    spread = np.linalg.norm(x - x.mean(axis=0))
    return bool(spread <= rtol * max(np.linalg.norm(x), np.finfo(np.float64).tiny))


# ----------------------------------------------------------------------------- retrieval
def tie_tol(q: np.ndarray, c: np.ndarray, shift: np.ndarray | None = None) -> np.ndarray:
    """Rounding bound of fl(q_i . c_j - shift_j) per query row: (d + 2) eps (|q_i| max|c| +
    max|shift|)."""
    eps = np.finfo(np.float64).eps * (q.shape[1] + 2)
    cmax = np.linalg.norm(c, axis=1).max()
    tol = eps * np.linalg.norm(q, axis=1) * cmax
    if shift is not None:
        tol = tol + eps * np.abs(shift).max()
    return tol


def _ranks(q: np.ndarray, c: np.ndarray, chunk: int,
           shift: np.ndarray | None = None) -> np.ndarray:
    """rank_i = #{j : s_ij >= s_ii - tol_i} - 1 with s = q c^T - shift (chunked)."""
    n = q.shape[0]
    tol = tie_tol(q, c, shift)
    ranks = np.empty(n, dtype=np.int64)
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        s = q[lo:hi] @ c.T  # [chunk, n]
        if shift is not None:
            s -= shift
        true = s[np.arange(hi - lo), np.arange(lo, hi)]
        ranks[lo:hi] = (s >= (true - tol[lo:hi])[:, None]).sum(axis=1) - 1
    return ranks


def retrieval_ranks(queries: np.ndarray, candidates: np.ndarray, *,
                    chunk: int = CHUNK) -> np.ndarray:
    """Rank of the true candidate for each query, ties counted against it.

    queries: [n, d], candidates: [n, d]; row i of each is a true pair. Score s_ij = <q_i, c_j>
    (pass L2-normalised rows for cosine). rank_i = #{j : s_ij >= s_ii} - 1, so rank 0 is a
    strict win and a collapsed encoder (all scores tied) ranks every true pair last.
    Returns int64 [n].
    """
    q, c = check_pair(queries, candidates, "queries", "candidates")
    if q.shape[1] != c.shape[1]:
        raise ValueError(f"queries have width {q.shape[1]}, candidates {c.shape[1]}; "
                         "map them into one space first")
    return _ranks(q, c, chunk)


def recall_at_k(queries: np.ndarray, candidates: np.ndarray, k: int = 1, *,
                chunk: int = CHUNK) -> np.ndarray:
    """Per-query hit@k: float64 [n], 1.0 where rank_i < k (`retrieval_ranks`); R@k = mean."""
    check_k(k, np.shape(queries)[0] + 1, "recall_at_k")
    return (retrieval_ranks(queries, candidates, chunk=chunk) < k).astype(np.float64)


# ----------------------------------------------------------------------------- FOSCTTM
def foscttm(queries: np.ndarray, keys: np.ndarray, *, chunk: int = CHUNK) -> np.ndarray:
    """Per-query FOSCTTM ("fraction of samples closer than the true match") with midranks, as
    the pair-free benchmark scores it (Schnaus et al. 2026, arXiv 2610.09411;
    `unpaired_rosetta/evaluation.py` `retrieval_metrics`): one direction, query i against
    every key by the inner product s_ij = <q_i, k_j> (unit rows: cosine), row i of each a true
    match, f_i = (#{j : s_ij > s_ii} + #{j != i : s_ij = s_ii} / 2) / (n - 1).

    0 is perfect and 0.5 is chance: a constant scorer (every key tied) gives exactly 0.5, and
    so does a collapsed query side (one query vector: the true keys' ranks are a permutation).
    Ties are equality up to the rounding bound of the scores (`tie_tol`), so identical keys
    tie whatever the BLAS. Float64, in blocks of `chunk` queries. Returns float64 [n].
    """
    q, c = check_pair(queries, keys, "queries", "keys")
    if q.shape[1] != c.shape[1]:
        raise ValueError(f"queries have width {q.shape[1]}, keys {c.shape[1]}; map them into "
                         "one space first")
    n = q.shape[0]
    check_k(1, n, "foscttm")
    tol = tie_tol(q, c)
    out = np.empty(n, dtype=np.float64)
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        s = q[lo:hi] @ c.T
        true = s[np.arange(hi - lo), np.arange(lo, hi)][:, None]
        t = tol[lo:hi, None]
        higher = (s > true + t).sum(axis=1)
        tied = (np.abs(s - true) <= t).sum(axis=1) - 1  # the true key ties with itself
        out[lo:hi] = (higher + 0.5 * tied) / (n - 1)
    return out


# ----------------------------------------------------------------------------- neighbourhoods
def knn_mask(sim: np.ndarray, k: int, self_cols: np.ndarray) -> np.ndarray:
    """Boolean [m, n] mask of each row's k largest entries, self excluded, ties to lowest index.

    Same sets as `argsort(-sim, kind="stable")[:, :k]`, in O(n) per row: everything above the
    k-th largest value, then the lowest-indexed entries equal to it. Overwrites `sim`'s
    self entries with -inf.
    """
    rows = np.arange(sim.shape[0])
    sim[rows, self_cols] = -np.inf
    n = sim.shape[1]
    kth = np.partition(sim, n - k, axis=1)[:, n - k]  # k-th largest per row
    mask = sim > kth[:, None]
    tied = sim == kth[:, None]
    need = k - mask.sum(axis=1)
    exact = tied.sum(axis=1) == need  # usual case: no surplus ties, take them all
    mask[exact] |= tied[exact]
    surplus = np.flatnonzero(~exact)
    mask[surplus] |= tied[surplus] & (np.cumsum(tied[surplus], axis=1) <= need[surplus, None])
    return mask


def mutual_knn(a: np.ndarray, b: np.ndarray, k: int = 10, *, chunk: int = CHUNK) -> np.ndarray:
    """Per-item mutual k-NN overlap (Huh et al. 2024, platonic-rep `mutual_knn`).

    a: [n, da], b: [n, db], rows paired. Rows are L2-normalised, neighbours ranked by cosine,
    self excluded: m_i = |N_a(i) ∩ N_b(i)| / k. The score is the mean; chance ≈ k / (n - 1)
    (0.0098 at n = 1024, k = 10). Returns float64 [n].
    """
    a, b = check_pair(a, b, "a", "b")
    n = a.shape[0]
    check_k(k, n, "mutual_knn")
    a, b = l2_normalize(a, "a"), l2_normalize(b, "b")
    out = np.empty(n)
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        cols = np.arange(lo, hi)
        na = knn_mask(a[lo:hi] @ a.T, k, cols)
        nb = knn_mask(b[lo:hi] @ b.T, k, cols)
        out[lo:hi] = (na & nb).sum(axis=1) / k
    return out


# Appendix C, "Uncertainty on WIT": each interval comes from 800-pair subsamples of WIT-1024
# drawn 200 times (the audit article; the registry's ci_subsample_size and ci_subsample_draws).
SUBSAMPLE_FRACTION = 800 / 1024
SUBSAMPLE_DRAWS = 200


def subsample_indices(n: int, draws: int = SUBSAMPLE_DRAWS, seed: int = 0,
                      fraction: float = SUBSAMPLE_FRACTION) -> np.ndarray:
    """[draws, round(fraction * n)] item indices, each row a subsample without replacement; a
    pure function of its arguments, so runs scored apart share the same subsamples (800 of
    WIT-1024's 1,024 items at the default fraction)."""
    size = round(fraction * n)
    if not 1 < size <= n or draws < 1:
        raise ValueError(f"subsamples of {size} of {n} items, {draws} draws: need 1 < size <= n "
                         "and draws >= 1")
    rng = np.random.default_rng(seed)
    return np.stack([np.sort(rng.choice(n, size, replace=False)) for _ in range(draws)])


def mutual_knn_subsamples(a: np.ndarray, b: np.ndarray, idx: np.ndarray, k: int = 10
                          ) -> np.ndarray:
    """The mutual k-NN score recomputed on each subsample of `idx` (`subsample_indices`):
    neighbours are found among the subsample's items only, as a benchmark of that size would
    find them. Returns float64 [draws]."""
    return np.array([mutual_knn(a[rows], b[rows], k).mean() for rows in idx])


# ----------------------------------------------------------------------------- CKA
def _hsic_terms(x: np.ndarray, y: np.ndarray, unbiased: bool) -> float:
    """HSIC of linear kernels K = x x^T, L = y y^T, computed in feature space (O(n d^2)).

    biased: tr(K H L H) = ||x_c^T y_c||_F^2 (H = I - 11^T/n; platonic-rep drops the (n-1)^-2,
    which cancels in CKA). unbiased (Song et al. 2012, Eq. 5), with K~, L~ zero-diagonal:
    [tr(K~L~) + 1^T K~ 1 1^T L~ 1 / ((n-1)(n-2)) - 2/(n-2) 1^T K~ L~ 1] / (n(n-3)).
    """
    n = x.shape[0]
    if not unbiased:
        xc, yc = x - x.mean(axis=0), y - y.mean(axis=0)
        return float(np.sum((xc.T @ yc) ** 2))
    kd, ld = np.einsum("ij,ij->i", x, x), np.einsum("ij,ij->i", y, y)  # diagonals
    tr_kl = np.sum((x.T @ y) ** 2) - kd @ ld
    k1 = x @ x.sum(axis=0) - kd  # K~ 1
    l1 = y @ y.sum(axis=0) - ld  # L~ 1
    total = tr_kl + k1.sum() * l1.sum() / ((n - 1) * (n - 2)) - 2 * (k1 @ l1) / (n - 2)
    return float(total / (n * (n - 3)))


def cka(a: np.ndarray, b: np.ndarray, *, unbiased: bool = False) -> float:
    """Linear CKA = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)) (Kornblith et al. 2019).

    a: [n, da], b: [n, db]. `unbiased` uses Song et al.'s estimator and needs n > 3. A side
    with no variance (a collapsed encoder) carries no alignment: the result is 0.0, as in
    platonic-rep's `+ 1e-6` denominator. Unlike platonic-rep, no epsilon is added otherwise.
    """
    a, b = check_pair(a, b, "a", "b")
    n = a.shape[0]
    if unbiased and n <= 3:
        raise ValueError(f"unbiased CKA needs n > 3 rows (its estimator divides by n(n-3)), "
                         f"got n={n}")
    if n < 2:
        raise ValueError(f"CKA needs at least 2 rows, got {n}")
    if is_collapsed(a) or is_collapsed(b):
        return 0.0
    kl, kk, ll = (_hsic_terms(a, b, unbiased), _hsic_terms(a, a, unbiased),
                  _hsic_terms(b, b, unbiased))
    if kk <= 0 or ll <= 0:
        raise ValueError(f"unbiased HSIC self-terms are not positive ({kk:.3g}, {ll:.3g}) at "
                         f"n={n}: too few rows for the unbiased estimator; use more rows")
    return kl / np.sqrt(kk * ll)
