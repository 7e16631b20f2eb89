"""Test-only helpers for prh.train: a one-process CPU run, and the batch of a list of photos
built the way the training loop builds it from its per-run caption bank."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from prh.batches import CaptionBank, Group, jepa_groups, ntp_groups
from prh.data import Photo
from prh.distributed import Process
from prh.tokenizer import Tokenizer
from prh.train_config import TrainConfig, view_config
from prh.views import ViewConfig

CPU = Process(rank=0, world=1, device=torch.device("cpu"), owns_group=False)


def jepa_batch(photos: Sequence[Photo], cfg: TrainConfig, views: ViewConfig,
               tokenizer: Tokenizer, ids: dict[str, list[int]], rng: np.random.Generator,
               split: bool = True) -> list[Group]:
    """The V views of `photos` (prh.batches.jepa_groups on a bank of just these photos):
    good: every view draws its own caption of the photo (with replacement); bad: one caption
    is drawn per photo and every view is cut from it (the rerun article, 'The line that
    separates good from bad')."""
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
