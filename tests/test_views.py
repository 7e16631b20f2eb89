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
    check_fits,
    collate_ntp,
    collate_views,
    make_views,
)

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
