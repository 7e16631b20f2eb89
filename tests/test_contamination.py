"""harness.contamination: planted contaminated captions (each rule) and a planted duplicate
image are found; clean rows are what is left; rescoring compares full and clean means."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFilter

from harness.data.contamination import (
    caption_overlap,
    clean_mask,
    image_duplicates,
    normalise,
    phash_bits,
    rescore,
)
from harness.stages.contamination import main as stage_main

TRAIN = [
    "A dog runs across the snowy field.",
    "two men in orange vests repair the road near a red truck while traffic waits behind",
    "a young girl in a pink dress climbs the wooden stairs of a playground slide at noon today",
]


def test_normalise() -> None:
    assert normalise("  A Dog,  runs!\tacross ") == "a dog runs across"


def test_caption_rules() -> None:
    evals = {
        "1": "a dog runs across the SNOWY field",                       # exact after normalising
        "2": "Two men in orange vests repair the road near a blue car",  # same first 40 chars
        # a shared 13-gram
        "3": "look: a young girl in a pink dress climbs the wooden stairs of a playground",
        "4": "a cat sleeps on a sofa",                                   # clean
    }
    found = caption_overlap(evals, TRAIN)
    assert {k: v["rule"] for k, v in found.items()} == {"1": "exact", "2": "prefix40",
                                                         "3": "ngram13"}
    assert found["2"]["train"] == TRAIN[1]
    assert caption_overlap(evals, TRAIN, n=20).keys() == {"1", "2"}


def _noise(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
    Image.fromarray(small).resize((64, 64), Image.BILINEAR).save(path)
    return path


def test_planted_duplicate_image_is_found(tmp_path: Path) -> None:
    train = [_noise(tmp_path / f"t{i}.png", i) for i in range(6)]
    # the planted copy: train image 3, blurred slightly, resized and saved as JPEG
    with Image.open(train[3]) as im:
        im.filter(ImageFilter.GaussianBlur(0.5)).resize((80, 80)).save(tmp_path / "dup.jpg",
                                                                        quality=85)
    evals = [_noise(tmp_path / "e0.png", 100), tmp_path / "dup.jpg",
             _noise(tmp_path / "e2.png", 101)]
    pairs = image_duplicates(phash_bits(evals), phash_bits(train), max_distance=6)
    assert [(i, j) for i, j, _ in pairs] == [(1, 3)]
    assert pairs[0][2] <= 6
    same = phash_bits(train + [tmp_path / "dup.jpg"])
    assert [(i, j) for i, j, _ in image_duplicates(same, same, 6, same=True)] == [(3, 6)]


def test_clean_mask_and_rescore() -> None:
    mask = clean_mask(["a", "b", "c", "d"], {"b"})
    assert mask.tolist() == [True, False, True, True]
    out = rescore(np.array([1.0, 1.0, 0.0, 0.0]), mask)
    assert out == {"n": 4, "n_clean": 3, "full": 0.5, "clean": pytest.approx(1 / 3),
                   "shift": pytest.approx(1 / 3 - 0.5)}
    with pytest.raises(ValueError, match="clean row"):
        rescore(np.ones(2), np.zeros(2, dtype=bool))


def test_stage_end_to_end(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    rows = []
    for i in range(8):
        split = "train" if i < 5 else ("val" if i == 5 else "test")
        _noise(images / f"{i}.png", i)
        caption = TRAIN[i] if i < 3 else f"photo number {i} shows a scene of kind {i * 7}"
        rows.append({"imgid": i, "filename": f"{i}.png", "split": split,
                     "sentences": [{"raw": caption}]})
    rows[6]["sentences"] = [{"raw": TRAIN[0].upper()}]          # planted caption, test split
    with Image.open(images / "2.png") as im:                    # planted image, test split
        im.save(images / "7.png")
    (tmp_path / "dataset.json").write_text(json.dumps({"dataset": "tiny", "images": rows}))
    out = tmp_path / "contamination.json"
    assert stage_main(["--dataset", str(tmp_path / "dataset.json"), "--image-dir", str(images),
                "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["captions"]["test"]["counts"] == {"exact": 1, "prefix40": 0, "ngram13": 0}
    assert rep["captions"]["test"]["examples"][0]["id"] == "6"
    assert rep["images"]["test~train"]["n_pairs"] == 1
    assert rep["images"]["test~train"]["examples"][0] == {"eval": "7.png", "other": "2.png",
                                                           "distance": 0}
    assert rep["clean_ids"] == {"val": ["5"], "test": []}
    assert rep["params"]["imagehash"] == "4.3.2"
