"""One training loop for the three text arms (good views, bad views, next-token prediction).

Read it top to bottom (nanoGPT `train.py` style): config -> distributed setup -> model ->
optimiser -> resume -> epochs -> evaluation hook -> checkpoint (its file and the random states
live in prh.checkpoint). Defaults and their sources are listed in `DEFAULT_SOURCES`;
"assumed" means neither article states the value.

Determinism: the photo order of epoch e is drawn from (seed, e), shared by every rank; the
views, the caption picks and dropout of epoch e on rank r come from (seed, e, r). The LR is a
pure function of the step, and the SIGReg direction counter lives in the checkpoint. So a run
killed at any point resumes from its last end-of-epoch checkpoint to the same weights as an
uninterrupted run (on CPU; CUDA kernels are not bitwise deterministic).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

from prh import distributed
from prh.batches import CaptionBank, Group, jepa_groups, ntp_groups
from prh.checkpoint import (
    CHECKPOINT_FORMAT,
    read_checkpoint,
    rng_states,
    rng_untouched,
    seed_epoch,
    set_rng_states,
    tokenizer_files,
    tokenizer_from_files,
    write_checkpoint,
)
from prh.config import ARMS, dataclass_from_dict
from prh.data import Photo
from prh.io import ContractError, write_json
from prh.losses import (
    SIGReg,
    effective_sigreg_weight,
    lamb_for_effective_weight,
    lejepa_loss,
    ntp_loss,
)
from prh.models import POOLINGS, Projector, TextEncoder, TextEncoderConfig, count_parameters
from prh.tokenizer import Tokenizer
from prh.views import ViewConfig, check_fits, collate_ntp, padded_width

DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
VIEW_KEYS = ViewConfig.SETTABLE  # the view keys params.yaml may set
WARMUP_START = 0.01  # warmup starts at lr/100 (stable-pretraining ImageNet-10 benchmark, §1.4)
FINAL_LR_RATIO = 1e-3  # cosine ends at lr/1000 (lejepa README, method-anchors.md §1.3)

A0 = "the rerun article (000_03f36f523aa97921.txt)"
DEFAULT_SOURCES: dict[str, str] = {
    "epochs": f"{A0}, 'Can a Text Model Match Photos...': all three arms ran 200 epochs",
    "lamb": f"{A0}, 'The loss brings view vectors together': stable-pretraining default .02",
    "sigreg_weight": f"assumed: 0, off (lamb as given). {A0} ('The loss brings view vectors "
                     "together'): the statistic is scaled by views x batch per GPU x GPUs, so "
                     "128 per GPU at .02 matches .01 at 256; a positive value holds that "
                     "product fixed (the paper's: .02 x 256 x 8 x 1 = 40.96)",
    "n_slices": f"{A0}, 'The loss brings view vectors together': 1,024 random unit directions",
    "views": f"{A0}, 'The line that separates good from bad': 2 global views keeping 50-100%, "
             "6 local keeping 15-50%, 15% of tokens masked",
    "model": f"{A0}, 'Can a Text Model Match Photos...': 33M-parameter encoder (BERT-S); "
             "projector: stable-pretraining default (method-anchors.md §1.4)",
    "lr": f"{A0}, 'What the paper claims at scale': lr 1e-4 at batch 256 is the recipe of the "
          "21.6M-sample runs; assumed to carry over to Flickr30k",
    "batch_size": f"{A0}, 'The loss brings view vectors together' quotes 256 per GPU; the "
                  "Flickr30k batch itself is assumed",
    "weight_decay": "assumed: 0.05, as lejepa's README and stable-pretraining's benchmark",
    "warmup_epochs": "assumed: 10 epochs linear warmup (stable-pretraining benchmark: 10 of 600)",
    "grad_clip": f"assumed off: {A0} ('The loss brings view vectors together') names gradient "
                 "clipping as a condition of the lambda ablations only",
    "max_len": "assumed: 64 tokens covers Flickr30k captions (12-15 words on average)",
    "eval_every": "assumed: 10 epochs (the article's curves are per epoch; set 1 to match)",
    "amp": "bf16 autocast on CUDA (lejepa README: bf16); never on CPU",
    "seed": "seed 0, as the rerun article's single run",
    # how a step runs (SpeedConfig): same method; float rounding and dropout draws differ
    "speed.compile": "assumed: eager; compiled modes compute the same loss and gradients "
                     "(tests/test_train.py); `bench/gpu_train.py --matrix` times them on a GPU",
    "speed.passes": "assumed: one padded pass on CUDA (an H200, before batch building was "
                    "vectorised: 163 vs 179 ms per BERT-S step), global and local passes on CPU",
    "speed.pad_multiple": "assumed: 1, each batch cut to its longest view",
    "speed.checkpoint_every": "assumed: every 10 epochs (and the last); a BERT-S checkpoint "
                              "with its AdamW state is 453 MiB, 0.7-2.0 s to write",
}


@dataclass(frozen=True)
class ModelConfig:
    """The encoder's shape (prh.models.TextEncoderConfig fields) and the projector's widths."""

    hidden: int = 384
    layers: int = 12
    heads: int = 12
    intermediate: int = 1536
    dropout: float = 0.1
    pooling: Literal["mean", "cls", "last"] = "mean"
    proj_dim: int = 512
    proj_hidden: int = 2048


@dataclass(frozen=True)
class SpeedConfig:
    """How a step is computed; none of it changes the method: padding is masked and compiled
    kernels compute the same functions, so the loss is the same up to float rounding, and with
    dropout > 0 up to which units are dropped (other mask shapes, or inductor's own random
    stream, draw other dropout masks from the same distribution). Not part of `run_identity`:
    a killed run may resume under other speed settings.

    compile: `torch.compile` mode for the BERT encoder ("none" = eager; "reduce-overhead" adds
    CUDA graphs). passes: encode global and local views in one padded pass or in two ("auto":
    two on CPU, one on CUDA). pad_multiple: round each batch's width up to a multiple of this,
    so a compiled encoder meets a few shapes (at most max_len / pad_multiple) instead of one per
    longest view. checkpoint_every: epochs between checkpoints (the last epoch always writes
    one); a BERT-S checkpoint with its AdamW state is 453 MiB, about a second to write, so one
    per epoch costs minutes per 200-epoch arm. A killed run redoes the epochs since its last
    checkpoint, to the same result."""

    compile: Literal["none", "default", "reduce-overhead", "max-autotune-no-cudagraphs"] = "none"
    passes: Literal["auto", "one", "split"] = "auto"
    pad_multiple: int = 1
    checkpoint_every: int = 10

    def split(self, device: torch.device) -> bool:
        """Whether global and local views go through the encoder in separate passes."""
        return self.passes == "split" or (self.passes == "auto" and device.type != "cuda")


@dataclass(frozen=True)
class TrainConfig:
    """Every field of params.yaml's `train` section; `from_dict` is the only loader."""

    arm: Literal["good", "bad", "ntp"] = "good"
    seed: int = 0
    epochs: int = 200
    batch_size: int = 256  # photos per step per GPU
    lr: float = 1e-4
    weight_decay: float = 0.05
    warmup_epochs: int = 10
    grad_clip: float = 0.0  # max gradient norm; 0 = off
    lamb: float = 0.02
    sigreg_weight: float = 0.0  # > 0: hold lamb x batch x views x GPUs here (`resolved_lamb`)
    n_slices: int = 1024
    max_len: int = 64  # tokens per sequence, specials included
    eval_every: int = 10
    amp: bool = True
    device: Literal["auto", "cpu", "cuda"] = "auto"
    views: ViewConfig = field(default_factory=ViewConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    speed: SpeedConfig = field(default_factory=SpeedConfig)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Build from a plain dict (params.yaml), rejecting unknown keys and wrong types."""
        cfg = dataclass_from_dict(cls, d, "train")
        cfg.validate()
        return cfg

    def to_dict(self) -> dict[str, Any]:
        """Plain data as in params.yaml (tuples as lists). The views' max_len and mask_id are
        left out: they come from `max_len` and the tokenizer (see `view_config`)."""
        d = json.loads(json.dumps(asdict(self)))
        d["views"] = {k: d["views"][k] for k in VIEW_KEYS}
        return d

    def validate(self) -> None:
        """Raise ValueError naming the key and the fix for any out-of-range value."""
        checks = [
            (self.arm in ARMS, "arm", f"use one of {ARMS}"),
            (self.device in DEVICES, "device", f"use one of {DEVICES}"),
            (self.model.pooling in POOLINGS, "model.pooling", f"use one of {POOLINGS}"),
            (self.epochs >= 1, "epochs", "train for at least 1 epoch"),
            (self.batch_size >= 2, "batch_size", "use at least 2 (BatchNorm needs 2 rows)"),
            (self.lr > 0, "lr", "use a positive learning rate"),
            (self.weight_decay >= 0, "weight_decay", "use 0 or more"),
            (0 <= self.warmup_epochs <= self.epochs, "warmup_epochs", "use 0..epochs"),
            (self.grad_clip >= 0, "grad_clip", "use 0 (off) or a positive max norm"),
            (self.lamb >= 0, "lamb", "use 0 or a positive SIGReg weight (the paper: .02)"),
            (self.sigreg_weight >= 0, "sigreg_weight",
             "use 0 (lamb as given) or the effective weight to hold (the paper: 40.96)"),
            (self.n_slices >= 1, "n_slices", "use at least 1 direction (the paper: 1024)"),
            (self.eval_every >= 1, "eval_every", "evaluate every 1 or more epochs"),
            (1 <= self.speed.pad_multiple <= self.max_len, "speed.pad_multiple",
             "use 1 (no rounding) up to max_len; 8 suits compiled CUDA steps"),
            (self.speed.checkpoint_every >= 1, "speed.checkpoint_every",
             "write a checkpoint every 1 or more epochs"),
            (self.model.hidden % self.model.heads == 0, "model.hidden",
             f"make it a multiple of model.heads={self.model.heads}"),
            (0 <= self.model.dropout < 1, "model.dropout", "use a value in [0, 1)"),
        ]
        for ok, key, fix in checks:
            if not ok:
                raise ValueError(f"train.{key}={_get(self, key)!r} is out of range: {fix}")
        for name in ("layers", "heads", "intermediate", "hidden", "proj_dim", "proj_hidden"):
            if getattr(self.model, name) < 1:
                raise ValueError(f"train.model.{name}={getattr(self.model, name)} must be >= 1")
        try:
            replace(self.views, max_len=self.max_len)
        except ValueError as e:
            raise ValueError(f"train.max_len={self.max_len}: the views cannot fit ({e}); raise "
                             "train.max_len (Flickr30k captions need about 64)") from e

    def n_views(self) -> int:
        return self.views.n_global + self.views.n_local


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def lr_at(step: int, total_steps: int, warmup_steps: int, base_lr: float) -> float:
    """Linear warmup from base_lr * WARMUP_START, then cosine to base_lr * FINAL_LR_RATIO."""
    if step < warmup_steps:
        return base_lr * (WARMUP_START + (1 - WARMUP_START) * step / warmup_steps)
    span = max(total_steps - warmup_steps, 1)
    progress = min((step - warmup_steps) / span, 1.0)
    final = base_lr * FINAL_LR_RATIO
    return final + 0.5 * (base_lr - final) * (1 + math.cos(math.pi * progress))


def resolved_lamb(cfg: TrainConfig, world_size: int) -> float:
    """The lamb a run uses: `cfg.lamb`, or with `cfg.sigreg_weight` > 0 the lamb that gives that
    effective SIGReg weight at this batch per GPU, view count and world size, so changing the
    batch or the GPU count keeps the regulariser's strength (prh.losses.effective_sigreg_weight)."""
    if cfg.sigreg_weight == 0:
        return cfg.lamb
    return lamb_for_effective_weight(cfg.sigreg_weight, cfg.batch_size, cfg.n_views(),
                                     world_size)


def encoder_config(cfg: TrainConfig, tokenizer: Tokenizer) -> TextEncoderConfig:
    """The encoder of this run: causal for NTP, bidirectional for the JEPA arms."""
    m = cfg.model
    return TextEncoderConfig(
        vocab_size=tokenizer.vocab_size, hidden=m.hidden, layers=m.layers, heads=m.heads,
        intermediate=m.intermediate, max_len=cfg.max_len, dropout=m.dropout,
        causal=cfg.arm == "ntp", pooling=m.pooling, pad_id=tokenizer.pad_id)


def run_identity(cfg: TrainConfig, enc_cfg: TextEncoderConfig) -> str:
    """sha256 of the resolved config without its speed settings (they do not change the
    method); a checkpoint resumes only under the same identity."""
    train = {k: v for k, v in cfg.to_dict().items() if k != "speed"}
    blob = json.dumps({"train": train, "encoder": asdict(enc_cfg)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def view_config(cfg: TrainConfig, tokenizer: Tokenizer) -> ViewConfig:
    """The views of this run: `cfg.views` with the run's max_len and the tokenizer's [MASK]."""
    return replace(cfg.views, max_len=cfg.max_len, mask_id=tokenizer.mask_id)


def tokenize_captions(photos: Sequence[Photo], tokenizer: Tokenizer) -> dict[str, list[int]]:
    """caption -> token ids (no specials), each distinct caption encoded once per run."""
    texts = sorted({c for p in photos for c in p.captions})
    return dict(zip(texts, tokenizer.encode_batch(texts), strict=True))


def trim(tokens: Tensor, mask: Tensor, multiple: int = 1) -> tuple[Tensor, Tensor]:
    """Cut the columns that are padding in every row: [..., L] -> [..., W], W the longest real
    length rounded up to `multiple` (at most L)."""
    width = padded_width(int(mask.sum(-1).max()), multiple, mask.size(-1))
    return tokens[..., :width], mask[..., :width]


def jepa_batch(photos: Sequence[Photo], cfg: TrainConfig, views: ViewConfig,
               tokenizer: Tokenizer, ids: dict[str, list[int]], rng: np.random.Generator,
               split: bool = True) -> list[Group]:
    """The V views of B photos as a global group [n_global*B, Lg] and a local one
    [n_local*B, Ll], each padded to its own longest view (view-major rows: view 0 of every
    photo, then view 1, ...), as upstream encodes global and local views in separate passes
    (method-anchors.md §1.4); `split=False` gives one group [V*B, L]. Padding is masked, so
    both give the same loss up to float rounding.

    good: every view draws its own caption of the photo (with replacement); bad: one caption
    is drawn per photo and every view is cut from it (the rerun article, 'The line that
    separates good from bad'). The training loop calls `prh.batches.jepa_groups` on a
    `CaptionBank` built once per run; this builds a bank for `photos` and does the same.
    """
    bank = CaptionBank.build(photos, ids, views, tokenizer.pad_id)
    return jepa_groups(bank, np.arange(len(photos)), cfg.arm == "good", views, tokenizer, rng,
                       split, cfg.speed.pad_multiple)


def ntp_batch(photos: Sequence[Photo], cfg: TrainConfig, tokenizer: Tokenizer,
              ids: dict[str, list[int]], rng: np.random.Generator) -> list[Group]:
    """One whole caption per photo, drawn at random: [B, L] (the rerun article: the NTP arm
    'has no views at all, and reads a whole caption')."""
    bank = CaptionBank.build(photos, ids, view_config(cfg, tokenizer), tokenizer.pad_id)
    return ntp_groups(bank, np.arange(len(photos)), cfg.max_len, tokenizer, rng,
                      cfg.speed.pad_multiple)


def step_groups(bank: CaptionBank, rows: np.ndarray, cfg: TrainConfig, views: ViewConfig,
                tokenizer: Tokenizer, rng: np.random.Generator, device: torch.device
                ) -> list[Group]:
    """The batch of training step for the photos `rows` of `bank`, as the loop builds it: a
    whole caption per photo for NTP, else the views, with `cfg.speed`'s passes and padding."""
    if cfg.arm == "ntp":
        return ntp_groups(bank, rows, cfg.max_len, tokenizer, rng, cfg.speed.pad_multiple)
    return jepa_groups(bank, rows, cfg.arm == "good", views, tokenizer, rng,
                       cfg.speed.split(device), cfg.speed.pad_multiple)


class _Net(nn.Module):
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
        pooled = [self.encoder.embed(tokens, mask) for tokens, mask in groups]  # [rows, D]
        return self.projector(torch.cat(pooled))


def step_loss(model: nn.Module, encoder: TextEncoder, sigreg: SIGReg, groups: list[Group],
              cfg: TrainConfig, pad_id: int, device: torch.device
              ) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss of one batch and its terms (detached, on `device`: no host sync per step).

    On CUDA the batch is copied from pinned memory: a copy from pageable memory first waits
    for the stream to drain (CUDA runtime API, "API synchronization behavior"), which would
    stop the host from queuing the next step while the GPU runs this one."""
    pin = device.type == "cuda"
    groups = [tuple(x.pin_memory().to(device, non_blocking=True) if pin else x.to(device)
                    for x in group) for group in groups]
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.amp and
                        device.type == "cuda"):
        out = model(*groups)
        if cfg.arm == "ntp":  # out: hidden [B, L, D]
            loss = ntp_loss(out, groups[0][0], encoder.word_embeddings, pad_id)
            return loss, {"loss": loss.detach()}
        all_projected = out.view(cfg.n_views(), -1, out.size(-1))  # [V*B, K] -> [V, B, K]
        loss, inv, sig = lejepa_loss(all_projected, cfg.views.n_global, sigreg, cfg.lamb)
    return loss, {"loss": loss.detach(), "inv": inv.detach(), "sigreg": sig.detach()}


def make_encode(encoder: TextEncoder, tokenizer: Tokenizer, max_len: int, device: torch.device,
                batch_size: int = 256, pad_multiple: int = 1
                ) -> Callable[[list[str]], np.ndarray]:
    """encode(texts) -> float32 [n, D]: pooled encoder output (not the projector) in eval mode.

    Each text is read whole as `[CLS] text [SEP]`, cut to `max_len`, no masking: the input
    format of the NTP arm, and of a JEPA view that keeps 100% with nothing masked.
    """

    @torch.no_grad()
    def encode(texts: list[str]) -> np.ndarray:
        was_training = encoder.training
        encoder.eval()
        out = [torch.zeros((0, encoder.cfg.hidden))]
        for i in range(0, len(texts), batch_size):
            chunk = tokenizer.encode_batch(list(texts[i: i + batch_size]))
            tokens, mask = trim(*collate_ntp(chunk, max_len, tokenizer), pad_multiple)
            out.append(encoder.embed(tokens.to(device), mask.to(device)).float().cpu())
        encoder.train(was_training)
        return torch.cat(out).numpy()

    return encode


# ---------------------------------------------------------------- distributed and seeding


@dataclass(frozen=True)
class _Dist:
    rank: int
    world: int
    device: torch.device
    owns_group: bool  # we called init_process_group, so we destroy it


def _setup_distributed(cfg: TrainConfig) -> _Dist:
    """torchrun sets WORLD_SIZE/RANK/LOCAL_RANK; NCCL on CUDA, gloo on CPU."""
    want_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device='cuda' but no CUDA device is visible; use 'auto'/'cpu'")
    owns = False
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if want_cuda else "gloo")
        owns = True
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}") if want_cuda else torch.device("cpu")
    if want_cuda:
        torch.cuda.set_device(device)
    return _Dist(distributed.rank(), distributed.world_size(), device, owns)


# ---------------------------------------------------------------- the loop


def build_modules(cfg: TrainConfig, enc_cfg: TextEncoderConfig, device: torch.device
                  ) -> tuple[_Net, SIGReg, torch.optim.Optimizer]:
    """Encoder (+ projector for JEPA), SIGReg and AdamW, seeded by `cfg.seed` (same on every
    rank). AdamW betas (0.9, 0.999) as stable-pretraining's benchmark (method-anchors.md §1.4)."""
    torch.manual_seed(cfg.seed)
    encoder = TextEncoder(enc_cfg)
    projector = (None if cfg.arm == "ntp" else
                 Projector(enc_cfg.hidden, cfg.model.proj_dim, cfg.model.proj_hidden))
    net = _Net(encoder, projector).to(device)
    if cfg.speed.compile != "none":  # in place: parameter names (and checkpoints) unchanged
        encoder.bert.compile(mode=None if cfg.speed.compile == "default" else cfg.speed.compile)
    sigreg = SIGReg(n_slices=cfg.n_slices).to(device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=cfg.lr, betas=(0.9, 0.999),
                                  weight_decay=cfg.weight_decay, fused=device.type == "cuda")
    return net, sigreg, optimizer


def train_step(model: nn.Module, net: _Net, sigreg: SIGReg, optimizer: torch.optim.Optimizer,
               groups: list[Group], cfg: TrainConfig, pad_id: int, device: torch.device,
               lr: float) -> dict[str, Tensor]:
    """One optimiser step at learning rate `lr`; `model` is `net` or its DDP wrapper."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss, terms = step_loss(model, net.encoder, sigreg, groups, cfg, pad_id, device)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip > 0:
        nn.utils.clip_grad_norm_(net.parameters(), cfg.grad_clip)
    optimizer.step()
    return terms


def _resume(path: Path, identity: str, net: _Net, sigreg: SIGReg,
            optimizer: torch.optim.Optimizer) -> tuple[int, int, list[dict[str, float]]]:
    """Load a matching checkpoint into the modules; return (epoch, step, curve)."""
    if not path.exists():
        return 0, 0, []
    ckpt = read_checkpoint(path)
    if ckpt["identity"] != identity:
        raise ContractError(
            f"{path}: written by config {ckpt['identity']}, this run is config {identity}; "
            f"delete {path.parent} to start over, or restore the params that wrote it")
    net.load_state_dict(ckpt["net"])
    sigreg.load_state_dict(ckpt["sigreg"])
    optimizer.load_state_dict(ckpt["optimizer"])
    # Each epoch reseeds from (seed, epoch, rank); restoring the saved states as well leaves
    # the process exactly as an uninterrupted run left it after that epoch.
    set_rng_states(ckpt["rng"])
    return ckpt["epoch"], ckpt["step"], ckpt["curve"]


def train_text_encoder(
    cfg: TrainConfig,
    photos: list[Photo],
    tokenizer: Tokenizer,
    out_dir: Path,
    *,
    eval_hook: Callable[[int, Callable[[list[str]], np.ndarray]], dict[str, float]] | None = None,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    progress: bool | None = None,
) -> dict[str, float]:
    """Train one arm on `photos`; resume from out_dir/checkpoint.pt when it matches `cfg`.

    Writes out_dir/config.json at the start, curve.json every epoch and checkpoint.pt every
    `cfg.speed.checkpoint_every` epochs and at the last (rank 0, atomically).
    `eval_hook(epoch, encode)` runs every `cfg.eval_every` epochs and at the last one; it and
    `on_epoch(epoch, metrics)` run on rank 0 only. Returns the last epoch's metrics.
    """
    cfg.validate()
    if not photos:
        raise ValueError("train_text_encoder: no training photos")
    out_dir = Path(out_dir)
    ckpt_path = out_dir / "checkpoint.pt"
    ctx = _setup_distributed(cfg)
    try:
        if len(photos) < ctx.world:
            raise ValueError(f"{len(photos)} photos cannot be split over {ctx.world} ranks")
        enc_cfg = encoder_config(cfg, tokenizer)
        identity = run_identity(cfg, enc_cfg)
        ids = tokenize_captions(photos, tokenizer)
        check_fits(views := view_config(cfg, tokenizer), [len(ids[c]) for c in ids],
                   where=f"train.max_len={cfg.max_len}: training captions (sorted)")
        bank = CaptionBank.build(photos, ids, views, tokenizer.pad_id)  # token matrix, once
        tok_files = tokenizer_files(tokenizer)
        net, sigreg, optimizer = build_modules(cfg, enc_cfg, ctx.device)
        steps_per_epoch = math.ceil(len(photos) // ctx.world / cfg.batch_size)
        total_steps = cfg.epochs * steps_per_epoch
        warmup_steps = cfg.warmup_epochs * steps_per_epoch
        start_epoch, step, curve = _resume(ckpt_path, identity, net, sigreg, optimizer)
        # the loss's lamb for this world size (cfg.sigreg_weight holds the effective weight)
        step_cfg = replace(cfg, lamb=resolved_lamb(cfg, ctx.world))
        resolved = _resolved_config(cfg, step_cfg.lamb, enc_cfg, identity, ctx, net,
                                    steps_per_epoch)
        if ctx.rank == 0:
            write_json(out_dir / "config.json", resolved)
        model = net if ctx.world == 1 else nn.parallel.DistributedDataParallel(
            net, device_ids=[ctx.device] if ctx.device.type == "cuda" else None)
        epochs = range(start_epoch + 1, cfg.epochs + 1)
        if ctx.rank == 0 and (progress if progress is not None else sys.stderr.isatty()):
            from tqdm import tqdm

            epochs = tqdm(epochs, desc=f"train {cfg.arm}", initial=start_epoch, total=cfg.epochs)

        for epoch in epochs:
            rng = seed_epoch(cfg.seed, epoch, ctx.rank)
            order = np.random.default_rng([cfg.seed, epoch]).permutation(len(photos))
            shard = order[: len(order) - len(order) % ctx.world][ctx.rank::ctx.world]
            net.train()
            sums: dict[str, Tensor] = {}
            for i in range(0, len(shard), cfg.batch_size):
                lr = lr_at(step, total_steps, warmup_steps, cfg.lr)
                rows = shard[i: i + cfg.batch_size]
                groups = step_groups(bank, rows, cfg, views, tokenizer, rng, ctx.device)
                terms = train_step(model, net, sigreg, optimizer, groups, step_cfg,
                                   tokenizer.pad_id, ctx.device, lr)
                step += 1
                for k, v in terms.items():
                    sums[k] = sums[k] + v.double() if k in sums else v.double()
            metrics = {"epoch": epoch, **_epoch_metrics(sums, steps_per_epoch), "lr": lr}
            if not all(math.isfinite(v) for v in metrics.values()):
                raise FloatingPointError(f"epoch {epoch}: non-finite loss {metrics}; lower "
                                         "train.lr or set train.grad_clip")
            if ctx.rank == 0 and eval_hook is not None and (
                    epoch % cfg.eval_every == 0 or epoch == cfg.epochs):
                with rng_untouched():
                    encode = make_encode(net.encoder, tokenizer, cfg.max_len, ctx.device,
                                         pad_multiple=cfg.speed.pad_multiple)
                    metrics.update(eval_hook(epoch, encode))
            curve.append(metrics)
            if ctx.rank == 0:
                if epoch % cfg.speed.checkpoint_every == 0 or epoch == cfg.epochs:
                    write_checkpoint(ckpt_path, {
                        "format": CHECKPOINT_FORMAT, "identity": identity, "config": resolved,
                        "net": net.state_dict(), "sigreg": sigreg.state_dict(),
                        "optimizer": optimizer.state_dict(), "epoch": epoch, "step": step,
                        "curve": curve, "rng": rng_states(), "tokenizer_files": tok_files})
                write_json(out_dir / "curve.json", curve)
                if on_epoch is not None:
                    with rng_untouched():
                        on_epoch(epoch, dict(metrics))
        if ctx.owns_group:
            dist.barrier()  # every rank done before the group (and its store) is torn down
        return dict(curve[-1])
    finally:
        if ctx.owns_group:
            dist.destroy_process_group()


def _resolved_config(cfg: TrainConfig, lamb: float, enc_cfg: TextEncoderConfig, identity: str,
                     ctx: _Dist, net: _Net, steps_per_epoch: int) -> dict[str, Any]:
    """config.json: the config as run, with what it implies (world size, the lamb the loss
    uses, the effective SIGReg weight)."""
    sigreg_weight = 0.0 if cfg.arm == "ntp" else effective_sigreg_weight(
        lamb, cfg.batch_size, cfg.n_views(), ctx.world)
    return {"train": cfg.to_dict(), "encoder": asdict(enc_cfg), "identity": identity,
            "world_size": ctx.world, "device": str(ctx.device), "lamb": lamb,
            "n_parameters": count_parameters(net), "steps_per_epoch": steps_per_epoch,
            "effective_sigreg_weight": sigreg_weight, "default_sources": DEFAULT_SOURCES}


def _epoch_metrics(sums: dict[str, Tensor], steps: int) -> dict[str, float]:
    """Per-step means of the loss terms, averaged over ranks (one host sync per epoch)."""
    keys = sorted(sums)
    values = torch.stack([sums[k] / steps for k in keys])
    if distributed.world_size() > 1:
        dist.all_reduce(values)
        values /= distributed.world_size()
    return dict(zip(keys, values.tolist(), strict=True))


def load_text_encoder(out_dir: Path, device: str = "cpu") -> Callable[[list[str]], np.ndarray]:
    """encode(texts) -> float32 [n, D] from out_dir/checkpoint.pt (its own tokenizer inside)."""
    path = Path(out_dir) / "checkpoint.pt"
    if not path.exists():
        raise ContractError(f"{path}: no checkpoint; run `harness train` for this arm and seed")
    ckpt = read_checkpoint(path)
    enc_cfg = TextEncoderConfig(**ckpt["config"]["encoder"])
    encoder = TextEncoder(enc_cfg)
    prefix = "encoder."
    encoder.load_state_dict({k[len(prefix):]: v for k, v in ckpt["net"].items()
                             if k.startswith(prefix)}, strict=True)
    encoder.to(device)
    tokenizer = tokenizer_from_files(ckpt["tokenizer_files"])
    return make_encode(encoder, tokenizer, ckpt["config"]["train"]["max_len"],
                       torch.device(device))
