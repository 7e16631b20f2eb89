"""The training loop on a stream of web-text samples (prh.stream): the same arms, batches and
step as prh.train (`step_groups`, `train_step`, `lr_at`, `build_state`), counted in samples
instead of epochs, with checkpoints at sample counts and an account of what was read.

Read it top to bottom: `train_stream` is the loop.

Determinism: the samples of step s are a pure function of (seed, s) (prh.stream.EpochOrder,
written by rank 0 before step 0 into out_dir/order/, one folder per samples and seed),
and so are the texts they read and their views: every rank draws them for the whole global
batch from (seed, s) and keeps its share (`step_groups(keep=...)`), so the global batch does
not depend on the number of ranks. Dropout of step s on rank r comes from (seed, s, r)
(prh.checkpoint.seed_epoch, one "epoch" per step). The LR is a pure function of the step, and
the SIGReg direction counter lives in the checkpoint. So a run killed anywhere resumes from its
last checkpoint to the same batches and the same weights as an uninterrupted run (on CPU; CUDA
kernels are not bitwise deterministic).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from prh.batches import CaptionBank, step_groups
from prh.checkpoint import (
    SNAPSHOT,
    STREAM_CHECKPOINT,
    UnreadableCheckpoint,
    read_checkpoint,
    seed_epoch,
    set_aside,
    tokenizer_files,
    write_checkpoint,
)
from prh.distributed import process_group
from prh.io import ContractError, write_json
from prh.models import count_parameters, parameter_counts
from prh.stream import Accounting, EpochOrder, StreamConfig, StreamData, read_texts, steps_for
from prh.tokenizer import Tokenizer
from prh.train import build_state, lr_at, train_step
from prh.train_config import TrainConfig, encoder_config, resolve, run_identity, view_config

OnCheckpoint = Callable[[dict[str, Any]], None]


def train_stream(cfg: TrainConfig, stream: StreamConfig, data: StreamData, tokenizer: Tokenizer,
                 out_dir: Path, *, on_checkpoint: OnCheckpoint | None = None,
                 stop_after: int | None = None, orders: Path | None = None
                 ) -> list[dict[str, Any]]:
    """Train `cfg.arm` on `data` for `stream.samples` samples; resume from
    out_dir/checkpoint.pt when it matches the run.

    At each scheduled sample count (`stream.checkpoints()`, the first step that reaches it)
    rank 0 writes out_dir/snapshots/samples-N.pt (the encoder, for scoring) and appends the
    account (prh.stream.Accounting.row, the mean loss since the last row, the LR) to
    out_dir/accounting.json; `on_checkpoint(row)` runs then. checkpoint.pt is written there and
    every `stream.save_every` steps. `stop_after`: return after that many steps of this call
    (a test's kill). The epoch order files go to `orders` (default out_dir/order; every rank
    must see rank 0's folder). Returns the account rows."""
    stream.validate()
    out_dir = Path(out_dir)
    ckpt_path = out_dir / "checkpoint.pt"
    with process_group(cfg.device) as proc:
        enc_cfg = encoder_config(cfg, tokenizer)
        views = view_config(cfg, tokenizer)
        identity = stream_identity(cfg, stream, enc_cfg, data)
        state = build_state(cfg, enc_cfg, proc)
        batch = cfg.batch_size * proc.world  # the global batch
        total = steps_for(stream.samples, batch)
        warmup = steps_for(stream.warmup_samples, batch)
        scored = {steps_for(n, batch) for n in stream.checkpoints()}
        folder = (orders or out_dir / "order") / f"{data.fingerprint}-s{cfg.seed}"
        if proc.rank == 0:
            EpochOrder.write(folder, cfg.seed, data, total * batch)
        if dist.is_available() and dist.is_initialized():
            dist.barrier()  # the order files exist before any rank reads them
        order = EpochOrder(folder, data.available)
        step, acc, rows, loss = _resume(ckpt_path, identity, state, data.available)
        if proc.rank == 0:
            write_json(out_dir / "config.json", {
                "train": {k: v for k, v in cfg.to_dict().items()
                          if k not in ("epochs", "warmup_epochs", "eval_every")},
                "stream": {**asdict(stream), "checkpoints": list(stream.checkpoints())},
                "encoder": asdict(enc_cfg), "identity": identity, "world_size": proc.world,
                "device": str(proc.device), "lamb": resolve(cfg, proc.world).lamb,
                "n_parameters": count_parameters(state.net),
                "parameters": parameter_counts(state.net.encoder, state.net.projector),
                "steps": total,
                "global_batch": batch, "samples_available": data.available})
            for row in rows if on_checkpoint is not None else ():
                on_checkpoint(dict(row))  # a tracker that missed them before the kill
        counts = np.zeros(3, dtype=np.int64)  # texts, tokens, view tokens since the last save
        loss_sum = torch.tensor(loss[0], dtype=torch.float64, device=proc.device)
        loss_steps, stopped = int(loss[1]), 0
        while step < total:
            seed_epoch(cfg.seed, step, proc.rank)  # dropout: this rank's own stream
            rng = np.random.default_rng([cfg.seed, step])  # the global batch's draws: shared
            drawn = order.rows(step * batch, batch)
            texts = [read_texts(t, cfg.arm == "good", rng) for t in data.sample_texts(drawn)]
            bank = CaptionBank.from_token_lists(texts, views, tokenizer.pad_id)
            mine = np.arange(proc.rank, batch, proc.world)  # this rank's share
            groups = step_groups(bank, np.arange(batch), cfg, views, tokenizer, rng,
                                 proc.device, keep=mine)
            lr = lr_at(step, total, warmup, cfg.lr)
            terms = train_step(state, groups, lr)
            read = np.repeat(bank.first[mine], bank.count[mine]) + _within(bank.count[mine])
            counts += (int(bank.count[mine].sum()), int(bank.lengths[read].sum()),
                       sum(int(g[1].sum()) for g in groups))
            loss_sum, loss_steps = loss_sum + terms["loss"].double(), loss_steps + 1  # no sync
            step += 1
            acc.samples = step * batch
            is_scored = step in scored or step == total
            if is_scored or step % stream.save_every == 0:
                acc.texts, acc.tokens, acc.view_tokens = (
                    a + b for a, b in zip((acc.texts, acc.tokens, acc.view_tokens),
                                          _sum_over_ranks(counts), strict=True))
                counts[:] = 0
                if is_scored:
                    row = {"step": step, **acc.row(),
                           "loss": _mean_over_ranks(float(loss_sum), loss_steps), "lr": lr}
                    rows.append(row)
                    loss_sum, loss_steps = torch.zeros_like(loss_sum), 0
                if proc.rank == 0:
                    if is_scored:
                        write_checkpoint(out_dir / "snapshots" / f"samples-{acc.samples:012d}.pt",
                                         {"format": SNAPSHOT, "encoder_config": asdict(enc_cfg),
                                          "encoder": state.net.encoder.state_dict(),
                                          "tokenizer_files": tokenizer_files(tokenizer),
                                          "max_len": cfg.max_len, "account": row})
                        write_json(out_dir / "accounting.json", rows)
                    write_checkpoint(ckpt_path, {
                        "format": STREAM_CHECKPOINT, "identity": identity, "step": step,
                        "net": state.net.state_dict(), "sigreg": state.sigreg.state_dict(),
                        "optimizer": state.optimizer.state_dict(), "account": acc.state(),
                        "rows": rows, "loss": [float(loss_sum), loss_steps]})
                    if is_scored and on_checkpoint is not None:
                        on_checkpoint(dict(row))
            stopped += 1
            if stop_after is not None and stopped >= stop_after:
                break
        return rows


def stream_identity(cfg: TrainConfig, stream: StreamConfig, enc_cfg: Any,
                    data: StreamData) -> str:
    """The run's config identity (prh.train_config.run_identity) with the stream's settings
    but `save_every`, and the samples it draws from (their count and fingerprint): a
    checkpoint of other texts is never resumed."""
    blob = json.dumps({"train": run_identity(cfg, enc_cfg),
                       "stream": {k: v for k, v in asdict(stream).items() if k != "save_every"},
                       "rows": data.available,
                       "data": data.fingerprint}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _resume(path: Path, identity: str, state: Any, available: int
            ) -> tuple[int, Accounting, list[dict[str, Any]], list[float]]:
    """(step, account, rows, [loss sum, steps] since the last row) from checkpoint.pt, or a
    fresh start (also when it cannot be read: prh.checkpoint.set_aside); another run's is
    refused."""
    fresh = 0, Accounting.start(available), [], [0.0, 0]
    if not path.exists():
        return fresh
    try:
        ckpt = read_checkpoint(path, STREAM_CHECKPOINT)
    except UnreadableCheckpoint as e:
        set_aside(path, str(e).split("; rerun")[0])
        return fresh
    if ckpt["identity"] != identity:
        raise ContractError(f"{path}: written by run {ckpt['identity']}, this run is "
                            f"{identity}; delete {path.parent} to start over, or restore the "
                            "params that wrote it")
    state.net.load_state_dict(ckpt["net"])
    state.sigreg.load_state_dict(ckpt["sigreg"])
    state.optimizer.load_state_dict(ckpt["optimizer"])
    return (ckpt["step"], Accounting.from_state(ckpt["account"]), list(ckpt["rows"]),
            list(ckpt["loss"]))


def _within(count: np.ndarray) -> np.ndarray:
    """0 .. c - 1 for each c of `count`, concatenated."""
    return np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)


def _sum_over_ranks(counts: np.ndarray) -> list[int]:
    t = torch.from_numpy(counts.copy())
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(t)
    return [int(v) for v in t.tolist()]


def _mean_over_ranks(total: float, steps: int) -> float:
    t = torch.tensor([total, float(steps)], dtype=torch.float64)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(t)
    return float(t[0] / max(t[1], 1.0))
