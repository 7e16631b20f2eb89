"""prh.views: crop sizes, masking rate, where good and bad views come from, collators."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from prh.views import (
    ViewConfig,
    ViewError,
    caption_matrix,
    check_fits,
    choose_captions,
    collate_ntp,
    collate_views,
    draw_views,
    pack_views,
)


def make_views(captions_token_ids: list[list[int]], cfg: ViewConfig,
               rng: np.random.Generator) -> list[list[int]]:
    """cfg.n_views views of one sample, global views first: the training batch's code
    (`choose_captions` with good views over the captions given, then `draw_views`) on one
    sample, so the tests below can look at single views."""
    if not captions_token_ids:
        raise ValueError("make_views needs at least one caption")
    tokens, lengths = caption_matrix(captions_token_ids, cfg)
    rows = choose_captions(np.zeros(1, np.int64), np.array([len(tokens)]), cfg.n_views, True,
                           rng)
    view, span = draw_views(tokens, lengths, rows, cfg, rng)
    return [view[v, 0, :span[v, 0]].tolist() for v in range(cfg.n_views)]

MASK = 4
SPECIALS = SimpleNamespace(pad_id=0, cls_id=2, sep_id=3)
CFG = ViewConfig(max_len=66)


def caption(photo_caption: int, length: int) -> list[int]:
    """Tokens unique to one caption: 1000 * (index + 1) + position."""
    return [1000 * (photo_caption + 1) + i for i in range(length)]


def source_of(view: list[int], captions: list[list[int]]) -> int | None:
    """Index of a caption that `view` is a contiguous span of ([MASK] matches anything)."""
    for c, cap in enumerate(captions):
        for start in range(len(cap) - len(view) + 1):
            if all(v == MASK or v == cap[start + i] for i, v in enumerate(view)):
                return c
    return None


def span_bounds(n: int, scale: tuple[float, float]) -> tuple[int, int]:
    return max(1, round(scale[0] * n)), min(n, max(1, round(scale[1] * n)))


lengths = st.integers(1, 64)


@settings(max_examples=60, deadline=None)
@given(st.lists(lengths, min_size=1, max_size=5), st.integers(0, 2**32 - 1))
def test_good_views_come_from_the_photos_captions_with_the_right_sizes(lens, seed):
    captions = [caption(c, n) for c, n in enumerate(lens)]
    views = make_views(captions, CFG, np.random.default_rng(seed))
    assert len(views) == 8
    for v, view in enumerate(views):
        src = source_of(view, captions)
        assert src is not None                      # a span of one of this photo's captions
        lo, hi = span_bounds(lens[src], CFG.global_scale if v < 2 else CFG.local_scale)
        assert lo <= len(view) <= hi
        assert sum(t == MASK for t in view) == round(0.15 * len(view))


@settings(max_examples=60, deadline=None)
@given(lengths, st.integers(0, 2**32 - 1))
def test_bad_views_all_cut_the_single_caption(n, seed):
    only = caption(3, n)
    views = make_views([only], CFG, np.random.default_rng(seed))
    for v, view in enumerate(views):
        assert source_of(view, [only]) == 0
        lo, hi = span_bounds(n, CFG.global_scale if v < 2 else CFG.local_scale)
        assert lo <= len(view) <= hi


def test_about_15_percent_of_tokens_are_masked():
    rng = np.random.default_rng(0)
    views = [v for _ in range(300) for v in make_views([caption(0, 40)], CFG, rng)]
    share = sum(t == MASK for v in views for t in v) / sum(len(v) for v in views)
    assert share == pytest.approx(0.15, abs=0.01)


def test_good_views_draw_captions_with_replacement():
    captions = [caption(c, 20) for c in range(5)]
    rng = np.random.default_rng(1)
    sources = [[source_of(v, captions) for v in make_views(captions, CFG, rng)]
               for _ in range(200)]
    flat = [s for sample in sources for s in sample]
    counts = np.bincount(flat, minlength=5) / len(flat)
    np.testing.assert_allclose(counts, 0.2, atol=0.03)
    assert any(len(set(sample)) < 8 for sample in sources)     # repeats happen


def test_same_seed_same_views_and_long_captions_are_cut():
    cfg = ViewConfig(max_len=12)
    long = caption(0, 50)
    a = make_views([long], cfg, np.random.default_rng(5))
    assert a == make_views([long], cfg, np.random.default_rng(5))
    assert all(source_of(v, [long[:10]]) == 0 for v in a)


@pytest.mark.parametrize("kwargs, message", [
    ({"max_len": 2}, "max_len"),
    ({"global_scale": (0.5, 1.2)}, "global_scale"),
    ({"local_scale": (0.0, 0.5)}, "local_scale"),
    ({"local_scale": (0.6, 0.5)}, "local_scale"),
    ({"mask_ratio": 1.0}, "mask_ratio"),
    ({"n_global": 0}, "n_global"),
])
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ViewConfig(**kwargs)


def test_check_fits_names_the_offending_caption():
    cfg = ViewConfig(max_len=10)
    check_fits(cfg, [8] * 200 + [9], "flickr train")            # 1 of 201 is within 1%
    with pytest.raises(ViewError, match=r"flickr train: 2 of 3 captions.*caption 1, 12 tokens"):
        check_fits(cfg, [4, 12, 30], "flickr train")
    with pytest.raises(ViewError, match="caption 1 has no tokens"):
        check_fits(cfg, [4, 0], "world")


def test_collate_views_layout():
    cfg = ViewConfig(n_global=1, n_local=1, max_len=6)
    samples = [[[11, 12], [13]], [[21, 22, 23, 24, 25], [26, 27, 28]]]
    ids, attention = collate_views(samples, cfg, SPECIALS)
    assert ids.dtype == attention.dtype == torch.long and ids.shape == (2, 2, 6)
    assert ids[0].tolist() == [[2, 11, 12, 3, 0, 0], [2, 21, 22, 23, 24, 3]]
    assert ids[1].tolist() == [[2, 13, 3, 0, 0, 0], [2, 26, 27, 28, 3, 0]]
    assert attention[1].tolist() == [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]]
    assert torch.equal(attention.bool(), ids != 0)
    with pytest.raises(ValueError, match="2 views"):
        collate_views([[[1]]], cfg, SPECIALS)


def test_collate_ntp_keeps_the_whole_caption():
    ids, attention = collate_ntp([[7, 8, 9], [5]], 6, SPECIALS)
    assert ids.tolist() == [[2, 7, 8, 9, 3, 0], [2, 5, 3, 0, 0, 0]]
    assert attention.sum(1).tolist() == [5, 3]


# ---------------------------------------------------------------- whole batches (training path)


def batch_views(photo_captions: list[list[list[int]]], good: bool, seed: int, cfg=CFG):
    """prh.batches' path: one caption matrix, picks/crops/masks drawn for the whole batch."""
    flat = [c for caps in photo_captions for c in caps]
    tokens, lens = caption_matrix(flat, cfg)
    count = np.array([len(caps) for caps in photo_captions])
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    rng = np.random.default_rng(seed)
    rows = choose_captions(first, count, cfg.n_views, good, rng)
    view, span = draw_views(tokens, lens, rows, cfg, rng)
    return [[view[v, b, :span[v, b]].tolist() for v in range(cfg.n_views)]
            for b in range(len(photo_captions))], view, span


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(lengths, min_size=1, max_size=5), min_size=1, max_size=6),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_batch_views_come_from_their_own_photo_with_the_right_sizes(lens, good, seed):
    photo_captions = [[caption(10 * p + c, n) for c, n in enumerate(ls)]
                      for p, ls in enumerate(lens)]
    samples, _, _ = batch_views(photo_captions, good, seed)
    for p, views in enumerate(samples):
        sources = []
        for v, view in enumerate(views):
            src = source_of(view, photo_captions[p])
            assert src is not None                   # a span of one of this photo's captions
            lo, hi = span_bounds(lens[p][src], CFG.global_scale if v < 2 else CFG.local_scale)
            assert lo <= len(view) <= hi
            assert sum(t == MASK for t in view) == round(0.15 * len(view))
            sources.append(src)
        if not good:
            assert len(set(sources)) == 1            # bad views: every view reads one caption


def test_batch_views_statistics():
    """Shares within 50-100% / 15-50% and roughly uniform over them, ~15% masked, good views
    draw each caption with probability 1/5 (with replacement), bad views one per photo."""
    cfg = CFG
    photo_captions = [[caption(c, 40) for c in range(5)] for _ in range(400)]
    samples, view, span = batch_views(photo_captions, True, 0, cfg)
    share = span / 40
    assert 0.5 <= share[:2].min() and share[:2].max() <= 1.0
    assert 0.15 <= share[2:].min() and share[2:].max() <= 0.5
    assert share[:2].mean() == pytest.approx(0.75, abs=0.02)
    assert share[2:].mean() == pytest.approx(0.325, abs=0.01)
    masked = sum(t == MASK for s in samples for v in s for t in v)
    assert masked / span.sum() == pytest.approx(0.15, abs=0.01)
    sources = np.array([[source_of(v, photo_captions[0]) for v in s] for s in samples[:200]])
    np.testing.assert_allclose(np.bincount(sources.ravel(), minlength=5) / sources.size, 0.2,
                               atol=0.03)
    assert any(len(set(row)) < 8 for row in sources)          # repeats happen
    bad, _, _ = batch_views(photo_captions[:200], False, 1, cfg)
    picks = np.array([source_of(s[0], photo_captions[0]) for s in bad])
    np.testing.assert_allclose(np.bincount(picks, minlength=5) / picks.size, 0.2, atol=0.08)
    # Mask positions are uniform over the span: each position of a full-length view is
    # masked ~15% of the time.
    short = [[caption(0, 20)]] * 3000
    full = [v for s in batch_views(short, True, 2, cfg)[0] for v in s[:2] if len(v) == 20]
    assert len(full) > 150
    per_pos = np.mean([[t == MASK for t in v] for v in full], axis=0)
    assert per_pos.min() > 0.05 and per_pos.max() < 0.3


def test_batch_views_are_deterministic_and_cut_long_captions():
    cfg = ViewConfig(max_len=12)
    photos = [[caption(0, 50), caption(1, 7)], [caption(2, 3)]]
    a, view_a, _ = batch_views(photos, True, 5, cfg)
    b, view_b, _ = batch_views(photos, True, 5, cfg)
    assert a == b and np.array_equal(view_a, view_b)
    assert all(source_of(v, [photos[0][0][:10], photos[0][1]]) is not None for v in a[0])


def test_pack_views_layout_matches_collate_views():
    cfg = ViewConfig(n_global=1, n_local=1, max_len=6)
    samples = [[[11, 12], [13]], [[21, 22, 23, 24, 25], [26, 27, 28]]]
    ids, attention = collate_views(samples, cfg, SPECIALS)
    view = np.full((2, 2, 6), 99, dtype=np.int64)          # 99 past a span: dropped
    span = np.zeros((2, 2), dtype=np.int64)
    for b, views in enumerate(samples):
        for v, toks in enumerate(views):
            view[v, b, :len(toks)] = toks
            span[v, b] = min(len(toks), cfg.max_tokens)      # views come cut to max_len - 2
    got_ids, got_att = pack_views(view, span, cfg.max_len, SPECIALS)
    width = got_ids.shape[-1]
    assert width == 7 - 1                                   # longest view (4) + 2
    assert np.array_equal(got_ids, ids.numpy()[..., :width])
    assert np.array_equal(got_att, attention.numpy()[..., :width])
