"""prh.pairfree (Wasserstein Procrustes from a geometric initialisation) and prh.qap on
synthetic spaces where the answer is known, VecMap (prh.vecmap) beside it; the image stage's
half of the pair-free pools."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from prh import align, metrics, pairfree, qap, vecmap
from prh.data import load_karpathy
from prh.io import load_embeddings

ROOT = Path(__file__).resolve().parents[1]

N_TEST = 200


class Spaces:
    """Clustered latent points (40 clusters in 8 dimensions), images = latent A (24 wide),
    texts = images W + noise with W 24 x 16 orthonormal columns whose span holds the images:
    on the images, W is a rotation. Every call draws fresh points, so two pools never share a
    row, let alone a pair."""

    def __init__(self, seed: int, *, noise: float = 0.05):
        self.rng = np.random.default_rng(seed)
        self.centres = 2 * self.rng.standard_normal((40, 8))
        self.a = self.rng.standard_normal((8, 24))
        basis = np.linalg.qr(np.hstack([self.a.T, self.rng.standard_normal((24, 8))]))[0]
        self.w = basis @ align.random_orthonormal_map(16, 16, seed + 1)
        self.noise = noise

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        lat = self.centres[self.rng.integers(0, 40, n)] + 0.5 * self.rng.standard_normal((n, 8))
        img = lat @ self.a
        return img, img @ self.w + self.noise * self.rng.standard_normal((n, 16))


def pools_and_test(seed: int, n_pool: int = 800) -> tuple[np.ndarray, ...]:
    s = Spaces(seed)
    pool_img, _ = s.draw(n_pool)  # the images' own texts are thrown away
    _, pool_txt = s.draw(n_pool)  # texts of other images
    return (pool_img, pool_txt, *s.draw(N_TEST))


CFG = pairfree.PairFreeConfig(clusters=10, restarts=5, rounds=20)  # the world's C, fewer S


def planted(n: int = 2000, d: int = 32, noise: float = 0.05, seed: int = 0):
    """One side a rotated, noised copy of the other, its rows shuffled: (x, y, q, perm) with
    y[perm^-1] = x q + noise, i.e. row i of x pairs with row where(perm == i) of y."""
    rng = np.random.default_rng(seed)
    lat = 2 * rng.standard_normal((40, 8))[rng.integers(0, 40, n)] + rng.standard_normal((n, 8))
    x = lat @ rng.standard_normal((8, d)) + 0.3 * rng.standard_normal((n, d))
    q = align.random_orthonormal_map(d, d, seed + 1)
    perm = rng.permutation(n)
    return x, (x @ q + noise * rng.standard_normal((n, d)))[perm], q, perm


def foscttm_on_pairs(pmap: align.ProcrustesMap, x: np.ndarray, y: np.ndarray) -> float:
    return float(metrics.foscttm(align.unit_or_zero(pmap.image_to_text(x)),
                                 align.unit_or_zero(pmap.text(y))).mean())


def test_planted_shuffled_copy_is_matched_below_one_percent_with_vecmap_beside_it():
    """The must-show problem (bench/pairfree.py prints the same figures): 2,000 rows."""
    x, y, q, perm = planted()
    y_true = y[np.argsort(perm)]  # row i pairs with x[i]
    ours = pairfree.fit_pairfree(x, y, seed=0, cfg=CFG)
    theirs = vecmap.fit_vecmap(x, y, seed=0)
    assert foscttm_on_pairs(ours, x, y_true) < 0.01
    assert foscttm_on_pairs(theirs, x, y_true) < 0.01  # a shuffled copy is VecMap's best case
    assert np.abs(ours.w - q).max() < 0.02  # the noise's share of the map


def test_a_noise_free_rotation_is_recovered_exactly_and_a_permuted_copy_matched_exactly():
    x, y, q, perm = planted(n=600, d=12, noise=0.0, seed=3)
    pmap = pairfree.fit_pairfree(x, y, seed=0, cfg=CFG)
    np.testing.assert_allclose(pmap.w, q, atol=1e-9)  # rounding of SVDs of 600 x 12 data
    same = pairfree.fit_pairfree(x, x[perm], seed=1, cfg=CFG)
    np.testing.assert_allclose(same.w, np.eye(12), atol=1e-9)
    ranks = metrics.retrieval_ranks(align.unit_or_zero(same.image_to_text(x)),
                                    align.unit_or_zero(same.text(x)))
    assert (ranks == 0).all() and same.rounds <= 2  # then a round repeats: a fixed point


def test_the_rotation_is_recovered_from_disjoint_pools_of_other_items():
    pool_img, pool_txt, test_img, test_txt = pools_and_test(0)
    out = pairfree.score_pairfree(pool_img, pool_txt, test_img, test_txt, seed=0, cfg=CFG)
    assert out["status"] == "ok" and out["chance_r_at_1"] == 1 / N_TEST
    assert out["r_at_1"] >= 0.9 and out["foscttm"] <= 0.005  # chance: .005 and .5
    assert out["n_pool_images"] == out["n_pool_texts"] == out["n_matches"] == 800
    assert 1 <= out["rounds"] <= 20


def test_the_map_is_orthonormal_and_the_first_moments_alone_do_not_find_it():
    """Proposition 2 (the rerun article): the pools' means and covariances leave the rotation
    open; a random orthonormal map on the pool means sits at chance, the fitted one does not."""
    pool_img, pool_txt, test_img, test_txt = pools_and_test(1)
    pmap = pairfree.fit_pairfree(pool_img, pool_txt, seed=0, cfg=CFG)
    np.testing.assert_allclose(pmap.w.T @ pmap.w, np.eye(16), atol=1e-12)
    np.testing.assert_array_equal(pmap.mean_img, pool_img.mean(axis=0))
    blind = align.ProcrustesMap(pmap.mean_img, pmap.mean_txt,
                                align.random_orthonormal_map(24, 16, seed=3))
    assert align.image_to_text_recall(blind, test_img, test_txt)[1].mean() <= 0.03
    assert align.image_to_text_recall(pmap, test_img, test_txt)[1].mean() >= 0.9


def test_independent_spaces_score_at_chance():
    s_img, s_txt = Spaces(2), Spaces(3)
    out = pairfree.score_pairfree(s_img.draw(800)[0], s_txt.draw(800)[1],
                                  s_img.draw(N_TEST)[0], s_txt.draw(N_TEST)[1], seed=0, cfg=CFG)
    assert out["status"] == "ok"
    assert out["r_at_1"] <= 0.03  # 6 hits of 200; chance .005
    assert abs(out["foscttm"] - 0.5) <= 0.06


@pytest.mark.parametrize("side", ["image_pool", "text_pool"])
@pytest.mark.parametrize("kind", ["one point", "rank 1"])
def test_a_collapsed_pool_is_flagged_not_scored(side, kind):
    pool_img, pool_txt, test_img, test_txt = pools_and_test(4, n_pool=100)
    pools = {"image_pool": pool_img, "text_pool": pool_txt}
    ref = pools[side]
    pools[side] = (np.tile(ref[0], (100, 1)) if kind == "one point"
                   else ref[0] + np.linspace(-1, 1, 100)[:, None] * ref[1])
    out = pairfree.score_pairfree(pools["image_pool"], pools["text_pool"], test_img, test_txt,
                                  seed=0, cfg=CFG)
    assert out["status"] == "collapsed" and out["collapsed"] == side
    assert out["r_at_1"] == 0.0 and out["foscttm"] == 0.5 and out["rounds"] == 0
    with pytest.raises(ValueError, match=f"{side}: collapsed"):
        pairfree.fit_pairfree(pools["image_pool"], pools["text_pool"], seed=0, cfg=CFG)


def test_collapsed_and_constant_scorers_sit_at_chance_exactly():
    """FOSCTTM .5 exactly for a constant scorer (every key ties) and for a collapsed query
    side (the true keys' ranks are a permutation); R@1 then 1/n (one query wins) or 0 (every
    candidate ties, counted against)."""
    rng = np.random.default_rng(5)
    keys = rng.standard_normal((50, 4))
    one = np.tile(rng.standard_normal(4), (50, 1))
    assert metrics.foscttm(one, keys).mean() == 0.5
    assert metrics.foscttm(keys, np.zeros((50, 4))).tolist() == [0.5] * 50
    assert metrics.recall_at_k(one, keys).mean() == 1 / 50
    assert metrics.recall_at_k(keys, np.zeros((50, 4))).sum() == 0.0


def test_rank_check_by_hand():
    line = np.outer(np.arange(5.0), [1.0, 2.0, 3.0]) + 7.0
    assert pairfree.numerical_rank_below_2(line)
    assert not pairfree.numerical_rank_below_2(line + np.eye(5, 3) * 1e-3)
    assert pairfree.collapsed_sides(a=line, b=np.eye(4)) == ["a"]


def test_same_seed_same_map_and_workers_change_nothing():
    pool_img, pool_txt, _, _ = pools_and_test(6, n_pool=300)
    a = pairfree.fit_pairfree(pool_img, pool_txt, seed=11, cfg=CFG)
    b = pairfree.fit_pairfree(pool_img, pool_txt, seed=11,
                              cfg=pairfree.PairFreeConfig(clusters=10, restarts=5, rounds=20,
                                                          workers=2))
    np.testing.assert_array_equal(a.w, b.w)
    assert (a.rounds, a.n_matches) == (b.rounds, b.n_matches)


@pytest.mark.slow  # spawned processes each import the stack: the pipeline section
def test_fits_side_by_side_give_what_one_at_a_time_gives():
    """fit_and_score_all: two encoders' pools x two seeds in spawned processes equal the same
    jobs fitted one after the other, scores and maps; a bad pool's error names its job."""
    pool_img, pool_txt, test_img, test_txt = pools_and_test(7, n_pool=300)
    other = pool_txt[:, ::-1].copy()  # a second "encoder": the text columns reversed
    jobs = {f"{name} seed {seed}": (pool_img, txt, test_img, test_txt[:, ::-1].copy()
                                    if name == "b" else test_txt, seed)
            for name, txt in (("a", pool_txt), ("b", other)) for seed in (3, 4)}
    one = pairfree.fit_and_score_all(jobs, cfg=CFG, parallel=1)
    two = pairfree.fit_and_score_all(jobs, cfg=CFG, parallel=2)
    assert list(one) == list(two) == list(jobs)
    for key in jobs:
        assert one[key][0] == two[key][0]
        np.testing.assert_array_equal(one[key][1].w, two[key][1].w)
    assert one["a seed 3"][0] != one["a seed 4"][0]  # two seeds, two fits
    with pytest.raises(ValueError, match="a seed 5: pools of 300 and 3 rows"):
        pairfree.fit_and_score_all({"a seed 5": (pool_img, pool_txt[:3], test_img, test_txt,
                                                 5)}, cfg=CFG)


def test_batches_smaller_than_the_pools_match_block_by_block():
    """b below the pool: the read-out matches every row in blocks of b, each refinement round a
    fresh batch of b rows a side; all R rounds run (no fixed point to stop at). Here 30
    rounds reach R@1 1.0, 6 only .23: the random batches are what moves the map on."""
    pool_img, pool_txt, test_img, test_txt = pools_and_test(7, n_pool=900)
    cfg = pairfree.PairFreeConfig(clusters=10, restarts=3, batch=400, rounds=30)
    pmap = pairfree.fit_pairfree(pool_img, pool_txt, seed=0, cfg=cfg)
    assert pmap.rounds == 30 and pmap.n_matches == 400
    assert align.image_to_text_recall(pmap, test_img, test_txt)[1].mean() >= 0.9
    r, c = pairfree.hungarian_blocks(pool_img, pool_img, 400)
    assert len(r) == 900 and sorted(r.tolist()) == list(range(900))
    assert ((r // 400) == (c // 400)).all()  # every pair inside its block


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**31), st.integers(1, 4))
def test_the_reduced_costs_keep_the_best_assignment_by_brute_force(n, m, seed, top):
    """Small integer scores (exact in float64, so every subtraction is exact; ties common):
    the solver on `reduced_costs` finds the largest total that any one-to-one assignment of
    min(n, m) pairs reaches, found by trying them all, square or not. Taking a constant off a
    line that some assignments leave out (a column of a wide block) would change the optimum:
    the rectangular cases are what this checks."""
    from scipy.optimize import linear_sum_assignment

    s = np.random.default_rng(seed).integers(-top, top + 1, (n, m)).astype(np.float64)
    best = max(sum(s[i, j] for i, j in zip(rows, cols, strict=True))
               for rows in itertools.combinations(range(n), min(n, m))
               for cols in itertools.permutations(range(m), min(n, m)))
    cost = pairfree.reduced_costs(s)
    assert cost.min() >= 0
    r, c = linear_sum_assignment(cost)
    assert len(r) == min(n, m) and s[r, c].sum() == best


def test_the_reduced_costs_match_the_benchmarks_optimum_on_a_fits_scores():
    """Scores as a fit makes them (float32 products of unit rows, 300 x 300 and a 300 x 420
    block): the pairs' total on the scores is the plain solver's within 16 n eps max|s|.
    Error analysis: each reduced cost is off by at most 4 eps max|s| (two subtractions of
    numbers at most 2 max|s|), so the totals of two assignments of n pairs are ranked right
    unless within 8 n eps max|s|; as much again for either solver's own sums."""
    from scipy.optimize import linear_sum_assignment

    rng = np.random.default_rng(3)
    q = align.unit_or_zero(rng.standard_normal((300, 24))).astype(np.float32)
    for k in (q[rng.permutation(300)] + np.float32(.2) * rng.standard_normal((300, 24)).astype(
            np.float32), rng.standard_normal((420, 24)).astype(np.float32)):
        s = (q @ k.T).astype(np.float64)
        kept = s.copy()
        r0, c0 = linear_sum_assignment(s, maximize=True)
        r, c = linear_sum_assignment(pairfree.reduced_costs(s))
        np.testing.assert_array_equal(s, kept)  # the caller's scores: a copy is reduced
        bound = 16 * len(r) * np.finfo(np.float64).eps * np.abs(s).max()
        assert abs(s[r0, c0].sum() - s[r, c].sum()) <= bound
    np.testing.assert_array_equal(pairfree.hungarian_blocks(q, q, 300)[1], np.arange(300))


def test_bad_inputs_are_refused():
    x = np.random.default_rng(7).standard_normal((30, 4))
    with pytest.raises(ValueError, match="k-means needs at least eval.pairfree.clusters = 40"):
        pairfree.fit_pairfree(x, x, seed=0, cfg=pairfree.PairFreeConfig(clusters=40))
    with pytest.raises(ValueError, match="rounds >= 0"):
        pairfree.PairFreeConfig(rounds=-1)
    with pytest.raises(ValueError, match="batch = 5 < clusters = 30"):
        pairfree.PairFreeConfig(batch=5)
    with pytest.raises(ValueError, match="30 rows, test texts has 29"):
        pairfree.score_pairfree(x, x, x, x[:29], seed=0, cfg=CFG)


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**31), st.integers(4, 10), st.integers(-3, 3), st.integers(12, 40))
def test_the_map_is_semi_orthogonal_on_any_pools(seed, dx, gap, n):
    """Whatever the pools (unrelated Gaussians of any widths), the result is dx x dy with
    orthonormal columns (dy <= dx) or rows (dy > dx), the pool means as centres."""
    rng = np.random.default_rng(seed)
    dy = max(2, dx - gap)
    x, z = rng.standard_normal((n, dx)), rng.standard_normal((n + 3, dy))
    pmap = pairfree.fit_pairfree(x, z, seed=seed,
                                 cfg=pairfree.PairFreeConfig(clusters=3, restarts=2, rounds=3))
    assert pmap.w.shape == (dx, dy)
    gram = pmap.w.T @ pmap.w if dy <= dx else pmap.w @ pmap.w.T
    np.testing.assert_allclose(gram, np.eye(min(dx, dy)), atol=1e-10)
    np.testing.assert_array_equal(pmap.mean_txt, z.mean(axis=0))
    assert 1 <= pmap.rounds <= 3 and pmap.n_matches == n


# ----------------------------------------------------------------------------- the QAP
@pytest.mark.parametrize("seed", range(3))
def test_mpopt_finds_the_optimum_of_small_problems_by_brute_force(seed):
    rng = np.random.default_rng(seed)
    f = -qap.centred_kernel(rng.standard_normal((7, 5)))
    g = qap.centred_kernel(rng.standard_normal((7, 9)))
    best = min(qap.objective(f, g, np.array(p)) for p in itertools.permutations(range(7)))
    assert qap.objective(f, g, qap.solve(f, g, seed)) == pytest.approx(best, rel=1e-12)


def test_cka_matching_recovers_a_planted_permutation_and_ignores_earlier_solves():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((12, 6))
    perm = rng.permutation(12)
    got = qap.cka_matching(a, a[perm] @ align.random_orthonormal_map(6, 6, 1), seed=7)
    assert (perm[got] == np.arange(12)).all()  # row i of a meets its own copy
    qap.cka_matching(a, a, seed=99)
    assert (qap.cka_matching(a, a[perm] @ align.random_orthonormal_map(6, 6, 1), seed=7)
            == got).all()
    np.testing.assert_allclose(qap.centred_kernel(a), (np.eye(12) - 1 / 12) @ a @ a.T
                               @ (np.eye(12) - 1 / 12), atol=1e-12)


@functools.cache
def unrotated_scores() -> dict:
    """The fit that every rotation is compared with (the same inputs each example)."""
    pool_img, pool_txt, test_img, test_txt = pools_and_test(8)
    return pairfree.score_pairfree(pool_img, pool_txt, test_img, test_txt, seed=0, cfg=CFG)


@pytest.mark.slow  # three pair-free fits (about 25 s): .ci/run's pipeline section
@settings(max_examples=3, deadline=None)
@given(st.integers(0, 2**31))
def test_rotating_the_text_space_does_not_change_the_scores(seed):
    """Nothing in the method depends on the text space's coordinates (k-means distances, the
    centres' CKA, Hungarian scores and Procrustes are rotation-equivariant)."""
    pool_img, pool_txt, test_img, test_txt = pools_and_test(8)
    q = align.random_orthonormal_map(16, 16, seed)
    a = unrotated_scores()
    b = pairfree.score_pairfree(pool_img, pool_txt @ q, test_img, test_txt @ q, seed=0, cfg=CFG)
    assert b["r_at_1"] == pytest.approx(a["r_at_1"], abs=1 / N_TEST)
    assert b["foscttm"] == pytest.approx(a["foscttm"], abs=1e-3)


# ----------------------------------------------------------------------------- the image stage
def test_the_image_stage_embeds_the_first_half_of_the_train_photos_as_the_image_pool(
        tmp_path, monkeypatch, capsys):
    from harness.stages import image, world

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["world"]["data"]["world"].update(n_train=41, n_fit=5, n_test=5)
    raw["world"]["image"].update(epochs=1)
    raw["world"]["eval"].update(k=3, fit_sizes=[2, 5], pairfree_pool=20)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    assert world.main(["--params", str(path), "--inputs", "data/world/raw",
                       "--out", "data/world/raw"]) == 0
    assert image.main(["--params", str(path), "--raw", "data/world/raw", "--out", "out"]) == 0
    train = load_karpathy(tmp_path / "data/world/raw/dataset.json").split("train")
    ids, emb, meta = load_embeddings(tmp_path / "out/pool_images.npz")
    assert ids.tolist() == [p.id for p in train[:20]] and emb.shape == (20, 64)
    assert not set(ids) & {p.id for p in train[-20:]}  # the text pool's photos (train stage)
    assert meta["encoder"] == "world_cnn"
    assert "pool_images: the first 20 train rows" in capsys.readouterr().out
    ids_train, emb_train, _ = load_embeddings(tmp_path / "out/train.npz")  # the 30k map's
    assert ids_train.tolist() == [p.id for p in train]  # every train photo, pool rows first
    np.testing.assert_array_equal(emb_train[:20], emb)
