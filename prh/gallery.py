"""Retrieval and mutual k-NN against every caption of a photo, and as the candidate pool grows.

The paper's protocol pairs each test photo with one caption (its first) and scores 1,000
photos against 1,000 captions. Koepke et al. (arXiv 2604.18572, "Back into Plato's Cave")
show mutual k-NN falling as the pool grows and one-to-one caption pairing flattering it;
Flickr30k has five captions per photo. This module scores the same fitted map both ways.

Captions are rows of `txt` [N, d]; `photo` [N] gives the row of `img` [n, d] each one
describes (every photo has at least one). Retrieval scores are dot products of the rows given
(pass `shared_space` rows: cosine in centred text space, as `prh.align`), ties counted against
the true pair within the rounding bound of `prh.metrics` (a tie between a true caption and a
wrong one is a miss). Mutual k-NN takes raw embeddings, as `prh.metrics.mutual_knn`.

Chance (uniform random rankings, no ties): image -> text with photo i's c_i captions among N
hits with probability c_i / N, so the mean over photos is sum(c_i) / (n N) = 1 / n, the
one-caption level; text -> image is 1 / n per caption.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from prh import metrics
from prh.align import ProcrustesMap, image_to_text_recall, unit_or_zero
from prh.config import metric_of, mknn_name


def check_photo_index(photo: np.ndarray, n: int, n_captions: int) -> np.ndarray:
    """`photo` as int64 [N]: one entry per caption row, each in [0, n), every photo covered."""
    photo = np.asarray(photo)
    if photo.shape != (n_captions,) or not np.issubdtype(photo.dtype, np.integer):
        raise ValueError(f"photo index: expected {n_captions} integers (one per caption), got "
                         f"shape {photo.shape} of {photo.dtype}")
    if n_captions and (photo.min() < 0 or photo.max() >= n):
        raise ValueError(f"photo index: entries outside [0, {n}) (the photo rows)")
    bare = np.flatnonzero(np.bincount(photo, minlength=n) == 0)
    if bare.size:
        raise ValueError(f"photos {bare[:10].tolist()} have no caption; every photo needs one")
    return photo.astype(np.int64)


def caption_ids(photo_ids: Sequence[str], counts: Sequence[int]) -> list[str]:
    """Row ids of every caption of each photo, in photo order: `PHOTO_ID:J`, J = 0, 1, ...
    its caption index (J = 0 is the one-caption protocol's caption). Unique, as
    `prh.io.save_embeddings` requires."""
    return [f"{p}:{j}" for p, c in zip(photo_ids, counts, strict=True) for j in range(c)]


def photo_index(ids: Sequence[str], photo_ids: Sequence[str]) -> np.ndarray:
    """The photo row of each caption row id (`caption_ids`): int64 [N]. Raises ValueError
    unless the rows list every photo's captions 0, 1, ... in the order of `photo_ids`."""
    ids, row = [str(i) for i in ids], {str(p): i for i, p in enumerate(photo_ids)}
    owners = [i.rpartition(":")[0] for i in ids]
    unknown = [i for i, o in zip(ids, owners, strict=True) if o not in row]
    if unknown:
        raise ValueError(f"caption ids {unknown[:5]} name no photo of the split "
                         f"({len(unknown)} rows)")
    photo = np.array([row[o] for o in owners], dtype=np.int64)
    expected = caption_ids(list(row), np.bincount(photo, minlength=len(row)).tolist())
    bad = next((j for j, (a, b) in enumerate(zip(ids, expected, strict=True)) if a != b), None)
    if bad is not None:
        raise ValueError(f"caption row {bad} is {ids[bad]!r} where {expected[bad]!r} belongs: "
                         "rows list each photo's captions 0, 1, ... in the photos' order")
    return check_photo_index(photo, len(row), len(ids))


def caption_photos(ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(photo ids in the order the rows list them, each one's caption count) of caption row
    ids `PHOTO_ID:J` (`caption_ids`' inverse). Raises ValueError for a row that is no caption
    row, or rows that do not list every photo's captions 0, 1, ... together (`photo_index`)."""
    bare = next((str(i) for i in ids if ":" not in str(i)), None)
    if bare is not None:
        raise ValueError(f"row {bare!r} is no caption row (PHOTO_ID:J)")
    photos = np.array(list(dict.fromkeys(str(i).rpartition(":")[0] for i in ids)))
    return photos, np.bincount(photo_index(ids, photos), minlength=len(photos))


def shared_space(pmap: ProcrustesMap, img: np.ndarray, txt: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Mapped images and centred texts, unit rows (zero rows stay zero): their dot products
    are the cosines `prh.align.image_to_text_recall` ranks by."""
    return unit_or_zero(pmap.image_to_text(img)), unit_or_zero(pmap.text(txt))


def image_to_text_any(img: np.ndarray, txt: np.ndarray, photo: np.ndarray, *,
                      chunk: int = metrics.CHUNK) -> np.ndarray:
    """Per-photo hit@1 with all N captions as candidates: 1.0 when a caption of the photo
    scores above every other photo's caption by more than the rounding bound. Float64 [n]."""
    q, c = metrics.check_matrix(img, "images"), metrics.check_matrix(txt, "captions")
    photo = check_photo_index(photo, q.shape[0], c.shape[0])
    tol = metrics.tie_tol(q, c, None)
    hits = np.empty(q.shape[0])
    for lo in range(0, q.shape[0], chunk):
        hi = min(lo + chunk, q.shape[0])
        s = q[lo:hi] @ c.T  # [chunk, N]
        own = photo[None, :] == np.arange(lo, hi)[:, None]
        best = np.where(own, s, -np.inf).max(axis=1)
        hits[lo:hi] = ~((s >= (best - tol[lo:hi])[:, None]) & ~own).any(axis=1)
    return hits


def text_to_image(txt: np.ndarray, img: np.ndarray, photo: np.ndarray, *,
                  chunk: int = metrics.CHUNK) -> np.ndarray:
    """Per-caption hit@1 with the n photos as candidates (`prh.metrics.retrieval_ranks`'
    rule: rank = #{photos scoring >= the true one - bound} - 1, a hit at rank 0). Float64 [N]."""
    q, c = metrics.check_matrix(txt, "captions"), metrics.check_matrix(img, "images")
    photo = check_photo_index(photo, c.shape[0], q.shape[0])
    tol = metrics.tie_tol(q, c, None)
    hits = np.empty(q.shape[0])
    for lo in range(0, q.shape[0], chunk):
        hi = min(lo + chunk, q.shape[0])
        s = q[lo:hi] @ c.T  # [chunk, n]
        true = s[np.arange(hi - lo), photo[lo:hi]]
        hits[lo:hi] = (s >= (true - tol[lo:hi])[:, None]).sum(axis=1) == 1
    return hits


def per_photo(values: np.ndarray, photo: np.ndarray, n: int) -> np.ndarray:
    """Mean of a per-caption outcome over each photo's captions: float64 [n]."""
    photo = check_photo_index(photo, n, len(values))
    return np.bincount(photo, weights=values, minlength=n) / np.bincount(photo, minlength=n)


def candidates_per_item(photo: np.ndarray, other_photos: bool) -> int:
    """The fewest neighbours an item of `caption_mutual_knn` can have: N - 1, or N - the
    largest number of captions of one photo when siblings are excluded."""
    return len(photo) - (int(np.bincount(photo).max()) if other_photos else 1)


def _distinct_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, index of each row's distinct row): x == distinct[index]."""
    uniq, inv = np.unique(x, axis=0, return_inverse=True)
    return uniq, inv.ravel()


def caption_mutual_knn(img: np.ndarray, txt: np.ndarray, photo: np.ndarray, k: int, *,
                       other_photos: bool, chunk: int = metrics.CHUNK) -> np.ndarray:
    """Mutual k-NN over caption-level pairs: item r is (image of photo[r], caption r), N items.

    N_img(r): the k items whose photos' images are nearest to photo[r]'s (cosine, self
    excluded); N_txt(r): the k captions nearest to caption r. m_r = |N_img ∩ N_txt| / k.
    Ties go to the lowest index (`prh.metrics.knn_mask`): the image side compares one
    photo-level similarity per pair of photos and the text side one per pair of distinct
    captions, so copies tie exactly (cosines equal only mathematically may round apart).
    other_photos=False: siblings (captions of the same photo) are candidates, and on the image
    side they tie with the item itself, so they come first. other_photos=True: siblings are
    excluded from both sides, leaving neighbours among the other photos. With one caption per
    photo both equal `prh.metrics.mutual_knn`. Chance for random captions: k / (N - 1), resp.
    k / (N - c_r). Float64 [N].
    """
    a = metrics.l2_normalize(img, "images")
    b = metrics.l2_normalize(txt, "captions")
    n_items = b.shape[0]
    photo = check_photo_index(photo, a.shape[0], n_items)
    room = candidates_per_item(photo, other_photos)
    if not 1 <= k <= room:
        raise ValueError(f"caption mutual k-NN: need 1 <= k <= {room} candidates per item, "
                         f"got k={k} with {n_items} captions")
    # similarities against each distinct row, then spread to its copies: a matrix product can
    # round identical columns differently, and the lowest-index rule needs copies to tie exactly
    sim_photo = a @ a.T  # [n_photos, n_photos], one value per pair of photos
    ub, ib = _distinct_rows(b)
    out = np.empty(n_items)
    for lo in range(0, n_items, chunk):
        hi = min(lo + chunk, n_items)
        rows = np.arange(lo, hi)
        sa = sim_photo[photo[lo:hi]][:, photo]
        sb = (b[lo:hi] @ ub.T)[:, ib]
        if other_photos:
            same = photo[lo:hi, None] == photo[None, :]
            sa[same] = -np.inf
            sb[same] = -np.inf
        out[lo:hi] = (metrics.knn_mask(sa, k, rows) & metrics.knn_mask(sb, k, rows)).sum(1) / k
    return out


def score_captions(pmap: ProcrustesMap, img: np.ndarray, txt: np.ndarray, photo: np.ndarray,
                   k: int) -> dict[str, np.ndarray]:
    """Per-photo outcomes [n] against all captions: `r_at_1_i2t_all_hit` (image -> text, any
    caption of the photo counts), `r_at_1_t2i_all` (text -> image, mean over the photo's
    captions), `mknn{k}_captions` and `mknn{k}_captions_other_photos` (`caption_mutual_knn`
    without and with siblings excluded, mean over the photo's captions). The mutual k-NN keys
    are left out when the pool is too small for k."""
    n = np.shape(img)[0]
    q, c = shared_space(pmap, img, txt)
    out = {"r_at_1_i2t_all_hit": image_to_text_any(q, c, photo),
           "r_at_1_t2i_all": per_photo(text_to_image(c, q, photo), photo, n)}
    for suffix, other in (("", False), ("_other_photos", True)):
        if k <= candidates_per_item(photo, other):
            out[f"{mknn_name(k)}_captions{suffix}"] = per_photo(
                caption_mutual_knn(img, txt, photo, k, other_photos=other), photo, n)
    return out


def pool_sizes(sizes: Sequence[int], n: int) -> list[int]:
    """The pool sizes a test split of n photos holds: those below n, and n itself (everything)."""
    return sorted({int(s) for s in sizes if s < n} | {n})


# a pool's retrieval scores; its mutual k-NNs are the mknn{k}* keys
POOL_METRICS = ("r_at_1", "r_at_1_i2t_all", "r_at_1_t2i_all")


def _pool_outcomes(pmap: ProcrustesMap, img: np.ndarray, txt_one: np.ndarray, txt: np.ndarray,
                   photo: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Per-photo outcomes of one pool: one-caption R@1 and mutual k-NN, `score_captions`."""
    n = img.shape[0]
    per = {"r_at_1": image_to_text_recall(pmap, img, txt_one)[1],
           **score_captions(pmap, img, txt, photo, k)}
    if k < n:
        per[mknn_name(k)] = metrics.mutual_knn(img, txt_one, k)
    return {metric_of(key): v for key, v in per.items()}


def _pool_chance(n: int, photo: np.ndarray, k: int, keys: Iterable[str]) -> dict[str, float]:
    """Chance level of each of `keys` on a pool of n photos holding the captions `photo`."""
    counts = np.bincount(photo, minlength=n)
    mknn = mknn_name(k)
    chance: dict[str, Callable[[], float]] = {
        "r_at_1": lambda: 1.0 / n, "r_at_1_i2t_all": lambda: 1.0 / n,
        "r_at_1_t2i_all": lambda: 1.0 / n, mknn: lambda: k / (n - 1),
        f"{mknn}_captions": lambda: k / (len(photo) - 1),
        f"{mknn}_captions_other_photos": lambda: float(np.mean(k / (len(photo) - counts)))}
    return {key: chance[key]() for key in keys}


def gallery_curve(pmap: ProcrustesMap, img: np.ndarray, txt_one: np.ndarray, txt: np.ndarray,
                  photo: np.ndarray, *, k: int, sizes: Sequence[int], draws: int, seed: int,
                  whole: Mapping[str, np.ndarray] | None = None) -> list[dict[str, Any]]:
    """Scores as the candidate pool grows: per pool size m (`pool_sizes`), `draws` random
    sub-galleries of m test photos (one, everything, at m = n), each scored on its own photos
    and their captions with the map fitted once; the mean over draws per metric.

    img [n, dx] raw images, txt_one [n, dy] each photo's one caption (the paper's pairs), txt
    [N, dy] all captions with `photo` [N]. Draws for size m come from
    `default_rng([seed, m])`, so a pool does not depend on the other sizes listed, and every
    run given the same seed scores the same sub-galleries. Metrics: `r_at_1` (one caption),
    those of `score_captions`, and `mknn{k}` (one caption, raw embeddings); a mutual k-NN is
    left out where the pool holds no k neighbours. Rows: {"n_photos", "n_captions" (mean
    over draws), "draws", "metrics": {name: mean}, "chance": {name: mean chance level}}.
    `whole`: the per-photo outcomes the caller already has for the whole split (keys as
    `score_alignment`'s and `score_captions`' per-query outcomes), reused for the m = n pool
    instead of scoring it again (the same numbers; tests/test_gallery.py checks it).
    """
    img, txt_one = metrics.check_pair(img, txt_one, "test images", "test captions")
    n = img.shape[0]
    photo = check_photo_index(photo, n, np.shape(txt)[0])
    txt = np.asarray(txt, dtype=np.float64)
    rows = []
    for m in pool_sizes(sizes, n):
        rng = np.random.default_rng([seed, m])
        subsets = ([np.arange(n)] if m == n else
                   [np.sort(rng.choice(n, size=m, replace=False)) for _ in range(draws)])
        scores, chances, n_captions = [], [], []
        for sub in subsets:
            keep = np.isin(photo, sub)
            pool_photo = np.searchsorted(sub, photo[keep])
            if m == n and whole is not None:
                per = {name: v for name, v in ((metric_of(key), v)
                                               for key, v in whole.items())
                       if name in POOL_METRICS or name.startswith(mknn_name(k))}
            else:
                per = _pool_outcomes(pmap, img[sub], txt_one[sub], txt[keep], pool_photo, k)
            scores.append({key: float(np.mean(v)) for key, v in per.items()})
            chances.append(_pool_chance(m, pool_photo, k, per))
            n_captions.append(int(keep.sum()))
        rows.append({"n_photos": m, "n_captions": float(np.mean(n_captions)),
                     "draws": len(subsets),
                     "metrics": {key: float(np.mean([s[key] for s in scores]))
                                 for key in scores[0]},
                     "chance": {key: float(np.mean([c[key] for c in chances]))
                                for key in chances[0]}})
    return rows


def curve_over_seeds(curves: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Per pool size, each metric's seed values, mean and std (ddof=1; None for one seed) from
    every seed's `gallery_curve`; pool sizes, draws, chance and metric names must agree."""
    seeds = list(curves)

    def shape(curve: Sequence[Mapping[str, Any]]) -> list[tuple]:
        return [(r["n_photos"], r["draws"], r["chance"], sorted(r["metrics"])) for r in curve]

    if any(shape(curves[s]) != shape(curves[seeds[0]]) for s in seeds):
        raise ValueError(f"gallery curves of seeds {seeds} differ in pool sizes, draws, chance "
                         "or metrics; rescore them with the same params.yaml")
    out = []
    for i, row in enumerate(curves[seeds[0]]):
        summary = {}
        for key in row["metrics"]:
            x = np.array([float(curves[s][i]["metrics"][key]) for s in seeds])
            summary[key] = {"values": dict(zip(seeds, x.tolist(), strict=True)),
                            "mean": float(x.mean()),
                            "std": float(x.std(ddof=1)) if x.size > 1 else None}
        out.append({"n_photos": row["n_photos"], "n_captions": row["n_captions"],
                    "draws": row["draws"], "seeds": seeds, "metrics": summary,
                    "chance": row["chance"]})
    return out
