"""The stage commands (harness/stages/) on a small generated world: each refuses bad input
with one error line and exit code 2, before any work, leaving no output behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.stages import image, prepare, theory, world

ROOT = Path(__file__).resolve().parents[1]


def write_params(tmp_path: Path, edit) -> Path:
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["world"]["data"]["world"].update(n_train=40, n_fit=5, n_test=5)
    # what 5 fit pairs, 5 test pairs and 40 train photos (pools of 20) allow
    raw["world"]["eval"].update(k=3, fit_sizes=[2, 5], gallery_sizes=[5], pairfree_pool=20)
    edit(raw)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def make_world(tmp_path: Path, monkeypatch, edit=lambda r: None) -> Path:
    path = write_params(tmp_path, edit)
    monkeypatch.chdir(tmp_path)
    assert world.main(["--params", str(path), "--inputs", "data/world/raw",
                       "--out", "data/world/raw"]) == 0
    return path


def test_views_longer_than_the_captions_allow_stop_the_prepare_stage(tmp_path, monkeypatch,
                                                                      capsys):
    """max_len 6 leaves 4 tokens: most captions would be cut, so `harness prepare` refuses
    before the image encoder or any text encoder trains (on the world, harness.config.validate
    already refuses it from the words a caption can have; prepare counts real tokens, the
    check a data set of unknown captions gets)."""
    path = make_world(tmp_path, monkeypatch)
    path.write_text(path.read_text().replace("max_len: 48", "max_len: 6"))
    assert prepare.main(["--params", str(path), "--dataset", "data/world/raw/dataset.json",
                         "--images", "data/world/raw/images", "--out", "data/world/prepared"]) == 2
    err = capsys.readouterr().err
    assert "dataset.json (training captions)" in err and "world.train.max_len" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "data" / "world" / "prepared").exists()


def test_flickr30k_without_data_stops_at_the_first_stage_listing_every_missing_path(
        tmp_path, monkeypatch, capsys):
    path = write_params(tmp_path, lambda r: r.update(profile="flickr30k"))
    monkeypatch.chdir(tmp_path)
    assert world.main(["--params", str(path), "--inputs", "data/flickr30k/raw",
                       "--out", "data/world/raw"]) == 2
    err = capsys.readouterr().err
    for missing in ("data/flickr30k/raw/dataset.json", "data/flickr30k/raw/images",
                    "data/flickr30k/raw/weights/dinov2_vitb14.pth"):
        assert missing in err
    assert "dvc add data/flickr30k/raw" in err
    assert not (tmp_path / "data").exists()


def test_image_stage_refuses_missing_photos_of_any_split_before_training(tmp_path, monkeypatch,
                                                                         capsys):
    path = make_world(tmp_path, monkeypatch)
    raw = tmp_path / "data" / "world" / "raw"
    doc = json.loads((raw / "dataset.json").read_text())
    gone = {s: next(im["filename"] for im in doc["images"] if im["split"] == s)
            for s in ("train", "test")}
    for name in gone.values():
        (raw / "images" / name).unlink()
    assert image.main(["--params", str(path), "--raw", str(raw), "--out", "runs/image"]) == 2
    err = capsys.readouterr().err
    assert "2 image file(s) missing" in err and all(name in err for name in gone.values())
    assert "put the data set's photos in" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_theory_stage_writes_the_grid_and_the_bound(tmp_path, monkeypatch, capsys):
    path = write_params(tmp_path, lambda r: r["world"]["theory"].update(
        n_worlds=2, n_points=20, bound_worlds=3))
    monkeypatch.chdir(tmp_path)
    assert theory.main(["--params", str(path), "--out", "runs/theory.json"]) == 0
    res = json.loads((tmp_path / "runs" / "theory.json").read_text())
    assert res["schema"] == "prh.theory/1"
    assert res["grid"]["n_points"] == 20 and res["bound"]["n_worlds"] == 3
    assert res["bound"]["n_hold"] == 3
    assert "tie rows r = [4]" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [[], ["--params", "params.yaml"]])
def test_a_stage_without_its_paths_is_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        theory.main(argv)
    assert exc.value.code == 2 and "usage: harness theory" in capsys.readouterr().err


def test_run_check_validates_and_runs_nothing(tmp_path, monkeypatch, capsys):
    """`harness run --check`: every setting and combination checked, nothing run (no .dvc
    here, so no `dvc status` either); a combination that cannot work is named, exit 2."""
    from harness.pipeline import run

    path = write_params(tmp_path, lambda r: None)
    monkeypatch.chdir(tmp_path)
    assert run.main(["--params", str(path), "--check"]) == 0
    assert "and its inputs are valid" in capsys.readouterr().out
    assert not (tmp_path / ".dvc").exists() and not (tmp_path / "data").exists()
    bad = write_params(tmp_path, lambda r: r["world"]["eval"].update(k=500))
    assert run.main(["--params", str(bad), "--check"]) == 2
    err = capsys.readouterr().err
    assert "world.eval.k = 500: mutual k-NN needs more than k test pairs" in err
    typo = write_params(tmp_path, lambda r: r.update(prfile="world"))
    assert run.main(["--params", str(typo), "--check"]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'prfile' (did you mean 'profile'?)" in err and len(err.splitlines()) == 1


def test_align_stage_reports_a_metric_it_cannot_compute_in_one_line(tmp_path, monkeypatch,
                                                                      capsys):
    """Four fit and three test pairs: R@5 needs more than five candidates, so the metrics
    refuse, and align says so in one line instead of a traceback."""
    import numpy as np

    from harness.config.params import load_params
    from harness.records.armtrain import arm_train_doc
    from harness.stages import align
    from prh.io import save_embeddings, write_json

    path = write_params(tmp_path, lambda r: r["world"]["eval"].update(k=1, fit_sizes=[2]))
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    for folder, width in (("runs/image", 8), ("runs/text/good-s0", 4)):
        for split, ids in (("val", ["1", "2", "3", "4"]), ("test", ["5", "6", "7"])):
            save_embeddings(tmp_path / folder / f"{split}.npz", ids,
                            rng.standard_normal((len(ids), width)).astype(np.float32))
    run = {"arm": "good", "seed": 0, "profile": "world", "mlflow_run_id": "x",
           "train_hash": load_params(path).train_hash("good"), "data_hash": "d",
           "git_commit": "c", "git_dirty": False}
    write_json(tmp_path / "runs/text/good-s0/run.json", run)
    write_json(tmp_path / "runs/config/good.json", arm_train_doc(load_params(path), "good"))
    write_json(tmp_path / "runs/text/good-s0/curve.json", [])
    assert align.main(["--params", str(path), "--arm", "good", "--seed", "0", "--image",
                       "runs/image", "--text", "runs/text/good-s0", "--config",
                       "runs/config/good.json", "--out",
                       "runs/align/good-s0.json", "--per-query", "runs/align/good-s0.npz"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "need 1 <= k < n, got k=5" in err
    assert err.startswith("error: runs/image/test.npz against runs/text/good-s0/test.npz")
    assert not (tmp_path / "runs/align").exists()


def test_world_stage_under_flickr30k_checks_the_inputs_and_generates_no_world(
        tmp_path, monkeypatch, capsys):
    path = write_params(tmp_path, lambda r: r.update(profile="flickr30k"))
    monkeypatch.chdir(tmp_path)
    raw = tmp_path / "data/flickr30k/raw"
    (raw / "images").mkdir(parents=True)
    (raw / "weights").mkdir()
    (raw / "dataset.json").write_text("{}")
    (raw / "weights/dinov2_vitb14.pth").write_bytes(b"")
    assert world.main(["--params", str(path), "--inputs", str(raw),
                       "--out", "data/world/raw"]) == 0
    assert [p.name for p in (tmp_path / "data/world/raw").iterdir()] == [world.NOT_GENERATED]
    assert "no world generated" in capsys.readouterr().out


def test_the_audit_names_data_that_differs_from_the_published_split():
    from harness.stages.audit import data_label

    assert data_label("flickr30k", {"data_warnings": []}) == "flickr30k"
    assert data_label("flickr30k", None) == "flickr30k"
    label = data_label("flickr30k", {"data_warnings": ["11 test photos", "30 files"]})
    assert label == "flickr30k variant (2 difference(s) from the published split)"
    assert label != "flickr30k"  # so every claim about flickr30k is scoped, never reproduced
