"""Pair-free alignment: a map from image space to text space fitted on two unpaired pools, then
scored on held-out pairs.

The paper's Table 4 uses the benchmark of Schnaus, Dagès, Cremers, Wang & Isola 2026 ("Shared
Geometry As A Rosetta Stone", arXiv 2610.09411; code dominik-schnaus/unpaired-rosetta, MIT,
commit caa1816): Wasserstein Procrustes, max over W in St(dx, dy) and a matching T of
tr(X W Y^T T^T), from a geometric initialisation. Its steps, as its code runs them
(`unpaired_rosetta/wasserstein_procrustes.py`, `geometric_initialization.py`; every constant
is a `PairFreeConfig` default taken from there):

1. each pool centred on its own mean, rows to unit length (norm floor 1e-10); the same means
   are reused on the test rows, so the inner product of the prepared rows is a cosine;
2. initialisation, S restarts: b rows drawn from each pool (all rows when a pool has fewer),
   scikit-learn k-means (k-means++, C clusters, otherwise its defaults) on each, the two sets of
   centres A, B matched by the permutation P that maximises their linear CKA (`prh.qap`), and
   M = the mean over restarts of (1/C) A^T P B, a dx x dy correspondence;
3. read-out: both pools shuffled and cut into blocks of b rows, block i of X M matched to block
   i of Y by the Hungarian algorithm on the scores (X M) Y^T (float32 products as its torch
   code computes them, solved in float64 by scipy `linear_sum_assignment` as its
   `hungarian_matching`, here on the reduced costs: `reduced_costs`); W = U V^T from the SVD
   of X_T^T Y_T on those pseudo-pairs (orthogonal Procrustes, `prh.align.procrustes`);
4. refinement, R rounds: b fresh random rows of each pool, Hungarian on (X_b W) Y_b^T, Procrustes.
   When both pools have at most b rows every round uses all rows, so a round whose matching
   equals the previous one is a fixed point (the same pairs give the same W, hence the same
   matching): the loop stops there, with the map R rounds would have reached.

Differences from the benchmark, none in what is computed: the solver gets reduced costs
(the same optimum; where several assignments tie for it, it may return another of them, so a
fit can take another path, as a change of seed would); the prepared rows, the CKA matching
and Procrustes in float64 (it fits in float32 torch; k-means and the score products, where a
fit spends its arithmetic, are float32 here as there); one seeded numpy Generator instead
of its seed derivation, so the same inputs and seed give the same map here but not its bit
pattern; scores are taken by cosine of (x - mean) W against y - mean
(`prh.align.ProcrustesMap`), which ranks each query's candidates exactly as its inner product
of the prepared rows does, since the two differ by a positive
factor per query. k-means runs on one thread (`threadpoolctl`), as the benchmark does, so the
fit does not depend on the machine's thread count.

The first two moments of unpaired data cannot identify the rotation (the rerun article,
"Why the first two moments cannot find the rotation", Proposition 2); the initialisation uses
the pools' cluster geometry, which carries more.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

import numpy as np

from prh import align, metrics, qap

NORM_FLOOR = 1e-10  # the benchmark's floor on a centred row's norm (`unpaired_rosetta/linalg.py`)


@dataclass(frozen=True)
class PairFreeConfig:
    """The aligner's constants (params.yaml `eval.pairfree`), defaults the benchmark's
    (`WassersteinProcrustes.__init__`, used by every experiment of its paper)."""

    clusters: int = 30  # C: k-means centres per side and restart
    restarts: int = 30  # S: initialisation restarts, averaged
    batch: int = 10_000  # b: rows per side of a restart and of every Hungarian block
    rounds: int = 100  # R: refinement rounds
    workers: int = 1  # processes for the restarts; never changes the result

    def __post_init__(self) -> None:
        if self.clusters < 2 or self.restarts < 1 or self.batch < 2 or self.rounds < 0 \
                or self.workers < 1:
            raise ValueError(f"{self}: needs clusters >= 2, restarts >= 1, batch >= 2, "
                             "rounds >= 0, workers >= 1 (the benchmark: 30, 30, 10000, 100)")
        if self.batch < self.clusters:
            raise ValueError(f"batch = {self.batch} < clusters = {self.clusters}: k-means needs "
                             "at least one row per cluster")


@dataclass(frozen=True)
class PairFreeMap(align.ProcrustesMap):
    """A Procrustes map fitted without pairs, with how it was found."""

    rounds: int  # refinement rounds run (fewer than R when a full-pool round repeated)
    n_matches: int  # pseudo-pairs of the last Procrustes step


def prepare(x: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Step 1: x - mean, rows to unit length (a row at the mean stays 0)."""
    c = np.asarray(x, dtype=np.float64) - mean
    return c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), NORM_FLOOR)


def numerical_rank_below_2(x: np.ndarray) -> bool:
    """True when the centred rows span fewer than 2 directions: the covariance's second
    eigenvalue at most max(n, d) eps times its first (the rounding floor of X^T X)."""
    x = np.asarray(x, dtype=np.float64)
    xc = x - x.mean(axis=0)
    ev = np.linalg.eigvalsh(xc.T @ xc)[::-1]
    if ev.size < 2 or ev[0] <= 0:
        return True
    return bool(ev[1] <= max(x.shape) * np.finfo(np.float64).eps * ev[0])


def collapsed_sides(**sides: np.ndarray) -> list[str]:
    """Names of the sides that carry no geometry to match: one point (`metrics.is_collapsed`)
    or numerical rank below 2."""
    return [name for name, x in sides.items()
            if metrics.is_collapsed(x) or numerical_rank_below_2(x)]


def hungarian_blocks(q: np.ndarray, k: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Block i of q matched one-to-one to block i of k, maximising the summed scores q k^T:
    (q rows, k rows), min(len(q), len(k)) pairs. The scores are products in q's and k's
    dtype (float32 in a fit, as the benchmark's), solved in float64 by scipy
    `linear_sum_assignment`. The caller shuffles both first.

    The solver gets the costs after the Hungarian method's row and column reduction (Kuhn
    1955; `reduced_costs`), where the benchmark hands it the negated scores: the same optimum,
    and scipy's shortest augmenting paths, which start from zero duals, ran 1.2 to 1.7 times
    faster on the random and clustered blocks of 2,000 to 10,000 rows that Table 4's fits
    solve, 0.8 times on near-permutation ones, whose solve is short (bench/pairfree.py
    --solvers); a whole fit 0.78 of the benchmark's wall time (--against, docs/sources.md)."""
    from scipy.optimize import linear_sum_assignment

    rows, cols = [], []
    for lo in range(0, min(len(q), len(k)), block):
        r, c = linear_sum_assignment(reduced_costs(q[lo:lo + block] @ k[lo:lo + block].T))
        rows.append(r + lo)
        cols.append(c + lo)
    return np.concatenate(rows), np.concatenate(cols)


def reduced_costs(scores: np.ndarray) -> np.ndarray:
    """The costs of maximising `scores` (float64), reduced: minus the scores, less each row's
    minimum when every row is assigned (rows <= columns), then less each column's minimum when
    every column is (columns <= rows); every entry >= 0. A constant taken off a line that every
    assignment uses once moves all their totals alike, so the costs rank assignments as the
    scores do, up to the rounding of the two subtractions (at most 4 eps max|score| an
    entry). A line that some assignments leave out keeps its costs."""
    cost = np.negative(scores, dtype=np.float64)  # a new array: the caller's scores stay
    n, m = cost.shape
    if n <= m:
        cost -= cost.min(axis=1, keepdims=True)
    if m <= n:
        cost -= cost.min(axis=0, keepdims=True)
    return cost


def _matching(pairs_x: np.ndarray, pairs_z: np.ndarray) -> np.ndarray:
    """The pairs as one array ordered by text row: equal arrays, equal matchings."""
    order = np.argsort(pairs_z)
    return np.stack([pairs_z[order], pairs_x[order]])


def _subset(rng: np.random.Generator, n: int, b: int) -> np.ndarray:
    """b distinct rows of n in random order (all n, shuffled, when n <= b)."""
    return rng.permutation(n)[:b]


def _kmeans_centres(x: np.ndarray, clusters: int, seed: int) -> np.ndarray:
    """scikit-learn's k-means (k-means++, its other defaults) on one thread, on float32 rows
    as the benchmark's (its torch rows as numpy): the centres, as float64."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        km = KMeans(n_clusters=clusters, init="k-means++", random_state=seed)
        return km.fit(x.astype(np.float32)).cluster_centers_.astype(np.float64)


def _restart(x: np.ndarray, z: np.ndarray, clusters: int, seeds: tuple[int, int, int]
             ) -> np.ndarray:
    """One restart of step 2 on the drawn rows: (1/C) A^T P B."""
    a = _kmeans_centres(x, clusters, seeds[0])
    b = _kmeans_centres(z, clusters, seeds[1])
    return a.T @ b[qap.cka_matching(a, b, seeds[2])] / clusters


def geometric_init(x: np.ndarray, z: np.ndarray, cfg: PairFreeConfig,
                   rng: np.random.Generator) -> np.ndarray:
    """Step 2: M [dx, dy] from the prepared pools. Every restart's rows and seeds are drawn
    before any runs, so `cfg.workers` changes only the wall time."""
    jobs = []
    for _ in range(cfg.restarts):
        ix, iz = _subset(rng, len(x), cfg.batch), _subset(rng, len(z), cfg.batch)
        jobs.append((ix, iz, tuple(int(s) for s in rng.integers(0, 2 ** 31 - 1, 3))))
    if cfg.workers == 1:
        parts = [_restart(x[ix], z[iz], cfg.clusters, s) for ix, iz, s in jobs]
    else:  # processes: MPOpt keeps its seed in a class attribute
        with ProcessPoolExecutor(cfg.workers, mp_context=get_context("spawn")) as pool:
            parts = list(pool.map(_restart, *zip(*[(x[ix], z[iz], cfg.clusters, s)
                                                   for ix, iz, s in jobs], strict=True)))
    return np.mean(parts, axis=0)


def fit_pairfree(pool_img: np.ndarray, pool_txt: np.ndarray, *, seed: int,
                 cfg: PairFreeConfig = PairFreeConfig()) -> PairFreeMap:
    """The image -> text map fitted on two unpaired pools (module docstring, steps 1-4).

    pool_img: [n_img, dx], pool_txt: [n_txt, dy]; no row of one pool is assumed to pair with
    any row of the other. Seeded: the same inputs, seed and config give the same map. Raises
    ValueError on a pool with no geometry to match (`collapsed_sides`) or fewer rows than
    clusters.
    """
    x_raw = metrics.check_matrix(pool_img, "image pool")
    z_raw = metrics.check_matrix(pool_txt, "text pool")
    bad = collapsed_sides(image_pool=x_raw, text_pool=z_raw)
    if bad:
        raise ValueError(f"{' and '.join(bad)}: collapsed (one point, or rank below 2); there "
                         "is no geometry to match without pairs")
    if min(len(x_raw), len(z_raw)) < cfg.clusters:
        raise ValueError(f"pools of {len(x_raw)} and {len(z_raw)} rows: k-means needs at "
                         f"least eval.pairfree.clusters = {cfg.clusters} rows a side")
    rng = np.random.default_rng(seed)
    mx, mz = x_raw.mean(axis=0), z_raw.mean(axis=0)
    x, z = prepare(x_raw, mx), prepare(z_raw, mz)
    m = geometric_init(x, z, cfg, rng)
    x32, z32 = x.astype(np.float32), z.astype(np.float32)   # the score products' precision
    ox, oz = rng.permutation(len(x)), rng.permutation(len(z))
    r, c = hungarian_blocks(x32[ox] @ m.astype(np.float32), z32[oz], cfg.batch)
    pairs_x, pairs_z = ox[r], oz[c]
    w = align.procrustes(x[pairs_x], z[pairs_z])
    whole = max(len(x), len(z)) <= cfg.batch
    last = _matching(pairs_x, pairs_z) if whole else None
    done = 0
    while done < cfg.rounds:
        bx, bz = _subset(rng, len(x), cfg.batch), _subset(rng, len(z), cfg.batch)
        r, c = hungarian_blocks(x32[bx] @ w.astype(np.float32), z32[bz], max(len(bx), len(bz)))
        pairs_x, pairs_z = bx[r], bz[c]
        w = align.procrustes(x[pairs_x], z[pairs_z])
        done += 1
        if whole:
            now = _matching(pairs_x, pairs_z)
            if np.array_equal(now, last):
                break
            last = now
    return PairFreeMap(mx, mz, w, rounds=done, n_matches=len(pairs_x))


def score_pairfree(pool_img: np.ndarray, pool_txt: np.ndarray, test_img: np.ndarray,
                   test_txt: np.ndarray, *, seed: int, cfg: PairFreeConfig = PairFreeConfig()
                   ) -> dict[str, float | int | str]:
    """Fit on the pools (`fit_pairfree`, never the test pairs), score image -> text on the test
    pairs with the mapped image as the query: `fit_and_score` without the map."""
    return fit_and_score(pool_img, pool_txt, test_img, test_txt, seed=seed, cfg=cfg)[0]


def fit_and_score(pool_img: np.ndarray, pool_txt: np.ndarray, test_img: np.ndarray,
                  test_txt: np.ndarray, *, seed: int, cfg: PairFreeConfig = PairFreeConfig()
                  ) -> tuple[dict[str, float | int | str], PairFreeMap | None]:
    """(scores, the map) of `fit_pairfree` on the pools, scored on the test pairs.

    The scores: status ("ok" or "collapsed"), r_at_1 (cosine, ties against the true pair:
    `prh.align.image_to_text_recall`), foscttm (`prh.metrics.foscttm`: midranks, ties one
    half), chance_r_at_1 = 1 / n_test, chance_foscttm = 0.5, rounds, n_matches and the sizes.
    A collapsed pool (`collapsed_sides`) is not fitted (the map is None): status "collapsed",
    `collapsed` names the sides, foscttm 0.5 (every candidate ties) and r_at_1 0 (a tie counts
    against).
    """
    test_img, test_txt = metrics.check_pair(test_img, test_txt, "test images", "test texts")
    n_test = test_img.shape[0]
    metrics.check_k(1, n_test, "pair-free scoring")
    out: dict[str, float | int | str] = {
        "n_pool_images": int(np.shape(pool_img)[0]), "n_pool_texts": int(np.shape(pool_txt)[0]),
        "n_test": n_test, "chance_r_at_1": 1.0 / n_test, "chance_foscttm": 0.5}
    bad = collapsed_sides(image_pool=metrics.check_matrix(pool_img, "image pool"),
                          text_pool=metrics.check_matrix(pool_txt, "text pool"))
    if bad:
        return {"status": "collapsed", "collapsed": " and ".join(bad), "r_at_1": 0.0,
                "foscttm": 0.5, "rounds": 0, "n_matches": 0, **out}, None
    pmap = fit_pairfree(pool_img, pool_txt, seed=seed, cfg=cfg)
    hits = align.image_to_text_recall(pmap, test_img, test_txt)[1]
    f = metrics.foscttm(align.unit_or_zero(pmap.image_to_text(test_img)),
                        align.unit_or_zero(pmap.text(test_txt)))
    return {"status": "ok", "r_at_1": float(hits.mean()), "foscttm": float(f.mean()),
            "rounds": pmap.rounds, "n_matches": pmap.n_matches, **out}, pmap


# pools from this size on fit side by side (`fit_and_score_all`): a fit there takes minutes
# (R rounds of Hungarian matchings), a spawned process some seconds to start
SIDE_BY_SIDE_ROWS = 2000

# one fit: (pool_img, pool_txt, test_img, test_txt, seed)
Job = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]
Fit = tuple[dict[str, float | int | str], PairFreeMap | None]


def _fit_job(job: Job, cfg: PairFreeConfig) -> Fit:
    *arrays, seed = job
    return fit_and_score(*arrays, seed=seed, cfg=cfg)


def fit_and_score_all(jobs: Mapping[str, Job], *, cfg: PairFreeConfig = PairFreeConfig(),
                      parallel: int | None = None) -> dict[str, Fit]:
    """`fit_and_score` for every job (every encoder and aligner seed of Table 4's setting, named
    by its key). `parallel` fits run side by side in spawned processes (each with
    `cfg.workers` for its restarts); None: as many as the cores hold (os.cpu_count() //
    cfg.workers) when every pool has SIDE_BY_SIDE_ROWS rows or more, else one at a time. A
    fit is seeded alone, so `parallel` changes only the wall time; one pool for all jobs
    keeps every slot busy until the last fits. A ValueError names the job's key."""
    import os

    if parallel is None:
        big = all(min(len(j[0]), len(j[1])) >= SIDE_BY_SIDE_ROWS for j in jobs.values())
        parallel = max(1, (os.cpu_count() or 1) // cfg.workers) if big else 1
    out = {}
    if min(parallel, len(jobs)) <= 1:
        for key, job in jobs.items():
            try:
                out[key] = _fit_job(job, cfg)
            except ValueError as e:
                raise ValueError(f"{key}: {e}") from e
        return out
    with ProcessPoolExecutor(min(parallel, len(jobs)), mp_context=get_context("spawn")) as pool:
        futures = {key: pool.submit(_fit_job, job, cfg) for key, job in jobs.items()}
        for key, future in futures.items():
            try:
                out[key] = future.result()
            except ValueError as e:
                raise ValueError(f"{key}: {e}") from e
    return out
