"""The training run's configuration: params.yaml's `train` section as typed dataclasses, and what
a run derives from it (the lamb its loss uses, its encoder, its views, its identity hash).

The sources of the paper-scale defaults are data in harness/config/provenance.yaml, printed in the
report's hyperparameter table.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import torch

from prh.config import ARMS, arm_section, dataclass_from_dict
from prh.losses import effective_sigreg_weight, lamb_for_effective_weight
from prh.models import POOLINGS, TextEncoderConfig
from prh.tokenizer import Tokenizer
from prh.views import ViewConfig

DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
VIEW_KEYS = ViewConfig.SETTABLE  # the view keys params.yaml may set


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
    checkpoint, to the same result. pack: several sequences per row of max_len tokens, each
    attending within itself only (prh.batches.pack_group), so the encoder computes on about the
    real tokens instead of every view padded to the longest; passes then do not apply and
    pad_multiple rounds up the number of packed rows instead of the width. Loss and gradients
    equal the padded path's up to float rounding (tests/test_train.py)."""

    compile: Literal["none", "default", "reduce-overhead", "max-autotune-no-cudagraphs"] = "none"
    passes: Literal["auto", "one", "split"] = "auto"
    pad_multiple: int = 1
    checkpoint_every: int = 10
    pack: bool = False

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
        return dataclass_from_dict(cls, d, "train")  # validated by __post_init__

    def to_dict(self) -> dict[str, Any]:
        """Plain data as in params.yaml (tuples as lists), as this run's arm reads it
        (`arm_section`). The views' max_len and mask_id are left out: they come from `max_len`
        and the tokenizer (see `view_config`)."""
        d = json.loads(json.dumps(asdict(self)))
        d["views"] = {k: d["views"][k] for k in VIEW_KEYS}
        return arm_section(d, self.arm)

    def __post_init__(self) -> None:  # frozen: validated once, when it is made
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the key and the fix for any out-of-range value."""
        for name in ("layers", "heads", "intermediate", "hidden", "proj_dim", "proj_hidden"):
            if getattr(self.model, name) < 1:  # first: hidden % heads below needs heads >= 1
                raise ValueError(f"train.model.{name}={getattr(self.model, name)} must be >= 1")
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
            (0 <= self.model.dropout < 1, "model.dropout", "use a value in [0, 1)"),
        ]
        for ok, key, fix in checks:
            if not ok:
                raise ValueError(f"train.{key}={_get(self, key)!r} is out of range: {fix}")
        if self.model.hidden % self.model.heads:
            raise ValueError(f"train.model.hidden={self.model.hidden} is out of range: make it a "
                             f"multiple of model.heads={self.model.heads}")
        try:
            replace(self.views, max_len=self.max_len)
        except ValueError as e:
            raise ValueError(f"train.max_len={self.max_len}: the views cannot fit ({e}); raise "
                             "train.max_len (Flickr30k captions need about 64)") from e

    def n_views(self) -> int:
        """Views per photo (global + local)."""
        return self.views.n_global + self.views.n_local


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def resolved_lamb(cfg: TrainConfig, world_size: int) -> float:
    """The lamb a run uses: `cfg.lamb`, or with `cfg.sigreg_weight` > 0 the lamb that gives that
    effective SIGReg weight at this batch per GPU, view count and world size, so changing the
    batch or the GPU count keeps the regulariser's strength (prh.losses.effective_sigreg_weight)."""
    if cfg.sigreg_weight == 0:
        return cfg.lamb
    return lamb_for_effective_weight(cfg.sigreg_weight, cfg.batch_size, cfg.n_views(),
                                     world_size)


@dataclass(frozen=True)
class Resolved:
    """What a run's config implies at its world size, computed once (`resolve`) for the
    trainer, config.json, run.json and MLflow: the lamb the loss uses and the effective SIGReg
    weight (prh.losses.effective_sigreg_weight), both None for next-token, which has no SIGReg
    term."""

    world_size: int
    lamb: float | None
    effective_sigreg_weight: float | None


def resolve(cfg: TrainConfig, world_size: int) -> Resolved:
    """The derived values of `cfg` trained on `world_size` processes (`Resolved`)."""
    if cfg.arm == "ntp":
        return Resolved(world_size, None, None)
    lamb = resolved_lamb(cfg, world_size)
    return Resolved(world_size, lamb,
                    effective_sigreg_weight(lamb, cfg.batch_size, cfg.n_views(), world_size))


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
