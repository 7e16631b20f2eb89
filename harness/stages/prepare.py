"""Stage `prepare`: validate the profile's caption file and train the WordPiece tokenizer on
its training captions; refuse a max_len that would cut the captions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config.params import Params
from harness.stages.common import fail, preflight, stage_parser
from prh.data import data_hash
from prh.io import ContractError, atomic_dir, write_json


def check_views_fit(params: Params, photos: list[Any], tokenizer: Any, path: Path) -> None:
    """Refuse a train.max_len that would cut more than 1% of the training captions."""
    from prh.batches import tokenize_captions
    from prh.train_config import TrainConfig, view_config
    from prh.views import check_fits

    cfg = params.config(TrainConfig, "train", arm=params.arms[0], seed=params.seeds[0])
    lengths = [len(ids) for ids in tokenize_captions(photos, tokenizer).values()]
    try:
        check_fits(view_config(cfg, tokenizer), lengths, where=f"{path} (training captions)")
    except ValueError as e:
        raise ContractError(f"{e} ({params.profile}.train.max_len in {params.path})") from e


def main(argv: list[str]) -> int:
    """Validate --dataset (Karpathy JSON) and every photo it names in --images, compare it with
    Karpathy's Flickr30k (flickr30k profile), and write the tokenizer and a summary to --out."""
    from harness.data.dvccache import dvc_cache_dir
    from prh.data import check_image_files, check_splits, karpathy_warnings, load_karpathy
    from prh.tokenizer import train_tokenizer

    parser = stage_parser("prepare", main.__doc__)
    parser.add_argument("--dataset", type=Path, required=True, help="Karpathy-split JSON")
    parser.add_argument("--images", type=Path, required=True, help="folder of the photos")
    parser.add_argument("--out", type=Path, required=True, help="prepared-data folder")
    args = parser.parse_args(argv)
    try:
        params = preflight(args.params, args.dataset.parent)
        corpus = load_karpathy(args.dataset, min_captions=1)
        check_splits(corpus)
        if params.profile != "world":  # the world is generated to params.yaml's sizes
            from harness.config.validate import check_data

            check_data(params, corpus)
        n_files = check_image_files(corpus, args.images, dvc_cache_dir())
        warnings = karpathy_warnings(corpus, n_files) if params.profile == "flickr30k" else []
        train = corpus.split("train")
        tokenizer = train_tokenizer((c for p in train for c in p.captions),
                                    params.sections["data"]["vocab_size"])
        check_views_fit(params, train, tokenizer, corpus.path)
    except ContractError as e:
        return fail(e)
    with atomic_dir(args.out) as tmp:
        tokenizer.save(tmp / "tokenizer")
        write_json(tmp / "summary.json", {
            "dataset": corpus.name, "data_hash": data_hash(corpus.path),
            "splits": {s: len(corpus.split(s)) for s in ("train", "val", "test")},
            "vocab_size": tokenizer.vocab_size, "warnings": warnings})
    for line in warnings:
        print(f"prepare: warning: {line}")
    print(f"prepare: {len(train)} training photos, vocabulary {tokenizer.vocab_size}")
    return 0
