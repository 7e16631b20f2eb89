"""COCO captions for Table 3's COCO column: the same every-layer evaluation as WIT-1024
(prh.features, prh.layers) on the user's copy of COCO in Karpathy's split (dataset_coco.json
and the images it names), never downloaded at run time.

Which COCO images the paper scored is not stated; assumed here (and in the registry, and in
every verdict on the column): the Karpathy test split's 5,000 images, each with its first
caption, as platonic-rep scores WIT's caption 0. The test images all come from val2014, so
`images` is that folder. Every record and image header is checked on reading (prh.data), before
any model runs; the images are decoded a batch at a time (`LazyImages`), since 5,000 decoded
photos would take gigabytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

N_ROWS = 5000  # assumed (module docstring): the Karpathy test split of COCO


class CocoError(ValueError):
    """The COCO copy is missing, too small, or has a bad record or image."""


class LazyImages(Sequence[Any]):
    """The images at `paths` as RGB PIL images, decoded when indexed."""

    def __init__(self, paths: Sequence[Path]):
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...

    def __getitem__(self, i: int | slice) -> Any:
        from PIL import Image

        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        with Image.open(self.paths[i]) as im:
            return im.convert("RGB")

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))


@dataclass(frozen=True)
class Coco:
    """The scored pairs in file order: one caption per image and the image files."""

    texts: list[str]
    paths: list[Path]

    def decoded(self) -> LazyImages:
        return LazyImages(self.paths)

    def digest(self) -> str:
        """sha256 (first 16 hex) of every caption and every image file's bytes, in order."""
        h = hashlib.sha256()
        for text, path in zip(self.texts, self.paths, strict=True):
            h.update(text.encode())
            h.update(hashlib.sha256(path.read_bytes()).digest())
        return h.hexdigest()[:16]


def read_coco(dataset: str | Path, images: str | Path, *, split: str = "test",
              n_rows: int = N_ROWS, caption_idx: int = 0) -> Coco:
    """The first `n_rows` photos of `split` with their caption `caption_idx`, every record and
    image header checked (prh.data); CocoError names the file, the record and the fix."""
    from prh.data import DataError, check_image_headers, load_karpathy, photo_paths

    try:
        corpus = load_karpathy(dataset)
        photos = corpus.split(split)
        if len(photos) < n_rows:
            raise CocoError(f"{dataset}: {len(photos)} photos in split {split!r}, "
                            f"wit1024.coco.n_rows asks for {n_rows}; use Karpathy's "
                            "dataset_coco.json (5,000 test photos) or lower n_rows for a "
                            "deliberate subset")
        photos = photos[:n_rows]
        short = [p for p in photos if len(p.captions) <= caption_idx]
        if short:
            raise CocoError(f"{dataset}: imgid {short[0].id} has {len(short[0].captions)} "
                            f"captions, caption_idx is {caption_idx} ({len(short)} such "
                            "photos); set wit1024.coco.caption_idx lower")
        paths = photo_paths(photos, Path(images))
        check_image_headers(photos, paths, str(images))
    except DataError as e:
        raise CocoError(str(e)) from e
    return Coco([p.captions[caption_idx] for p in photos], paths)
