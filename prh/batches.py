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

Group = tuple[Tensor, ...]  # (tokens, mask), both [rows, L] long; packed: + `pack_group`'s four


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
        return cls.from_token_lists([[ids[c] for c in p.captions] for p in photos], views,
                                    pad_id)

    @classmethod
    def from_token_lists(cls, captions: Sequence[Sequence[Sequence[int]]], views: ViewConfig,
                         pad_id: int) -> CaptionBank:
        """Per photo, its captions' token ids (a web-text sample's texts: prh.stream)."""
        count = np.array([len(c) for c in captions], dtype=np.int64)
        if count.size == 0 or count.min() < 1:
            raise ValueError("every photo needs at least one caption")
        first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
        tokens, lengths = caption_matrix([c for cs in captions for c in cs], views, pad_id)
        return cls(tokens, lengths, first, count)


def _group(ids: np.ndarray, attention: np.ndarray) -> Group:
    """Flatten [..., L] to rows [N, L] (`pack_views` has already set the width)."""
    width = ids.shape[-1]
    return (torch.from_numpy(np.ascontiguousarray(ids.reshape(-1, width))),
            torch.from_numpy(np.ascontiguousarray(attention.reshape(-1, width))))


def jepa_groups(bank: CaptionBank, photo_rows: np.ndarray, good_views: bool, views: ViewConfig,
                specials: SpecialIds, rng: np.random.Generator, split: bool = True,
                pad_multiple: int = 1, keep: np.ndarray | None = None) -> list[Group]:
    """The V views of the photos `photo_rows` (indices into the bank's photos): a global group
    [n_global*B, Lg] and a local one [n_local*B, Ll], each padded to its own longest view
    (rounded up to `pad_multiple`), view-major rows (view 0 of every photo, then view 1, ...),
    as stable-pretraining's LeJEPA runs global and local views through the backbone in separate
    passes (stable_pretraining/methods/lejepa.py); `split=False`: one group [V*B, L]. Padding is
    masked, so both give the same loss up to float rounding."""
    rows = choose_captions(bank.first[photo_rows], bank.count[photo_rows], views.n_views,
                           good_views, rng)
    view, span = draw_views(bank.tokens, bank.lengths, rows, views, rng)
    if keep is not None:  # every photo's views drawn, these photos' kept
        view, span = view[:, keep], span[:, keep]
    cuts = [(0, views.n_global), (views.n_global, views.n_views)] if split else [
        (0, views.n_views)]
    return [_group(*pack_views(view[a:b], span[a:b], views.max_len, specials, pad_multiple))
            for a, b in cuts if b > a]


def ntp_groups(bank: CaptionBank, photo_rows: np.ndarray, max_len: int, specials: SpecialIds,
               rng: np.random.Generator, pad_multiple: int = 1,
               keep: np.ndarray | None = None) -> list[Group]:
    """One whole caption per photo, drawn uniformly: one group [B, L] (L rounded up to
    `pad_multiple`)."""
    first, count = bank.first[photo_rows], bank.count[photo_rows]
    rows = first + rng.integers(0, count)
    rows = rows if keep is None else rows[keep]
    tokens, span = bank.tokens[rows], np.minimum(bank.lengths[rows], max_len - 2)
    return [_group(*pack_views(tokens, span, max_len, specials, pad_multiple))]


def step_groups(bank: CaptionBank, rows: np.ndarray, cfg: TrainConfig, views: ViewConfig,
                tokenizer: Tokenizer, rng: np.random.Generator, device: torch.device,
                keep: np.ndarray | None = None) -> list[Group]:
    """The batch of training step for the photos `rows` of `bank`, as the loop builds it: a
    whole caption per photo for NTP, else the views, with `cfg.speed`'s passes and padding, or
    with `cfg.speed.pack` every sequence of the step packed into rows of max_len tokens (one
    pass; the random draws are the same, so the batch is the same). `keep` (indices into
    `rows`): the draws are made for every photo of `rows`, the groups hold these photos' only,
    so a rank's share of a global batch is what one process drawing it whole would give it."""
    if cfg.speed.pack:
        groups = (ntp_groups(bank, rows, cfg.max_len, tokenizer, rng, keep=keep)
                  if cfg.arm == "ntp" else
                  jepa_groups(bank, rows, cfg.arm == "good", views, tokenizer, rng, split=False,
                              keep=keep))
        return [pack_group(g, cfg.max_len, cfg.speed.pad_multiple) for g in groups]
    if cfg.arm == "ntp":
        return ntp_groups(bank, rows, cfg.max_len, tokenizer, rng, cfg.speed.pad_multiple, keep)
    return jepa_groups(bank, rows, cfg.arm == "good", views, tokenizer, rng,
                       cfg.speed.split(device), cfg.speed.pad_multiple, keep)


def trim(tokens: Tensor, mask: Tensor, multiple: int = 1) -> tuple[Tensor, Tensor]:
    """Cut the columns that are padding in every row: [..., L] -> [..., W], W the longest real
    length rounded up to `multiple` (at most L)."""
    width = padded_width(int(mask.sum(-1).max()), multiple, mask.size(-1))
    return tokens[..., :width], mask[..., :width]


def pack_rows(lengths: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """First-fit decreasing: place sequences of `lengths` (each <= width) into rows of `width`
    tokens. Returns (row, start) per sequence; rows are numbered 0..R-1 with no gaps."""
    order = np.argsort(-lengths, kind="stable")
    free = np.empty(0, dtype=np.int64)                 # tokens left in each open row
    row = np.empty(len(lengths), dtype=np.int64)
    start = np.empty(len(lengths), dtype=np.int64)
    for i in order:
        fits = np.flatnonzero(free >= lengths[i])
        r = int(fits[0]) if fits.size else len(free)
        if r == len(free):
            free = np.append(free, width)
        row[i], start[i] = r, width - free[r]
        free[r] -= lengths[i]
    return row, start


def pack_group(group: Group, width: int, row_multiple: int = 1) -> Group:
    """One padded group (tokens, mask [N, L]) plus its packed form: several sequences per row
    of `width` tokens, so the encoder computes on (almost) only real tokens.

    Returns (tokens, mask, packed [R, W], positions [R, W] (restarting at 0 in each sequence),
    segments [R, W] (the sequence a token belongs to; a row's tail of padding is a segment of
    its own, so no query row is empty), index [N, L] (where token j of sequence n sits in the
    flattened [R * W] rows; -1 on padding)). R is rounded up to `row_multiple` with rows of
    padding, so a compiled encoder meets a few shapes. prh.models.TextEncoder attends within
    segments only (block-diagonal, causal inside a segment for NTP) and gathers its output
    back to [N, L], so pooling and losses read the same layout as the padded path."""
    tokens, mask = group
    lengths = mask.sum(-1).numpy()
    row, start = pack_rows(lengths, width)
    n, length = mask.shape
    rows = -(-(int(row.max()) + 1 if n else 0) // row_multiple) * row_multiple
    col = np.arange(length)
    real = col[None, :] < lengths[:, None]                                   # [N, L]
    flat = (row * width + start)[:, None] + col[None, :]                      # [N, L]
    index = np.where(real, flat, -1)
    packed = np.zeros(rows * width, dtype=np.int64)
    positions = np.zeros(rows * width, dtype=np.int64)
    segments = n + np.repeat(np.arange(rows), width)                         # tails: own ids
    packed[flat[real]] = tokens.numpy()[real]
    positions[flat[real]] = np.broadcast_to(col, (n, length))[real]
    segments[flat[real]] = np.repeat(np.arange(n), lengths)
    shape = (rows, width)
    return (tokens, mask, torch.from_numpy(packed.reshape(shape)),
            torch.from_numpy(positions.reshape(shape)), torch.from_numpy(segments.reshape(shape)),
            torch.from_numpy(index))
