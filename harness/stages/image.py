"""Stage `image`: image embeddings of the fit (val) and test photos, from the world's small
bad-view image JEPA trained on the training images, or from frozen DINOv2 ViT-B/14; and of
every training photo (the image side of the map fitted on the train + val pairs), whose first
half is also written as the image side of the pair-free pools (`prh.data.pairfree_halves`;
the align stage uses the first `eval.pairfree_pool` rows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config.params import weights_path
from harness.stages.common import fail, preflight, stage_parser
from prh.io import ContractError, atomic_dir, save_embeddings


def image_model(params: Any, cfg: Any, raw: Path) -> tuple[Any, str]:
    """The DINOv2 and its device, built before any output (a bad state dict fails here); no
    model for the world's CNN, which embeds on the CPU."""
    from prh import image

    if cfg.encoder == "world_cnn":
        return None, "cpu"
    device = embed_device(params)
    return image.build_dinov2(weights_path(params.sections["image"], raw),
                              img_size=cfg.image_size), device


def main(argv: list[str]) -> int:
    """Embed the val, test and train photos of --raw (dataset.json, images/) into
    --out/{val,test,train}.npz, and the first half of the train photos (the pair-free image
    pool, the same rows of train.npz) into --out/pool_images.npz."""
    from harness.config.validate import check_data
    from harness.data.dvccache import dvc_cache_dir
    from prh import image
    from prh.data import check_splits, load_karpathy, pairfree_halves, photo_paths

    parser = stage_parser("image", main.__doc__)
    parser.add_argument("--raw", type=Path, required=True,
                        help="raw data folder (dataset.json, images/, weights/)")
    parser.add_argument("--out", type=Path, required=True, help="image-embedding folder")
    args = parser.parse_args(argv)
    try:
        params = preflight(args.params, args.raw)
        cfg = params.config(image.ImageConfig, "image")
        corpus = load_karpathy(args.raw / "dataset.json", min_captions=1)
        check_splits(corpus)
        if params.profile != "world":  # the world is generated to params.yaml's sizes
            check_data(params, corpus)  # before any embedding
        images, cache = args.raw / "images", dvc_cache_dir()
        train = corpus.split("train")
        splits = {"val": corpus.split("val"), "test": corpus.split("test"), "train": train}
        pool = pairfree_halves(train)[0]
        image.check_images_exist(photo_paths([p for ps in splits.values() for p in ps], images,
                                             cache),
                                 f"put the data set's photos in {images} (the file names "
                                 f"dataset.json lists), or regenerate it with `dvc repro`")
        model, device = image_model(params, cfg, args.raw)
    except ContractError as e:
        return fail(e)
    with atomic_dir(args.out) as tmp:
        embed_splits(tmp, cfg, model, splits, pool,
                     lambda photos: photo_paths(photos, images, cache), params.hash, device)
    print(f"image: embedded {', '.join(f'{n} ({len(p)})' for n, p in splits.items())} "
          f"with {cfg.encoder}; pool_images: the first {len(pool)} train rows")
    return 0


def embed_device(params: Any) -> str:
    """Where DINOv2 embeds: the profile's `train.device` ("auto": a GPU when one is visible);
    "cuda" with none visible is refused."""
    from prh.distributed import torch_device

    try:
        return torch_device(params.sections["train"].get("device", "auto"))
    except RuntimeError as e:
        raise ContractError(f"{params.path}: {e}") from e


def embed_splits(out: Path, cfg: Any, model: Any, splits: dict[str, list[Any]], pool: list[Any],
                 paths: Any, params_hash: str, device: str) -> None:
    """Into `out`: {val,test,train}.npz and pool_images.npz (the first rows of train), each
    with its encoder, config and params hash. `model` None: the world's CNN, trained here on
    the train photos first (one frozen image encoder for every text run, as DINOv2 is; seed 0,
    assumed), its checkpoint as encoder.pt, and embedded on the CPU it was trained on; DINOv2
    on `device` (the profile's `train.device`: "auto" is a GPU when one is visible)."""
    from prh import image

    on = device
    if model is None:
        model, on = image.train_world_image_encoder(paths(splits["train"]), cfg, 0,
                                                    out / "encoder.pt"), "cpu"
    meta = {"encoder": cfg.encoder, "config": cfg.to_dict(), "params_hash": params_hash,
            "device": on}
    for name, photos in splits.items():  # check_splits: none is empty
        emb = image.embed_images(model, paths(photos), image_size=cfg.image_size, mean=cfg.mean,
                                 std=cfg.std, batch_size=cfg.embed_batch_size, progress=None,
                                 interpolation=cfg.interpolation, device=on)
        save_embeddings(out / f"{name}.npz", [p.id for p in photos], emb, meta=meta)
        if name == "train" and pool:  # a train split of one photo has no pair-free pool
            save_embeddings(out / "pool_images.npz", [p.id for p in pool], emb[:len(pool)],
                            meta=meta)
