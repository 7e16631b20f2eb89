"""Zero-shot classification through an image -> text map: each image is mapped into the text
space and its class is the class prompt it is closest to, as the pair-free benchmark scores it
(Schnaus et al. 2026, arXiv 2610.09411; code dominik-schnaus/unpaired-rosetta@caa1816,
`unpaired_rosetta/evaluation.py`): ImageNet-100 top-5 with one prompt per class, the class name
and its WordNet definition (`in100_prompt`), CIFAR-10 top-1 and CIFAR-100 top-5 with CLIP's 18
templates averaged per class.

Both sides are prepared as the map's fit prepared its pools (`prh.align.ProcrustesMap`: the
image pool's mean off the images, the text pool's mean off the prompts) and compared by cosine.
Ties count against the true class, as every retrieval rank here does (`prh.metrics`): the
true class is in the top k only when fewer than k other classes score at least as high, so an
image at the map's image mean (every image of a collapsed encoder) scores 0, never k / C. The
benchmark takes torch's topk over classes in a shuffled order, which breaks ties at random; on
untied scores the two agree exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from prh import align, metrics

# CLIP's 18 CIFAR templates as the benchmark lists them (`modalities/image_captions/
# datasets.py` CIFAR_TEMPLATES), in its order; "{}" takes the archive's class name as it is
# (CIFAR-100's underscores kept, as the benchmark keeps them)
CIFAR_TEMPLATES: tuple[str, ...] = (
    "a photo of a {}.", "a blurry photo of a {}.", "a black and white photo of a {}.",
    "a low contrast photo of a {}.", "a high contrast photo of a {}.", "a bad photo of a {}.",
    "a good photo of a {}.", "a photo of a small {}.", "a photo of a big {}.",
    "a photo of the {}.", "a blurry photo of the {}.", "a black and white photo of the {}.",
    "a low contrast photo of the {}.", "a high contrast photo of the {}.",
    "a bad photo of the {}.", "a good photo of the {}.", "a photo of the small {}.",
    "a photo of the big {}.")
TOP_K = {"in100": 5, "cifar10": 1, "cifar100": 5}  # the benchmark's reported k per class set
IN100_SEPARATOR = " - "  # the benchmark's prompts join name and definition so (datasets.py)


def in100_prompt(name: str, definition: str) -> str:
    """The benchmark's ImageNet-100 prompt, "<class name> - <WordNet definition>" as its
    IMAGENET100_PROMPTS list has them (its paper writes "<name>: <definition>")."""
    return f"{name}{IN100_SEPARATOR}{definition}"


def class_embeddings(encode: Callable[[list[str]], np.ndarray],
                     prompts: Sequence[Sequence[str]], reduce: bool = False) -> np.ndarray:
    """[C, d]: per class, the mean of its prompts' embeddings (one prompt: its embedding), on
    the scale of the pool captions: the pools enter the map unnormalised (prh.pairfree step 1
    centres, then normalises), so the class vectors do too. `reduce`: as the benchmark
    prepares its stored rows, each prompt to unit length, the mean, to unit length
    (prh.align.reduce_texts). `encode` maps texts to [n, d]."""
    if any(len(ps) == 0 for ps in prompts):
        raise ValueError("every class needs at least one prompt")
    emb = metrics.check_matrix(encode([p for ps in prompts for p in ps]), "prompt embeddings")
    if reduce:
        from prh.align import reduce_texts

        return reduce_texts(emb, [len(ps) for ps in prompts])
    ends = np.cumsum([len(ps) for ps in prompts])
    return np.stack([emb[e - len(ps):e].mean(axis=0) for e, ps in zip(ends, prompts,
                                                                      strict=True)])


def class_ranks(queries: np.ndarray, classes: np.ndarray, labels: np.ndarray,
                chunk: int = metrics.CHUNK) -> np.ndarray:
    """rank_i = #{c : s_ic >= s_i,y_i - tol_i} - 1 with s = queries classes^T: how many other
    classes score at least as high as the true one (ties within the rounding bound
    `metrics.tie_tol` count against it). int64 [n]."""
    q = metrics.check_matrix(queries, "queries")
    c = metrics.check_matrix(classes, "class embeddings")
    y = np.asarray(labels)
    if q.shape[1] != c.shape[1]:
        raise ValueError(f"queries have width {q.shape[1]}, classes {c.shape[1]}; map them "
                         "into one space first")
    if y.shape != (q.shape[0],) or not np.issubdtype(y.dtype, np.integer) \
            or y.min(initial=0) < 0 or y.max(initial=0) >= c.shape[0]:
        raise ValueError(f"labels: expected {q.shape[0]} integers in [0, {c.shape[0]}), got "
                         f"shape {y.shape}, dtype {y.dtype}")
    tol = metrics.tie_tol(q, c)
    out = np.empty(len(q), dtype=np.int64)
    for lo in range(0, len(q), chunk):
        s = q[lo:lo + chunk] @ c.T
        true = s[np.arange(len(s)), y[lo:lo + chunk]]
        out[lo:lo + chunk] = (s >= (true - tol[lo:lo + chunk])[:, None]).sum(axis=1) - 1
    return out


def zeroshot_scores(pmap: align.ProcrustesMap, images: np.ndarray, class_text: np.ndarray,
                    labels: np.ndarray, k: int) -> dict[str, float | int]:
    """Top-k accuracy of the mapped images against the class prompts' embeddings: the images
    prepared and mapped by `pmap`, the prompts centred on its text mean, both by cosine.
    Returns top_k (the accuracy), k, chance = k / C, n and n_classes."""
    n_classes = np.shape(class_text)[0]
    metrics.check_k(k, n_classes, "zero-shot top-k")
    q = align.unit_or_zero(pmap.image_to_text(metrics.check_matrix(images, "images")))
    c = align.unit_or_zero(pmap.text(metrics.check_matrix(class_text, "class embeddings")))
    hits = class_ranks(q, c, labels) < k
    return {"top_k": float(hits.mean()), "k": k, "chance": k / n_classes, "n": int(len(q)),
            "n_classes": int(n_classes)}
