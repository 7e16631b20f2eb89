"""prh.gallery: all-caption retrieval and caption-level mutual k-NN against explicit loops,
hand cases, chance levels and the gallery-size curve."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prh import align, gallery, metrics


# ----------------------------------------------------------------------------- references
def brute_i2t(q: np.ndarray, c: np.ndarray, photo: np.ndarray) -> np.ndarray:
    """A photo hits when its best caption beats every other photo's caption strictly."""
    out = []
    for i in range(len(q)):
        s = [float(q[i] @ c[j]) for j in range(len(c))]
        best = max(s[j] for j in range(len(c)) if photo[j] == i)
        out.append(float(all(s[j] < best for j in range(len(c)) if photo[j] != i)))
    return np.array(out)


def brute_t2i(c: np.ndarray, q: np.ndarray, photo: np.ndarray) -> np.ndarray:
    out = []
    for j in range(len(c)):
        s = [float(c[j] @ q[p]) for p in range(len(q))]
        out.append(float(all(s[p] < s[photo[j]] for p in range(len(q)) if p != photo[j])))
    return np.array(out)


def brute_caption_mknn(img, txt, photo, k, other_photos):
    a = img / np.linalg.norm(img, axis=1, keepdims=True)
    b = txt / np.linalg.norm(txt, axis=1, keepdims=True)
    sim_photo = a @ a.T
    def top(sim, cand):  # the k largest, ties to the lowest index (a stable sort)
        return set(sorted(cand, key=lambda j: (-sim[j], j))[:k])

    out = []
    for r in range(len(photo)):
        cand = [j for j in range(len(photo))
                if j != r and not (other_photos and photo[j] == photo[r])]
        near_img = top([sim_photo[photo[r], photo[j]] for j in range(len(photo))], cand)
        near_txt = top([float(b[r] @ b[j]) for j in range(len(photo))], cand)
        out.append(len(near_img & near_txt) / k)
    return np.array(out)


@st.composite
def small_gallery(draw, max_photos=5, max_caps=3, d=3):
    """Integer vectors (exact dot products, so ties are exact) and a photo index."""
    n = draw(st.integers(1, max_photos))
    counts = draw(st.lists(st.integers(1, max_caps), min_size=n, max_size=n))
    photo = np.repeat(np.arange(n), counts)
    perm = draw(st.permutations(range(len(photo))))
    photo = photo[list(perm)]
    ints = st.integers(-2, 2)
    q = np.array(draw(st.lists(st.lists(ints, min_size=d, max_size=d), min_size=n,
                               max_size=n)), dtype=np.float64)
    c = np.array(draw(st.lists(st.lists(ints, min_size=d, max_size=d), min_size=len(photo),
                               max_size=len(photo))), dtype=np.float64)
    return q, c, photo


@settings(max_examples=200, deadline=None)
@given(small_gallery())
def test_retrieval_both_directions_equals_explicit_loops_ties_against(g):
    q, c, photo = g
    np.testing.assert_array_equal(gallery.image_to_text_any(q, c, photo, chunk=2),
                                  brute_i2t(q, c, photo))
    np.testing.assert_array_equal(gallery.text_to_image(c, q, photo, chunk=2),
                                  brute_t2i(c, q, photo))


def axis_rows(x: np.ndarray) -> np.ndarray:
    """Each row replaced by a signed axis direction (scaled by 1..3): every cosine between
    rows is exactly 0 or +-1 in any summation order, so mathematical ties are exact ties.
    (Cosines equal only mathematically, e.g. 1/3 from two different vectors, can round apart
    in one matrix product and not in another; the lowest-index rule breaks exact ties only.)"""
    flat = np.abs(x).sum(axis=1).astype(int)
    axis, sign = flat % x.shape[1], np.where(x.sum(axis=1) < 0, -1.0, 1.0)
    out = np.zeros_like(x)
    out[np.arange(len(x)), axis] = sign * (1 + flat % 3)
    return out


@settings(max_examples=150, deadline=None)
@given(small_gallery(max_photos=6), st.integers(1, 4), st.booleans())
def test_caption_mutual_knn_equals_explicit_loops(g, k, other_photos):
    q, c, photo = g
    q, c = axis_rows(q), axis_rows(c)  # no zero rows; exact ties between and across copies
    if k > gallery.candidates_per_item(photo, other_photos):
        with pytest.raises(ValueError, match="caption mutual k-NN"):
            gallery.caption_mutual_knn(q, c, photo, k, other_photos=other_photos)
        return
    np.testing.assert_allclose(
        gallery.caption_mutual_knn(q, c, photo, k, other_photos=other_photos, chunk=3),
        brute_caption_mknn(q, c, photo, k, other_photos), atol=0)


@settings(max_examples=60, deadline=None)
@given(st.integers(3, 12), st.integers(1, 2), st.integers(0, 10_000))
def test_one_caption_per_photo_gives_the_one_caption_metrics(n, k, seed):
    rng = np.random.default_rng(seed)
    q, c = rng.standard_normal((n, 4)), rng.standard_normal((n, 4))
    ident = np.arange(n)
    np.testing.assert_array_equal(gallery.image_to_text_any(q, c, ident),
                                  metrics.retrieval_ranks(q, c) == 0)
    np.testing.assert_array_equal(gallery.text_to_image(c, q, ident),
                                  metrics.retrieval_ranks(c, q) == 0)
    for other in (False, True):
        np.testing.assert_array_equal(
            gallery.caption_mutual_knn(q, c, ident, k, other_photos=other),
            metrics.mutual_knn(q, c, k))


@settings(max_examples=60, deadline=None)
@given(small_gallery(), st.randoms(use_true_random=False))
def test_relabelling_photos_and_reordering_captions_moves_the_outcomes_with_them(g, rnd):
    q, c, photo = g
    n = len(q)
    relabel = np.array(rnd.sample(range(n), n))          # photo p becomes relabel[p]
    order = np.array(rnd.sample(range(len(photo)), len(photo)))
    q2 = np.empty_like(q)
    q2[relabel] = q
    c2, photo2 = c[order], relabel[photo[order]]
    np.testing.assert_array_equal(gallery.image_to_text_any(q2, c2, photo2)[relabel],
                                  gallery.image_to_text_any(q, c, photo))
    np.testing.assert_array_equal(gallery.text_to_image(c2, q2, photo2),
                                  gallery.text_to_image(c, q, photo)[order])


# ----------------------------------------------------------------------------- hand cases
def test_a_wrong_caption_tied_with_the_best_true_one_is_a_miss():
    img = np.array([[1.0, 0.0], [0.0, 1.0]])
    txt = np.array([[1.0, 0.0],    # photo 0: scores 1 against photo 0
                    [1.0, 0.0],    # photo 1, same vector: ties with photo 0's caption
                    [0.0, 1.0]])   # photo 1: scores 1 against photo 1, 0 against photo 0
    photo = np.array([0, 1, 1])
    np.testing.assert_array_equal(gallery.image_to_text_any(img, txt, photo), [0.0, 1.0])
    # caption 1 scores 1 against photo 0 and 0 against its own photo 1: a miss
    np.testing.assert_array_equal(gallery.text_to_image(txt, img, photo), [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(gallery.per_photo(np.array([1.0, 0.0, 1.0]), photo, 2),
                                  [1.0, 0.5])


def test_siblings_come_first_on_the_image_side_or_not_at_all():
    """Two photos, two captions each, k = 1. With siblings, image neighbour = the sibling;
    text neighbours: caption 0 <-> 1 close, 2 <-> 3 close: every item agrees, 1.0. Without
    siblings, the image neighbour is the lowest-indexed copy of the other photo and the text
    neighbour the nearest other-photo caption: caption 0's is 3 (not 2), a miss."""
    img = np.array([[1.0, 0.0], [0.6, 0.8]])
    txt = np.array([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0], [0.2, 0.98]])
    photo = np.array([0, 0, 1, 1])
    np.testing.assert_array_equal(
        gallery.caption_mutual_knn(img, txt, photo, 1, other_photos=False), [1, 1, 1, 1])
    # image side, other photos only: items 0, 1 -> item 2; items 2, 3 -> item 0
    # text side: 0 -> 3 (cos .2 > 0), 1 -> 3, 2 -> 1 (.14 > 0), 3 -> 1
    np.testing.assert_array_equal(
        gallery.caption_mutual_knn(img, txt, photo, 1, other_photos=True), [0, 0, 0, 0])


def five_captions(n=40, c=5, dx=16, dy=8, noise=0.05, seed=0):
    """Images [n, dx]; c captions per photo in text space: (x - m) W0 + noise, photo order."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dx))
    w0 = align.random_orthonormal_map(dx, dy, seed=seed + 1)
    photo = np.repeat(np.arange(n), c)
    y = (x[photo] - x.mean(0)) @ w0 + noise * rng.standard_normal((n * c, dy))
    return x, y, photo


def test_identical_spaces_score_one_and_a_collapsed_text_encoder_zero():
    x = np.random.default_rng(1).standard_normal((30, 6))
    photo = np.repeat(np.arange(30), 3)
    pmap = align.fit_procrustes(x, x)
    out = gallery.score_captions(pmap, x, x[photo], photo, k=5)
    assert out["r_at_1_i2t_all_hit"].mean() == 1.0 and out["r_at_1_t2i_all"].mean() == 1.0
    collapsed = np.ones((90, 6))
    pmap_c = align.fit_procrustes(x[photo], collapsed)
    out = gallery.score_captions(pmap_c, x, collapsed, photo, k=5)
    assert out["r_at_1_i2t_all_hit"].sum() == 0.0 and out["r_at_1_t2i_all"].sum() == 0.0


def test_chance_is_c_over_n_per_photo_and_one_over_n_on_average():
    """Random embeddings: photo i's hit rate is c_i / N (5/11 for five captions of 11), the
    mean over photos 1/n; text -> image 1/n."""
    rng = np.random.default_rng(0)
    photo = np.repeat(np.arange(4), [1, 2, 3, 5])
    trials = 3000
    i2t, t2i = np.zeros(4), 0.0
    for _ in range(trials):
        q, c = rng.standard_normal((4, 8)), rng.standard_normal((11, 8))
        i2t += gallery.image_to_text_any(q, c, photo)
        t2i += gallery.text_to_image(c, q, photo).mean()
    np.testing.assert_allclose(i2t / trials, np.array([1, 2, 3, 5]) / 11, atol=0.03)
    assert abs(i2t.sum() / (4 * trials) - 0.25) < 0.015
    assert abs(t2i / trials - 0.25) < 0.015


def test_photo_index_errors_name_the_problem():
    q, c = np.eye(3), np.eye(3)
    with pytest.raises(ValueError, match=r"photos \[2\] have no caption"):
        gallery.image_to_text_any(q, c, np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="outside"):
        gallery.text_to_image(c, q, np.array([0, 1, 3]))
    with pytest.raises(ValueError, match="one per caption"):
        gallery.text_to_image(c, q, np.array([0, 1]))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=8))
def test_caption_photos_inverts_caption_ids(counts):
    """Photo ids with colons and digits (`2:1` is a photo, `2:1:0` its first caption) come back
    in order with their counts; the rows' photo index is `photo_index`'s."""
    photos = [f"{i}:{i % 3}" if i % 2 else str(10 - i) for i in range(len(counts))]
    ids = gallery.caption_ids(photos, counts)
    got, got_counts = gallery.caption_photos(ids)
    assert got.tolist() == photos and got_counts.tolist() == counts
    assert np.repeat(np.arange(len(counts)), counts).tolist() == \
        gallery.photo_index(ids, got).tolist()


def test_caption_photos_refuses_rows_that_are_not_every_caption_in_order():
    with pytest.raises(ValueError, match=r"row 'b' is no caption row \(PHOTO_ID:J\)"):
        gallery.caption_photos(["a:0", "b"])
    with pytest.raises(ValueError, match=r"caption row 1 is 'a:2' where 'a:1' belongs"):
        gallery.caption_photos(["a:0", "a:2"])
    with pytest.raises(ValueError, match=r"caption row 1 is 'b:0' where 'a:1' belongs"):
        gallery.caption_photos(["a:0", "b:0", "a:1"])  # a photo's captions apart


# ----------------------------------------------------------------------------- the curve
def test_pool_sizes_clip_to_the_split_and_end_with_everything():
    assert gallery.pool_sizes([1000, 100, 300, 5000], 1000) == [100, 300, 1000]
    assert gallery.pool_sizes([50, 100, 200, 300], 300) == [50, 100, 200, 300]
    assert gallery.pool_sizes([500], 120) == [120]


def test_the_full_pool_row_equals_the_test_split_scores():
    x, y, photo = five_captions()
    y_one = y[::5]
    pmap = align.fit_procrustes(x, y_one)
    curve = gallery.gallery_curve(pmap, x, y_one, y, photo, k=3, sizes=[5, 10, 40, 99],
                                  draws=4, seed=7)
    assert [(r["n_photos"], r["draws"], r["n_captions"]) for r in curve] == [
        (5, 4, 25.0), (10, 4, 50.0), (40, 1, 200.0)]
    full = curve[-1]
    per = gallery.score_captions(pmap, x, y, photo, k=3)
    assert full["metrics"]["r_at_1"] == align.image_to_text_recall(pmap, x, y_one)[1].mean()
    assert full["metrics"]["mknn3"] == metrics.mutual_knn(x, y_one, 3).mean()
    for key, v in per.items():
        assert full["metrics"][key.removesuffix("_hit")] == v.mean()
    assert full["chance"] == {"r_at_1": 1 / 40, "r_at_1_i2t_all": 1 / 40,
                              "r_at_1_t2i_all": 1 / 40, "mknn3": 3 / 39,
                              "mknn3_captions": 3 / 199, "mknn3_captions_other_photos": 3 / 195}
    assert full["metrics"]["r_at_1_i2t_all"] > 0.9  # nearly noiseless captions
    again = gallery.gallery_curve(pmap, x, y_one, y, photo, k=3, sizes=[10], draws=4, seed=7)
    assert again[0] == curve[1]  # a pool size's draws do not depend on the other sizes


def test_the_whole_split_outcomes_are_reused_for_the_full_pool_unchanged():
    x, y, photo = five_captions()
    y_one = y[::5]
    pmap = align.fit_procrustes(x, y_one)
    whole = {"r_at_1_hit": align.image_to_text_recall(pmap, x, y_one)[1],
             "r_at_5_hit": np.zeros(40), "mknn3": metrics.mutual_knn(x, y_one, 3),
             **gallery.score_captions(pmap, x, y, photo, k=3)}
    args = dict(k=3, sizes=[10, 40], draws=2, seed=1)
    fresh = gallery.gallery_curve(pmap, x, y_one, y, photo, **args)
    assert gallery.gallery_curve(pmap, x, y_one, y, photo, whole=whole, **args) == fresh
    whole["mknn3"] = whole["mknn3"] + 1.0  # the full pool row reads `whole`, nothing else
    reused = gallery.gallery_curve(pmap, x, y_one, y, photo, whole=whole, **args)
    assert reused[-1]["metrics"]["mknn3"] == pytest.approx(fresh[-1]["metrics"]["mknn3"] + 1)
    assert reused[0] == fresh[0] and "r_at_5" not in reused[-1]["metrics"]


def test_a_pool_with_no_k_neighbours_leaves_mutual_knn_out():
    x, y, photo = five_captions(n=12, c=2)
    pmap = align.fit_procrustes(x, y[::2])
    row = gallery.gallery_curve(pmap, x, y[::2], y, photo, k=4, sizes=[3], draws=2, seed=0)[0]
    # 3 photos: one-caption mknn4 needs 5; 6 captions leave 5 (siblings in), 4 (siblings out)
    assert set(row["metrics"]) == {"r_at_1", "r_at_1_i2t_all", "r_at_1_t2i_all",
                                   "mknn4_captions", "mknn4_captions_other_photos"}
    assert set(row["chance"]) == set(row["metrics"])


def test_more_distractors_lower_recall_on_noisy_captions():
    x, y, photo = five_captions(n=200, noise=0.9, seed=3)
    pmap = align.fit_procrustes(x, y[::5])
    curve = gallery.gallery_curve(pmap, x, y[::5], y, photo, k=10, sizes=[20, 200],
                                  draws=5, seed=0)
    small, full = (r["metrics"] for r in curve)
    for key in ("r_at_1", "r_at_1_i2t_all", "r_at_1_t2i_all", "mknn10"):
        assert small[key] > full[key], key


def test_seed_summary_of_the_curves():
    def curve(r1):
        return [{"n_photos": 10, "n_captions": 50.0, "draws": 5,
                 "metrics": {"r_at_1": r1}, "chance": {"r_at_1": 0.1}}]

    out = gallery.curve_over_seeds({"0": curve(0.2), "1": curve(0.4)})
    r1 = {"values": {"0": 0.2, "1": 0.4}, "mean": pytest.approx(0.3),
          "std": pytest.approx(0.2 / np.sqrt(2))}
    assert out == [{"n_photos": 10, "n_captions": 50.0, "draws": 5, "seeds": ["0", "1"],
                    "metrics": {"r_at_1": r1}, "chance": {"r_at_1": 0.1}}]
    assert gallery.curve_over_seeds({"3": curve(0.5)})[0]["metrics"]["r_at_1"]["std"] is None
    other = curve(0.2)
    other[0]["draws"] = 4
    with pytest.raises(ValueError, match="differ in pool sizes"):
        gallery.curve_over_seeds({"0": curve(0.2), "1": other})
