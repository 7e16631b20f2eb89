"""All-caption scoring's refusals and row ids, in process. The stages' all-caption outputs on
a tiny world are read by tests/test_staged_world.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from tiny_world import align_cmd

from prh import gallery
from prh.io import save_embeddings

ROOT = Path(__file__).resolve().parents[1]
ALIGN = align_cmd("good", 0)


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
