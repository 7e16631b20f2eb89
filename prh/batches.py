"""Training batches as arrays: every caption tokenised once, every step built by numpy.

Every distinct caption is tokenised once per run (`tokenize_captions`); a `CaptionBank` holds
all captions of the training photos as one token matrix (built once per run); a step draws its
caption picks, crops and masks for the whole batch in a few array operations
(`prh.views.choose_captions`, `draw_views`, `pack_views`) instead of a Python loop per view.
`step_groups` is the batch of one training step as the loop builds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from prh.data import Photo
from prh.tokenizer import Tokenizer
from prh.train_config import TrainConfig
from prh.views import (
    SpecialIds,
    ViewConfig,
    caption_matrix,
    choose_captions,
    draw_views,
    pack_views,
    padded_width,
)

Group = tuple[Tensor, Tensor]  # (tokens, mask), both [rows, L] long


def tokenize_captions(photos: Sequence[Photo], tokenizer: Tokenizer) -> dict[str, list[int]]:
    """caption -> token ids (no specials), each distinct caption encoded once per run."""
    texts = sorted({c for p in photos for c in p.captions})
    return dict(zip(texts, tokenizer.encode_batch(texts), strict=True))


@dataclass(frozen=True)
class CaptionBank:
    """Captions of `photos` in photo order: tokens [C, T] (cut to max_len - 2), lengths [C];
    photo p owns caption rows first[p] .. first[p] + count[p] - 1."""

    tokens: np.ndarray
    lengths: np.ndarray
    first: np.ndarray
    count: np.ndarray

    @classmethod
    def build(cls, photos: Sequence[Photo], ids: Mapping[str, Sequence[int]],
              views: ViewConfig, pad_id: int) -> CaptionBank:
        """`ids` maps caption text -> token ids (`tokenize_captions`)."""
        count = np.array([len(p.captions) for p in photos], dtype=np.int64)
        if count.size == 0 or count.min() < 1:
            raise ValueError("every photo needs at least one caption")
        first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
        tokens, lengths = caption_matrix([ids[c] for p in photos for c in p.captions], views,
                                         pad_id)
        return cls(tokens, lengths, first, count)


def _group(ids: np.ndarray, attention: np.ndarray) -> Group:
    """Flatten [..., L] to rows [N, L] (`pack_views` has already set the width)."""
    width = ids.shape[-1]
    return (torch.from_numpy(np.ascontiguousarray(ids.reshape(-1, width))),
            torch.from_numpy(np.ascontiguousarray(attention.reshape(-1, width))))


def jepa_groups(bank: CaptionBank, photo_rows: np.ndarray, good_views: bool, views: ViewConfig,
                specials: SpecialIds, rng: np.random.Generator, split: bool = True,
                pad_multiple: int = 1) -> list[Group]:
    """The V views of the photos `photo_rows` (indices into the bank's photos): a global group
    [n_global*B, Lg] and a local one [n_local*B, Ll], each padded to its own longest view
    (rounded up to `pad_multiple`), view-major rows (view 0 of every photo, then view 1, ...),
    as stable-pretraining's LeJEPA runs global and local views through the backbone in separate
    passes (stable_pretraining/methods/lejepa.py); `split=False`: one group [V*B, L]. Padding is
    masked, so both give the same loss up to float rounding."""
    rows = choose_captions(bank.first[photo_rows], bank.count[photo_rows], views.n_views,
                           good_views, rng)
    view, span = draw_views(bank.tokens, bank.lengths, rows, views, rng)
    cuts = [(0, views.n_global), (views.n_global, views.n_views)] if split else [
        (0, views.n_views)]
    return [_group(*pack_views(view[a:b], span[a:b], views.max_len, specials, pad_multiple))
            for a, b in cuts if b > a]


def ntp_groups(bank: CaptionBank, photo_rows: np.ndarray, max_len: int, specials: SpecialIds,
               rng: np.random.Generator, pad_multiple: int = 1) -> list[Group]:
    """One whole caption per photo, drawn uniformly: one group [B, L] (L rounded up to
    `pad_multiple`)."""
    first, count = bank.first[photo_rows], bank.count[photo_rows]
    rows = first + rng.integers(0, count)
    tokens, span = bank.tokens[rows], np.minimum(bank.lengths[rows], max_len - 2)
    return [_group(*pack_views(tokens, span, max_len, specials, pad_multiple))]


def step_groups(bank: CaptionBank, rows: np.ndarray, cfg: TrainConfig, views: ViewConfig,
                tokenizer: Tokenizer, rng: np.random.Generator, device: torch.device
                ) -> list[Group]:
    """The batch of training step for the photos `rows` of `bank`, as the loop builds it: a
    whole caption per photo for NTP, else the views, with `cfg.speed`'s passes and padding."""
    if cfg.arm == "ntp":
        return ntp_groups(bank, rows, cfg.max_len, tokenizer, rng, cfg.speed.pad_multiple)
    return jepa_groups(bank, rows, cfg.arm == "good", views, tokenizer, rng,
                       cfg.speed.split(device), cfg.speed.pad_multiple)


def trim(tokens: Tensor, mask: Tensor, multiple: int = 1) -> tuple[Tensor, Tensor]:
    """Cut the columns that are padding in every row: [..., L] -> [..., W], W the longest real
    length rounded up to `multiple` (at most L)."""
    width = padded_width(int(mask.sum(-1).max()), multiple, mask.size(-1))
    return tokens[..., :width], mask[..., :width]
