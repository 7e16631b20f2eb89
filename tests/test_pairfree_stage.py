"""The align stage's pair-free block and its aggregation over seeds."""

from __future__ import annotations

import numpy as np
import pytest

from harness.records.results import aggregate_pair_free
from harness.stages.align import pair_free_scores
from prh.io import ContractError, save_embeddings
from prh.pairfree import PairFreeConfig

CFG = PairFreeConfig(clusters=3, restarts=2, rounds=5)


def _pools(tmp_path, img_ids, txt_ids, width=4, seed=0):
    rng = np.random.default_rng(seed)
    (tmp_path / "image").mkdir()
    (tmp_path / "text").mkdir()
    save_embeddings(tmp_path / "image/pool_images.npz", img_ids,
                    rng.standard_normal((len(img_ids), width)).astype(np.float32))
    save_embeddings(tmp_path / "text/pool_texts.npz", txt_ids,
                    rng.standard_normal((len(txt_ids), width)).astype(np.float32))
    test = rng.standard_normal((6, width))
    return tmp_path / "image", tmp_path / "text", np.array([f"t{i}" for i in range(6)]), test


def test_pool_zero_is_off_and_reads_nothing(tmp_path):
    assert pair_free_scores(tmp_path / "no", tmp_path / "no", 0, CFG, tmp_path / "params.yaml",
                            np.array(["t0"]), np.zeros((1, 2)), np.zeros((1, 2)), 0) == {}


def test_the_first_pool_rows_are_scored_against_the_test_pairs(tmp_path):
    image, text, ids, test = _pools(tmp_path, [f"a{i}" for i in range(40)],
                                    [f"b{i}" for i in range(40)])
    out = pair_free_scores(image, text, 30, CFG, tmp_path / "params.yaml", ids, test, test, 0)
    assert out["status"] == "ok" and out["n_pool_images"] == out["n_pool_texts"] == 30
    assert out["chance_r_at_1"] == pytest.approx(1 / 6) and 0 <= out["foscttm"] <= 1
    assert 1 <= out["rounds"] <= 5 and out["n_matches"] == 30


@pytest.mark.parametrize("img_ids, txt_ids, pool, needle", [
    (["a0", "a1"], ["b0", "b1", "b2"], 3, "pool_images.npz: 2 rows, eval.pairfree_pool asks for 3"),
    (["a0", "s1", "a2"], ["b0", "s1", "b2"], 3, "share 1 photos, first ['s1']"),
    (["a0", "t3", "a2"], ["b0", "b1", "b2"], 3, "share 1 ids"),
])
def test_bad_pools_are_refused_naming_the_file(tmp_path, img_ids, txt_ids, pool, needle):
    image, text, ids, test = _pools(tmp_path, img_ids, txt_ids)
    with pytest.raises(ContractError) as e:
        pair_free_scores(image, text, pool, CFG, tmp_path / "params.yaml", ids, test, test, 0)
    assert needle in str(e.value)


def test_aggregate_gives_each_arms_seed_spread_and_statuses():
    runs = {("good", 0): {"status": "ok", "r_at_1": 0.25, "foscttm": 0.1, "n_test": 300},
            ("good", 1): {"status": "collapsed", "r_at_1": 0.0, "foscttm": 0.5, "n_test": 300},
            ("bad", 0): {}, ("bad", 1): {}}
    out = aggregate_pair_free(runs, ["good", "bad"], [0, 1])
    assert out["bad"] == {} and out["good"]["status"] == {"0": "ok", "1": "collapsed"}
    assert out["good"]["r_at_1"]["mean"] == pytest.approx(0.125)
    assert out["good"]["foscttm"]["values"] == {"0": 0.1, "1": 0.5}
    with pytest.raises(ValueError, match=r"seeds \['1'\] have no pair-free scores"):
        aggregate_pair_free({**runs, ("good", 1): {}}, ["good"], [0, 1])
