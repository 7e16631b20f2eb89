"""The text multi-view transform, shared by the good and bad arms, and the batch collators.

The rerun article, "The line that separates good from bad": 8 views per sample, 2 global views
keeping 50-100% of the caption's tokens and 6 local views keeping 15-50%, each a random
contiguous span, then 15% of the view's tokens masked. Each view first draws one of the
captions it is given, at random with replacement (`choose_captions`: any of a photo's captions
for good views, one caption drawn per sample and shared by all its views for bad views), so
the crops and masking below are the same code for both arms and only what the views share
differs.

Assumed by us (the article gives no more detail): the kept share s ~ U(lo, hi) gives a span of
clamp(round(s n), 1, n) tokens; round(mask_ratio * span) distinct positions are masked; a
caption longer than max_len - 2 tokens is cut to its first max_len - 2 tokens ([CLS] and [SEP]
take the other two), as a BERT tokenizer with truncation does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

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

    # keys a user sets in params.yaml (max_len and mask_id come from the run and tokenizer)
    SETTABLE: ClassVar[tuple[str, ...]] = ("n_global", "n_local", "global_scale",
                                           "local_scale", "mask_ratio")
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


def caption_matrix(captions_token_ids: Sequence[Sequence[int]], cfg: ViewConfig,
                   pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Captions as one int64 matrix [C, T] (each cut to cfg.max_tokens, right-padded with
    `pad_id`; T = the longest cut caption) and their cut lengths [C]."""
    cut = [list(c[:cfg.max_tokens]) for c in captions_token_ids]
    lengths = np.fromiter((len(c) for c in cut), dtype=np.int64, count=len(cut))
    if lengths.size == 0 or lengths.min() < 1:
        raise ValueError("cannot cut a view from an empty caption")
    tokens = np.full((len(cut), int(lengths.max())), pad_id, dtype=np.int64)
    for i, c in enumerate(cut):
        tokens[i, :len(c)] = c
    return tokens, lengths


def choose_captions(first: np.ndarray, count: np.ndarray, n_views: int, good_views: bool,
                    rng: np.random.Generator) -> np.ndarray:
    """Caption rows [n_views, B] the views of B samples are cut from; sample b owns rows
    first[b] .. first[b] + count[b] - 1. Good views: every view draws its own caption uniformly
    with replacement; bad views: one caption is drawn per sample and every view reads it
    This is the one line that separates the good and bad arms (the rerun article, "The line
    that separates good from bad"), drawn for a whole batch at once."""
    first = np.asarray(first, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    if good_views:
        return first + rng.integers(0, count, size=(n_views, first.size))
    return np.broadcast_to(first + rng.integers(0, count), (n_views, first.size)).copy()


def draw_views(tokens: np.ndarray, lengths: np.ndarray, rows: np.ndarray, cfg: ViewConfig,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Crop and mask the views of a whole batch at once.

    tokens [C, T], lengths [C] from `caption_matrix`; rows [V, B] caption row of each view
    (V = cfg.n_views, global views first). Each view keeps a contiguous span of
    clamp(round(s n), 1, n) tokens, s ~ U(scale), starting uniformly at 0 .. n - span, then
    round(mask_ratio * span) distinct positions drawn uniformly among the span are set to
    cfg.mask_id. Returns the view tokens [V, B, T] (positions past a view's length hold
    whatever follows it in the caption matrix; `pack_views` pads them) and lengths [V, B].
    """
    n_views, batch = rows.shape
    if n_views != cfg.n_views:
        raise ValueError(f"rows has {n_views} views, the config {cfg.n_views}")
    width = tokens.shape[1]
    n = lengths[rows]  # [V, B]
    lo = np.array([cfg.global_scale[0]] * cfg.n_global + [cfg.local_scale[0]] * cfg.n_local)
    hi = np.array([cfg.global_scale[1]] * cfg.n_global + [cfg.local_scale[1]] * cfg.n_local)
    share = rng.uniform(lo[:, None], hi[:, None], size=(n_views, batch))
    span = np.clip(np.rint(share * n), 1, n).astype(np.int64)
    start = rng.integers(0, n - span + 1)
    pos = np.arange(width)
    src = np.minimum(start[..., None] + pos, width - 1)
    view = tokens[rows[..., None], src]  # [V, B, T]
    # A uniform subset of k positions of the span: the k smallest of iid uniform keys.
    keys = rng.random((n_views, batch, width))
    keys[pos >= span[..., None]] = 2.0  # past the span: never among the k smallest
    order = np.argsort(keys, axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.broadcast_to(pos, order.shape), axis=-1)
    k = np.rint(cfg.mask_ratio * span).astype(np.int64)
    view[ranks < k[..., None]] = cfg.mask_id
    return view, span


def padded_width(longest: int, multiple: int, limit: int) -> int:
    """`longest` rounded up to a multiple of `multiple`, at most `limit`: with a multiple > 1 a
    compiled encoder meets a few widths only (limit / multiple) instead of one per batch."""
    return min(-(-longest // multiple) * multiple, limit)


def pack_views(view: np.ndarray, span: np.ndarray, max_len: int, specials: SpecialIds,
               multiple: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """[CLS] view [SEP] padded: ids and attention (int64) [..., L], L = the longest view + 2
    rounded up to `multiple` (at most max_len; views are already cut to max_len - 2 tokens)."""
    longest = int(span.max()) + 2 if span.size else 2
    if longest > max_len:
        raise ValueError(f"a view of {longest - 2} tokens does not fit max_len={max_len}")
    width = padded_width(longest, multiple, max_len)
    pos = np.arange(width)
    ids = np.full((*span.shape, width), specials.pad_id, dtype=np.int64)
    body = min(width - 2, view.shape[-1])
    inside = pos[1:1 + body] <= span[..., None]
    ids[..., 1:1 + body] = np.where(inside, view[..., :body], specials.pad_id)
    ids[..., 0] = specials.cls_id
    np.put_along_axis(ids, (span + 1)[..., None], specials.sep_id, axis=-1)
    return ids, (pos < (span + 2)[..., None]).astype(np.int64)


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
