"""prh.pairfree: a map found without pairs on synthetic spaces where the answer is known; the
image stage's half of the pair-free pools."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from prh import align, metrics, pairfree
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


def test_the_rotation_is_recovered_from_unpaired_pools():
    pool_img, pool_txt, test_img, test_txt = pools_and_test(0)
    out = pairfree.score_pairfree(pool_img, pool_txt, test_img, test_txt, seed=0)
    supervised = align.image_to_text_recall(align.fit_procrustes(test_img, test_txt),
                                            test_img, test_txt)[1].mean()
    assert out["status"] == "ok" and out["chance_r_at_1"] == 1 / N_TEST
    assert supervised == 1.0  # the noise leaves every test pair resolvable
    assert out["r_at_1"] >= 0.97 and out["foscttm"] <= 0.002  # chance: .005 and .5
    assert out["n_pool_images"] == out["n_pool_texts"] == 800
    assert 1 <= out["iterations"] <= 20 and out["n_matches"] == 1600  # union: one per row


def test_the_map_is_orthonormal_and_the_first_moments_alone_do_not_find_it():
    """Proposition 2 (the rerun article): the pools' means and covariances leave the rotation
    open; without the self-learning (a random orthonormal map on the pool means) the test pairs
    sit at chance, with it they do not."""
    pool_img, pool_txt, test_img, test_txt = pools_and_test(1)
    pmap = pairfree.fit_pairfree(pool_img, pool_txt, seed=0)
    np.testing.assert_allclose(pmap.w.T @ pmap.w, np.eye(16), atol=1e-12)
    np.testing.assert_array_equal(pmap.mean_img, pool_img.mean(axis=0))
    blind = align.ProcrustesMap(pmap.mean_img, pmap.mean_txt,
                                align.random_orthonormal_map(24, 16, seed=3))
    assert align.image_to_text_recall(blind, test_img, test_txt)[1].mean() <= 0.03
    assert align.image_to_text_recall(pmap, test_img, test_txt)[1].mean() >= 0.97


def test_independent_spaces_score_at_chance():
    s_img, s_txt = Spaces(2), Spaces(3)
    out = pairfree.score_pairfree(s_img.draw(800)[0], s_txt.draw(800)[1],
                                  s_img.draw(N_TEST)[0], s_txt.draw(N_TEST)[1], seed=0)
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
                                  seed=0)
    assert out["status"] == "collapsed" and out["collapsed"] == side
    assert out["r_at_1"] == 0.0 and out["foscttm"] == 1.0 and out["iterations"] == 0
    with pytest.raises(ValueError, match=f"{side}: collapsed"):
        pairfree.fit_pairfree(pools["image_pool"], pools["text_pool"], seed=0)


def test_the_collapsed_values_are_what_the_tie_convention_gives():
    """r_at_1 = 0 and foscttm = 1 are the scores of a map whose every candidate ties."""
    x = np.random.default_rng(5).standard_normal((50, 4))
    zero = np.zeros((50, 4))
    assert metrics.recall_at_k(x, zero).sum() == 0.0
    assert metrics.foscttm(zero, zero).mean() == 1.0


def test_rank_check_by_hand():
    line = np.outer(np.arange(5.0), [1.0, 2.0, 3.0]) + 7.0
    assert pairfree.numerical_rank_below_2(line)
    assert not pairfree.numerical_rank_below_2(line + np.eye(5, 3) * 1e-3)
    assert pairfree.collapsed_sides(a=line, b=np.eye(4)) == ["a"]


def test_same_seed_same_map():
    pool_img, pool_txt, _, _ = pools_and_test(6, n_pool=300)
    a = pairfree.fit_pairfree(pool_img, pool_txt, seed=11)
    b = pairfree.fit_pairfree(pool_img, pool_txt, seed=11)
    np.testing.assert_array_equal(a.w, b.w)
    assert (a.iterations, a.n_matches) == (b.iterations, b.n_matches)


def test_bad_inputs_are_refused():
    x = np.random.default_rng(7).standard_normal((30, 4))
    with pytest.raises(ValueError, match="text width 5 exceeds image width 4"):
        pairfree.fit_pairfree(x, np.ones((30, 5)) + np.eye(30, 5), seed=0)
    with pytest.raises(ValueError, match="n_iter = 0"):
        pairfree.fit_pairfree(x, x, seed=0, n_iter=0)
    with pytest.raises(ValueError, match="zero vectors"):
        pairfree.fit_pairfree(np.vstack([x, np.zeros((1, 4))]), x, seed=0)
    with pytest.raises(ValueError, match="30 rows, test texts has 29"):
        pairfree.score_pairfree(x, x, x, x[:29], seed=0)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**31), st.integers(4, 12), st.integers(1, 4), st.integers(8, 40))
def test_the_map_has_orthonormal_columns_on_any_pools(seed, dx, gap, n):
    """Whatever the pools (here unrelated Gaussians of any widths dy <= dx), the result is a
    Procrustes map: dx x dy, W^T W = I, the pool means as centres."""
    rng = np.random.default_rng(seed)
    dy = max(2, dx - gap)
    x, z = rng.standard_normal((n, dx)), rng.standard_normal((n + 3, dy))
    pmap = pairfree.fit_pairfree(x, z, seed=seed, n_iter=3)
    assert pmap.w.shape == (dx, dy)
    np.testing.assert_allclose(pmap.w.T @ pmap.w, np.eye(dy), atol=1e-10)
    np.testing.assert_array_equal(pmap.mean_txt, z.mean(axis=0))
    assert 1 <= pmap.iterations <= 3 and pmap.n_matches == 2 * n + 3


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 2**31))
def test_rotating_the_text_space_does_not_change_the_scores(seed):
    """Nothing in the method depends on the text space's coordinates (sorted similarities,
    CSLS and Procrustes are rotation-equivariant): an orthogonal change of text coordinates
    leaves the scores where they were."""
    pool_img, pool_txt, test_img, test_txt = pools_and_test(8, n_pool=300)
    q = align.random_orthonormal_map(16, 16, seed)
    a = pairfree.score_pairfree(pool_img, pool_txt, test_img, test_txt, seed=0)
    b = pairfree.score_pairfree(pool_img, pool_txt @ q, test_img, test_txt @ q, seed=0)
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
