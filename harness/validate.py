"""Every config of the profile built once, so a bad value in params.yaml fails before any stage
does work: `harness run` and the pipeline's first stage (world) call `validate_params`. Each
later stage builds only the configs it reads (harness.params.Params.config)."""

from __future__ import annotations

from prh.image import ImageConfig
from prh.train_config import TrainConfig
from prh.world import WorldConfig

from .params import Params, ParamsError


def validate_params(params: Params) -> None:
    """Build every config of the profile; ParamsError names the file, the key and the fix."""
    vocab = params.sections["data"].get("vocab_size")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 10:
        raise ParamsError(f"{params.path}: {params.profile}.data.vocab_size: expected an integer "
                          f">= 10, got {vocab!r}")
    if params.profile == "world":
        params.config(WorldConfig, "data", "world")
    params.config(ImageConfig, "image")
    for arm in params.arms:
        params.config(TrainConfig, "train", arm=arm, seed=params.seeds[0])
    params.eval_config()
    params.theory_config()
