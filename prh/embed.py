"""`prh embed`: image embeddings of one split of a Karpathy data set, with row ids.

One `.npz` per encoder per split (prh.io.save_embeddings): `ids` are the photos' `str(imgid)`
in the data set's file order, `emb` is float32 [n, d], and `meta` records the encoder, its
weights (path and sha256) and the preprocessing, so the file says how it was made (timm's cfg
as data; style-anchors.md 7). DINOv2 uses the CLS token (rerun article, "We kept the pretrained
image encoder DINOv2 fixed"); the `world` profile uses the LeJEPA-trained WorldCNN (prh.image).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

from prh import image, io

MISSING_FIX = ("pass --image-dir pointing at the folder that holds the data set's `filename`s "
               "(Flickr30k: flickr30k-images/; world: data/world/images/, written by `harness "
               "data`)")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def embed_split(*, encoder: str, weights: Path, dataset: Path, image_dir: Path, split: str,
                out: Path, batch_size: int = 64, image_size: int = 224,
                progress: bool | None = None, per_block_dir: Path | None = None) -> dict[str, Any]:
    """Embed every photo of `split` in file order and write `out`; returns the stored meta.

    `image_size` applies to DINOv2 only; the world encoder uses the size, mean and std it was
    trained with (read from its checkpoint). `per_block_dir` (DINOv2 only) also writes
    `block00.npz` ... `block11.npz`, the CLS token after each block, same ids.
    """
    from prh.data import load_karpathy

    photos = load_karpathy(dataset).split(split)
    if not photos:
        raise image.ImageError(f"{dataset}: split {split!r} has no photos; use one of "
                               "train, val, test")
    paths = [Path(image_dir) / p.filename for p in photos]
    image.check_images_exist(paths, MISSING_FIX)
    if encoder == "world_cnn":
        model = image.load_world_image_encoder(weights)
        prep = image.load_checkpoint(weights)["preprocessing"]
    elif encoder == "dinov2_vitb14":
        model = image.build_dinov2(weights, img_size=image_size)
        prep = image.dinov2_preprocessing(model, image_size)
    else:
        raise image.ImageError(f"--encoder {encoder!r}: must be one of {image.ENCODERS}")
    if per_block_dir is not None and encoder != "dinov2_vitb14":
        raise image.ImageError("--per-block-dir needs --encoder dinov2_vitb14 (a ViT)")
    kwargs = {"image_size": prep["image_size"], "mean": prep["mean"], "std": prep["std"],
              "interpolation": prep["interpolation"], "batch_size": batch_size,
              "progress": progress}
    ids = [p.id for p in photos]
    meta = {"encoder": encoder, "weights": str(weights), "weights_sha256": sha256(Path(weights)),
            "dataset": str(dataset), "split": split, "preprocessing": prep,
            "token": "cls" if encoder == "dinov2_vitb14" else "mean-pooled conv features"}
    if per_block_dir is not None:
        blocks = image.embed_images(model, paths, per_block=True, **kwargs)   # (n, L, d)
        for i in range(blocks.shape[1]):
            io.save_embeddings(Path(per_block_dir) / f"block{i:02d}.npz", ids, blocks[:, i],
                               {**meta, "token": f"cls after block {i}, before the final norm"})
    emb = image.embed_images(model, paths, **kwargs)
    meta["dim"] = int(emb.shape[1])
    io.save_embeddings(out, ids, emb, meta)
    return meta


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="prh embed", description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", choices=image.ENCODERS, required=True)
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", type=Path, help="world_cnn checkpoint (harness image)")
    src.add_argument("--weights", type=Path, help="DINOv2 ViT-B/14 state dict (local file)")
    parser.add_argument("--dataset", type=Path, required=True, help="Karpathy-split JSON")
    parser.add_argument("--image-dir", type=Path, required=True)
    parser.add_argument("--split", default="val", choices=("train", "val", "test", "restval"))
    parser.add_argument("--out", type=Path, required=True, help="output .npz")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224, help="DINOv2 input size")
    parser.add_argument("--per-block-dir", type=Path,
                        help="DINOv2: also write the CLS of every block here (layer-wise WIT)")
    args = parser.parse_args(argv)
    weights = args.checkpoint if args.encoder == "world_cnn" else args.weights
    if weights is None:
        parser.error(f"--encoder {args.encoder} needs "
                     f"{'--checkpoint' if args.encoder == 'world_cnn' else '--weights'}")
    try:
        meta = embed_split(encoder=args.encoder, weights=weights, dataset=args.dataset,
                           image_dir=args.image_dir, split=args.split, out=args.out,
                           batch_size=args.batch_size, image_size=args.image_size,
                           per_block_dir=args.per_block_dir)
    except io.ContractError as e:
        print(f"prh embed: error: {e}", file=sys.stderr)
        return 1
    print(f"prh embed: wrote {args.out} ({args.split}, dim {meta['dim']})", file=sys.stderr)
    return 0
