"""Stage `recap_train@ARM-SEED` (pipelines/recap/dvc.yaml): one arm and seed trained on the
web-text subset (prh.train_stream over prh.stream), tracked in MLflow with its account at every
scored checkpoint (step = samples), resumable from its work folder; the account, the encoder
snapshots and the resolved config are the stage's outputs (run.json, snapshots/).

The run's config is params.yaml's `recap.train`: its length and sources, and `encoder`, the
keys that differ from the flickr30k profile's train section (the paper trains the same 33M
encoder on both; `samples` replaces epochs)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from harness.config.recap import BY_SAMPLES
from harness.config.recap_train import configs
from harness.records.runfile import run_name
from harness.records.schemas import RECAP_RUN
from harness.stages.common import add_arm_arg, fail, stage_parser
from prh.io import ContractError, atomic_dir, read_json, write_json


def main(argv: list[str]) -> int:
    """Train --arm with --seed on the subset in --subset for recap.train.samples samples
    (checkpoints in --work); write the account, the encoder snapshots and the config to --out."""
    parser = add_arm_arg(stage_parser("recap_train", main.__doc__))
    parser.add_argument("--seed", type=int, required=True, help="one of recap.train.seeds")
    parser.add_argument("--subset", type=Path, required=True, help="the recap stage's folder")
    parser.add_argument("--paraphrase", type=Path, default=None,
                        help="the recap_paraphrase stage's folder (its source, when written)")
    parser.add_argument("--work", type=Path, required=True,
                        help="resumable checkpoints, outside DVC's outputs")
    parser.add_argument("--out", type=Path, required=True, help="this arm's folder")
    args = parser.parse_args(argv)
    from harness.tracking import mlflow_runs as tracking
    from prh.stream import StreamData
    from prh.tokenizer import Tokenizer
    from prh.train_config import encoder_config
    from prh.train_stream import stream_identity, train_stream

    rank = int(os.environ.get("RANK", "0"))
    try:
        cfg, stream = configs(args.params, args.arm, args.seed)
        data = StreamData.open(args.subset, stream.sources, args.paraphrase)  # before any model
        tokenizer = Tokenizer.load(args.subset / "tokenizer")
        if rank == 0:
            tracking.check_server()
    except ContractError as e:
        return fail(e)
    identity = stream_identity(cfg, stream, encoder_config(cfg, tokenizer), data)
    name = run_name(args.arm, cfg.seed)
    work = args.work / f"{name}-{identity[:12]}"
    if rank > 0:  # torchrun: rank 0 tracks and writes outputs
        train_stream(cfg, stream, data, tokenizer, work)
        return 0
    rows, run_id = train_tracked(args, cfg, stream, data, tokenizer, work, identity)
    shutil.rmtree(work, ignore_errors=True)
    last = rows[-1]
    print(f"recap_train: {name}: {last['samples']:,} samples, {last['texts']:,} texts, "
          f"{last['tokens']:,} tokens, {last['unique_images']:,} unique images "
          f"(MLflow run {run_id})")
    return 0


def train_tracked(args: Any, cfg: Any, stream: Any, data: Any, tokenizer: Any, work: Path,
                  identity: str) -> tuple[list[dict[str, Any]], str]:
    """Rank 0: train under one MLflow run (resumed with the work folder), write --out (the
    snapshots, run.json with the account and config); (the account rows, the run's id)."""
    from harness.tracking import mlflow_runs as tracking
    from harness.tracking.fingerprint import environment_fingerprint
    from prh.train_stream import train_stream

    name = run_name(args.arm, cfg.seed)
    env = environment_fingerprint()
    tags = {"arm": args.arm, "seed": cfg.seed, "profile": "recap",
            "dvc_stage": f"recap_train@{args.arm}-{cfg.seed}", "config_hash": identity[:12],
            **tracking.git_state(), **{f"env.{k}": v for k, v in env.items()}}
    logged = {"arm": args.arm, "seed": cfg.seed, "sources": ",".join(stream.sources),
              "samples": stream.samples, "samples_available": data.available,
              **{f"train.{k}": v for k, v in cfg.to_dict().items()
                 if k not in (*BY_SAMPLES, "arm", "seed")}}
    start = time.perf_counter()
    with tracking.tracked_run(f"recap-{name}", logged, tags,
                              resume=work / "mlflow_run_id") as run:
        rows = train_stream(cfg, stream, data, tokenizer, work,
                            on_checkpoint=lambda row: tracking.log_epoch(row, row["samples"]))
        seconds = time.perf_counter() - start
        with atomic_dir(args.out) as tmp:
            shutil.copytree(work / "snapshots", tmp / "snapshots")
            tracking.log_artifacts([work / "accounting.json", work / "config.json"])
            write_json(tmp / "run.json", {
                "schema": str(RECAP_RUN), "arm": args.arm, "seed": cfg.seed,
                "config": read_json(work / "config.json"), "account": rows,
                "mlflow_run_id": run.info.run_id, "config_hash": identity[:12],
                "seconds_last_attempt": round(seconds, 2), "environment": env,
                **tracking.git_state()})
    return rows, run.info.run_id
