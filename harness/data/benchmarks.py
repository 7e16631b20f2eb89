"""The public benchmarks as the evaluation-only pipeline reads and scores them (params.yaml's
`wit1024` section, harness.config.reference): the WIT items' digest, every vision encoder's
clipped layers, the Flickr30k pairs with the 30k-pair map's R@1, and a best pair's interval
over the items. The reference stage and the web-text recap_score stage share them."""

from __future__ import annotations

import gc
import hashlib
import time
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from harness.config.reference import ReferenceConfig
    from prh.coco import Coco
    from prh.wit import Wit


def wit_digest(wit: Wit) -> str:
    """The WIT items' identity in the scores: a sha256 over every text and image digest."""
    h = hashlib.sha256()
    for text, image in zip(wit.texts, wit.images, strict=True):
        h.update(text.encode())
        h.update(hashlib.sha256(image).digest())
    return h.hexdigest()[:16]


def free_memory() -> None:
    """Release a model's memory before the next one loads (the GPU's cache too)."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def collapsed_note(info: dict[str, Any]) -> str:
    """The line's warning for a model whose layers collapsed (prh.layers.degenerate_layers)."""
    bad = info["degenerate_layers"]
    return (f"; COLLAPSED at layers {bad}: every cosine between items within float32 "
            "rounding (random weights?), no verdict from its scores") if bad else ""


def vision_layers(cfg: ReferenceConfig, wit: Wit | Coco
                  ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Every vision encoder's per-layer CLS features of the items' images, clipped as
    platonic-rep clips, with each model's facts, collapsed layers and seconds."""
    from prh.features import load_vision_model, vision_features
    from prh.layers import clip_outliers, degenerate_layers

    images = wit.decoded()
    feats, infos = {}, {}
    for v in cfg.vision:
        start = time.perf_counter()
        model, info = load_vision_model(v.timm, v.weights, v.image_size, v.precision, cfg.device)
        x = vision_features(model, images, image_size=info["image_size"],
                            batch_size=cfg.batch_size, device=cfg.device)
        feats[v.name] = clip_outliers(x, cfg.q_outlier, cfg.clip_mode)
        infos[v.name] = {**info, "degenerate_layers": degenerate_layers(feats[v.name]),
                         "seconds": round(time.perf_counter() - start, 2)}
        print(f"reference: {v.name}: {x.shape[1]} layers x {x.shape[2]} of {x.shape[0]} images "
              f"in {infos[v.name]['seconds']:.1f} s" + collapsed_note(infos[v.name]))
        del model
        free_memory()
    return feats, infos


def read_flickr(cfg: ReferenceConfig) -> dict[str, tuple[list[str], np.ndarray]] | None:
    """Per split (train, val, test): the evaluation captions (each photo's first, as the train
    stage's) and the image stage's embeddings of the same photos, ids checked; None when
    `wit1024.flickr` is not set."""
    if cfg.flickr is None:
        return None
    from harness.config.reference import FLICKR_SPLITS
    from prh.data import eval_captions, load_karpathy
    from prh.io import check_same_ids, load_embeddings

    corpus = load_karpathy(cfg.flickr.dataset)
    out = {}
    for split in FLICKR_SPLITS:
        photos = corpus.split(split)
        path = cfg.flickr.image / f"{split}.npz"
        ids, emb, _ = load_embeddings(path)
        check_same_ids(ids, np.array([p.id for p in photos]), str(path),
                       f"{cfg.flickr.dataset} ({split})")
        out[split] = (eval_captions(photos), emb)
    return out


def flickr_recall(cfg: ReferenceConfig, encode: Any, flickr: dict[str, Any]) -> dict[str, Any]:
    """Table 3's last column for one text encoder: R@1 on the test pairs of a map fitted on
    every train pair and the val pairs (prh.align, ties against the true pair), with its
    interval over the test pairs."""
    from harness.stats.estimators import bootstrap_ci
    from prh.align import fit_procrustes, image_to_text_recall

    (tr_txt, tr_img), (va_txt, va_img), (te_txt, te_img) = (flickr[s] for s in
                                                            ("train", "val", "test"))
    txt = [encode(t) for t in (tr_txt, va_txt, te_txt)]
    if txt[0].shape[1] > tr_img.shape[1]:
        return {"skipped": f"text width {txt[0].shape[1]} exceeds the image width "
                           f"{tr_img.shape[1]}: the map reduces images to the text width"}
    pmap = fit_procrustes(np.concatenate([tr_img, va_img]), np.concatenate(txt[:2]))
    hits = image_to_text_recall(pmap, te_img, txt[2])[1]
    ci = bootstrap_ci(hits, level=cfg.ci_level, n_resamples=cfg.n_resamples, seed=cfg.seed)
    return {"r_at_1": float(hits.mean()), "n_pairs": len(tr_txt) + len(va_txt),
            "n_test": len(te_txt), "chance": 1 / len(te_txt),
            **ci.to_dict(), "resamples": "the test pairs",
            "per_pair": hits.astype(int).tolist(),  # each test pair's hit, for paired intervals
            "pooling": "mean of the last hidden state over the attention mask",
            "pairs": "every train photo and every val photo with its first caption"}


def item_interval(cfg: ReferenceConfig, per_item: np.ndarray) -> dict[str, Any]:
    """The bootstrap interval of a best pair's score over the WIT items, as the fields an
    entry carries beside its number (results.json's shape: `ci: [lo, hi]`, `ci_level`,
    `ci_method`, `n`, `n_resamples`, `note`, and what it `resamples`)."""
    from harness.stats.estimators import bootstrap_ci

    ci = bootstrap_ci(per_item, level=cfg.ci_level, n_resamples=cfg.n_resamples, seed=cfg.seed)
    return {**ci.to_dict(), "resamples": "the WIT items, at the best layer pair"}
