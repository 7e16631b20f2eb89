"""Training batches as arrays: every caption tokenised once, every step built by numpy.

A `CaptionBank` holds all captions of the training photos as one token matrix (built once per
run); a step draws its caption picks, crops and masks for the whole batch in a few array
operations (`prh.views.choose_captions`, `draw_views`, `pack_views`) instead of a Python loop
per view. The views follow the same distribution as `prh.views.make_views` (it is the same
code on one sample); only the order in which random numbers are drawn differs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from prh.data import Photo
from prh.views import (
    SpecialIds,
    ViewConfig,
    caption_matrix,
    choose_captions,
    draw_views,
    pack_views,
)

Group = tuple[Tensor, Tensor]  # (tokens, mask), both [rows, L] long


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
        """`ids` maps caption text -> token ids (prh.train.tokenize_captions)."""
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
    (rounded up to `pad_multiple`), view-major rows (view 0 of every photo, then view 1, ...);
    `split=False`: one group [V*B, L]."""
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
