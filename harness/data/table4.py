"""Table 4's pair-free setting beside the public encoders (the reference stage's
`wit1024.flickr.pairfree_seeds`): the flickr30k profile's pools, aligner and class sets read
and checked before any model loads (`read_pairfree`), the image rows made as the benchmark
makes them or read from the image stage (`image_rows`, `table4_images`), each text encoder's
rows (`pairfree_rows`), and every encoder's and seed's fit in one side-by-side batch
(`pairfree_all`)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.config.params import weights_path
from harness.data.benchmarks import free_memory
from prh.io import ContractError

if TYPE_CHECKING:
    from harness.config.reference import ReferenceConfig


@dataclass
class PairFreeInputs:
    """Table 4's setting, read and checked before any model loads (`read_pairfree`)."""

    pool_img: np.ndarray  # the image stage's pool_images.npz, first `pool` rows (first-caption)
    pool_captions: list[list[str]]  # every caption of the text pool's photos, in pool order
    test_captions: list[list[str]]  # every caption of the test photos, in test order
    aligner: Any  # prh.pairfree.PairFreeConfig of the flickr30k profile
    classes: dict[str, Any]  # class set -> prh.classsets.ClassSet
    image: Any  # prh.image.ImageConfig of the flickr30k profile
    weights: Path  # its DINOv2 weights
    inputs: str  # wit1024.flickr.inputs
    pool_paths: list[Path]  # the image pool's photos ("benchmark" inputs embed them here)
    test_paths: list[Path]  # the test photos, likewise


def read_pairfree(cfg: ReferenceConfig, params_path: Path) -> PairFreeInputs | None:
    """The pools, aligner, class sets and image encoder of `flickr.pairfree_seeds`, checked
    before any model loads: the pool and test photos on disk ("benchmark" inputs embed them,
    `_photos`), or the image stage's pool (`_stage_pool`). None when no seed is set."""
    if cfg.flickr is None or not cfg.flickr.pairfree_seeds:
        return None
    from harness.config.params import EvalConfig, _build
    from harness.config.reference import PAIRFREE_PROFILE
    from prh import classsets
    from prh.data import load_karpathy, pairfree_halves
    from prh.image import ImageConfig
    from prh.io import read_yaml

    block = read_yaml(params_path, "pass --params").get(PAIRFREE_PROFILE) or {}
    ev = _build(EvalConfig, block.get("eval") or {}, params_path, f"{PAIRFREE_PROFILE}.eval")
    if ev.pairfree_pool == 0:
        raise ContractError(f"{params_path}: {PAIRFREE_PROFILE}.eval.pairfree_pool is 0; set it "
                            "(14500: half the train photos) to score wit1024.flickr.pairfree_seeds")
    corpus = load_karpathy(cfg.flickr.dataset)
    img_half, txt_half = pairfree_halves(corpus.split("train"))
    if len(img_half) < ev.pairfree_pool:
        raise ContractError(f"{cfg.flickr.dataset}: {len(img_half)} photos a side, "
                            f"{PAIRFREE_PROFILE}.eval.pairfree_pool asks for {ev.pairfree_pool}")
    image = ImageConfig.from_dict(block.get("image") or {}, f"{PAIRFREE_PROFILE}.image")
    if image.encoder != "dinov2_vitb14":
        raise ContractError(f"{params_path}: {PAIRFREE_PROFILE}.image.encoder is "
                            f"{image.encoder!r}; Table 4's setting embeds its images with the "
                            "paper's dinov2_vitb14")
    bench = cfg.flickr.inputs == "benchmark"
    weights = weights_path(block.get("image") or {}, cfg.flickr.dataset.parent)
    if not weights.exists():
        raise ContractError(f"{weights}: the {PAIRFREE_PROFILE} image encoder's weights are "
                            "missing; Table 4's setting embeds its "
                            + ("photos and class images" if bench else "class images")
                            + " with them and records their architecture and digest")
    pool, test = img_half[:ev.pairfree_pool], corpus.split("test")
    readers = {"in100": classsets.read_in100,
               "cifar10": lambda r: classsets.read_cifar(r, "cifar10"),
               "cifar100": lambda r: classsets.read_cifar(r, "cifar100")}
    return PairFreeInputs(
        np.zeros((0, 0), np.float32) if bench else _stage_pool(cfg, pool, image),
        [list(p.captions) for p in txt_half[:ev.pairfree_pool]],
        [list(p.captions) for p in test], ev.pairfree,
        {name: readers[name](root) for name, root in cfg.flickr.classes}, image, weights,
        cfg.flickr.inputs, *(_photos(cfg, pool, test) if bench else ([], [])))


def _stage_pool(cfg: ReferenceConfig, pool: list[Any], image: Any) -> np.ndarray:
    """The image stage's pool rows, their ids the first half of the train photos
    (`prh.data.pairfree_halves`), embedded under the flickr30k image config that the class
    images will be embedded with."""
    from harness.config.reference import PAIRFREE_PROFILE
    from prh.io import check_same_ids, load_embeddings

    path = cfg.flickr.image / "pool_images.npz"
    ids, emb, _ = load_embeddings(path)
    check_same_ids(ids[:len(pool)], np.array([p.id for p in pool]), str(path),
                   f"{cfg.flickr.dataset} (first half of train)")
    made = load_embeddings(cfg.flickr.image / "test.npz")[2].get("config")
    if made != image.to_dict():
        raise ContractError(f"{cfg.flickr.image / 'test.npz'}: embedded under another image "
                            f"config than params.yaml's {PAIRFREE_PROFILE}.image; rerun its "
                            "image stage so the class images and the pools share an encoder")
    return emb[:len(pool)]


def _photos(cfg: ReferenceConfig, pool: list[Any], test: list[Any]
            ) -> tuple[list[Path], list[Path]]:
    """The files of the pool and test photos, every one checked to be there."""
    from harness.config.reference import PAIRFREE_PROFILE
    from harness.data.dvccache import dvc_cache_dir
    from prh.data import photo_paths
    from prh.image import check_images_exist

    images, cache = cfg.flickr.dataset.parent / "images", dvc_cache_dir()
    pool_paths, test_paths = photo_paths(pool, images, cache), photo_paths(test, images, cache)
    check_images_exist([*pool_paths, *test_paths],
                       f"put the {PAIRFREE_PROFILE} photos in {images}: "
                       "wit1024.flickr.inputs: benchmark embeds them as the benchmark does")
    return pool_paths, test_paths


def image_rows(pf: PairFreeInputs) -> dict[str, Any]:
    """How Table 4's image rows are made, by `wit1024.flickr.inputs` (recorded with every
    score): "benchmark", as unpaired-rosetta's `dinov2_vit-b14@224_mean` stores them (the
    whole image resized to S x S, bilinear; ImageNet's mean and std; the mean over the
    final-norm tokens, `prh.image.TokenMean`; every row to unit length); "first-caption", as
    the flickr30k image stage embedded the pools (its transform, the final-norm CLS token)."""
    norm = {"mean": list(pf.image.mean), "std": list(pf.image.std)}
    if pf.inputs == "benchmark":
        return {"made_by": "this stage", "resize": "squash", "interpolation": "bilinear",
                "image_size": pf.image.image_size, "pooling": "mean of the final-norm tokens",
                **norm, "unit_rows": True}
    return {"made_by": "the flickr30k image stage", "resize": "crop",
            "interpolation": pf.image.interpolation, "image_size": pf.image.image_size,
            "pooling": "final-norm CLS token", **norm, "unit_rows": False}


# rows of the image pool whose cosines `degenerate_layers` checks (a 14,500-row Gram matrix
# would take 1.7 GB): a collapsed pool has every subset collapsed
COLLAPSE_ROWS = 1024


def table4_images(pf: PairFreeInputs, test_img: np.ndarray, device: str = "cpu"
                  ) -> dict[str, Any]:
    """Table 4's image rows by `image_rows`: {"pool", "test": [n, d], "classes": {class set:
    [n, d]}, "facts": how they were made, the encoder's architecture and weights' digest, and
    whether the pool's rows collapse (`prh.layers.degenerate_layers` on its first
    COLLAPSE_ROWS)}, on `wit1024.device`. "benchmark" embeds the pool and test photos and
    the class images here; "first-caption" reads the pools and test photos from the image stage
    and embeds the class images the way it did."""
    from prh import image
    from prh.align import unit_or_zero
    from prh.classsets import IN100_N
    from prh.io import file_sha256
    from prh.layers import degenerate_layers

    how = image_rows(pf)
    bench = pf.inputs == "benchmark"
    out: dict[str, Any] = {"pool": pf.pool_img, "test": test_img, "classes": {}}
    model = image.build_dinov2(pf.weights, img_size=pf.image.image_size)
    out["facts"] = {**how, "encoder": {
        "timm": image.DINOV2_TIMM_NAME, "image_size": pf.image.image_size,
        "width": int(model.embed_dim), "layers": len(model.blocks),
        "sha256": file_sha256(pf.weights)}}
    if bench:
        model = image.TokenMean(model)

    jobs = [("pool", pf.pool_paths, 0), ("test", pf.test_paths, 0)] if bench else []
    jobs += [(name, cs.images, len(cs.names)) for name, cs in pf.classes.items()]
    for name, images, n_classes in jobs:
        start = time.perf_counter()
        x = image.embed_images(model, images, image_size=how["image_size"], mean=pf.image.mean,
                               std=pf.image.std, batch_size=pf.image.embed_batch_size,
                               interpolation=how["interpolation"], resize=how["resize"],
                               device=device)
        print(f"reference: {name}: {len(x)} images"
              + (f" of {n_classes} classes" if n_classes else "")
              + f" embedded in {time.perf_counter() - start:.1f} s ({how['resize']}, "
              f"{how['pooling']})" + (f" (the benchmark scores {IN100_N:,}: a partial copy)"
                                      if name == "in100" and len(x) != IN100_N else ""))
        x = unit_or_zero(x) if how["unit_rows"] else x
        if name in ("pool", "test"):
            out[name] = x
        else:
            out["classes"][name] = x
    del model
    free_memory()
    out["facts"]["collapsed"] = bool(degenerate_layers(out["pool"][:COLLAPSE_ROWS, None, :]))
    return out


def _prompts(cs: Any) -> list[list[str]]:
    from prh.zeroshot import CIFAR_TEMPLATES, in100_prompt

    if cs.definitions:
        return [[in100_prompt(n, d)] for n, d in zip(cs.names, cs.definitions, strict=True)]
    return [[t.format(n) for t in CIFAR_TEMPLATES] for n in cs.names]


def pairfree_rows(encode: Any, pf: PairFreeInputs, images: dict[str, Any]) -> dict[str, Any]:
    """The rows Table 4's aligner and scores read, by `wit1024.flickr.inputs`: "benchmark", as
    unpaired-rosetta's load_rows prepares its stored embeddings (the image rows of
    `table4_images`, unit length; a photo's captions each to unit length, averaged, to unit
    length again, the class prompts likewise: prh.align.reduce_texts); "first-caption", each
    photo's first caption and the rows as embedded."""
    from prh.align import reduce_texts
    from prh.zeroshot import class_embeddings

    bench = pf.inputs == "benchmark"

    def texts(items: list[list[str]]) -> np.ndarray:
        if not bench:
            return encode([c[0] for c in items])
        return reduce_texts(encode([c for cs in items for c in cs]), [len(cs) for cs in items])

    return {"pool_img": images["pool"], "pool_txt": texts(pf.pool_captions),
            "test_img": images["test"], "test_txt": texts(pf.test_captions),
            "class_img": images["classes"],
            "prompts": {cs: class_embeddings(encode, _prompts(c), reduce=bench)
                        for cs, c in pf.classes.items()}}


def _pairfree_scores(cfg: ReferenceConfig, pf: PairFreeInputs, rows: dict[str, dict[str, Any]]
                     ) -> dict[str, dict[str, Any]]:
    """Table 4's setting for every encoder (name -> its `pairfree_rows`): per aligner seed, the
    pair-free map's scores on the test pairs and its zero-shot top-k on each class set; the
    spread and median over seeds. Every encoder's and seed's fit side by side
    (`prh.pairfree.fit_and_score_all`). Any width on either side: the map is a Stiefel
    matrix [image width, text width], as the benchmark's. A score the inputs cannot give is
    a ContractError naming the encoder and the seed."""
    from harness.stats.estimators import seed_spread
    from prh.pairfree import fit_and_score_all
    from prh.zeroshot import TOP_K, zeroshot_scores

    seeds = cfg.flickr.pairfree_seeds
    jobs = {f"{name}, seed {seed}": (r["pool_img"], r["pool_txt"], r["test_img"],
                                     r["test_txt"], seed)
            for name, r in rows.items() for seed in seeds}
    try:
        fits = fit_and_score_all(jobs, cfg=pf.aligner)
    except ValueError as e:
        raise ContractError(f"pair-free {e}") from e
    out = {}
    for name, r in rows.items():
        by_seed = {}
        for seed in seeds:
            got, pmap = fits[f"{name}, seed {seed}"]
            got["zeroshot"] = {} if pmap is None else {
                cs: zeroshot_scores(pmap, r["class_img"][cs], r["prompts"][cs], c.labels,
                                    TOP_K[cs]) for cs, c in pf.classes.items()}
            by_seed[str(seed)] = got
        spread = {m: seed_spread({s: g[m] for s, g in by_seed.items()})
                  for m in ("r_at_1", "foscttm")}
        spread.update({f"{cs}_top{TOP_K[cs]}": seed_spread(
            {s: g["zeroshot"].get(cs, {}).get("top_k", 0.0) for s, g in by_seed.items()})
            for cs in pf.classes})
        out[name] = {"seeds": by_seed, "spread": spread, "n_pool": len(pf.pool_captions),
                     "n_test": len(pf.test_captions), "aligner": asdict(pf.aligner),
                     "inputs": pf.inputs, "images": image_rows(pf)}
        print(f"reference: {name}: pair-free " + ", ".join(
            f"{m} median {v['median']:.4f} over {v['n']} seeds" for m, v in spread.items()))
    return out


def _arm_rows(cfg: ReferenceConfig, pf: PairFreeInputs, images: dict[str, Any],
              runs: dict[Path, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Table 4's setting for the trained arms beside the public encoders: every ARM-sSEED's own
    encoder (prh.encode_text) on the same captions, pools and class prompts
    (`pairfree_rows`): (the blocks {arm: {profile, runs: {training seed: {skipped: why}}}},
    {run folder: its rows}). Arms trained on another profile's captions than the pools'
    are skipped, saying so."""
    from harness.config.reference import PAIRFREE_PROFILE
    from prh.encode_text import load_text_encoder

    blocks: dict[str, Any] = {}
    rows: dict[str, Any] = {}
    for folder, run in runs.items():
        block = blocks.setdefault(run["arm"], {"profile": run["profile"], "runs": {}})
        if run["profile"] != PAIRFREE_PROFILE:
            block["runs"][str(run["seed"])] = {
                "skipped": f"trained on the {run['profile']} profile's captions; the pools are "
                           f"the {PAIRFREE_PROFILE} profile's"}
        else:
            rows[str(folder)] = pairfree_rows(load_text_encoder(folder, cfg.device), pf, images)
    return blocks, rows


def pairfree_all(cfg: ReferenceConfig, pf: PairFreeInputs, images: dict[str, Any],
                  pf_rows: dict[str, Any], runs: dict[Path, dict[str, Any]] | None
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pair_free, pair_free_arms): the public encoders' rows and the trained arms' fitted in
    one batch (`_pairfree_scores`)."""
    pf_arms, arm_rows = _arm_rows(cfg, pf, images, runs) if runs else ({}, {})
    if set(pf_rows) & set(arm_rows):
        raise ContractError(f"wit1024: {sorted(set(pf_rows) & set(arm_rows))} names both a text "
                            "model and a trained run; rename the model in wit1024.text")
    fitted = _pairfree_scores(cfg, pf, {**pf_rows, **arm_rows})
    for folder, run in (runs or {}).items():
        if str(folder) in arm_rows:
            pf_arms[run["arm"]]["runs"][str(run["seed"])] = fitted[str(folder)]
    return {name: fitted[name] for name in pf_rows}, pf_arms
