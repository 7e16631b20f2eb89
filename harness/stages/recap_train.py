"""Stage `recap_train@ARM-SEED` (pipelines/recap/dvc.yaml): one arm and seed trained on the
web-text subset (prh.train_stream over prh.stream), tracked in MLflow with its account at every
scored checkpoint (step = samples), resumable from its work folder; the account, the encoder
snapshots and the resolved config are the stage's outputs (run.json, snapshots/).

The run's config is params.yaml's `recap.train`: its length and sources, and `encoder`, the
keys that differ from the flickr30k profile's train section (the paper trains the same 33M
encoder on both; `samples` replaces epochs)."""

from __future__ import annotations

import copy
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.records.runfile import run_name
from harness.records.schemas import RECAP_RUN
from harness.stages.common import add_arm_arg, fail, stage_parser
from harness.stages.recap import load_recap
from harness.stages.recap_paraphrase import load_paraphrase
from prh.io import ContractError, atomic_dir, read_json, write_json
from prh.paraphrase import PARAPHRASE

KNOWN = {"arms", "seeds", "sources", "samples", "warmup_samples", "first_checkpoint",
         "per_decade", "save_every", "encoder"}
BY_SAMPLES = ("epochs", "warmup_epochs", "eval_every")  # a stream counts samples instead


def read_section(path: Path, raw: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """params.yaml's `recap.train` (from `raw`, the file already read, when given), its keys
    checked (the values by the configs built from it)."""
    from harness.config.params import check_seeds, read_top_level

    raw = read_top_level(path) if raw is None else raw
    train = (raw.get("recap") or {}).get("train")
    if not isinstance(train, Mapping):
        raise ContractError(f"{path}: recap.train is missing; it holds {sorted(KNOWN)}")
    unknown, missing = sorted(set(train) - KNOWN), sorted(KNOWN - {"encoder"} - set(train))
    if unknown or missing:
        raise ContractError(f"{path}: recap.train: unknown key(s) {unknown}, missing key(s) "
                            f"{missing}; the keys are {sorted(KNOWN)}")
    check_seeds(train["seeds"], f"{path}: recap.train.seeds")
    counted = sorted(set(train.get("encoder") or {}) & set(BY_SAMPLES))
    if counted:
        raise ContractError(f"{path}: recap.train.encoder sets {counted}; a web-text run is "
                            "counted in samples: set recap.train.samples and warmup_samples")
    return dict(train)


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        out[key] = (_merged(out[key], value) if isinstance(value, Mapping)
                    and isinstance(out.get(key), Mapping) else copy.deepcopy(value))
    return out


def runs_of(train: Mapping[str, Any]) -> list[tuple[str, int]]:
    """Every (arm, seed) of a checked `recap.train` section, arms first."""
    return [(arm, seed) for arm in train["arms"] for seed in train["seeds"]]


def configs(path: Path, arm: str, seed: int) -> tuple[Any, Any]:
    """(TrainConfig, StreamConfig) of `arm`'s web-text run with `seed`."""
    from harness.config.params import read_top_level
    from prh.stream import StreamConfig
    from prh.train_config import TrainConfig

    raw = read_top_level(path)
    train = read_section(path, raw)
    base = (raw.get("flickr30k") or {}).get("train") or {}
    section = _merged({k: v for k, v in base.items() if k not in BY_SAMPLES},
                      train.get("encoder") or {})
    try:
        cfg = TrainConfig.from_dict({**section, "arm": arm, "seed": seed})
        stream = StreamConfig(sources=tuple(train["sources"]), samples=train["samples"],
                              warmup_samples=train["warmup_samples"],
                              first_checkpoint=train["first_checkpoint"],
                              per_decade=train["per_decade"], save_every=train["save_every"])
    except (TypeError, ValueError) as e:
        raise ContractError(f"{path}: recap.train: {e}") from e
    stream.validate()
    names = [name for name, _ in load_recap(path).sources]
    if load_paraphrase(path).model is not None:
        names.append(PARAPHRASE)
    if not set(stream.sources) <= set(names):
        raise ContractError(f"{path}: recap.train.sources {list(stream.sources)} names a source "
                            f"that is not there ({names}); name one of recap.sources, or "
                            f"{PARAPHRASE} with recap.paraphrase.model set")
    if arm not in train["arms"] or seed not in train["seeds"]:
        raise ContractError(f"{path}: recap.train has arms {train['arms']} and seeds "
                            f"{train['seeds']}, without {arm!r} seed {seed}")
    return cfg, stream


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
    from harness.tracking.fingerprint import environment_fingerprint
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
    env = environment_fingerprint()
    tags = {"arm": args.arm, "seed": cfg.seed, "profile": "recap",
            "dvc_stage": f"recap_train@{args.arm}-{cfg.seed}", "config_hash": identity[:12],
            **tracking.git_state(), **{f"env.{k}": v for k, v in env.items()}}
    logged = {"arm": args.arm, "seed": cfg.seed, "sources": ",".join(stream.sources),
              "samples": stream.samples, "samples_available": int(data.rows.size),
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
    shutil.rmtree(work, ignore_errors=True)
    last = rows[-1]
    print(f"recap_train: {name}: {last['samples']:,} samples, {last['texts']:,} texts, "
          f"{last['tokens']:,} tokens, {last['unique_images']:,} unique images "
          f"(MLflow run {run.info.run_id})")
    return 0
