"""The align stage's pair-free block and its aggregation over seeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.config.params import EvalConfig
from harness.records.results import aggregate_pair_free
from harness.stages.align import pair_free_scores
from prh.gallery import caption_ids
from prh.io import ContractError, load_embeddings, save_embeddings
from prh.pairfree import PairFreeConfig, score_pairfree

CFG = PairFreeConfig(clusters=3, restarts=2, rounds=5)
PARAMS = Path("params.yaml")


def _ev(pool: int, inputs: str = "benchmark") -> EvalConfig:
    return EvalConfig(pairfree_pool=pool, pairfree=CFG, pairfree_inputs=inputs)


def counts_of(n: int) -> list[int]:
    """Captions a photo, uneven (1, 2, 3, 1, 2, 3, ...): a slice or reshape that assumes one
    count for all would pick other photos' rows."""
    return [1 + i % 3 for i in range(n)]


def _pools(tmp_path, img_ids, txt_ids, width=4, seed=0):
    """The image stage's pool rows, the train stage's pool captions (`counts_of` a photo), and
    test pairs of 6 photos with their captions (ids, images, first captions; rows, photo)."""
    rng = np.random.default_rng(seed)
    (tmp_path / "image").mkdir()
    (tmp_path / "text").mkdir()
    save_embeddings(tmp_path / "image/pool_images.npz", img_ids,
                    rng.standard_normal((len(img_ids), width)).astype(np.float32))
    counts = counts_of(len(txt_ids))
    save_embeddings(tmp_path / "text/pool_texts.npz", caption_ids(txt_ids, counts),
                    rng.standard_normal((sum(counts), width)).astype(np.float32))
    photo = np.repeat(np.arange(6), counts_of(6))
    img_test, cap_test = rng.standard_normal((6, width)), rng.standard_normal((len(photo), width))
    test = (np.array([f"t{i}" for i in range(6)]), img_test, cap_test[starts(counts_of(6))])
    return tmp_path / "image", tmp_path / "text", test, (cap_test, photo)


def starts(counts: list[int]) -> np.ndarray:
    return np.cumsum(counts) - np.asarray(counts)


def by_hand(caps: np.ndarray, counts: list[int]) -> np.ndarray:
    """Each photo's captions to unit length, their mean, to unit length (a loop)."""
    out, at = [], 0
    for c in counts:
        out.append(unit(unit(caps[at:at + c]).mean(axis=0, keepdims=True))[0])
        at += c
    return np.array(out)


def test_pool_zero_is_off_and_reads_nothing(tmp_path):
    test = (np.array(["t0"]), np.zeros((1, 2)), np.zeros((1, 2)))
    assert pair_free_scores(tmp_path / "no", tmp_path / "no", _ev(0), PARAMS, test,
                            (np.zeros((1, 2)), np.zeros(1, int)), 0) == {}


def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("inputs", ["benchmark", "first-caption"])
def test_the_first_pool_photos_are_scored_against_the_test_pairs(tmp_path, inputs):
    """The stage's score is prh.pairfree's on rows prepared by hand: under "benchmark" every
    image row unit length and each photo's captions (1 to 3) unit length, averaged, unit
    length again (the benchmark's load_rows), the test pairs likewise; under "first-caption"
    each photo's first caption and the rows as embedded. Only the first 30 photos a pool."""
    image, text, test, test_caps = _pools(tmp_path, [f"a{i}" for i in range(40)],
                                          [f"b{i}" for i in range(40)])
    out = pair_free_scores(image, text, _ev(30, inputs), PARAMS, test, test_caps, 0)
    assert out["status"] == "ok" and out["n_pool_images"] == out["n_pool_texts"] == 30
    assert out["inputs"] == inputs and out["chance_r_at_1"] == pytest.approx(1 / 6)
    assert 1 <= out["rounds"] <= 5 and out["n_matches"] == 30 and 0 <= out["foscttm"] <= 1
    img = load_embeddings(image / "pool_images.npz")[1][:30].astype(np.float64)
    counts = counts_of(30)
    caps = load_embeddings(text / "pool_texts.npz")[1][:sum(counts)].astype(np.float64)
    if inputs == "benchmark":
        rows = (unit(img), by_hand(caps, counts), unit(test[1]),
                by_hand(test_caps[0], counts_of(6)))
    else:
        rows = (img, caps[starts(counts)], test[1], test[2])
    want = score_pairfree(*rows, seed=0, cfg=CFG)
    assert {k: v for k, v in out.items() if k != "inputs"} == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("img_ids, txt_ids, pool, needle", [
    (["a0", "a1"], ["b0", "b1", "b2"], 3,
     "pool_images.npz: 2 photos, eval.pairfree_pool asks for 3"),
    (["a0", "a1", "a2"], ["b0", "b1"], 3,
     "pool_texts.npz: 2 photos, eval.pairfree_pool asks for 3"),
    (["a0", "s1", "a2"], ["b0", "s1", "b2"], 3, "share 1 photos, first ['s1']"),
    (["a0", "t3", "a2"], ["b0", "b1", "b2"], 3, "share 1 ids"),
])
def test_bad_pools_are_refused_naming_the_file(tmp_path, img_ids, txt_ids, pool, needle):
    image, text, test, test_caps = _pools(tmp_path, img_ids, txt_ids)
    with pytest.raises(ContractError) as e:
        pair_free_scores(image, text, _ev(pool), PARAMS, test, test_caps, 0)
    assert needle in str(e.value)


def test_a_pool_written_one_row_a_photo_is_refused_with_the_rerun(tmp_path):
    """A train stage from before every pool caption was written (one row a photo, photo ids):
    one line naming the file and `dvc repro`, not a wrong score."""
    image, text, test, test_caps = _pools(tmp_path, ["a0", "a1", "a2"], ["b0", "b1", "b2"])
    save_embeddings(text / "pool_texts.npz", ["b0", "b1", "b2"], np.ones((3, 4), np.float32))
    with pytest.raises(ContractError, match=r"pool_texts.npz: row 'b0' is no caption row "
                       r"\(PHOTO_ID:J\); rerun `dvc repro`"):
        pair_free_scores(image, text, _ev(3), PARAMS, test, test_caps, 0)


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
