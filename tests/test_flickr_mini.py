"""The Flickr30k path on a miniature Flickr30k (tests/flickr_mini.py): the stages that read the
user's data refuse each kind of bad input with one error line naming the file, the record and
the fix, before any training and with nothing left behind. Slow (`.ci/run`'s pipeline section,
minutes of BERT-S and ViT-B/14 processes): the real `harness run` (dvc repro) on the flickr30k
profile, with only sizes overridden, ends at the report."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest
import torch
import yaml
from flickr_mini import build, dinov2_state
from tiny_world import commit_all, copy_code, sh

from harness.stages import contamination, image, prepare

ROOT = Path(__file__).resolve().parents[1]
RAW = Path("data/flickr30k/raw")
WEIGHTS = RAW / "weights" / "dinov2_vitb14.pth"


def mini_params(raw: dict) -> dict:
    """params.yaml's flickr30k profile with only sizes cut: one seed, epochs, batch, fit
    sizes, bootstrap resamples, theory grid. BERT-S (12 layers, width 384), max_len 64, the
    30,522 vocabulary bound, DINOv2 ViT-B/14 at 224 px and every method setting stay."""
    raw["profile"] = "flickr30k"
    raw["seeds"] = [0]
    f = raw["flickr30k"]
    f["train"].update(epochs=1, warmup_epochs=0, batch_size=8, eval_every=1)
    f["eval"].update(n_resamples=200, fit_sizes=[4, 8, 11], pairfree_pool=4,
                     pairfree={**f["eval"]["pairfree"], "clusters": 2, "restarts": 2,
                               "workers": 1})
    f["theory"].update(n_worlds=2, n_points=20, bound_worlds=4)
    return raw


@pytest.fixture(scope="module")
def timm_weights(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("weights") / "dinov2_vitb14.pth"
    torch.save(dinov2_state("timm"), path)
    return path


def user_folder(root: Path, weights: Path) -> Path:
    """A working folder as a user has it: params.yaml on flickr30k, the raw data in place."""
    build(root / RAW, n_train=8, n_val=11, n_test=11)
    (root / WEIGHTS).parent.mkdir(parents=True)
    os.link(weights, root / WEIGHTS)
    (root / "params.yaml").write_text(yaml.safe_dump(
        mini_params(yaml.safe_load((ROOT / "params.yaml").read_text())), sort_keys=False))
    return root


@pytest.fixture
def user(tmp_path, monkeypatch, timm_weights) -> Path:
    monkeypatch.chdir(tmp_path)
    return user_folder(tmp_path, timm_weights)


def run_prepare() -> int:
    return prepare.main(["--params", "params.yaml", "--dataset", str(RAW / "dataset.json"),
                         "--images", str(RAW / "images"), "--out", "data/flickr30k/prepared"])


def run_image() -> int:
    return image.main(["--params", "params.yaml", "--raw", str(RAW), "--out", "runs/image"])


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    return err


def test_the_miniature_passes_with_its_differences_from_karpathy_as_warnings(user, capsys):
    assert run_prepare() == 0
    summary = json.loads((user / "data/flickr30k/prepared/summary.json").read_text())
    assert summary["splits"] == {"train": 8, "val": 11, "test": 11}
    assert len(summary["warnings"]) == 4
    assert "11 test photos, Karpathy's Flickr30k has 1,000" in summary["warnings"][2]
    assert "30 files, flickr30k-images has 31,783" in summary["warnings"][3]
    assert capsys.readouterr().out.count("prepare: warning: ") == 4


def edit_dataset(root: Path, edit) -> dict:
    path = root / RAW / "dataset.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return doc


def first(doc: dict, split: str) -> tuple[int, dict]:
    return next((i, im) for i, im in enumerate(doc["images"]) if im["split"] == split)


def break_jpeg(root: Path, split: str, how: str) -> str:
    doc = json.loads((root / RAW / "dataset.json").read_text())
    i, im = first(doc, split)
    path = root / RAW / "images" / im["filename"]
    if how == "missing":
        path.unlink()
    elif how == "empty (0 bytes)":
        path.write_bytes(b"")
    else:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    return f"{im['filename']} (images[{i}], imgid {im['imgid']}, {split}): {how}"


def run_contamination() -> int:
    return contamination.main(["--params", "params.yaml", "--dataset", str(RAW / "dataset.json"),
                               "--image-dir", str(RAW / "images"),
                               "--out", "runs/contamination.json"])


@pytest.mark.parametrize("split,how", [("train", "does not decode"), ("val", "missing"),
                                       ("test", "empty (0 bytes)")])
def test_a_photo_that_cannot_be_read_stops_prepare_naming_file_and_record(user, capsys, split,
                                                                         how):
    expected = break_jpeg(user, split, how)
    for stage in (run_prepare, run_contamination):
        assert stage() == 2
        err = one_error(capsys)
        assert expected in err and str(RAW / "dataset.json") in err
        assert "copy the flickr30k-images JPEGs there again" in err
    assert not (user / "data/flickr30k/prepared").exists() and not (user / "runs").exists()


def test_two_photos_with_one_file_name_and_splits_that_are_not_karpathys(user, capsys):
    def share(doc):
        doc["images"][5]["filename"] = doc["images"][2]["filename"]

    doc = edit_dataset(user, share)
    assert run_prepare() == 2
    err = one_error(capsys)
    assert (f"images[5] (imgid 5) names the file '{doc['images'][2]['filename']}' of "
            "images[2]") in err
    build(user / RAW, n_train=8, n_val=11, n_test=11)     # restore the file names
    edit_dataset(user, lambda d: [im.update(split="val") for im in d["images"]
                                  if im["split"] == "test"])
    for stage in (run_prepare, run_image, run_contamination):
        assert stage() == 2
        err = one_error(capsys)
        assert "no photos in split(s) ['test']" in err and "Karpathy split file" in err
    assert not (user / "runs").exists() and not (user / "data/flickr30k/prepared").exists()


def save_weights(root: Path, state: dict) -> None:
    (root / WEIGHTS).unlink()
    torch.save({k: v.half() for k, v in state.items()}, root / WEIGHTS)


def test_meta_layout_weights_load_with_the_position_table_resampled_to_224(tmp_path):
    from prh.image import build_dinov2

    state = dinov2_state("meta")
    assert state["pos_embed"].shape == (1, 1 + 37 * 37, 768) and "mask_token" in state
    torch.save(state, tmp_path / "dinov2_vitb14_pretrain.pth")
    model = build_dinov2(tmp_path / "dinov2_vitb14_pretrain.pth", img_size=224)
    assert model.pos_embed.shape == (1, 1 + 16 * 16, 768)
    torch.testing.assert_close(model.blocks[3].attn.qkv.weight, state["blocks.3.attn.qkv.weight"])


def vit_s(_state):
    return dinov2_state("timm", "vit_small_patch14_dinov2.lvd142m")


def missing_block(state):
    return {k: v for k, v in state.items() if not k.startswith("blocks.11.")}


def world_cnn(_state):
    from prh.image import ImageConfig, WorldCNN
    return WorldCNN(ImageConfig()).state_dict()


@pytest.mark.parametrize("make,message", [
    (vit_s, "holds ViT-S/14 weights (cls_token width 384), the image encoder is DINOv2 "
            "ViT-B/14 (width 768)"),
    (missing_block, "not a DINOv2 ViT-B/14 state dict: missing keys ['blocks.11.norm1.weight'"),
    (world_cnn, "not a DINOv2 ViT-B/14 state dict: missing keys ['cls_token'"),
])
def test_weights_of_another_model_stop_the_image_stage(user, capsys, timm_weights, make,
                                                       message):
    save_weights(user, make(torch.load(timm_weights, weights_only=True)))
    assert run_image() == 2
    err = one_error(capsys)
    assert str(WEIGHTS) in err and message in err and "dvc add" in err
    assert not (user / "runs").exists()


@pytest.mark.slow
def test_harness_run_on_the_flickr30k_profile_ends_at_the_report(tmp_path, timm_weights):
    """From a clean checkout: the user's data and timm-layout weights, `harness run`."""
    repo = copy_code(tmp_path / "clone")
    user_folder(repo, timm_weights)
    commit_all(repo, "clone with the user's params")
    start = time.perf_counter()
    out = sh(repo, "harness", "run", OMP_NUM_THREADS=str(os.cpu_count() or 1))
    print(f"harness run on the miniature Flickr30k: {time.perf_counter() - start:.0f} s")
    assert "Running stage 'report'" in out.stdout
    summary = json.loads((repo / "data/flickr30k/prepared/summary.json").read_text())
    assert len(summary["warnings"]) == 4
    cfg = json.loads((repo / "runs/text/good-s0/config.json").read_text())
    assert "384" in json.dumps(cfg) and "12" in json.dumps(cfg)
    results = json.loads((repo / "runs/results.json").read_text())
    assert results["n_test"] == 11 and results["data_warnings"] == summary["warnings"]
    audit = json.loads((repo / "reports/audit.json").read_text())
    assert audit["profile"].startswith("flickr30k variant (4 difference(s)")
    about_data = [c for c in audit["claims"] if c["kind"] in ("flickr_measurable", "ordering")]
    assert about_data and not [c["id"] for c in about_data if c["verdict"] == "reproduced"]
    with sqlite3.connect(repo / "mlflow.db") as db:
        rows = db.execute("select name, status from runs").fetchall()
    seeds = [(f"{a}-s0", "FINISHED") for a in ("good", "bad", "ntp")]
    arms = [(f"{a} (seeds 0)", "FINISHED") for a in ("good", "bad", "ntp")]
    plan = json.loads((repo / "runs/plan.json").read_text())  # registered before training
    assert sorted(rows) == sorted(seeds + arms + [("flickr30k results", "FINISHED"),
                                                  (f"plan {plan['hash']} (flickr30k)",
                                                   "FINISHED")])
    assert (repo / "reports/audit.html").stat().st_size > 1000
    assert (repo / "reports/audit.pdf").read_bytes()[:5] == b"%PDF-"
