"""The zero-shot class sets, read from the user's copies (nothing is downloaded):

- ImageNet-100 (`read_in100`): the 100 classes of Tian et al. 2020 (CMC), the benchmark's
  `IN100.txt`, scored on their ImageNet-1k validation images: every image found, which is 50 a
  class (5,000) in a whole copy; `IN100_N` is that count, and the caller says when a copy
  differs. The folder
  holds `classes.tsv` (one line per class: wnid, class name, WordNet definition, tab-separated)
  and `val/WNID/*` (the validation images sorted into one folder per class, the layout of
  torchvision's ImageFolder and of most ImageNet copies).
- CIFAR-10 and CIFAR-100 (`read_cifar`): the python pickles of the official archives
  (`cifar-10-batches-py`, `cifar-100-python`), the 50,000 training images as the benchmark
  scores them, class names from the archive's meta file (`label_names`, `fine_label_names`).

Every reader checks the whole set against what the benchmark scores before an image is
embedded, and names the file and the fix.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from prh.io import ContractError

IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
CIFAR = {  # name -> (archive folder, training batches, label key, class-name key, meta file)
    "cifar10": ("cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)),
                b"labels", b"label_names", "batches.meta"),
    "cifar100": ("cifar-100-python", ("train",), b"fine_labels", b"fine_label_names", "meta")}
CIFAR_N = 50_000  # training images of either archive
IN100_N = 5_000  # ImageNet-1k's validation images of the 100 classes, 50 each


@dataclass(frozen=True)
class ClassSet:
    """Images with integer labels into `names`; `images` are paths or uint8 [n, 32, 32, 3]
    arrays; `definitions` is set for ImageNet-100 only."""

    name: str
    names: tuple[str, ...]
    labels: np.ndarray  # int64 [n]
    images: list[Path] | np.ndarray
    definitions: tuple[str, ...] = ()


def in100_wnids() -> tuple[str, ...]:
    """The 100 WordNet ids of ImageNet-100 (Tian et al. 2020), shipped as package data."""
    text = resources.files("prh").joinpath("in100_wnids.txt").read_text()
    return tuple(line.strip() for line in text.splitlines()
                 if line.strip() and not line.startswith("#"))


def read_in100(root: str | Path) -> ClassSet:
    """ImageNet-100 from `root` (module docstring), in `in100_wnids()` order. ContractError when
    classes.tsv does not list exactly those 100 classes with a name and a definition, or a
    class has no validation image."""
    root = Path(root)
    path = root / "classes.tsv"
    fix = ("write one line per ImageNet-100 class: WNID<TAB>class name<TAB>WordNet definition "
           "(README, \"Zero-shot class sets\")")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ContractError(f"{path}: cannot read the class list ({e}); {fix}") from e
    rows: dict[str, tuple[str, str]] = {}
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not all(p.strip() for p in parts):
            raise ContractError(f"{path}, line {i}: expected 3 tab-separated fields, got "
                                f"{line[:80]!r}; {fix}")
        wnid, name, definition = (p.strip() for p in parts)
        if wnid in rows:
            raise ContractError(f"{path}, line {i}: {wnid} listed twice; {fix}")
        rows[wnid] = (name, definition)
    wnids = in100_wnids()
    missing, extra = sorted(set(wnids) - set(rows)), sorted(set(rows) - set(wnids))
    if missing or extra:
        raise ContractError(f"{path}: not the ImageNet-100 classes: {len(missing)} missing "
                            f"(first {missing[:5]}), {len(extra)} not in it (first {extra[:5]});"
                            f" {fix}")
    images: list[Path] = []
    labels: list[int] = []
    for c, wnid in enumerate(wnids):
        folder = root / "val" / wnid
        files = sorted(p for p in folder.glob("*") if p.suffix.lower() in IMAGE_SUFFIXES) \
            if folder.is_dir() else []
        if not files:
            raise ContractError(f"{folder}: no validation image of {wnid} ({rows[wnid][0]}); "
                                "sort ImageNet-1k's validation images into val/WNID/ folders")
        images += files
        labels += [c] * len(files)
    return ClassSet("in100", tuple(rows[w][0] for w in wnids), np.array(labels, dtype=np.int64),
                    images, tuple(rows[w][1] for w in wnids))


def _unpickle(path: Path) -> dict:
    try:
        with path.open("rb") as f:
            return pickle.load(f, encoding="bytes")
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        raise ContractError(f"{path}: cannot read the CIFAR batch ({e}); unpack the official "
                            "python archive there") from e


def read_cifar(root: str | Path, name: str) -> ClassSet:
    """CIFAR-10 or CIFAR-100's 50,000 training images from the official python archive unpacked
    under `root`. ContractError on a missing or short archive."""
    folder, batches, label_key, names_key, meta = CIFAR[name]
    base = Path(root) / folder
    path = base / meta
    try:
        names = tuple(n.decode() for n in _unpickle(path)[names_key])
        data, labels = [], []
        for b in batches:
            path = base / b
            d = _unpickle(path)
            data.append(np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3 * 32 * 32))
            labels += [int(v) for v in d[label_key]]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ContractError(f"{path}: not a batch of the official {name} python archive "
                            f"({type(e).__name__}: {e}); unpack that archive there") from e
    x = np.concatenate(data)
    if x.shape != (CIFAR_N, 3 * 32 * 32) or len(labels) != CIFAR_N:
        raise ContractError(f"{base}: {x.shape[0]} training images of width {x.shape[1]}, "
                            f"expected {CIFAR_N} of 3072; unpack the whole official archive")
    y = np.array(labels, dtype=np.int64)
    if y.min() < 0 or y.max() >= len(names):
        raise ContractError(f"{base}: labels outside the {len(names)} classes of {meta}")
    return ClassSet(name, names, y, x.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
