"""prh.align: Procrustes directions, fit/test separation, controls, the CLI and its errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import orthogonal_procrustes

from prh import align, io


def paired(n: int, dx: int = 48, dy: int = 24, noise: float = 0.1, seed: int = 0):
    """Images x [n, dx] and texts y = (x - m) W0 + noise [n, dy], W0 orthonormal columns."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dx)) * np.linspace(2.0, 0.5, dx) + 1.0
    w0 = align.random_orthonormal_map(dx, dy, seed=seed + 1)
    y = (x - 1.0) @ w0 + noise * rng.standard_normal((n, dy)) + 3.0
    return x, y


def test_small_to_large_direction_equals_scipy_on_zero_padded_inputs():
    x, y = paired(200, dx=64, dy=16)
    xc, yc = x - x.mean(0), y - y.mean(0)
    r_scipy, _ = orthogonal_procrustes(np.pad(yc, ((0, 0), (0, 48))), xc)
    w = align.fit_procrustes(x, y).w  # [dx, dy]
    np.testing.assert_allclose(w.T, r_scipy[:16], atol=1e-12)
    np.testing.assert_allclose(w.T @ w, np.eye(16), atol=1e-12)


def test_paper_widths_give_a_768_by_384_map_with_orthonormal_columns():
    x, y = paired(100, dx=768, dy=384, seed=3)
    w = align.fit_procrustes(x, y).w
    assert w.shape == (768, 384)
    np.testing.assert_allclose(w.T @ w, np.eye(384), atol=1e-12)


def test_large_to_small_is_only_the_max_trace_solution():
    """W maximises tr(W^T X^T Y) but a projected-gradient step lowers ||X W - Y||_F."""
    x, y = paired(300, dx=12, dy=4, noise=1.0, seed=5)
    xc, yc = x - x.mean(0), y - y.mean(0)
    w = align.fit_procrustes(x, y).w
    for seed in range(20):
        other = align.random_orthonormal_map(12, 4, seed)
        assert np.trace(w.T @ xc.T @ yc) >= np.trace(other.T @ xc.T @ yc)
    grad = xc.T @ (xc @ w - yc)
    q, r = np.linalg.qr(w - 1e-4 * grad)  # retraction onto orthonormal columns
    stepped = q * np.sign(np.diag(r))
    assert np.linalg.norm(xc @ stepped - yc) < np.linalg.norm(xc @ w - yc) - 1e-6


def test_fitting_never_touches_test_rows(monkeypatch):
    x, y = paired(300)
    fitted = []  # (image rows the fit saw, the map it returned)
    real = align.fit_procrustes

    def spy(img, txt):
        fitted.append((np.array(img), real(img, txt)))
        return fitted[-1][1]

    monkeypatch.setattr(align, "fit_procrustes", spy)
    first = align.score_alignment(x[:200], y[:200], x[200:], y[200:], fit_sizes=[50])
    maps_first = [m for _, m in fitted]
    fitted.clear()
    x2, y2 = x.copy(), y.copy()
    x2[200:] = np.random.default_rng(9).standard_normal((100, 48))
    second = align.score_alignment(x2[:200], y2[:200], x2[200:], y2[200:], fit_sizes=[50])
    for a, b in zip(maps_first, [m for _, m in fitted], strict=True):
        assert np.array_equal(a.w, b.w) and np.array_equal(a.mean_img, b.mean_img)
        assert np.array_equal(a.mean_txt, b.mean_txt)
    test_rows = {r.tobytes() for r in x[200:]} | {r.tobytes() for r in x2[200:]}
    assert not any(r.tobytes() in test_rows for rows, _ in fitted for r in rows)
    assert first.metrics["r_at_1_fit"] == second.metrics["r_at_1_fit"]


def test_scores_controls_and_curve_on_aligned_data():
    x, y = paired(400, noise=0.3)
    res = align.score_alignment(x[:300], y[:300], x[300:], y[300:], k=10, seed=0,
                                fit_sizes=[30, 100, 300])
    m = res.metrics
    assert set(m) == {"r_at_1", "r_at_5", "mknn10", "r_at_1_fit", "control_random_map_r_at_1",
                      "control_shuffled_r_at_1", "chance_r_at_1", "chance_mknn10",
                      "cka_linear", "cka_linear_unbiased"}
    assert m["r_at_1"] > 0.9 and m["r_at_5"] >= m["r_at_1"]
    assert m["control_random_map_r_at_1"] < 0.1 and m["control_shuffled_r_at_1"] < 0.1
    assert m["chance_r_at_1"] == 0.01 and m["chance_mknn10"] == pytest.approx(10 / 99)
    assert m["r_at_1"] == res.per_query["r_at_1_hit"].mean()
    assert m["mknn10"] == res.per_query["mknn10"].mean()
    assert [p["n_fit"] for p in res.fit_size_curve] == [30, 100, 300]
    assert res.fit_size_curve[0]["r_at_1"] < res.fit_size_curve[-1]["r_at_1"] == m["r_at_1"]
    reverse = align.fit_size_curve(x[:300], y[:300], x[300:], y[300:], [300, 100, 30], seed=0)
    assert reverse == res.fit_size_curve[::-1]  # nested subsets: order does not matter
    assert align.fit_and_recall(x[:300], y[:300], x[300:], y[300:]) == (m["r_at_1"],
                                                                       m["r_at_1_fit"])


def test_retrieval_is_cosine_after_centring_in_float64():
    x, y = paired(120, noise=0.5, seed=2)
    pmap = align.fit_procrustes(x[:80], y[:80])
    q, c = pmap.image_to_text(x[80:]), pmap.text(y[80:])
    s = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (c / np.linalg.norm(c, axis=1)[:, None]).T
    expected = (s >= np.diag(s)[:, None]).sum(1) - 1 < 1
    hits = align.image_to_text_recall(pmap, x[80:].astype(np.float32), y[80:], ks=(1,))[1]
    np.testing.assert_array_equal(hits, expected.astype(float))


def test_collapsed_text_encoder_scores_zero_and_chance():
    x, _ = paired(400)
    collapsed = np.tile(np.linspace(-1, 1, 24), (400, 1))
    res = align.score_alignment(x[:200], collapsed[:200], x[200:], collapsed[200:], seed=0)
    assert res.metrics["r_at_1"] == 0.0 and res.metrics["r_at_5"] == 0.0
    assert res.metrics["r_at_1_fit"] == 0.0
    assert abs(res.metrics["mknn10"] - res.metrics["chance_mknn10"]) < 0.02
    assert res.metrics["cka_linear"] == 0.0


def test_fit_size_outside_the_fit_split_is_refused():
    x, y = paired(50)
    with pytest.raises(ValueError, match=r"fit size 60 outside \[2, 40\]"):
        align.fit_size_curve(x[:40], y[:40], x[40:], y[40:], [60])


def test_check_disjoint_names_the_overlapping_ids():
    with pytest.raises(io.ContractError, match=r"fit.npz and test.npz share 2 ids, first \['3', "
                                               r"'7'\]"):
        align.check_disjoint(["1", "3", "7"], ["7", "3", "9"], "fit.npz", "test.npz")
    align.check_disjoint(["1"], ["2"], "fit.npz", "test.npz")


# ------------------------------------------------------------------- the align stage's checks
def write_split(tmp_path, name, ids, img, txt):
    io.save_embeddings(tmp_path / f"img-{name}.npz", ids, img)
    io.save_embeddings(tmp_path / f"txt-{name}.npz", ids, txt)
    return [str(tmp_path / f"img-{name}.npz"), str(tmp_path / f"txt-{name}.npz")]


def test_load_split_returns_ids_and_both_sides(tmp_path):
    x, y = paired(40)
    ids = [str(i) for i in range(40)]
    got_ids, img, txt = align.load_split(*write_split(tmp_path, "ok", ids, x, y))
    assert got_ids.tolist() == ids
    np.testing.assert_array_equal(img, x.astype(img.dtype))
    np.testing.assert_array_equal(txt, y.astype(txt.dtype))


def test_load_split_and_disjoint_refuse_bad_files(tmp_path):
    x, y = paired(120)
    ids = [str(i) for i in range(120)]
    test = write_split(tmp_path, "test", ids[80:], x[80:], y[80:])
    # ids that differ between modalities
    io.save_embeddings(tmp_path / "txt-bad.npz", ids[80:][::-1], y[80:])
    with pytest.raises(io.ContractError, match=r"img-test.npz and .*txt-bad.npz: ids differ"):
        align.load_split(test[0], str(tmp_path / "txt-bad.npz"))
    # different row counts
    io.save_embeddings(tmp_path / "txt-short.npz", ids[80:110], y[80:110])
    with pytest.raises(io.ContractError, match="has 40 rows, .*txt-short.npz has 30"):
        align.load_split(test[0], str(tmp_path / "txt-short.npz"))
    # NaN rows
    bad = y[80:].copy()
    bad[[3, 5], 0] = np.nan
    io.save_embeddings(tmp_path / "txt-nan.npz", ids[80:], bad)
    with pytest.raises(io.ContractError, match=r"txt-nan.npz: NaN or inf .*'83'.*'85'"):
        align.load_split(test[0], str(tmp_path / "txt-nan.npz"))
    # zero vectors
    zero = y[80:].copy()
    zero[7] = 0
    io.save_embeddings(tmp_path / "txt-zero.npz", ids[80:], zero)
    with pytest.raises(io.ContractError, match=r"txt-zero.npz: zero vectors at ids \['87'\]"):
        align.load_split(test[0], str(tmp_path / "txt-zero.npz"))
    # a fit split that overlaps the test split
    with pytest.raises(io.ContractError, match=r"share 10 ids, first \['80', '81'"):
        align.check_disjoint(ids[70:90], ids[80:], "fit.npz", "test.npz")


@pytest.mark.parametrize("k, sizes, message", [
    (40, [10], r"eval.k = 40 needs more than 40 test rows; test.npz has 40"),
    (0, [10], r"eval.k = 0 needs more than 0 test rows"),
    (10, [10, 81], r"eval.fit_sizes \[10, 81\]: \[81\] outside \[2, 80\], the rows of fit.npz"),
    (10, [1], r"\[1\] outside \[2, 80\]")])
def test_scoring_sizes_beyond_the_splits_are_refused(k, sizes, message):
    with pytest.raises(io.ContractError, match=message):
        align.check_scoring_sizes(k, sizes, 80, 40, "fit.npz", "test.npz")
    align.check_scoring_sizes(39, [2, 80], 80, 40, "fit.npz", "test.npz")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=6), st.integers(0, 2**31 - 1))
def test_reduce_texts_is_the_benchmarks_normalise_mean_normalise(counts, seed):
    """unpaired-rosetta `reduce_texts` by hand: each text to unit length, the item's mean, to
    unit length; a one-text item is its text's direction, and the order of an item's texts
    does not matter (float64: 1e-12 covers the summation order)."""
    from prh.align import reduce_texts

    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((sum(counts), 7)) * rng.uniform(0.1, 10, (sum(counts), 1))
    got = reduce_texts(emb, counts)
    ends = np.cumsum(counts)
    for row, (e, c) in enumerate(zip(ends, counts, strict=True)):
        texts = emb[e - c:e] / np.linalg.norm(emb[e - c:e], axis=1, keepdims=True)
        mean = texts.mean(axis=0)
        np.testing.assert_allclose(got[row], mean / np.linalg.norm(mean), atol=1e-12)
        np.testing.assert_allclose(got[row], reduce_texts(emb[e - c:e][::-1], [c])[0],
                                   atol=1e-12)
    with pytest.raises(ValueError, match="text rows for items"):
        reduce_texts(emb, [*counts, 1])
