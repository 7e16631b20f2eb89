"""prh.data: the Karpathy-split reader and its errors."""

from __future__ import annotations

import copy
import json

import pytest

from prh.data import DataError, Photo, load_karpathy
from prh.io import ContractError


def sentence(imgid: int, sentid: int, raw: str) -> dict:
    return {"raw": raw, "tokens": raw.lower().split(), "sentid": sentid, "imgid": imgid}


def karpathy_doc() -> dict:
    images = []
    for imgid, split in [(10, "train"), (11, "restval"), (12, "val"), (13, "test")]:
        sents = [sentence(imgid, 5 * imgid + j, f"photo {imgid} caption {j} .") for j in range(5)]
        images.append({"imgid": imgid, "filename": f"{imgid}.jpg", "split": split,
                       "sentences": sents, "sentids": [s["sentid"] for s in sents]})
    return {"dataset": "flickr30k", "images": images}


def write(tmp_path, doc, name="dataset_flickr30k.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_reads_photos_and_splits(tmp_path):
    corpus = load_karpathy(write(tmp_path, karpathy_doc()), min_captions=5)
    assert corpus.name == "flickr30k"
    assert [p.id for p in corpus.photos] == ["10", "11", "12", "13"]
    assert [p.id for p in corpus.split("train")] == ["10", "11"]   # restval counts as train
    assert [p.id for p in corpus.split("val")] == ["12"]
    assert corpus.photos[2] == Photo("12", "12.jpg", "val",
                                     tuple(f"photo 12 caption {j} ." for j in range(5)))
    with pytest.raises(DataError, match="unknown split 'dev'"):
        corpus.split("dev")


def broken(mutate):
    doc = karpathy_doc()
    mutate(doc)
    return doc


BAD = {
    "missing field": (lambda d: d["images"][1].pop("split"), "missing field 'split'", "11"),
    "wrong type": (lambda d: d["images"][2].update(filename=7), "field 'filename' is int", "12"),
    "bool imgid": (lambda d: d["images"][2].update(imgid=True), "field 'imgid' is bool", "[2]"),
    "empty caption": (lambda d: d["images"][3]["sentences"][2].update(raw="  "),
                      "empty caption", "13"),
    "missing raw": (lambda d: d["images"][0]["sentences"][0].pop("raw"),
                    "missing field 'raw'", "10"),
    "few captions": (lambda d: d["images"][1].update(sentences=d["images"][1]["sentences"][:3]),
                     "3 captions, fewer than min_captions=5", "11"),
    "duplicate imgid": (lambda d: d["images"][3].update(imgid=11, sentences=[
        sentence(11, j, "another photo .") for j in range(5)]), "duplicates", "11"),
    "unknown split": (lambda d: d["images"][0].update(split="dev"), "unknown split 'dev'", "10"),
    "sentence imgid": (lambda d: d["images"][2]["sentences"][0].update(imgid=99),
                       "differs from the photo's", "12"),
    "no images": (lambda d: d.pop("images"), "missing field 'images'", "top level"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_records_name_the_file_and_the_record(tmp_path, case):
    mutate, message, record = BAD[case]
    path = write(tmp_path, broken(mutate))
    with pytest.raises(DataError) as err:
        load_karpathy(path, min_captions=5)
    text = str(err.value)
    assert str(path) in text and message in text and record in text
    assert isinstance(err.value, ContractError)


def test_missing_file_and_not_json(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_karpathy(tmp_path / "nope.json")
    path = tmp_path / "broken.json"
    path.write_text('{"dataset": "x", "images": [', encoding="utf-8")
    with pytest.raises(DataError, match=r"broken\.json: not valid JSON"):
        load_karpathy(path)


def test_reader_does_not_mutate_or_depend_on_optional_fields(tmp_path):
    doc = karpathy_doc()
    for image in doc["images"]:
        image.pop("sentids")
        for s in image["sentences"]:
            s.pop("tokens")
    before = copy.deepcopy(doc)
    corpus = load_karpathy(write(tmp_path, doc))
    assert len(corpus.photos) == 4 and doc == before
