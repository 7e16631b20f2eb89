"""VecMap, a named baseline of pair-free alignment (`bench/pairfree.py` and the tests set it
beside `prh.pairfree`; no stage runs it): the fully unsupervised self-learning of Artetxe,
Labaka & Agirre (ACL 2018; artetxem/vecmap `map_embeddings.py --unsupervised`), with its
orthogonal mapping. The pair-free benchmark the paper uses (Schnaus et al. 2026, arXiv
2610.09411, Table 1) scores VecMap's initialisation near chance on COCO image-caption pools
(FOSCTTM .472, chance .5) against .076 for its own initialisation; VecMap also assumes the
frequency-ordered rows of a word list, which image and caption pools do not have. Its steps:

1. each pool's rows to unit length, centred on the pool's mean, unit length again (VecMap's
   `--normalize unit center unit`);
2. initial matches without pairs: on m = min(n_img, n_txt, 4,000) rows of each pool, the
   smoothed similarity matrix sqrt(X X^T) = U S U^T (X = U S V^T), each row sorted (sorting
   forgets which row is which, so rows become comparable across the two spaces), normalised
   as in 1, matched by CSLS both ways. VecMap takes the 4,000 most frequent words; a pool has
   no frequencies, so here the m rows are a seeded random subset;
3. self-learning: orthogonal Procrustes (`prh.align.procrustes`) on the current matches, then
   new matches: each image's nearest text and each text's nearest image by CSLS with 10
   neighbours (Conneau et al. 2018), both kept (VecMap's `--direction union`), each similarity
   kept with probability p and dropped otherwise (VecMap's stochastic dictionary induction:
   p starts at .1 and doubles). VecMap doubles p after 50 iterations without gain and runs
   until then; here p doubles every `interval` iterations and the loop stops once p = 1 and the
   matches repeat, or after `n_iter` (a fixed, bounded schedule);
4. the map: VecMap's final re-weighting (whitening, de-whitening) is left out so the map stays
   orthogonal, and it is fitted as the supervised one is (`prh.align.fit_procrustes`): the
   pool means and Procrustes on the centred rows of the final matches, so it is
   scored exactly as the supervised map is (cosine, ties against the true pair).

The first two moments of unpaired data cannot identify the rotation (the rerun article,
"Why the first two moments cannot find the rotation", Proposition 2); what this method uses is
the pools' finer geometry, the distribution of similarities around each point. Everything
is numpy float64; similarities are processed in row blocks (`prh.metrics.CHUNK`), so memory
stays bounded (a 512 x n block, and the m x m matrices of step 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prh import align, metrics
from prh.pairfree import collapsed_sides

INIT_ROWS = 4_000  # rows of the sorted-similarity initialisation (VecMap's unsupervised_vocab)
CSLS_K = 10  # CSLS neighbourhood (Conneau et al. 2018; VecMap --csls)
KEEP_START = 0.1  # first keep probability of stochastic matching (VecMap --stochastic_initial)
KEEP_FACTOR = 2.0  # its multiplier (VecMap --stochastic_multiplier)


@dataclass(frozen=True)
class VecMapMap(align.ProcrustesMap):
    """A Procrustes map fitted by VecMap's self-learning, with how it was found."""

    iterations: int  # self-learning iterations run
    n_matches: int  # (image, text) matches the final map is fitted on


def _unit_centre_unit(x: np.ndarray, name: str) -> np.ndarray:
    """VecMap's `unit center unit`: rows to unit length, columns centred, rows to unit length
    (a row equal to the mean stays zero)."""
    x = metrics.l2_normalize(x, name)
    return align.unit_or_zero(x - x.mean(axis=0))


def _topk_mean(s: np.ndarray, k: int) -> np.ndarray:
    """Mean of each row's k largest entries."""
    n = s.shape[1]
    return np.partition(s, n - k, axis=1)[:, n - k:].mean(axis=1)


def _csls_matches(x: np.ndarray, z: np.ndarray, keep: float,
                  rng: np.random.Generator, chunk: int = metrics.CHUNK
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Union of each x row's and each z row's CSLS nearest neighbour: (x indices, z indices).

    CSLS(x_i, z_j) = 2 cos - r_z(x_i) - r_x(z_j), r = mean cosine of the k nearest across;
    the argmax over j does not depend on r_z(x_i), so each direction subtracts only the other
    side's r (as VecMap does). Each score is dropped with probability 1 - keep (never chosen).
    """
    k = min(CSLS_K, x.shape[0], z.shape[0])
    r_x = np.concatenate([_topk_mean(x[lo:lo + chunk] @ z.T, k)
                          for lo in range(0, x.shape[0], chunk)])  # r_z(x_i)
    r_z = np.empty(z.shape[0])
    back = np.empty(z.shape[0], dtype=np.int64)
    for lo in range(0, z.shape[0], chunk):
        s = z[lo:lo + chunk] @ x.T
        r_z[lo:lo + chunk] = _topk_mean(s, k)
        back[lo:lo + chunk] = _drop(2 * s - r_x, keep, rng).argmax(axis=1)
    fwd = np.empty(x.shape[0], dtype=np.int64)
    for lo in range(0, x.shape[0], chunk):
        fwd[lo:lo + chunk] = _drop(2 * (x[lo:lo + chunk] @ z.T) - r_z, keep, rng).argmax(axis=1)
    return (np.concatenate([np.arange(x.shape[0]), back]),
            np.concatenate([fwd, np.arange(z.shape[0])]))


def _drop(s: np.ndarray, keep: float, rng: np.random.Generator) -> np.ndarray:
    """Scores dropped (set to -inf) with probability 1 - keep, in place; none at keep = 1."""
    if keep < 1.0:
        s[rng.random(s.shape) >= keep] = -np.inf
    return s


def initial_matches(x: np.ndarray, z: np.ndarray, rng: np.random.Generator,
                    rows: int = INIT_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """Matches from sorted-similarity rows (step 2 of the module docstring), as row indices
    into `x` and `z`, the normalised pools."""
    m = min(x.shape[0], z.shape[0], rows)
    ix = np.sort(rng.choice(x.shape[0], m, replace=False))
    iz = np.sort(rng.choice(z.shape[0], m, replace=False))
    desc = []
    for pool in (x[ix], z[iz]):
        u, s, _ = np.linalg.svd(pool, full_matrices=False)
        d = (u * s) @ u.T  # sqrt(pool pool^T)
        d.sort(axis=1)
        desc.append(_unit_centre_unit(d, "descriptors"))
    src, trg = _csls_matches(desc[0], desc[1], 1.0, rng)
    return ix[src], iz[trg]


def fit_vecmap(pool_img: np.ndarray, pool_txt: np.ndarray, *, seed: int, n_iter: int = 20,
                 interval: int = 2, init_rows: int = INIT_ROWS) -> VecMapMap:
    """The image -> text map fitted on two unpaired pools (module docstring, steps 1-4).

    pool_img: [n_img, dx], pool_txt: [n_txt, dy], dy <= dx; no row of one pool is assumed to
    pair with any row of the other. Seeded: the initial subset and the dropped scores come
    from `seed`, so the same inputs and seed give the same map. Raises ValueError on a pool
    with no geometry to match (`collapsed_sides`).
    """
    x_raw = metrics.check_matrix(pool_img, "image pool")
    z_raw = metrics.check_matrix(pool_txt, "text pool")
    if z_raw.shape[1] > x_raw.shape[1]:
        raise ValueError(f"text width {z_raw.shape[1]} exceeds image width {x_raw.shape[1]}; "
                         "the map reduces images to the text width (dy <= dx)")
    bad = collapsed_sides(image_pool=x_raw, text_pool=z_raw)
    if bad:
        raise ValueError(f"{' and '.join(bad)}: collapsed (one point, or rank below 2); there "
                         "is no geometry to match without pairs")
    if n_iter < 1 or interval < 1:
        raise ValueError(f"n_iter = {n_iter}, interval = {interval}: both must be >= 1")
    rng = np.random.default_rng(seed)
    x, z = _unit_centre_unit(x_raw, "image pool"), _unit_centre_unit(z_raw, "text pool")
    src, trg = initial_matches(x, z, rng, init_rows)
    it = 0
    while it < n_iter:
        keep = min(1.0, KEEP_START * KEEP_FACTOR ** (it // interval))
        w = align.procrustes(x[src], z[trg])
        it += 1
        new_src, new_trg = _csls_matches(x @ w, z, keep, rng)
        settled = keep == 1.0 and np.array_equal(new_src, src) and np.array_equal(new_trg, trg)
        src, trg = new_src, new_trg
        if settled:
            break
    mx, mz = x_raw.mean(axis=0), z_raw.mean(axis=0)
    w = align.procrustes(x_raw[src] - mx, z_raw[trg] - mz)
    return VecMapMap(mx, mz, w, iterations=it, n_matches=len(src))
