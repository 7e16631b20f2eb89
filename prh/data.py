"""Caption corpora in their published format: the Karpathy-split JSON.

- Karpathy-split JSON (Flickr30k, COCO, and the generated `world` data set; docs/contracts.md,
  "Data on disk"): `{"dataset", "images": [{"imgid", "filename", "split", "sentences":
  [{"raw", "tokens", "sentid", "imgid"}], "sentids"}]}`. Split "restval" is training data
  (Karpathy's convention for the COCO val images moved into training).

A record may carry texts from other sources beside its captions (the Karpathy `sentences`,
source "people"): `"texts": {SOURCE: [str, ...]}`, e.g. the world's "captioner" texts
(prh.world). `load_karpathy(..., source=...)` gives a photo the texts of one source.

Which captions a sample's views read, the one line that separates the good and bad arms, is
`prh.views.choose_captions`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, ImageFile

from prh.io import ContractError, file_sha256

SPLITS = ("train", "val", "test", "restval")
TRAIN_SPLITS = ("train", "restval")
REGENERATE = ("fix the record, or replace the file (the world profile: `dvc repro world` "
              "regenerates it; Flickr30k: download the Karpathy split again)")


class DataError(ContractError):
    """A caption file breaks its format; the message names the file, the record and the fix."""


@dataclass(frozen=True)
class Photo:
    """One photo: row id `str(imgid)`, its file name, Karpathy split and captions (raw text)."""

    id: str
    filename: str
    split: str
    captions: tuple[str, ...]


@dataclass(frozen=True)
class CaptionCorpus:
    """All photos of one Karpathy-split file, in file order."""

    path: Path
    name: str
    photos: tuple[Photo, ...]

    def split(self, name: str) -> list[Photo]:
        """Photos of split `name`; "train" also returns "restval" photos (Karpathy convention)."""
        if name not in SPLITS:
            raise DataError(f"{self.path}: unknown split {name!r}; use one of {list(SPLITS)}")
        wanted = TRAIN_SPLITS if name == "train" else (name,)
        return [p for p in self.photos if p.split in wanted]


def _field(record: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """record[key], checked to be of `kind` (bool never passes as int)."""
    if key not in record:
        raise DataError(f"{where}: missing field {key!r}; {REGENERATE}")
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise DataError(f"{where}: field {key!r} is {type(value).__name__} {value!r:.60}, "
                        f"expected {names}; {REGENERATE}")
    return value


def _captions(image: Mapping[str, Any], imgid: int, where: str) -> tuple[str, ...]:
    sentences = _field(image, "sentences", list, where)
    captions = []
    for j, sentence in enumerate(sentences):
        at = f"{where}, sentence {j}"
        if not isinstance(sentence, Mapping):
            raise DataError(f"{at}: expected an object with 'raw', got "
                            f"{type(sentence).__name__}; {REGENERATE}")
        raw = _field(sentence, "raw", str, at).strip()
        if not raw:
            raise DataError(f"{at}: empty caption; remove the sentence or write its text")
        if "tokens" in sentence:
            tokens = _field(sentence, "tokens", list, at)
            if not all(isinstance(t, str) for t in tokens):
                raise DataError(f"{at}: field 'tokens' must be a list of strings; {REGENERATE}")
        if "sentid" in sentence:
            _field(sentence, "sentid", int, at)
        if "imgid" in sentence and _field(sentence, "imgid", int, at) != imgid:
            raise DataError(f"{at}: sentence imgid {sentence['imgid']} differs from the photo's "
                            f"imgid {imgid}; {REGENERATE}")
        captions.append(raw)
    return tuple(captions)


PEOPLE = "people"  # the source of the Karpathy `sentences`


def _source_texts(image: Mapping[str, Any], source: str, where: str) -> tuple[str, ...]:
    """record["texts"][source]: a non-empty list of non-empty strings."""
    texts = image.get("texts", {})
    if not isinstance(texts, Mapping) or source not in texts:
        raise DataError(f"{where}: no {source!r} texts (field 'texts.{source}'); the world "
                        "writes its captioner texts there (`dvc repro world` regenerates an older "
                        "file), a published caption file has only its captions: train on "
                        f"source {PEOPLE!r}")
    value = texts[source]
    if not isinstance(value, list) or not value or not all(
            isinstance(t, str) and t.strip() for t in value):
        raise DataError(f"{where}: field 'texts.{source}' must be a non-empty list of non-empty "
                        f"strings, got {value!r:.80}; {REGENERATE}")
    return tuple(t.strip() for t in value)


NAME_MAX = 255  # bytes in one part of a path (Linux, macOS and Windows file systems alike)


def check_file_name(name: str, where: str) -> str:
    """`name` as a photo's file name: a relative path inside the image folder. Empty names,
    absolute paths and `..` segments are refused with the record (`where`), so no stage opens
    a file outside images/ (symlinks are checked when the files are opened: `photo_paths`)."""
    parts = name.replace("\\", "/").split("/")
    absolute = parts[0] == "" or (len(parts[0]) == 2 and parts[0][1] == ":")  # /x, \\x, C:
    why = ("is empty" if not name.strip() else "holds a NUL byte" if "\0" in name
           else "is an absolute path" if absolute else "has a '..' segment" if ".." in parts
           else f"has a part over {NAME_MAX} bytes, more than a file system holds"
           if any(len(p.encode("utf-8", "surrogateescape")) > NAME_MAX for p in parts)
           else "")
    if why:
        shown = name if len(name) <= 120 else f"{name[:60]}...{name[-20:]}"
        raise DataError(f"{where}: file name {shown!r} {why}; a photo's file name is a path "
                        "relative to the image folder with no '..' (e.g. '1000092795.jpg'): fix "
                        "the record or drop it")
    return name


def _photo(image: Any, index: int, path: Path, min_captions: int, source: str) -> Photo:
    if not isinstance(image, Mapping):
        raise DataError(f"{path}: images[{index}] is {type(image).__name__}, expected an "
                        f"object; {REGENERATE}")
    where = f"{path}: images[{index}]"
    imgid = _field(image, "imgid", int, where)
    where = f"{path}: images[{index}] (imgid {imgid})"
    filename = check_file_name(_field(image, "filename", str, where), where)
    split = _field(image, "split", str, where)
    if split not in SPLITS:
        raise DataError(f"{where}: unknown split {split!r}, expected one of {list(SPLITS)}; "
                        f"{REGENERATE}")
    captions = _captions(image, imgid, where)
    if source != PEOPLE:
        captions = _source_texts(image, source, where)
    if len(captions) < min_captions:
        raise DataError(f"{where}: {len(captions)} captions, fewer than min_captions="
                        f"{min_captions}; drop the photo or lower min_captions")
    return Photo(id=str(imgid), filename=filename, split=split, captions=captions)


def load_karpathy(path: str | Path, *, min_captions: int = 1,
                  source: str = PEOPLE) -> CaptionCorpus:
    """Read a Karpathy-split JSON file (Flickr30k, COCO or world) and validate every record;
    each photo's captions are those of `source` (the module docstring).

    Raises DataError naming the file and the record (index and imgid) for a missing file, text
    that is not JSON, a missing or mistyped field, an empty caption, a photo with fewer than
    `min_captions` captions, a duplicate imgid or an unknown split.
    """
    path = Path(path)
    if min_captions < 1:
        raise ValueError(f"min_captions must be >= 1, got {min_captions}")
    if not path.is_file():
        raise DataError(f"{path}: file not found; the world profile generates it (`dvc repro "
                        "world`); for Flickr30k place the Karpathy-split JSON "
                        "(dataset_flickr30k.json) there")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not valid JSON ({e}); re-download or regenerate the file") from e
    if not isinstance(doc, Mapping):
        raise DataError(f"{path}: top level is {type(doc).__name__}, expected an object with "
                        f"'dataset' and 'images'; {REGENERATE}")
    name = _field(doc, "dataset", str, f"{path}: top level")
    images = _field(doc, "images", list, f"{path}: top level")
    photos, seen, files, sentids = [], {}, {}, {}
    for i, image in enumerate(images):
        photo = _photo(image, i, path, min_captions, source)
        if photo.id in seen:
            raise DataError(f"{path}: images[{i}] (imgid {photo.id}) duplicates the imgid of "
                            f"images[{seen[photo.id]}]; give every photo a unique imgid")
        if photo.filename in files:
            raise DataError(f"{path}: images[{i}] (imgid {photo.id}) names the file "
                            f"{photo.filename!r} of images[{files[photo.filename]}]; two records "
                            f"cannot share one photo: fix the file name or drop the duplicate")
        for j, sentence in enumerate(image["sentences"]):
            sid = sentence.get("sentid")
            if sid is not None and sid in sentids:
                raise DataError(f"{path}: images[{i}] (imgid {photo.id}), sentence {j}: sentid "
                                f"{sid} is also used in images[{sentids[sid]}]; give every "
                                f"sentence a unique sentid; {REGENERATE}")
            sentids[sid] = i
        seen[photo.id], files[photo.filename] = i, i
        photos.append(photo)
    return CaptionCorpus(path=path, name=name, photos=tuple(photos))


# Karpathy's Flickr30k split (dataset_flickr30k.json; the rerun article, "Our rerun": fit on the
# 1,014 validation pairs, score on the 1,000 test pairs): photos per split, captions per photo,
# and the JPEGs of the flickr30k-images folder.
KARPATHY_FLICKR30K = {"train": 29000, "val": 1014, "test": 1000, "captions": 5,
                      "images": 31783}


def check_splits(corpus: CaptionCorpus) -> None:
    """Refuse a file without Karpathy's three splits: training photos (train/restval), the val
    photos the alignment is fitted on and the test photos it is scored on."""
    empty = [s for s in ("train", "val", "test") if not corpus.split(s)]
    if empty:
        counts = {s: sum(p.split == s for p in corpus.photos) for s in SPLITS}
        raise DataError(f"{corpus.path}: no photos in split(s) {empty} (found {counts}); the "
                        "protocol trains on 'train', fits on 'val' and scores on 'test': use "
                        "the Karpathy split file, whose photos carry those split names")


def karpathy_warnings(corpus: CaptionCorpus, n_files: int) -> list[str]:
    """Differences from Karpathy's Flickr30k that keep the protocol (train, fit, score) but
    change what the numbers can be compared with; `n_files` counts the image folder's files."""
    want = KARPATHY_FLICKR30K
    out = []
    if corpus.name != "flickr30k":
        out.append(f"{corpus.path}: dataset {corpus.name!r}, not 'flickr30k'")
    for split in ("train", "val", "test"):
        n = len(corpus.split(split))
        if n != want[split]:
            out.append(f"{corpus.path}: {n} {split} photos, Karpathy's Flickr30k has "
                       f"{want[split]:,}" + ("; R@k over other test pairs is not the paper's "
                                             "figure" if split == "test" else ""))
    restval = sum(p.split == "restval" for p in corpus.photos)
    if restval:
        out.append(f"{corpus.path}: {restval} 'restval' photos (trained on; Karpathy's "
                   "Flickr30k has none)")
    other = [p for p in corpus.photos if len(p.captions) != want["captions"]]
    if other:
        out.append(f"{corpus.path}: {len(other)} photos without exactly {want['captions']} "
                   f"captions (first: imgid {other[0].id}, {len(other[0].captions)})")
    if n_files != want["images"]:
        out.append(f"image folder: {n_files:,} files, flickr30k-images has {want['images']:,}")
    return out


def photo_paths(photos: Sequence[Photo], image_dir: Path, cache: Path | None = None
                ) -> list[Path]:
    """The files of `photos` in `image_dir`, confined to it. Symlink policy: a link (the file
    or a folder on its way) is followed when its target lies inside the image folder, or inside
    `cache` (the caller's own DVC cache, resolved: `dvc add` with `cache.type: symlink`); any
    other target is refused with the record, as is a file name that leaves the folder
    (`check_file_name`), a link loop and a name the file system cannot hold. The image folder
    itself may be a link (data kept on another disk): confinement is to its resolved path."""
    root = image_dir.resolve()
    out = []
    for photo in photos:
        where = f"{image_dir}: imgid {photo.id}"
        check_file_name(photo.filename, where)
        path = image_dir / photo.filename
        try:
            target = path.resolve()
        except (RuntimeError, OSError) as e:  # a link loop, a name too long for the disk
            raise DataError(f"{where} ({photo.split}): {photo.filename[:80]!r} cannot be "
                            f"resolved ({getattr(e, 'strerror', None) or e}); fix or remove "
                            "that file or link") from None
        if not target.is_relative_to(root) and not (cache and target.is_relative_to(cache)):
            raise DataError(f"{path} (imgid {photo.id}, {photo.split}): a symlink to {target}, "
                            f"outside {root}; copy the photo into the image folder (links are "
                            "followed only when they stay inside it or point into this "
                            "repository's DVC cache)")
        out.append(path)
    return out


def check_image_files(corpus: CaptionCorpus, image_dir: Path, cache: Path | None = None) -> int:
    """Open and decode every photo the file names (all splits); raise one DataError naming each
    missing, empty or undecodable file with its record, or a file outside the folder
    (`photo_paths`). Returns the folder's file count."""
    bad = []
    for i, (photo, path) in enumerate(zip(corpus.photos,
                                          photo_paths(corpus.photos, image_dir, cache),
                                          strict=True)):
        why = ("missing" if not path.is_file() else "empty (0 bytes)"
               if path.stat().st_size == 0 else _undecodable(path))
        if why:
            bad.append(f"{photo.filename} (images[{i}], imgid {photo.id}, {photo.split}): {why}")
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise DataError(f"{image_dir}: {len(bad)} photo(s) of {corpus.path} cannot be read: "
                        f"{'; '.join(bad[:5])}{more}; Flickr30k: copy the flickr30k-images JPEGs "
                        "there again (the world profile: `dvc repro world` regenerates them), "
                        "or drop those records")
    return sum(1 for p in image_dir.iterdir() if p.is_file())


def _undecodable(path: Path) -> str:
    """'' when PIL decodes the file whole, else why not (a truncated JPEG raises in load).
    PIL's LOAD_TRUNCATED_IMAGES is off while it decodes: importing WeasyPrint (the report)
    turns it on for the whole process, and a truncated JPEG then loads with grey rows."""
    allowed, ImageFile.LOAD_TRUNCATED_IMAGES = ImageFile.LOAD_TRUNCATED_IMAGES, False
    try:
        with Image.open(path) as im:
            im.draft("RGB", (64, 64))  # JPEG: decode at 1/8 scale, still the whole stream
            im.load()
            if min(im.size) < 1:
                return f"size {im.size}"
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        return f"does not decode ({' '.join(str(e).split())})"
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = allowed
    return ""


IMAGE_FORMATS = ("JPEG", "PNG")  # Flickr30k's JPEGs, the world's PNGs
# A file cut while copying lacks its format's end: JPEG's end-of-image marker (FF D9) after the
# scan data, PNG's IEND chunk. JPEG: the marker segments are walked by their lengths to the
# first start-of-scan (so an EXIF thumbnail's FF D9 does not count); after it a 0xFF byte of
# entropy-coded data is stuffed (FF 00), so FF D9 there is the marker. It is looked for in the
# file's last TAIL_BYTES first, then in the whole scan (bytes appended after it, a motion
# photo's video say, are allowed). PNG: the chunks are walked by their lengths to IEND.
TAIL_BYTES = 1024
JPEG_EOI, JPEG_SOS = b"\xff\xd9", 0xDA
JPEG_STANDALONE = {0x01, *range(0xD0, 0xD8)}  # TEM and RSTn carry no length
MAX_PIXELS = Image.MAX_IMAGE_PIXELS  # PIL's decompression-bomb bound (89,478,485 pixels)


def header_problem(path: Path) -> str:
    """'' when the file's header is a JPEG or PNG header of at most MAX_PIXELS pixels, else
    what is wrong; only the header and the segment or chunk structure are read (no decoding),
    so every photo of a data set can be checked before any stage runs: a file cut anywhere
    lacks its format's end (the comment above TAIL_BYTES). Damage inside the pixel data of a
    whole file passes here and fails when decoded (`check_image_files`)."""
    try:
        if path.stat().st_size == 0:
            return "empty (0 bytes)"
        with Image.open(path) as im:
            fmt, (w, h) = im.format, im.size
    except FileNotFoundError:
        return "missing"
    except Image.DecompressionBombError as e:  # raised from the header above twice the bound
        return f"over {MAX_PIXELS:,} pixels, PIL's decompression-bomb bound ({e})"
    except (OSError, ValueError, SyntaxError) as e:
        return f"not an image PIL can open ({' '.join(str(e).split())[:120]})"
    if fmt not in IMAGE_FORMATS:
        return f"a {fmt} file, not one of {list(IMAGE_FORMATS)}"
    if w * h > MAX_PIXELS or min(w, h) < 1:
        return f"{w} x {h} pixels, outside 1 to {MAX_PIXELS:,} (PIL's decompression-bomb bound)"
    with open(path, "rb") as f:
        ended = _png_ends(f) if fmt == "PNG" else _jpeg_ends(f, path.stat().st_size)
    return "" if ended else (f"truncated: the {fmt} data stops before its end marker (the "
                             "file was cut, while copying?)")


def _jpeg_scan_start(f: Any) -> int:
    """The offset of the first start-of-scan segment, walking the segments from SOI by their
    lengths; 2 (just after SOI) where the walk does not reach one."""
    pos = 2
    while True:
        f.seek(pos)
        head = f.read(4)
        if len(head) < 2 or head[0] != 0xFF:
            return 2
        if head[1] == 0xFF:  # a fill byte
            pos += 1
        elif head[1] == JPEG_SOS:
            return pos
        elif head[1] in JPEG_STANDALONE:
            pos += 2
        elif len(head) < 4:
            return 2
        else:
            pos += 2 + int.from_bytes(head[2:4], "big")


def _jpeg_ends(f: Any, size: int) -> bool:
    """Whether end-of-image follows the first start-of-scan (the comment above TAIL_BYTES)."""
    scan = _jpeg_scan_start(f)
    f.seek(max(scan, size - TAIL_BYTES))
    if JPEG_EOI in f.read():
        return True
    f.seek(scan)
    last = b""
    while chunk := f.read(1 << 20):
        if JPEG_EOI in last + chunk:
            return True
        last = chunk[-1:]
    return False


def _png_ends(f: Any) -> bool:
    """Whether the chunks, walked by their lengths from the signature, reach IEND whole."""
    pos = 8
    while True:
        f.seek(pos)
        head = f.read(8)
        if len(head) < 8:
            return False
        length = int.from_bytes(head[:4], "big")
        if head[4:] == b"IEND":
            return len(f.read(length + 4)) == length + 4
        pos += 12 + length


def check_image_headers(photos: Sequence[Photo], paths: Sequence[Path], source: str) -> None:
    """One DataError naming every photo whose header `header_problem` refuses, with its record
    (the first 5 and the count)."""
    bad = [f"{p.filename} (imgid {p.id}, {p.split}): {why}"
           for p, path in zip(photos, paths, strict=True) if (why := header_problem(path))]
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise DataError(f"{source}: {len(bad)} photo(s) cannot be used: {'; '.join(bad[:5])}"
                        f"{more}; replace those files with the data set's JPEGs, or drop their "
                        "records")


def pairfree_halves(train: Sequence[Photo]) -> tuple[list[Photo], list[Photo]]:
    """The pair-free pools' photos (assumed by us; the audit article's pools are 15,000 images
    and the captions of 15,000 others): the first half of the train split in dataset order
    gives the images, the last half the captions, so no photo is on both sides. Flickr30k's
    29,000 train photos give 14,500 a side. The align stage uses the first
    `eval.pairfree_pool` photos of each side, so that knob never reruns an embedding stage."""
    half = len(train) // 2
    return list(train[:half]), list(train[len(train) - half:])


DATA_HASH_CHARS = 16  # the data hash shown in tags and results (a prefix of the file's sha256)


def data_hash(path: Path) -> str:
    """The caption file's identity in results and MLflow tags: its sha256, first 16 hex."""
    return file_sha256(path)[:DATA_HASH_CHARS]


def eval_captions(photos: list[Any]) -> list[str]:
    """The evaluation caption of a photo: its first sentence (assumed by us)."""
    return [p.captions[0] for p in photos]
