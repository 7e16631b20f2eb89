"""All-caption scoring through the stages. On a tiny world (slow: a real training, MLflow
run and aggregate): the train stage embeds every test caption and the pair-free text pool,
align scores them with the map of the one-caption protocol and writes the gallery curve,
aggregate averages it over seeds. Fast: the refusals, in process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from tiny_world import align_cmd

from prh import gallery
from prh.data import load_karpathy
from prh.io import load_embeddings, save_embeddings

ROOT = Path(__file__).resolve().parents[1]
ALIGN = align_cmd("good", 0)
NEW = ("r_at_1_i2t_all", "r_at_1_t2i_all", "mknn10_captions", "mknn10_captions_other_photos")


@pytest.fixture
def repo(staged_world: Path) -> Path:
    return staged_world  # tests/conftest.py: shared with the curves' stage tests


@pytest.mark.slow
def test_train_embeds_every_test_caption_and_the_last_train_photos(repo):
    corpus = load_karpathy(repo / "data/world/raw/dataset.json")
    test, train = corpus.split("test"), corpus.split("train")
    ids, emb, meta = load_embeddings(repo / "runs/text/good-s0/test_captions.npz")
    assert ids.tolist() == [f"{p.id}:{j}" for p in test for j in range(5)]
    assert emb.shape[0] == 5 * len(test) == 200 and meta == {"arm": "good", "seed": 0}
    one_ids, one, _ = load_embeddings(repo / "runs/text/good-s0/test.npz")
    np.testing.assert_allclose(emb[::5], one, atol=1e-5)  # caption 0 is the protocol's
    pool_ids, pool, _ = load_embeddings(repo / "runs/text/good-s0/pool_texts.npz")
    assert pool_ids.tolist() == [f"{p.id}:{j}" for p in train[-60:] for j in range(5)]
    assert pool.shape[0] == 300  # every caption: the align stage prepares the pool's rows
    assert not {i.rpartition(":")[0] for i in pool_ids} & {p.id for p in train[:60]}


@pytest.mark.slow
def test_align_scores_every_caption_with_intervals_and_the_gallery_curve(repo):
    run = json.loads((repo / "runs/align/good-s0.json").read_text())
    with np.load(repo / "runs/align/good-s0.npz") as z:
        per = {k: z[k] for k in z.files}
    for key in NEW:
        m = run["metrics"][key]
        assert m["ci"][0] <= m["value"] <= m["ci"][1] and m["n"] == 40
    assert run["metrics"]["r_at_1_i2t_all"]["value"] == per["r_at_1_i2t_all_hit"].mean()
    assert run["metrics"]["r_at_1_t2i_all"]["value"] == per["r_at_1_t2i_all"].mean()
    curve = run["gallery_curve"]
    assert [(r["n_photos"], r["draws"], r["n_captions"]) for r in curve] == [
        (10, 3, 50.0), (20, 3, 100.0), (40, 1, 200.0)]
    full = curve[-1]["metrics"]
    assert full["r_at_1"] == run["metrics"]["r_at_1"]["value"]
    assert full["mknn10"] == run["metrics"]["mknn10"]["value"]
    for key in NEW:
        assert full[key] == run["metrics"][key]["value"]
    assert "mknn10" not in curve[0]["metrics"]  # 10 photos hold 9 neighbours
    assert curve[0]["chance"]["r_at_1_i2t_all"] == pytest.approx(0.1)


@pytest.mark.slow
def test_aggregate_averages_the_curve_over_seeds(repo):
    results = json.loads((repo / "runs/results.json").read_text())
    run = json.loads((repo / "runs/align/good-s0.json").read_text())
    curve = results["arms"]["good"]["gallery_curve"]
    assert [r["n_photos"] for r in curve] == [10, 20, 40]
    r1 = curve[-1]["metrics"]["r_at_1_i2t_all"]
    assert r1 == {"values": {"0": run["metrics"]["r_at_1_i2t_all"]["value"]},
                  "mean": run["metrics"]["r_at_1_i2t_all"]["value"], "std": None}
    for key in NEW:  # all-caption outcomes get intervals like the one-caption ones
        assert "ci" in results["arms"]["good"]["metrics"][key]


def test_align_refuses_captions_of_other_photos_in_one_line(tmp_path, monkeypatch, capsys):
    from harness.config.params import load_params
    from harness.records.armtrain import arm_train_doc
    from harness.stages import align
    from prh.io import write_json

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["world"]["eval"].update(k=2, fit_sizes=[4])
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    fit, test = [str(i) for i in range(8)], [str(i) for i in range(8, 14)]
    for folder, width in (("runs/image", 8), ("runs/text/good-s0", 4)):
        for split, ids in (("val", fit), ("test", test)):
            save_embeddings(tmp_path / folder / f"{split}.npz", ids,
                            rng.standard_normal((len(ids), width)))
    ids = gallery.caption_ids(test, [2] * 6)
    ids[7] = "999999:1"
    save_embeddings(tmp_path / "runs/text/good-s0/test_captions.npz", ids,
                    rng.standard_normal((12, 4)))
    write_json(tmp_path / "runs/text/good-s0/run.json", {
        "arm": "good", "seed": 0, "profile": "world", "mlflow_run_id": "x", "data_hash": "d",
        "train_hash": load_params(path).train_hash("good"), "git_commit": "c",
        "git_dirty": False})
    write_json(tmp_path / "runs/config/good.json", arm_train_doc(load_params(path), "good"))
    assert align.main(ALIGN[2:]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("error: runs/text/good-s0/test_captions.npz against "
                          "runs/image/test.npz: caption ids ['999999:1'] name no photo")
    assert "dvc repro train@good-0" in err and not (tmp_path / "runs/align").exists()


@pytest.mark.parametrize("n, images, texts", [(0, [], []), (1, [], []),
                                              (5, ["1", "2"], ["4", "5"]),
                                              (6, ["1", "2", "3"], ["4", "5", "6"])])
def test_pairfree_pools_are_disjoint_halves_of_the_train_split(n, images, texts):
    from prh.data import Photo, pairfree_halves

    photos = [Photo(str(i), f"{i}.png", "train", ("a caption",)) for i in range(1, n + 1)]
    img, txt = pairfree_halves(photos)
    assert ([p.id for p in img], [p.id for p in txt]) == (images, texts)


def test_caption_row_ids_round_trip_and_refuse_a_reordering():
    ids = gallery.caption_ids(["7", "3"], [2, 3])
    assert ids == ["7:0", "7:1", "3:0", "3:1", "3:2"]
    np.testing.assert_array_equal(gallery.photo_index(ids, ["7", "3"]), [0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match=r"caption row 0 is '3:0' where '7:0' belongs"):
        gallery.photo_index(ids[2:] + ids[:2], ["7", "3"])
    with pytest.raises(ValueError, match=r"photos \[1\] have no caption"):
        gallery.photo_index(ids[:2], ["7", "3"])
