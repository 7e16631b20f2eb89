"""Stage `reference` (evaluation only, the `wit1024` section): every listed public text encoder
against every listed vision encoder on WIT-1024 by the platonic-rep protocol (prh.features,
prh.layers), best layer pair and its max-over-pairs calibration, the item interval, and STS-B
for every text encoder (and for the trained arms under `arms`), and Flickr30k R@1 with the
30k-pair map when `flickr` is set.
Everything is checked (section, paths, data, every text model's tokenizer on the texts it will
score) before a model loads; `--check` stops there. The text models run before the WIT and
COCO vision models, so a text-side fault does not wait for the slowest step. Every model's
collapsed layers (prh.layers.degenerate_layers) are recorded beside its scores."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.data.benchmarks import (
    collapsed_note,
    flickr_recall,
    free_memory,
    item_interval,
    read_flickr,
    vision_layers,
    wit_digest,
)
from harness.records.reference import metric_key, pair_key, write_reference
from harness.stages.common import fail, stage_parser, weights_path
from prh.io import ContractError

if TYPE_CHECKING:  # the stage imports torch and scipy only once it runs (`--help` stays fast)
    from harness.config.reference import ReferenceConfig
    from prh.coco import Coco
    from prh.sts import Sts

LANGUAGE = {
    "platonic-rep": "mask-weighted mean over tokens of every hidden state, embedding output "
                    "included; left padding to the set's longest text, no position ids, pooled "
                    "in the compute precision (platonic-rep extract_llm_features)",
    "padding-invariant": "mask-weighted mean over tokens of every hidden state, embedding "
                         "output included; right padding per batch, position ids from the "
                         "attention mask"}
PROTOCOL = {
    "vision": "CLS token after every block, before the final norm, at the model's input size",
    "score": "each layer L2-normalised; max over all (text layer, vision layer) pairs",
    "null": "one row permutation per draw applied to every vision layer, the same max "
            "(calibrated-similarity calibrate_layers, agg max)",
    "sts": "cosine of the mean-pooled last hidden state, Spearman against the gold scores",
    "flickr": "the mean-pooled last hidden state of each photo's first caption; Procrustes "
              "fitted on every train and val pair, image -> text R@1 on the test pairs",
    "pair_free": "the flickr30k profile's pair-free pools (images of the first half of the "
                 "train photos, the captions of the last half) and aligner (prh.pairfree), "
                 "the rows by wit1024.flickr.inputs (pair_free's `inputs`), one map per seed, "
                 "scored image -> text on the test pairs (R@1 ties against, FOSCTTM "
                 "midranks) and zero-shot on the class sets (prh.zeroshot)"}


def text_sides(cfg: ReferenceConfig, texts: list[str]) -> dict[str, dict[str, Any]]:
    """Every text model's config and tokenizer (no weights), its tokenizer exercised on the
    texts it will score: the size against the embedding table, the share of unknown tokens
    (prh.features.load_text_side, check_unknown). FeatureError names the folder."""
    from prh.features import check_unknown, load_text_side

    out = {}
    for t in cfg.text:
        side = load_text_side(t.path)
        share = check_unknown(side, texts, f"{t.path} ({t.name})")
        out[t.name] = {**side.facts, "unk_share": share}
        print(f"reference: {t.name}: {side.facts['model_type']}, {side.facts['layers']} layers "
              f"x {side.facts['hidden']}, tokenizer of {side.facts['tokenizer_size']:,} tokens, "
              f"{share:.2%} of the scored tokens unknown")
    return out


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


def _pairfree_all(cfg: ReferenceConfig, pf: PairFreeInputs, images: dict[str, Any],
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


def _text(cfg: ReferenceConfig, benches: dict[str, Any], sts: Sts | None,
          flickr: dict[str, Any] | None, pf: PairFreeInputs | None = None,
          images: dict[str, Any] | None = None
          ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, dict[str, np.ndarray]],
                     dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Per text encoder: its features on each benchmark's texts (`benches`: wit1024, coco ->
    its data) by `wit1024.protocol` and by the other protocol (what the choice moves, shown
    beside every verdict), each {benchmark: {model: features}}; what was loaded (WIT's
    extraction); its STS-B and Flickr30k scores; and its rows of Table 4's setting
    (`pairfree_rows`), fitted once every encoder's are made."""
    from prh.features import PROTOCOLS, language_features, load_language_model
    from prh.layers import clip_outliers, degenerate_layers
    from prh.sts import spearman

    other = next(p for p in PROTOCOLS if p != cfg.protocol)
    feats: dict[str, dict[str, np.ndarray]] = {b: {} for b in benches}
    alt: dict[str, dict[str, np.ndarray]] = {b: {} for b in benches}
    infos, sts_out, flickr_out, pf_rows = {}, {}, {}, {}
    for t in cfg.text:
        start = time.perf_counter()
        lm = load_language_model(t.path, t.precision, cfg.device)
        for bench, data in benches.items():
            x, got = language_features(lm, data.texts, batch_size=cfg.batch_size,
                                       device=cfg.device, protocol=cfg.protocol)
            if bench == "wit1024":  # the first: what the printed line and `text` report
                how = got
            feats[bench][t.name] = clip_outliers(x, cfg.q_outlier, cfg.clip_mode)
            alt[bench][t.name] = clip_outliers(language_features(
                lm, data.texts, batch_size=cfg.batch_size, device=cfg.device,
                protocol=other)[0], cfg.q_outlier, cfg.clip_mode)
            if bench == "wit1024":
                infos[t.name] = {**lm.info, **how,
                                 "degenerate_layers": degenerate_layers(feats[bench][t.name])}
        infos[t.name]["seconds"] = round(time.perf_counter() - start, 2)
        print(f"reference: {t.name}: {x.shape[1]} layers x {x.shape[2]} of "
              + " and ".join(f"{len(d.texts)} {b} texts" for b, d in benches.items())
              + f" in {infos[t.name]['seconds']:.1f} s ({how['n_truncated']} cut at "
              f"{lm.max_length} tokens)" + collapsed_note(infos[t.name]))
        def last_layer(texts: list[str], lm: Any = lm) -> np.ndarray:
            return language_features(lm, texts, batch_size=cfg.batch_size, device=cfg.device,
                                     last_only=True)[0][:, 0]
        if sts is not None:
            rho = spearman(sts, last_layer)
            sts_out[t.name] = {"spearman": rho, "n": int(len(sts.scores)), "path": str(cfg.stsb)}
            print(f"reference: {t.name}: STS-B Spearman {rho:.4f} over {len(sts.scores)} pairs")
        if flickr is not None:
            flickr_out[t.name] = got = flickr_recall(cfg, last_layer, flickr)
            print(f"reference: {t.name}: Flickr30k " + (got.get("skipped") or (
                f"R@1 {got['r_at_1']:.4f} with the {got['n_pairs']}-pair map")))
        if pf is not None and images is not None:
            pf_rows[t.name] = pairfree_rows(last_layer, pf, images)
        del lm
        free_memory()
    return feats, alt, infos, sts_out, flickr_out, pf_rows


def arm_runs(cfg: ReferenceConfig) -> dict[Path, dict[str, Any]]:
    """The trained runs under `wit1024.arms` (the train stage's ARM-sSEED folders with their
    run.json), checked before any model loads: at least one, one profile per arm."""
    from prh.io import read_json

    if cfg.arms is None:
        return {}
    runs = {p: read_json(p / "run.json") for p in sorted(cfg.arms.iterdir())
            if (p / "run.json").is_file()}
    if not runs:
        raise ContractError(f"{cfg.arms}: no trained runs (ARM-sSEED folders with run.json); "
                            "run `harness run` first or unset wit1024.arms")
    profiles: dict[str, str] = {}
    for folder, run in runs.items():
        if profiles.setdefault(run["arm"], run["profile"]) != run["profile"]:
            raise ContractError(f"{folder / 'run.json'}: trained on the {run['profile']} "
                                f"profile, the other {run['arm']} runs on "
                                f"{profiles[run['arm']]}; score one profile's runs at a time")
    return runs


def _sts_arms(cfg: ReferenceConfig, sts: Sts, runs: dict[Path, dict[str, Any]]
              ) -> dict[str, Any]:
    """STS-B of every trained run, grouped by arm: {arm: {profile, values: {seed: rho}, n}};
    the embedding is each arm's own (prh.encode_text)."""
    from prh.encode_text import load_text_encoder
    from prh.sts import spearman

    out: dict[str, Any] = {}
    for folder, run in runs.items():
        rho = spearman(sts, load_text_encoder(folder, cfg.device))
        block = out.setdefault(run["arm"], {"profile": run["profile"], "values": {},
                                            "n": int(len(sts.scores))})
        block["values"][str(run["seed"])] = rho
        print(f"reference: {folder.name}: STS-B Spearman {rho:.4f} ({run['profile']} profile)")
    return out


def _other(cfg: ReferenceConfig, name: str, x: np.ndarray, y: np.ndarray, metric: str
           ) -> dict[str, Any]:
    from prh.layers import LayerAlignment

    obs = LayerAlignment(x, y, metric, cfg.k, cfg.score_precision).observed()
    return {"name": name, "best": obs.best, "pair": list(obs.pair)}


def _align(cfg: ReferenceConfig, text: dict[str, np.ndarray], vision: dict[str, np.ndarray],
           collapsed: dict[str, list[int]], alt: dict[str, np.ndarray],
           metrics: tuple[str, ...] = ("mutual_knn", "cka")) -> dict[str, Any]:
    """Every (text, vision, metric) entry; `degenerate` names the collapsed layers of either
    model (`collapsed`: model -> layers), whose neighbour sets are rounding noise;
    `other_protocol` the best pair of the text features by the other protocol (`alt`)."""
    from prh.features import PROTOCOLS

    other = next(p for p in PROTOCOLS if p != cfg.protocol)
    from prh import calibrate
    from prh.layers import LayerAlignment

    out = {}
    for tname, x in text.items():
        for vname, y in vision.items():
            for metric in metrics:
                k = cfg.k if metric == "mutual_knn" else None
                la = LayerAlignment(x, y, metric, cfg.k, cfg.score_precision)
                obs = la.observed()
                cal = None
                if cfg.n_permutations:
                    null = la.null(calibrate.permutations(la.n, cfg.n_permutations, cfg.seed))
                    cal = calibrate.calibrate(obs.best, null, alpha=cfg.alpha)
                interval = None if obs.per_item is None else item_interval(cfg, obs.per_item)
                out[pair_key(tname, vname, metric, k)] = {
                    "text": tname, "vision": vname, "metric": metric_key(metric, k), "k": k,
                    "best": obs.best, "pair": list(obs.pair), "scores": obs.scores.tolist(),
                    "calibrated": cal, "interval": interval,
                    "per_item": None if obs.per_item is None else obs.per_item.tolist(),
                    "degenerate": {m: collapsed[m] for m in (tname, vname) if collapsed[m]},
                    "other_protocol": _other(cfg, other, alt[tname], y, metric)}
                shown = f", calibrated {cal['calibrated']:.4f} (p {cal['p_value']:.4f})" \
                    if cal else ""
                print(f"reference: {tname} x {vname}: {metric_key(metric, k)} {obs.best:.4f} at "
                      f"layers {obs.pair}{shown}")
    return out


def _coco_block(cfg: ReferenceConfig, coco: Coco, text: dict[str, np.ndarray],
                alt: dict[str, np.ndarray], vision: dict[str, np.ndarray],
                vision_info: dict[str, Any]) -> dict[str, Any]:
    """Table 3's COCO column: the same mutual k-NN entries as WIT's on the COCO pairs (the
    column prints no CKA), with what was read and every model's collapsed layers there (the
    models are `text`'s and `vision`'s of the document)."""
    from prh.layers import degenerate_layers

    collapsed = {**{n: degenerate_layers(x) for n, x in text.items()},
                 **{n: info["degenerate_layers"] for n, info in vision_info.items()}}
    return {"data": {"dataset": str(cfg.coco.dataset), "images": str(cfg.coco.images),
                     "split": cfg.coco.split, "n": len(coco.texts),
                     "caption_idx": cfg.coco.caption_idx, "sha256": coco.digest()},
            "degenerate_layers": collapsed,
            "alignment": _align(cfg, text, vision, collapsed, alt, ("mutual_knn",))}


@dataclass(frozen=True)
class ReferenceInputs:
    """Everything the stage scores, read and checked before a model's weights load."""

    cfg: ReferenceConfig
    benches: dict[str, Any]  # wit1024 (and coco): the items scored layer by layer
    sts: Sts | None
    flickr: dict[str, Any] | None
    pf: PairFreeInputs | None
    runs: dict[Path, dict[str, Any]]  # the trained arms' runs (`arms`)
    sides: dict[str, dict[str, Any]]  # every text model's config and tokenizer facts


def load_inputs(params: Path) -> ReferenceInputs:
    """The section, every path, the data sets and every text model's tokenizer on its texts;
    raises naming what is missing or wrong."""
    from harness.config.reference import load_reference, missing_paths
    from prh.coco import read_coco
    from prh.sts import read_sts
    from prh.wit import read_wit

    cfg = load_reference(params)
    missing = missing_paths(cfg)
    if missing:
        raise ContractError("missing input(s) named in the wit1024 section:\n  "
                            + "\n  ".join(missing) + "\nDownload the data and models "
                            "once (README, \"Public encoders on WIT-1024\"), make what a "
                            "stage makes, and run again")
    if cfg.device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            raise ContractError(f"{params}: wit1024.device is {cfg.device!r} and no "
                                "CUDA device is visible; set it to cpu for a CPU run")
    benches: dict[str, Any] = {"wit1024": read_wit(cfg.data, caption_idx=cfg.caption_idx,
                                                   n_rows=cfg.n_rows)}
    sts = read_sts(cfg.stsb) if cfg.stsb else None
    flickr, pf, runs = read_flickr(cfg), read_pairfree(cfg, params), arm_runs(cfg)
    if cfg.coco:
        benches["coco"] = read_coco(cfg.coco.dataset, cfg.coco.images, split=cfg.coco.split,
                                    n_rows=cfg.coco.n_rows, caption_idx=cfg.coco.caption_idx)
    sides = text_sides(cfg, [t for d in benches.values() for t in d.texts])
    return ReferenceInputs(cfg, benches, sts, flickr, pf, runs, sides)


def inputs_line(inp: ReferenceInputs) -> str:
    """What the stage read, in one line."""
    cfg, pf = inp.cfg, inp.pf
    return (f"reference: {len(inp.benches['wit1024'].texts)} WIT items from {cfg.data}"
            + (f", {len(inp.benches['coco'].texts)} COCO {cfg.coco.split} pairs"
               if cfg.coco else "")
            + (f", {len(inp.sts.scores)} STS-B pairs" if inp.sts else "")
            + (f", {sum(len(f[0]) for f in inp.flickr.values())} Flickr30k photos"
               if inp.flickr else "")
            + (f", pair-free pools of {len(pf.pool_captions)}, seeds "
               f"{list(cfg.flickr.pairfree_seeds)}"
               + "".join(f", {n} ({len(c.labels)} images)" for n, c in pf.classes.items())
               if pf else ""))


def score_all(inp: ReferenceInputs) -> dict[str, Any]:
    """Every text model, then every vision model, then the alignments: the scores file."""
    cfg, benches, sts, flickr, pf, runs = (inp.cfg, inp.benches, inp.sts, inp.flickr, inp.pf,
                                           inp.runs)
    images = table4_images(pf, flickr["test"][1], cfg.device) if pf and flickr else None
    text, alt, text_info, sts_out, flickr_out, pf_rows = _text(cfg, benches, sts, flickr, pf,
                                                               images)
    vision = {b: vision_layers(cfg, data) for b, data in benches.items()}
    sts_arms = _sts_arms(cfg, sts, runs) if runs and sts else {}
    pf_out, pf_arms = _pairfree_all(cfg, pf, images, pf_rows, runs) if pf and images else ({},
                                                                                          {})
    vision_info = vision["wit1024"][1]
    collapsed = {name: info["degenerate_layers"]
                 for name, info in (*text_info.items(), *vision_info.items())}
    wit = benches["wit1024"]
    doc = {"data": {"path": str(cfg.data), "n": len(wit.texts), "caption_idx": cfg.caption_idx,
                    "sha256": wit_digest(wit)},
           "protocol": {**PROTOCOL, "language": LANGUAGE[cfg.protocol], "name": cfg.protocol,
                        "score_precision": cfg.score_precision,
                        "clip": {"q": cfg.q_outlier, "mode": cfg.clip_mode},
                        "k": cfg.k, "n_permutations": cfg.n_permutations, "alpha": cfg.alpha,
                        "seed": cfg.seed},
           "text": {n: {**inp.sides[n], **info} for n, info in text_info.items()},
           "vision": vision_info,
           "alignment": _align(cfg, text["wit1024"], vision["wit1024"][0], collapsed,
                               alt["wit1024"]),
           "sts": sts_out, "flickr": flickr_out,
           "pair_free": pf_out, "pair_free_arms": pf_arms,
           "pair_free_images": images["facts"] if images else {},
           "classes": {n: {"n": len(c.labels), "n_classes": len(c.names)}
                       for n, c in (pf.classes.items() if pf else ())},
           "sts_arms": sts_arms}
    if cfg.coco:
        doc["coco"] = _coco_block(cfg, benches["coco"], text["coco"], alt["coco"],
                                  *vision["coco"])
    return doc


def main(argv: list[str]) -> int:
    """Score every text encoder of params.yaml's `wit1024` section against every vision encoder
    on WIT-1024 (and COCO, STS-B, Flickr30k when set); write the scores to --out. --check:
    check the section, the data and every tokenizer, and stop."""
    parser = stage_parser("reference", main.__doc__)
    parser.add_argument("--out", type=Path,
                        help="the scores JSON (runs/reference/wit1024.json); --check needs none")
    parser.add_argument("--check", action="store_true",
                        help="check the section, the paths, the data and every text model's "
                             "tokenizer on its texts; load no weights")
    args = parser.parse_args(argv)
    if args.out is None and not args.check:
        parser.error("--out is required (or --check)")
    from prh.coco import CocoError
    from prh.features import FeatureError
    from prh.sts import StsError
    from prh.wit import WitError

    try:
        inp = load_inputs(args.params)
    except (ContractError, WitError, CocoError, StsError, FeatureError, ValueError) as e:
        return fail(e)
    print(inputs_line(inp))
    if args.check:
        return 0
    try:
        doc = score_all(inp)
    except (FeatureError, ContractError) as e:
        return fail(e)
    write_reference(args.out, doc)
    return 0
