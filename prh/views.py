"""The text multi-view transform, shared by the good and bad arms, and the batch collators.

The rerun article, "The line that separates good from bad": 8 views per sample, 2 global views
keeping 50-100% of the caption's tokens and 6 local views keeping 15-50%, each a random
contiguous span, then 15% of the view's tokens masked. Each view first draws one of the
captions it is given, at random with replacement: `pick` gives all of a photo's captions for
good views and a single caption for bad views, so the crops and masking below are the same
code for both arms and only what the views share differs.

Assumed by us (the article gives no more detail): the kept share s ~ U(lo, hi) gives a span of
clamp(round(s n), 1, n) tokens; round(mask_ratio * span) distinct positions are masked; a
caption longer than max_len - 2 tokens is cut to its first max_len - 2 tokens ([CLS] and [SEP]
take the other two), as a BERT tokenizer with truncation does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from prh.io import ContractError


class SpecialIds(Protocol):
    """What the collators need from a tokenizer (prh.tokenizer.Tokenizer provides it)."""

    pad_id: int
    cls_id: int
    sep_id: int


class ViewError(ContractError):
    """A view configuration does not fit the captions it is applied to."""


def _check_scale(name: str, scale: tuple[float, float]) -> None:
    lo, hi = scale
    if not 0 < lo <= hi <= 1:
        raise ValueError(f"ViewConfig.{name}={scale}: need 0 < low <= high <= 1 (shares of "
                         "the caption's tokens)")


@dataclass(frozen=True)
class ViewConfig:
    """Views per sample and their sizes (defaults: the rerun article, "The line that separates
    good from bad"); `max_len` counts [CLS] and [SEP]; `mask_id` is the tokenizer's [MASK] id
    (prh.tokenizer puts it at 4)."""

    n_global: int = 2
    n_local: int = 6
    global_scale: tuple[float, float] = (0.5, 1.0)
    local_scale: tuple[float, float] = (0.15, 0.5)
    mask_ratio: float = 0.15
    max_len: int = 64
    mask_id: int = 4

    def __post_init__(self) -> None:
        if self.n_global < 1 or self.n_local < 0:
            raise ValueError(f"ViewConfig: need n_global >= 1 and n_local >= 0, got "
                             f"{self.n_global} and {self.n_local}")
        _check_scale("global_scale", self.global_scale)
        _check_scale("local_scale", self.local_scale)
        if not 0 <= self.mask_ratio < 1:
            raise ValueError(f"ViewConfig.mask_ratio={self.mask_ratio}: need 0 <= ratio < 1")
        if self.max_len < 3:
            raise ValueError(f"ViewConfig.max_len={self.max_len}: a view needs [CLS], at least "
                             "one token and [SEP]")

    @property
    def n_views(self) -> int:
        return self.n_global + self.n_local

    @property
    def max_tokens(self) -> int:
        """Caption tokens a view can hold (max_len minus [CLS] and [SEP])."""
        return self.max_len - 2


def check_fits(cfg: ViewConfig, lengths: Sequence[int], where: str,
               max_truncated: float = 0.01) -> None:
    """Raise ViewError when more than `max_truncated` of the captions (token counts `lengths`)
    are longer than cfg.max_tokens, or when a caption is empty, naming the first offender."""
    arr = np.asarray(lengths)
    if arr.size and arr.min() < 1:
        i = int(np.argmin(arr))
        raise ViewError(f"{where}: caption {i} has no tokens; views need at least one")
    too_long = np.flatnonzero(arr > cfg.max_tokens)
    if arr.size and too_long.size / arr.size > max_truncated:
        i = int(too_long[0])
        raise ViewError(f"{where}: {too_long.size} of {arr.size} captions exceed max_len - 2 = "
                        f"{cfg.max_tokens} tokens (first: caption {i}, {int(arr[i])} tokens, "
                        f"longest {int(arr.max())}); raise train.max_len")


def crop_and_mask(tokens: Sequence[int], scale: tuple[float, float], cfg: ViewConfig,
                  rng: np.random.Generator) -> list[int]:
    """One view: a random contiguous span keeping a U(scale) share, then masking."""
    tokens = list(tokens[:cfg.max_tokens])
    n = len(tokens)
    if n == 0:
        raise ValueError("cannot cut a view from an empty caption")
    length = min(n, max(1, round(rng.uniform(*scale) * n)))
    start = int(rng.integers(n - length + 1))
    view = tokens[start:start + length]
    for i in rng.choice(length, size=round(cfg.mask_ratio * length), replace=False):
        view[i] = cfg.mask_id
    return view


def make_views(captions_token_ids: list[list[int]], cfg: ViewConfig,
               rng: np.random.Generator) -> list[list[int]]:
    """cfg.n_views views of one sample, global views first.

    Each view draws its caption uniformly with replacement from `captions_token_ids` (all of
    a photo's captions for good views, one caption for bad views), then is cropped and masked.
    """
    if not captions_token_ids:
        raise ValueError("make_views needs at least one caption")
    scales = [cfg.global_scale] * cfg.n_global + [cfg.local_scale] * cfg.n_local
    views = []
    for scale in scales:
        caption = captions_token_ids[int(rng.integers(len(captions_token_ids)))]
        views.append(crop_and_mask(caption, scale, cfg, rng))
    return views


def _pack(token_lists: Sequence[Sequence[int]], max_len: int,
          specials: SpecialIds) -> tuple[Tensor, Tensor]:
    """[CLS] tokens [SEP], cut to max_len and padded to it: ids and attention mask [B, max_len]."""
    ids = torch.full((len(token_lists), max_len), specials.pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    for b, tokens in enumerate(token_lists):
        row = [specials.cls_id, *tokens[:max_len - 2], specials.sep_id]
        ids[b, :len(row)] = torch.tensor(row, dtype=torch.long)
        attention[b, :len(row)] = 1
    return ids, attention


def collate_views(samples: Sequence[Sequence[Sequence[int]]], cfg: ViewConfig,
                  specials: SpecialIds) -> tuple[Tensor, Tensor]:
    """Batch B samples of V views each into ids and attention mask, both LongTensor [V, B, L]
    with L = cfg.max_len (fixed, so every step has the same shapes)."""
    if any(len(views) != cfg.n_views for views in samples):
        raise ValueError(f"every sample needs {cfg.n_views} views")
    packed = [_pack([views[v] for views in samples], cfg.max_len, specials)
              for v in range(cfg.n_views)]
    return torch.stack([p[0] for p in packed]), torch.stack([p[1] for p in packed])


def collate_ntp(token_lists: Sequence[Sequence[int]], max_len: int,
                specials: SpecialIds) -> tuple[Tensor, Tensor]:
    """Whole captions for next-token prediction (no views; the rerun article, "Next-token
    prediction in two lines"): ids and attention mask, LongTensor [B, max_len]."""
    if max_len < 3:
        raise ValueError(f"max_len={max_len}: need [CLS], one token and [SEP]")
    return _pack(token_lists, max_len, specials)
