"""Stage `train@ARM-SEED`: train one text arm for one seed (tracked in MLflow, resumable from
its work folder; the NTP arm logs its validation loss on the fit pairs' captions every
epoch: one per val photo, so an epoch's loss costs one encoding of the fit split), then
embed the fit and test captions, every caption of the test photos, the evaluation caption
of every train photo (the train + val map's pairs) and every caption of the last half of the
train photos (the text side of the pair-free pools)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.records.runfile import run_name
from harness.stages.common import add_run_args, fail, preflight, stage_parser
from prh.config import CURVE_FIT, CURVE_TEST
from prh.data import data_hash, eval_captions
from prh.io import (
    ContractError,
    atomic_dir,
    check_same_ids,
    load_embeddings,
    save_embeddings,
    write_json,
)


def make_eval_hook(image_dir: Path, photos_fit: list[Any], photos_test: list[Any]):
    """Per-epoch R@1 on the fit and test pairs (the rerun article's epoch curves)."""
    from prh.align import fit_and_recall

    ids_fit, img_fit, _ = load_embeddings(image_dir / "val.npz")
    ids_test, img_test, _ = load_embeddings(image_dir / "test.npz")
    check_same_ids(ids_fit, np.array([p.id for p in photos_fit]), str(image_dir / "val.npz"),
                   "dataset.json val split")
    check_same_ids(ids_test, np.array([p.id for p in photos_test]), str(image_dir / "test.npz"),
                   "dataset.json test split")
    fit_texts, test_texts = eval_captions(photos_fit), eval_captions(photos_test)

    def hook(epoch: int, encode) -> dict[str, float]:
        r1_test, r1_fit = fit_and_recall(img_fit, encode(fit_texts), img_test,
                                         encode(test_texts))
        return {CURVE_TEST: float(r1_test), CURVE_FIT: float(r1_fit)}

    return hook


def write_embeddings(out: Path, encode: Any, corpus: Any, meta: dict[str, Any]) -> None:
    """The run's text embeddings in `out`: the fit and test pairs' evaluation captions, every
    caption of the test photos (prh.gallery's rows), the evaluation caption of every train photo
    (the train + val map's text side) and every caption of the last half of the train photos
    (the pair-free pool, rows `caption_ids`: the align stage prepares them by
    eval.pairfree_inputs)."""
    from prh.data import pairfree_halves
    from prh.gallery import caption_ids

    fit, test, train = corpus.split("val"), corpus.split("test"), corpus.split("train")
    for split, photos in (("val", fit), ("test", test)):
        save_embeddings(out / f"{split}.npz", [p.id for p in photos],
                        encode(eval_captions(photos)), meta=meta)
    save_embeddings(out / "test_captions.npz",
                    caption_ids([p.id for p in test], [len(p.captions) for p in test]),
                    encode([c for p in test for c in p.captions]), meta=meta)
    ids_train = [p.id for p in train]
    emb_train = encode(eval_captions(train))
    save_embeddings(out / "train_texts.npz", ids_train, emb_train, meta=meta)
    pool = pairfree_halves(train)[1]
    save_embeddings(out / "pool_texts.npz",
                    caption_ids([p.id for p in pool], [len(p.captions) for p in pool]),
                    encode([c for p in pool for c in p.captions]), meta=meta)


@dataclass(frozen=True)
class TrainRun:
    """One (arm, seed) training as the stage runs it: its inputs, checked, and its identity."""

    params: Any
    train: dict[str, Any]  # the config stage's train section for the arm
    cfg: Any  # prh.train_config.TrainConfig
    corpus: Any
    tokenizer: Any
    name: str
    cfg_hash: str  # the config's identity, speed settings aside
    corpus_hash: str
    work: Path  # resumable checkpoints: a killed run on other captions is never resumed


def load_run(args: Any) -> TrainRun:
    """params.yaml, the tracking server (rank 0), the arm's train section, the captions and
    the tokenizer, before any training; ContractError names what is wrong."""
    from harness.config.runparams import arm_train_config
    from harness.records.armtrain import read_arm_train
    from harness.tracking import mlflow_runs as tracking
    from prh.data import load_karpathy
    from prh.tokenizer import Tokenizer
    from prh.train_config import encoder_config, run_identity

    params = preflight(args.params, args.dataset.parent)
    if int(os.environ.get("RANK", "0")) == 0:
        tracking.check_server()  # an unreachable server stops here, before training
    train = read_arm_train(args.config, params, args.arm)
    cfg = arm_train_config(params, args.arm, args.seed, train)
    corpus = load_karpathy(args.dataset, min_captions=1)
    tokenizer = Tokenizer.load(args.prepared / "tokenizer")
    name = run_name(args.arm, args.seed)
    cfg_hash = run_identity(cfg, encoder_config(cfg, tokenizer))[:12]
    corpus_hash = data_hash(corpus.path)
    return TrainRun(params, train, cfg, corpus, tokenizer, name, cfg_hash, corpus_hash,
                    args.work / f"{name}-{cfg_hash}-{corpus_hash[:8]}")


def train_and_write(args: Any, run: TrainRun) -> str:
    """Train (resuming from the work folder) under one MLflow run, embed, write --out; remove
    the work folder; return the MLflow run's id."""
    from harness.config.runparams import run_params
    from harness.tracking import mlflow_runs as tracking
    from harness.tracking.fingerprint import environment_fingerprint
    from prh.encode_text import load_text_encoder
    from prh.train import train_text_encoder
    from prh.train_config import resolve

    fit, test = run.corpus.split("val"), run.corpus.split("test")
    resolved = resolve(run.cfg, int(os.environ.get("WORLD_SIZE", "1")))  # torchrun sets it
    env = environment_fingerprint()
    ids = {"train_hash": run.params.train_hash(args.arm, run.train),
           "data_hash": run.corpus_hash, "config_hash": run.cfg_hash}
    tags = {"arm": args.arm, "seed": args.seed, "profile": run.params.profile,
            "dvc_stage": f"train@{args.arm}-{args.seed}", **ids, "lamb_used": resolved.lamb,
            "effective_sigreg_weight": resolved.effective_sigreg_weight, **tracking.git_state(),
            **{f"env.{k}": v for k, v in env.items()}}
    logged = run_params(run.params, args.arm, args.seed, run.cfg)  # views.max_len = max_len
    with tracking.tracked_run(run.name, logged, tags, resume=run.work / "mlflow_run_id") as ml:
        train_text_encoder(run.cfg, run.corpus.split("train"), run.tokenizer, run.work,
                           eval_hook=make_eval_hook(args.image, fit, test),
                           on_epoch=lambda epoch, m: tracking.log_epoch(m, epoch),
                           val_texts=eval_captions(fit),  # the fit pairs' captions
                           resolved=resolved)
        encode = load_text_encoder(run.work)
        with atomic_dir(args.out) as tmp:
            write_embeddings(tmp, encode, run.corpus, {"arm": args.arm, "seed": args.seed})
            for item in ("checkpoint.pt", "curve.json", "config.json"):
                shutil.copy2(run.work / item, tmp / item)
            tracking.log_artifacts([run.work / "config.json", run.work / "curve.json"])
            write_json(tmp / "run.json", {
                "arm": args.arm, "seed": args.seed, "profile": run.params.profile,
                "mlflow_run_id": ml.info.run_id, **ids,
                "effective_sigreg_weight": resolved.effective_sigreg_weight,
                "environment": env, **tracking.git_state()})
    shutil.rmtree(run.work, ignore_errors=True)
    return ml.info.run_id


def main(argv: list[str]) -> int:
    """Train --arm for --seed on --dataset's train split with --config's train section
    (tokenizer from --prepared, per-epoch curves against --image), checkpointing under --work;
    write embeddings and run.json to --out."""
    parser = add_run_args(stage_parser("train", main.__doc__))
    parser.add_argument("--dataset", type=Path, required=True, help="Karpathy-split JSON")
    parser.add_argument("--prepared", type=Path, required=True, help="prepare stage's folder")
    parser.add_argument("--image", type=Path, required=True, help="image stage's folder")
    parser.add_argument("--config", type=Path, required=True,
                        help="the config stage's train section for --arm (runs/config/ARM.json)")
    parser.add_argument("--work", type=Path, required=True,
                        help="resumable checkpoints, outside DVC's outputs")
    parser.add_argument("--out", type=Path, required=True, help="this run's text folder")
    args = parser.parse_args(argv)
    try:
        run = load_run(args)
    except ContractError as e:
        return fail(e)
    if int(os.environ.get("RANK", "0")) > 0:  # torchrun: rank 0 tracks and writes outputs
        from prh.train import train_text_encoder

        train_text_encoder(run.cfg, run.corpus.split("train"), run.tokenizer, run.work)
        return 0
    run_id = train_and_write(args, run)
    print(f"train: {run.name} done (MLflow run {run_id})")
    return 0
