"""Layer-wise alignment by the platonic-rep protocol, calibrated by a null that takes the same max.

The protocol (Huh et al. 2024; minyoungg/platonic-rep@dcd76ba, `measure_alignment.py`):
- features: [n, L, d] per model, every layer of it (prh.features: language, the mask-weighted
  mean of every hidden state, embedding output included; vision, the CLS token after every
  block, before the final norm);
- outliers clipped (`clip_outliers`): every |x| clamped at one scalar for all layers of a model,
  by one of platonic-rep's two modes of `remove_outliers`: "per_sample" (`exact=False`: each
  sample's q-quantile of |x| over all its layers and dims, averaged over samples; what
  `measure_alignment.py` runs as a script without `--precise`, so the WIT-1024 numbers' mode)
  or "global" (`exact=True`: the entry at index int(q * numel) of the sorted |x|; the
  `platonic.Alignment` package's). q = 0.95 in both;
- each layer L2-normalised, the metric on every layer pair (i, j), the score the max over pairs
  with the pair that achieved it (the first in row-major order on a tie: compute_score's
  strict `>`).

The null (Groger, Wen & Brbic 2026, arXiv 2602.14486; calibrated-similarity 0.1.1
`calibrate_layers`, agg "max"): each draw applies one permutation of the rows to every layer of
the second model and takes the same max over pairs, so the threshold prices the search over
L_x * L_y pairs; threshold, add-one p-value and calibrated score by prh.calibrate.

Precision (`SCORE_PRECISIONS`): platonic-rep scores in float32 (`prepare_features(...).float()`,
TF32 matmuls on a GPU unless `--precise`); "float64" is this tool's option. On real features the
two agree but for neighbours whose cosines differ by less than float32 resolves; on collapsed
features (a random ViT's CLS tokens agree to 6e-7) the neighbour sets are rounding noise in
either, and the max over pairs picks the largest noise. `degenerate_layers` names such layers:
the spread of a layer's off-diagonal cosines at or below `resolution(d)`, the first-order
float32 rounding bound of one cosine of unit d-vectors (Higham 2002, Thm 3.1: d * u,
u = 2**-24); the features are float32, so no scoring precision can resolve below it.

Metrics: "mutual_knn" (prh.metrics.mutual_knn, ties to the lowest index) and "cka" (biased
linear CKA, prh.metrics.cka, here as <K_c, L_c> / (|K_c| |L_c|) on centred Gram matrices).
Under a permutation the second model's neighbour sets and Gram matrices are permuted, not
recomputed: equal to recomputing them except where a row has exact ties at its k-th neighbour
(the tie then goes to the lowest original index, not the lowest permuted one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from prh import calibrate, metrics

CLIP_MODES = ("per_sample", "global")
SCORE_PRECISIONS = {"float32": np.float32, "float64": np.float64}  # platonic-rep: float32
UNIT_ROUNDOFF_FLOAT32 = 2.0 ** -24
METRICS = ("mutual_knn", "cka")
Q_OUTLIER = 0.95  # platonic-rep's prepare_features default


def clip_outliers(feats: np.ndarray, q: float = Q_OUTLIER, mode: str = "per_sample") -> np.ndarray:
    """feats [n, ...] clamped to [-t, t], t one scalar (module docstring); q = 1: unchanged."""
    x = np.asarray(feats, dtype=np.float64)
    if mode not in CLIP_MODES:
        raise ValueError(f"clip mode {mode!r}: choose one of {list(CLIP_MODES)}")
    if not 0.0 < q <= 1.0:
        raise ValueError(f"q = {q}: the clipping quantile is in (0, 1] (platonic-rep: 0.95)")
    if q == 1.0:
        return x
    a = np.abs(x)
    if mode == "global":
        t = np.sort(a, axis=None)[int(q * a.size)]
    else:
        t = np.quantile(a.reshape(len(a), -1), q, axis=1).mean()
    return np.clip(x, -t, t)


def _layers(feats: np.ndarray, name: str, dtype: type = np.float64) -> np.ndarray:
    x = np.asarray(feats, dtype=dtype)
    if x.ndim != 3 or min(x.shape) == 0:
        raise ValueError(f"{name}: expected features [n, layers, d], got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name}: NaN or inf in the features (rows "
                         f"{np.flatnonzero(~np.isfinite(x).all(axis=(1, 2)))[:10].tolist()})")
    return x


def resolution(d: int) -> float:
    """The float32 rounding bound of one cosine of unit d-vectors (module docstring)."""
    return d * UNIT_ROUNDOFF_FLOAT32


def degenerate_layers(feats: np.ndarray) -> list[int]:
    """The layers of feats [n, L, d] whose off-diagonal cosines all lie within `resolution(d)`
    of each other (computed in float64): their neighbour sets and Gram matrices are rounding
    noise."""
    x = _layers(feats, "features")
    out = []
    for i in range(x.shape[1]):
        u = _unit(x[:, i])
        g = u @ u.T
        off = g[~np.eye(len(g), dtype=bool)]
        if off.size and off.max() - off.min() <= resolution(x.shape[2]):
            out.append(i)
    return out


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows of one layer set to unit length; a zero row stays zero (no neighbours by cosine)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def _neighbours(layer: np.ndarray, k: int) -> np.ndarray:
    """bool [n, n]: each row's k nearest rows by cosine, self excluded (prh.metrics.knn_mask)."""
    u = _unit(layer)
    return metrics.knn_mask(u @ u.T, k, np.arange(len(u)))


def _centred_gram(layer: np.ndarray) -> np.ndarray:
    u = _unit(layer)
    g = u @ u.T
    return g - g.mean(axis=0) - g.mean(axis=1)[:, None] + g.mean()


@dataclass(frozen=True)
class LayerScores:
    """scores[i, j] = metric(x layer i, y layer j); `best` their max at `pair` (row-major first);
    `per_item` the best pair's per-row values (mutual k-NN; None for CKA, which has none)."""

    metric: str
    scores: np.ndarray
    best: float
    pair: tuple[int, int]
    per_item: np.ndarray | None


class LayerAlignment:
    """One metric between every layer of two models, observed and under row permutations of the
    second. Built once (neighbour sets or Gram matrices per layer), then `observed()` and
    `null(perms)` reuse them."""

    def __init__(self, x: np.ndarray, y: np.ndarray, metric: str, k: int = 10,
                 precision: str = "float64"):
        if precision not in SCORE_PRECISIONS:
            raise ValueError(f"score precision {precision!r}: choose one of "
                             f"{list(SCORE_PRECISIONS)}")
        dtype = SCORE_PRECISIONS[precision]
        x, y = _layers(x, "x", dtype), _layers(y, "y", dtype)
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} rows and y {len(y)}: the two models must embed "
                             "the same items in the same order")
        if metric not in METRICS:
            raise ValueError(f"metric {metric!r}: choose one of {list(METRICS)}")
        self.metric, self.k, self.n = metric, k, len(x)
        if metric == "mutual_knn":
            metrics.check_k(k, self.n, "mutual_knn")
            self._mx = np.stack([_neighbours(x[:, i], k) for i in range(x.shape[1])])
            self._iy = np.stack([np.nonzero(_neighbours(y[:, j], k))[1].reshape(self.n, k)
                                 for j in range(y.shape[1])])
        else:
            kx = np.stack([_centred_gram(x[:, i]) for i in range(x.shape[1])])
            self._ly = np.stack([_centred_gram(y[:, j]) for j in range(y.shape[1])])
            self._kx = kx.reshape(len(kx), -1)
            self._nx = np.linalg.norm(self._kx, axis=1)
            self._ny = np.linalg.norm(self._ly.reshape(len(self._ly), -1), axis=1)

    def _scores(self, pi: np.ndarray | None) -> np.ndarray:
        if self.metric == "mutual_knn":
            iy = self._iy if pi is None else np.argsort(pi)[self._iy[:, pi]]
            rows = np.arange(self.n)[:, None]
            hits = np.stack([self._mx[:, rows, iy[j]].sum(axis=(1, 2))
                             for j in range(len(iy))], axis=1)
            return hits / (self.n * self.k)
        ly = self._ly if pi is None else self._ly[:, pi][:, :, pi]
        num = self._kx @ ly.reshape(len(ly), -1).T
        den = np.outer(self._nx, self._ny)
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0)

    def observed(self) -> LayerScores:
        s = self._scores(None)
        i, j = np.unravel_index(int(np.argmax(s)), s.shape)
        per_item = None
        if self.metric == "mutual_knn":
            per_item = self._mx[i, np.arange(self.n)[:, None], self._iy[j]].sum(axis=1) / self.k
        return LayerScores(self.metric, s, float(s[i, j]), (int(i), int(j)), per_item)

    def null(self, perms: Iterable[np.ndarray]) -> np.ndarray:
        """float64 [K]: the max over layer pairs with y's rows permuted by each permutation."""
        return np.array([self._scores(np.asarray(pi)).max() for pi in perms])


def calibrate_layers(x: np.ndarray, y: np.ndarray, metric: str, *, k: int = 10,
                     n_permutations: int = 500, seed: int = 0,
                     alpha: float = calibrate.ALPHA) -> tuple[LayerScores, dict[str, float]]:
    """The best-layer score of x against y and its calibration against the max-over-pairs null
    (permutations from prh.calibrate.permutations(n, n_permutations, seed))."""
    la = LayerAlignment(x, y, metric, k)
    obs = la.observed()
    null = la.null(calibrate.permutations(la.n, n_permutations, seed))
    return obs, calibrate.calibrate(obs.best, null, alpha=alpha)
