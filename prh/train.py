"""One training loop for the three text arms (good views, bad views, next-token prediction).

Read it top to bottom (nanoGPT `train.py` style): the loop (`train_text_encoder`) first, then
what one step does (`train_step`), then the pieces it is built from. The configuration is
prh.train_config, the batches prh.batches, the process group prh.distributed, the checkpoint
file and the random states prh.checkpoint, the evaluation encoder prh.encode_text.

Determinism: the photo order of epoch e is drawn from (seed, e), shared by every rank; the
views, the caption picks and dropout of epoch e on rank r come from (seed, e, r). The LR is a
pure function of the step, and the SIGReg direction counter lives in the checkpoint. So a run
killed at any point resumes from its last checkpoint to the same weights as an uninterrupted
run (on CPU; CUDA kernels are not bitwise deterministic).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from prh import distributed
from prh.batches import CaptionBank, Group, step_groups, tokenize_captions
from prh.checkpoint import (
    CHECKPOINT_FORMAT,
    resume,
    rng_states,
    rng_untouched,
    seed_epoch,
    tokenizer_files,
    write_checkpoint,
)
from prh.data import Photo
from prh.distributed import Process, ddp_wrap, process_group
from prh.encode_text import make_encode, make_val_loss
from prh.io import write_json
from prh.losses import SIGReg, lejepa_loss, ntp_loss
from prh.models import (
    Projector,
    TextEncoder,
    TextEncoderConfig,
    count_parameters,
    parameter_counts,
)
from prh.tokenizer import Tokenizer
from prh.train_config import (
    Resolved,
    TrainConfig,
    encoder_config,
    resolve,
    run_identity,
    view_config,
)
from prh.views import check_fits

# stable-pretraining's LeJEPA benchmark (benchmarks/imagenet10/lejepa-vit-small.py) warms up
# linearly from lr/100; the lejepa README's schedule ends its cosine at lr/1000.
WARMUP_START = 0.01
FINAL_LR_RATIO = 1e-3
EvalHook = Callable[[int, Callable[[list[str]], np.ndarray]], dict[str, float]]


@dataclass(frozen=True)
class TrainState:
    """What a step reads and updates: the network (`net`), what the step calls (`ddp`: `net` in
    DistributedDataParallel, or `net` itself in a one-process run), SIGReg, AdamW, the lamb the
    loss uses (`prh.train_config.resolve`; 0 for next-token, which has no SIGReg term) and
    the run's config."""

    net: Net
    ddp: nn.Module
    sigreg: SIGReg
    optimizer: torch.optim.Optimizer
    lamb: float
    cfg: TrainConfig


def train_text_encoder(cfg: TrainConfig, photos: list[Photo], tokenizer: Tokenizer,
                       out_dir: Path, *, eval_hook: EvalHook | None = None,
                       on_epoch: Callable[[int, dict[str, float]], None] | None = None,
                       progress: bool | None = None,
                       val_texts: list[str] | None = None,
                       resolved: Resolved | None = None) -> dict[str, float]:
    """Train one arm on `photos`; resume from out_dir/checkpoint.pt when it matches `cfg`.

    Writes out_dir/config.json at the start, curve.json every epoch and checkpoint.pt every
    `cfg.speed.checkpoint_every` epochs and at the last (rank 0, atomically).
    `eval_hook(epoch, encode)` runs at epoch 1, every `cfg.eval_every` epochs and at the last
    one (`evaluated`); it and `on_epoch(epoch, metrics)` run on rank 0 only. A resumed run first
    replays the checkpoint's epochs through `on_epoch`: a kill between a checkpoint and its
    epoch's `on_epoch` (or a tracker's unsent buffer) would otherwise lose them. With `val_texts`
    the NTP arm also logs `val_loss` every epoch, their next-token loss
    (prh.encode_text.make_val_loss; JEPA arms have no next-token head and ignore them).
    Returns the last epoch's metrics. `resolved`: what the config implies at this world size,
    when the caller has it (the train stage logs it); computed here otherwise, once.
    """
    if not photos:
        raise ValueError("train_text_encoder: no training photos")
    out_dir = Path(out_dir)
    ckpt_path = out_dir / "checkpoint.pt"
    with process_group(cfg.device) as proc:
        if len(photos) < proc.world:
            raise ValueError(f"{len(photos)} photos cannot be split over {proc.world} ranks")
        enc_cfg = encoder_config(cfg, tokenizer)
        identity = run_identity(cfg, enc_cfg)
        ids = tokenize_captions(photos, tokenizer)
        check_fits(views := view_config(cfg, tokenizer), [len(ids[c]) for c in ids],
                   where=f"train.max_len={cfg.max_len}: training captions (sorted)")
        bank = CaptionBank.build(photos, ids, views, tokenizer.pad_id)  # token matrix, once
        tok_files = tokenizer_files(tokenizer)
        resolved = resolved or resolve(cfg, proc.world)
        if resolved.world_size != proc.world:
            raise ValueError(f"resolved for {resolved.world_size} processes, run on {proc.world}")
        state = build_state(cfg, enc_cfg, proc, resolved)
        steps_per_epoch = math.ceil(len(photos) // proc.world / cfg.batch_size)
        total_steps = cfg.epochs * steps_per_epoch
        warmup_steps = cfg.warmup_epochs * steps_per_epoch
        start_epoch, step, curve = resume(ckpt_path, identity, state.net, state.sigreg,
                                          state.optimizer)
        as_run = _resolved_config(state, enc_cfg, identity, proc, steps_per_epoch, resolved)
        val_loss = (make_val_loss(state.net.encoder, tokenizer, cfg.max_len, proc.device,
                                  list(val_texts))
                    if val_texts and cfg.arm == "ntp" and proc.rank == 0 else None)
        if proc.rank == 0:
            write_json(out_dir / "config.json", as_run)
            with rng_untouched():
                for done in curve if on_epoch is not None else ():
                    on_epoch(int(done["epoch"]), dict(done))
        epochs = range(start_epoch + 1, cfg.epochs + 1)
        if proc.rank == 0 and (progress if progress is not None else sys.stderr.isatty()):
            from tqdm import tqdm

            epochs = tqdm(epochs, desc=f"train {cfg.arm}", initial=start_epoch, total=cfg.epochs)

        for epoch in epochs:
            rng = seed_epoch(cfg.seed, epoch, proc.rank)
            order = np.random.default_rng([cfg.seed, epoch]).permutation(len(photos))
            shard = order[: len(order) - len(order) % proc.world][proc.rank::proc.world]
            state.net.train()
            sums: dict[str, Tensor] = {}
            for i in range(0, len(shard), cfg.batch_size):
                lr = lr_at(step, total_steps, warmup_steps, cfg.lr)
                batch = step_groups(bank, shard[i: i + cfg.batch_size], cfg, views, tokenizer,
                                    rng, proc.device)
                terms = train_step(state, batch, lr)
                step += 1
                for k, v in terms.items():
                    sums[k] = sums[k] + v.double() if k in sums else v.double()
            metrics = {"epoch": epoch, **_epoch_metrics(sums, steps_per_epoch), "lr": lr}
            if not all(math.isfinite(v) for v in metrics.values()):
                raise FloatingPointError(f"epoch {epoch}: non-finite loss {metrics}; lower "
                                         "train.lr or set train.grad_clip")
            if val_loss is not None:
                with rng_untouched():
                    metrics["val_loss"] = val_loss()
            if proc.rank == 0 and eval_hook is not None and evaluated(epoch, cfg):
                with rng_untouched():
                    encode = make_encode(state.net.encoder, tokenizer, cfg.max_len, proc.device,
                                         pad_multiple=cfg.speed.pad_multiple)
                    metrics.update(eval_hook(epoch, encode))
            curve.append(metrics)
            if proc.rank == 0:
                if epoch % cfg.speed.checkpoint_every == 0 or epoch == cfg.epochs:
                    write_checkpoint(ckpt_path, {
                        "format": CHECKPOINT_FORMAT, "identity": identity, "config": as_run,
                        "net": state.net.state_dict(), "sigreg": state.sigreg.state_dict(),
                        "optimizer": state.optimizer.state_dict(), "epoch": epoch,
                        "step": step, "curve": curve, "rng": rng_states(),
                        "tokenizer_files": tok_files})
                write_json(out_dir / "curve.json", curve)
                if on_epoch is not None:
                    with rng_untouched():
                        on_epoch(epoch, dict(metrics))
        return dict(curve[-1])


def evaluated(epoch: int, cfg: TrainConfig) -> bool:
    """Whether the per-epoch evaluation runs after `epoch` (counted from 1): the first epoch
    (the rerun article's curves start there: "after one epoch all three arms already score
    about .04"), every `cfg.eval_every`-th and the last."""
    return epoch == 1 or epoch % cfg.eval_every == 0 or epoch == cfg.epochs


def train_step(state: TrainState, batch: list[Group], lr: float) -> dict[str, Tensor]:
    """One optimiser step on `batch` at learning rate `lr`; returns the loss terms (detached,
    on the device: no host sync per step)."""
    for group in state.optimizer.param_groups:
        group["lr"] = lr
    loss, terms = step_loss(state, batch)
    state.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if state.cfg.grad_clip > 0:
        nn.utils.clip_grad_norm_(state.net.parameters(), state.cfg.grad_clip)
    state.optimizer.step()
    return terms


def step_loss(state: TrainState, batch: list[Group]) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss of one batch and its terms: the LeJEPA loss of the views, or next-token
    cross-entropy (NTP).

    On CUDA the batch is copied from pinned memory: a copy from pageable memory first waits
    for the stream to drain (CUDA runtime API, "API synchronization behavior"), which would
    stop the host from queuing the next step while the GPU runs this one."""
    cfg, device = state.cfg, next(state.net.parameters()).device
    pin = device.type == "cuda"
    batch = [tuple(x.pin_memory().to(device, non_blocking=True) if pin else x.to(device)
                   for x in group) for group in batch]
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.amp and
                        device.type == "cuda"):
        out = state.ddp(*batch)
        if cfg.arm == "ntp":  # out: hidden [B, L, D]
            encoder = state.net.encoder
            loss = ntp_loss(out, batch[0][0], encoder.word_embeddings, encoder.cfg.pad_id)
            loss = loss * _token_share(batch[0][0], encoder.cfg.pad_id)
            return loss, {"loss": loss.detach()}  # its mean over ranks: the global token mean
        all_projected = out.view(cfg.n_views(), -1, out.size(-1))  # [V*B, K] -> [V, B, K]
        loss, inv, sig = lejepa_loss(all_projected, cfg.views.n_global, state.sigreg,
                                     state.lamb)
    return loss, {"loss": loss.detach(), "inv": inv.detach(), "sigreg": sig.detach()}


def _token_share(tokens: Tensor, pad_id: int) -> Tensor | float:
    """world x this rank's next-token targets / every rank's (1 in a one-process run). DDP
    averages gradients over ranks; each rank's token mean weighted by this, the average is the
    gradient of the mean over every target of the global batch, as one process would compute
    it (an all-reduce of one number, no host sync)."""
    world = distributed.world_size()
    if world == 1:
        return 1.0
    mine = (tokens[:, 1:] != pad_id).sum().float()
    every = mine.detach().clone()
    dist.all_reduce(every)
    return mine * world / every


def lr_at(step: int, total_steps: int, warmup_steps: int, base_lr: float) -> float:
    """Linear warmup from base_lr * WARMUP_START, then cosine to base_lr * FINAL_LR_RATIO."""
    if step < warmup_steps:
        return base_lr * (WARMUP_START + (1 - WARMUP_START) * step / warmup_steps)
    span = max(total_steps - warmup_steps, 1)
    progress = min((step - warmup_steps) / span, 1.0)
    final = base_lr * FINAL_LR_RATIO
    return final + 0.5 * (base_lr - final) * (1 + math.cos(math.pi * progress))


def build_state(cfg: TrainConfig, enc_cfg: TextEncoderConfig, proc: Process,
                resolved: Resolved | None = None) -> TrainState:
    """Encoder (+ projector for JEPA), SIGReg and AdamW on `proc.device`, seeded by `cfg.seed`
    (the same on every rank), the network wrapped in DDP when the run has several processes.
    AdamW betas (0.9, 0.999) as stable-pretraining's LeJEPA benchmark
    (benchmarks/imagenet10/lejepa-vit-small.py)."""
    torch.manual_seed(cfg.seed)
    encoder = TextEncoder(enc_cfg)
    projector = (None if cfg.arm == "ntp" else
                 Projector(enc_cfg.hidden, cfg.model.proj_dim, cfg.model.proj_hidden))
    net = Net(encoder, projector).to(proc.device)
    if cfg.speed.compile != "none":  # in place: parameter names (and checkpoints) unchanged
        encoder.bert.compile(mode=None if cfg.speed.compile == "default" else cfg.speed.compile)
    sigreg = SIGReg(n_slices=cfg.n_slices).to(proc.device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=cfg.lr, betas=(0.9, 0.999),
                                  weight_decay=cfg.weight_decay,
                                  fused=proc.device.type == "cuda")
    lamb = (resolved or resolve(cfg, proc.world)).lamb
    return TrainState(net, ddp_wrap(net, proc), sigreg, optimizer,
                      0.0 if lamb is None else lamb, cfg)


class Net(nn.Module):
    """Encoder + projector as one module (what DDP wraps)."""

    def __init__(self, encoder: TextEncoder, projector: Projector | None) -> None:
        super().__init__()
        self.encoder = encoder
        self.projector = projector

    def forward(self, *groups: Group) -> Tensor:
        """NTP (no projector): one group [B, L] -> hidden [B, L, D].
        JEPA: view groups -> pooled, concatenated -> projections [V*B, K] (BatchNorm sees
        every view, as upstream concatenates before the projector)."""
        if self.projector is None:
            return self.encoder(*groups[0])
        pooled = [self.encoder.embed(*group) for group in groups]  # [rows, D]
        return self.projector(torch.cat(pooled))


def _resolved_config(state: TrainState, enc_cfg: TextEncoderConfig, identity: str,
                     proc: Process, steps_per_epoch: int, resolved: Resolved
                     ) -> dict[str, Any]:
    """config.json: the config as run, with what it implies (world size, the lamb the loss
    uses, the effective SIGReg weight)."""
    cfg = state.cfg
    return {"train": cfg.to_dict(), "encoder": asdict(enc_cfg), "identity": identity,
            "world_size": proc.world, "device": str(proc.device), "lamb": resolved.lamb,
            "n_parameters": count_parameters(state.net),
            "parameters": parameter_counts(state.net.encoder, state.net.projector),
            "steps_per_epoch": steps_per_epoch,
            "effective_sigreg_weight": resolved.effective_sigreg_weight}


def _epoch_metrics(sums: dict[str, Tensor], steps: int) -> dict[str, float]:
    """Per-step means of the loss terms, averaged over ranks (one host sync per epoch)."""
    keys = sorted(sums)
    values = torch.stack([sums[k] / steps for k in keys])
    if distributed.world_size() > 1:
        dist.all_reduce(values)
        values /= distributed.world_size()
    return dict(zip(keys, values.tolist(), strict=True))
