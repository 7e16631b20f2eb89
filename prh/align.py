"""Orthogonal Procrustes between a frozen image encoder and a text encoder, and its scores.

The map is the only thing fitted on pairs (the rerun article, "The map between the
encoders"): W = U V^T from the thin SVD of the centred cross-covariance X^T Y of the fit rows,
X [n, dx] images (DINOv2 ViT-B: 768), Y [n, dy] texts (BERT-S: 384), dy <= dx. W is dx x dy
with orthonormal columns (W^T W = I), 768*384 - 384*385/2 = 220,992 free parameters.

Which direction is exact (Schönemann 1966; both checked numerically against SciPy):
- small -> large, text into image space: Q = W^T (dy x dx, Q Q^T = I) minimises ||Y Q - X||_F
  exactly, because ||Y Q||_F = ||Y||_F for every such Q. It equals SciPy's square solution
  `orthogonal_procrustes(Y_pad, X)` on Y zero-padded to dx columns (its first dy rows).
- large -> small, image into text space (what retrieval uses here): W only maximises
  tr(W^T X^T Y). It is *not* the least-squares minimiser of ||X W - Y||_F unless X^T X ∝ I,
  since ||X W||_F depends on W (the unbalanced Procrustes problem has no closed form).

Means and the map come from fit rows only; test rows never enter the fit (the rerun article,
"The scoring is careful in two places"). Retrieval scores image (centred with the fit mean,
then mapped) against text (centred with the fit mean) by cosine, in float64: the map is fitted
on centred data, so centred coordinates are the ones it aligns; cosine keeps caption norms
(which the map never constrains) from turning long-norm captions into hubs that win every
query (a query's own norm never changes its ranking). Float64 keeps near-ties resolvable at
n = 1,000 candidates. Ties count against the true pair (`prh.metrics.retrieval_ranks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from prh import calibrate, io, metrics
from prh.config import mknn_name


@dataclass(frozen=True)
class ProcrustesMap:
    """Fit-row means and the dx x dy map with orthonormal columns."""

    mean_img: np.ndarray  # [dx]
    mean_txt: np.ndarray  # [dy]
    w: np.ndarray  # [dx, dy]

    def image_to_text(self, img: np.ndarray) -> np.ndarray:
        """(img - mean_img) W: [n, dx] -> [n, dy], float64."""
        return (np.asarray(img, dtype=np.float64) - self.mean_img) @ self.w

    def text(self, txt: np.ndarray) -> np.ndarray:
        """txt - mean_txt: the text side in the coordinates the map targets, float64."""
        return np.asarray(txt, dtype=np.float64) - self.mean_txt


@dataclass
class AlignmentScores:
    """What `score_alignment` returns (docs/contracts.md, prh.align)."""

    metrics: dict[str, float]
    per_query: dict[str, np.ndarray]
    fit_size_curve: list[dict[str, float]] = field(default_factory=list)
    calibrated: dict[str, dict[str, float]] = field(default_factory=dict)
    pmap: ProcrustesMap | None = None  # the map fitted on all fit rows


def procrustes(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """U V^T from the thin SVD of src^T dst: [d_src, d_dst], orthonormal columns or rows.

    Maximises tr(M^T src^T dst) over such M; minimises ||src M - dst||_F only when
    d_src <= d_dst (or the square case). No centring here (see `fit_procrustes`).
    """
    u, _, vt = np.linalg.svd(np.asarray(src, np.float64).T @ np.asarray(dst, np.float64),
                             full_matrices=False)
    return u @ vt


def fit_procrustes(fit_img: np.ndarray, fit_txt: np.ndarray) -> ProcrustesMap:
    """Means and map from fit rows only: W = procrustes(img - mean_img, txt - mean_txt)."""
    x, y = metrics.check_pair(fit_img, fit_txt, "fit images", "fit texts")
    if y.shape[1] > x.shape[1]:
        raise ValueError(f"text width {y.shape[1]} exceeds image width {x.shape[1]}; the map "
                         "reduces images to the text width (dy <= dx)")
    mx, my = x.mean(axis=0), y.mean(axis=0)
    return ProcrustesMap(mx, my, procrustes(x - mx, y - my))


def random_orthonormal_map(dx: int, dy: int, seed: int) -> np.ndarray:
    """A Haar-random dx x dy map with orthonormal columns (QR of a Gaussian, signs fixed)."""
    g = np.random.default_rng(seed).standard_normal((dx, dy))
    q, r = np.linalg.qr(g)
    return q * np.sign(np.diag(r))


def image_to_text_recall(pmap: ProcrustesMap, img: np.ndarray, txt: np.ndarray,
                         ks: Sequence[int] = (1,)) -> dict[int, np.ndarray]:
    """Per-query hit@k of image -> text retrieval by cosine in centred text space.

    A centred vector of norm 0 (a row equal to the fit mean, e.g. a collapsed encoder) has
    cosine 0 with everything, so its true pair ties with all candidates and ranks last.
    """
    for k in ks:
        metrics.check_k(k, np.shape(img)[0] + 1, "recall")
    ranks = metrics.retrieval_ranks(unit_or_zero(pmap.image_to_text(img)),
                                    unit_or_zero(pmap.text(txt)))
    return {k: (ranks < k).astype(np.float64) for k in ks}


def unit_or_zero(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; a zero row stays zero (it ties with every candidate)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def _check_counts(n_rows: int, counts: Sequence[int]) -> None:
    """ValueError unless `counts` (texts per item, each >= 1) add up to the n_rows text rows."""
    if any(c < 1 for c in counts) or sum(counts) != n_rows:
        raise ValueError(f"{n_rows} text rows for items of {list(counts)[:5]}... texts")


def reduce_texts(emb: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    """One row per item from its texts' rows (`counts` texts per item, in order): each text's
    row to unit length, their mean, that to unit length (unpaired-rosetta `embeddings.
    reduce_texts`, which its `load_rows` applies to every stored file, one text an item
    included; it runs in the stored bfloat16, this in the rows' own precision)."""
    _check_counts(len(emb), counts)
    u = unit_or_zero(np.asarray(emb, dtype=np.float64))
    ends = np.cumsum(counts)
    return unit_or_zero(np.stack([u[e - c:e].mean(axis=0) for e, c in zip(ends, counts,
                                                                           strict=True)]))


# How Table 4's aligner gets its rows: "benchmark", as unpaired-rosetta's `load_rows` prepares
# its stored embeddings (every image row unit length; an item's texts by `reduce_texts`);
# "first-caption", each item's first text and the image rows as embedded (`item_rows`)
PAIRFREE_INPUTS = ("benchmark", "first-caption")


def item_rows(img: np.ndarray, txt: np.ndarray, counts: Sequence[int], inputs: str
              ) -> tuple[np.ndarray, np.ndarray]:
    """(image rows, one text row per item) as `inputs` (PAIRFREE_INPUTS) prepares them: img
    [n, dx] one row per item, txt [sum(counts), dy] each item's texts in order, its first
    text first."""
    if inputs not in PAIRFREE_INPUTS:
        raise ValueError(f"inputs {inputs!r}: choose one of {list(PAIRFREE_INPUTS)}")
    if len(counts) != len(img):
        raise ValueError(f"{len(img)} image rows for {len(counts)} items")
    _check_counts(len(txt), counts)
    if inputs == "benchmark":
        return unit_or_zero(np.asarray(img, dtype=np.float64)), reduce_texts(txt, counts)
    return np.asarray(img), np.asarray(txt)[np.cumsum(counts) - np.asarray(counts)]


def fit_and_recall(fit_img: np.ndarray, fit_txt: np.ndarray, test_img: np.ndarray,
                   test_txt: np.ndarray) -> tuple[float, float]:
    """(R@1 on test rows, R@1 on fit rows) of the map fitted on fit rows: per-epoch curves."""
    pmap = fit_procrustes(fit_img, fit_txt)
    r1_test = image_to_text_recall(pmap, test_img, test_txt)[1].mean()
    r1_fit = image_to_text_recall(pmap, fit_img, fit_txt)[1].mean()
    return float(r1_test), float(r1_fit)


def fit_size_curve(fit_img: np.ndarray, fit_txt: np.ndarray, test_img: np.ndarray,
                   test_txt: np.ndarray, sizes: Sequence[int], seed: int = 0
                   ) -> list[dict[str, float]]:
    """Test R@1 against the number of fit pairs.

    Subsets are nested: the first `size` rows of one seeded permutation of the fit rows, so a
    larger subset always contains a smaller one and the order of `sizes` does not matter.
    """
    n_fit = np.shape(fit_img)[0]
    perm = np.random.default_rng(seed).permutation(n_fit)
    curve = []
    for size in sizes:
        if not 2 <= size <= n_fit:
            raise ValueError(f"fit size {size} outside [2, {n_fit}] (the number of fit pairs)")
        idx = np.sort(perm[:size])
        pmap = fit_procrustes(np.asarray(fit_img)[idx], np.asarray(fit_txt)[idx])
        r1 = image_to_text_recall(pmap, test_img, test_txt)[1].mean()
        curve.append({"n_fit": int(size), "r_at_1": float(r1)})
    return curve


def score_alignment(fit_img: np.ndarray, fit_txt: np.ndarray, test_img: np.ndarray,
                    test_txt: np.ndarray, *, k: int = 10, seed: int = 0,
                    fit_sizes: Sequence[int] = (), n_permutations: int = 0) -> AlignmentScores:
    """Procrustes on fit rows, image -> text retrieval on test rows, controls, neighbourhoods.

    Controls (the rerun article, "Our rerun"): a random orthonormal map (seeded) and a map
    fitted on shuffled fit pairs (seeded); both should sit at chance, 1 / n_test. mknn{k}
    and CKA compare raw test embeddings, with no map. With `n_permutations` > 0, both are also
    calibrated against that many permutations of the test texts (seeded; `prh.calibrate`).
    """
    if n_permutations < 0:
        raise ValueError(f"n_permutations = {n_permutations}: use 0 (off) or more")
    fit_img, fit_txt = metrics.check_pair(fit_img, fit_txt, "fit images", "fit texts")
    test_img, test_txt = metrics.check_pair(test_img, test_txt, "test images", "test texts")
    n_test = test_img.shape[0]
    pmap = fit_procrustes(fit_img, fit_txt)
    hits = image_to_text_recall(pmap, test_img, test_txt, ks=(1, 5))
    rand = ProcrustesMap(pmap.mean_img, pmap.mean_txt,
                         random_orthonormal_map(*pmap.w.shape, seed=seed))
    perm = np.random.default_rng(seed).permutation(fit_txt.shape[0])
    shuffled = fit_procrustes(fit_img, fit_txt[perm])
    mknn = metrics.mutual_knn(test_img, test_txt, k)
    scores = {
        "r_at_1": hits[1].mean(),
        "r_at_5": hits[5].mean(),
        mknn_name(k): mknn.mean(),
        "r_at_1_fit": image_to_text_recall(pmap, fit_img, fit_txt)[1].mean(),
        "control_random_map_r_at_1": image_to_text_recall(rand, test_img, test_txt)[1].mean(),
        "control_shuffled_r_at_1": image_to_text_recall(shuffled, test_img, test_txt)[1].mean(),
        "chance_r_at_1": 1.0 / n_test,
        f"chance_{mknn_name(k)}": k / (n_test - 1),
        "cka_linear": metrics.cka(test_img, test_txt),
        "cka_linear_unbiased": metrics.cka(test_img, test_txt, unbiased=True),
    }
    raw: dict[str, calibrate.Score] = {
        mknn_name(k): lambda a, b: metrics.mutual_knn(a, b, k).mean(),
        "cka_linear": metrics.cka}
    null = calibrate.null_scores(test_img, test_txt, raw,
                                 calibrate.permutations(n_test, n_permutations, seed))
    return AlignmentScores(
        metrics={name: float(v) for name, v in scores.items()},
        per_query={"r_at_1_hit": hits[1], "r_at_5_hit": hits[5], mknn_name(k): mknn},
        fit_size_curve=fit_size_curve(fit_img, fit_txt, test_img, test_txt, fit_sizes, seed),
        calibrated={name: calibrate.calibrate(scores[name], null[name]) for name in raw}
        if n_permutations else {},
        pmap=pmap,
    )


def check_disjoint(fit_ids: Sequence[str], test_ids: Sequence[str], fit_name: str,
                   test_name: str) -> None:
    """Raise ContractError when a row id is in both the fit split and the test split."""
    overlap = sorted(set(map(str, fit_ids)) & set(map(str, test_ids)))
    if overlap:
        raise io.ContractError(
            f"{fit_name} and {test_name} share {len(overlap)} ids, first {overlap[:10]}; the "
            "map must never be fitted on test rows: embed the fit split from the val split only")


def _check_nonzero(ids: np.ndarray, emb: np.ndarray, path: str) -> None:
    zero = np.flatnonzero(~np.any(emb != 0, axis=1))
    if zero.size:
        raise io.ContractError(f"{path}: zero vectors at ids {ids[zero][:10].tolist()} have no "
                               "cosine; rerun the embedding stage for these rows")


def load_split(img_path: str, txt_path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One split's image and text embeddings (ids, images, texts): the same ids in the same
    order, finite, no zero vectors; ContractError naming the file otherwise."""
    ids_i, img, _ = io.load_embeddings(img_path)
    ids_t, txt, _ = io.load_embeddings(txt_path)
    io.check_same_ids(ids_i, ids_t, img_path, txt_path)
    _check_nonzero(ids_i, img, img_path)
    _check_nonzero(ids_t, txt, txt_path)
    return ids_i, img, txt


def check_scoring_sizes(k: int, fit_sizes: Sequence[int], n_fit: int, n_test: int,
                        fit_name: str, test_name: str) -> None:
    """Refuse a mutual k-NN k or fit-size curve that the splits cannot hold: 1 <= k < n_test
    (a query needs k other candidates) and every fit size in [2, n_fit]."""
    if not 1 <= k < n_test:
        raise io.ContractError(f"eval.k = {k} needs more than {k} test rows; {test_name} has "
                               f"{n_test}: lower eval.k in params.yaml")
    bad = [s for s in fit_sizes if not 2 <= s <= n_fit]
    if bad:
        raise io.ContractError(f"eval.fit_sizes {list(fit_sizes)}: {bad} outside [2, {n_fit}], "
                               f"the rows of {fit_name}: shrink them in params.yaml")
