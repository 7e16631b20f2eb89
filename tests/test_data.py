"""prh.data: the Karpathy-split reader and its errors."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from prh.data import (
    DataError,
    Photo,
    check_image_files,
    check_splits,
    karpathy_warnings,
    load_karpathy,
)
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


def test_a_source_gives_each_photo_that_sources_texts_and_a_missing_one_names_the_record(
        tmp_path):
    doc = karpathy_doc()
    for image in doc["images"]:
        image["texts"] = {"captioner": [f"recap {image['imgid']} a", f"recap {image['imgid']} b"]}
    path = write(tmp_path, doc)
    corpus = load_karpathy(path, source="captioner")
    assert corpus.photos[1].captions == ("recap 11 a", "recap 11 b")
    assert load_karpathy(path).photos[1].captions[0] == "photo 11 caption 0 ."  # people
    with pytest.raises(DataError, match=r"images\[0\] \(imgid 10\): no 'alt' texts .*"
                                        r"texts\.alt.*source 'people'"):
        load_karpathy(path, source="alt")
    doc["images"][2]["texts"]["captioner"] = ["fine", ""]
    with pytest.raises(DataError, match=r"imgid 12\): field 'texts.captioner' must be a "
                                        r"non-empty list of non-empty strings"):
        load_karpathy(write(tmp_path, doc), source="captioner")
    del doc["images"][2]["texts"]
    assert load_karpathy(write(tmp_path, doc)).photos[2].captions[0] == "photo 12 caption 0 ."


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


def test_two_photos_sharing_a_file_name_or_a_sentid_are_refused(tmp_path):
    doc = karpathy_doc()
    doc["images"][3]["filename"] = "11.jpg"
    with pytest.raises(DataError, match=r"images\[3\] \(imgid 13\) names the file '11.jpg' of "
                                        r"images\[1\]"):
        load_karpathy(write(tmp_path, doc))
    doc = karpathy_doc()
    doc["images"][2]["sentences"][4]["sentid"] = 50   # photo 10's first sentence
    with pytest.raises(DataError, match=r"images\[2\] \(imgid 12\), sentence 4: sentid 50 is "
                                        r"also used in images\[0\]"):
        load_karpathy(write(tmp_path, doc))


def test_a_file_without_karpathys_three_splits_is_refused(tmp_path):
    doc = karpathy_doc()
    doc["images"][3]["split"] = "val"                  # no test photo left
    corpus = load_karpathy(write(tmp_path, doc))
    with pytest.raises(DataError, match=r"no photos in split\(s\) \['test'\].*'val': 2"):
        check_splits(corpus)
    check_splits(load_karpathy(write(tmp_path, karpathy_doc())))


def test_differences_from_karpathy_flickr30k_are_warnings_that_say_what_differs(tmp_path):
    doc = karpathy_doc()
    doc["images"][0]["sentences"].pop()
    warnings = karpathy_warnings(load_karpathy(write(tmp_path, doc)), n_files=4)
    text = "\n".join(warnings)
    assert "2 train photos, Karpathy's Flickr30k has 29,000" in text     # train + restval
    assert "1 val photos, Karpathy's Flickr30k has 1,014" in text
    assert "1 test photos, Karpathy's Flickr30k has 1,000; R@k over other test pairs" in text
    assert "1 'restval' photos" in text
    assert "1 photos without exactly 5 captions (first: imgid 10, 4)" in text
    assert "4 files, flickr30k-images has 31,783" in text
    assert len(warnings) == 6


def test_karpathy_sized_flickr30k_gives_no_warning(tmp_path):
    images = []
    splits = ["train"] * 29000 + ["val"] * 1014 + ["test"] * 1000
    for imgid, split in enumerate(splits):
        sents = [sentence(imgid, 5 * imgid + j, "a dog .") for j in range(5)]
        images.append({"imgid": imgid, "filename": f"{imgid}.jpg", "split": split,
                       "sentences": sents})
    corpus = load_karpathy(write(tmp_path, {"dataset": "flickr30k", "images": images}))
    assert karpathy_warnings(corpus, n_files=31783) == []


@pytest.mark.parametrize("truncated_allowed", [False, True])  # True: as importing WeasyPrint sets
def test_every_photo_of_every_split_is_opened_and_decoded(tmp_path, monkeypatch, truncated_allowed):
    from PIL import Image, ImageFile

    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", truncated_allowed)

    corpus = load_karpathy(write(tmp_path, karpathy_doc()))
    folder = tmp_path / "images"
    folder.mkdir()
    noise = np.random.default_rng(0).integers(0, 256, (150, 200, 3), dtype=np.uint8)
    for i in (10, 11, 12, 13):
        Image.fromarray(noise).save(folder / f"{i}.jpg", format="JPEG")
    (folder / "extra.txt").write_text("not a photo")
    assert check_image_files(corpus, folder) == 5
    good = (folder / "12.jpg").read_bytes()
    (folder / "10.jpg").write_bytes(b"")                      # train: zero bytes
    (folder / "11.jpg").unlink()                              # restval: missing
    (folder / "12.jpg").write_bytes(good[: len(good) // 2])   # val: truncated JPEG
    (folder / "13.jpg").write_bytes(b"<html>not found</html>")  # test: not an image
    with pytest.raises(DataError) as err:
        check_image_files(corpus, folder)
    text = str(err.value)
    assert text.startswith(f"{folder}: 4 photo(s) of {corpus.path} cannot be read")
    for expected in ("10.jpg (images[0], imgid 10, train): empty (0 bytes)",
                     "11.jpg (images[1], imgid 11, restval): missing",
                     "12.jpg (images[2], imgid 12, val): does not decode (image file is truncated",
                     "13.jpg (images[3], imgid 13, test): does not decode (cannot identify"):
        assert expected in text
    assert "copy the flickr30k-images JPEGs there again" in text and "\n" not in text
