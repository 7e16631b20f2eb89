"""Evaluation items found in the training data: captions (text rules) and photos (pHash).

Text rules, applied in order, each pair counted once under the first rule that fires:
- `exact`: the normalised evaluation caption equals a normalised training text;
- `prefix40`: same first 40 normalised characters. These two are the rules behind the paper's
  WIT count as the audit article reports it (section "Contamination and Fits, the Things the
  Paper Counted on Itself": 26 exact + 17 first-40-character matches = 43);
- `ngram13`: a shared word 13-gram (GPT-3 appendix C: an item sharing any N-gram with the
  training data is contaminated; lm-evaluation-harness takes n = 13). Captions shorter than 13
  words have no 13-gram and cannot match.

Images: perceptual hash (imagehash.phash, pinned at 4.3.2 in pyproject.toml because 4.0 changed
the encoding), a pair within `max_distance` bits of Hamming distance is a duplicate.

The clean subset is every evaluation photo that neither rule flags; `rescore` compares the
mean per-query outcome on all rows with the mean on clean rows (GPT-3-style).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import imagehash
import numpy as np
from PIL import Image

from harness.data.dvccache import dvc_cache_dir
from harness.records.schemas import CONTAMINATION
from prh.data import check_image_files, check_splits, load_karpathy, photo_paths
from prh.io import ContractError

TEXT_RULES = ("exact", "prefix40", "ngram13")
EVAL_SPLITS = ("val", "test")
N_EXAMPLES = 5


def normalise(text: str) -> str:
    """NFKC, lower case, punctuation to spaces, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = text.split()
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def caption_overlap(eval_captions: Mapping[str, str], train_texts: Iterable[str], *,
                    prefix_chars: int = 40, n: int = 13) -> dict[str, dict[str, str]]:
    """Evaluation captions (id -> text) found in the training texts.

    Returns id -> {"rule": exact|prefix40|ngram13, "eval": caption, "train": matching text}.
    """
    exact: dict[str, str] = {}
    prefix: dict[str, str] = {}
    grams: dict[tuple[str, ...], str] = {}
    for text in train_texts:
        norm = normalise(text)
        exact.setdefault(norm, text)
        if len(norm) >= prefix_chars:
            prefix.setdefault(norm[:prefix_chars], text)
        for g in ngrams(norm, n):
            grams.setdefault(g, text)
    found: dict[str, dict[str, str]] = {}
    for cid, caption in eval_captions.items():
        norm = normalise(caption)
        hit = _first_rule(norm, exact, prefix, grams, prefix_chars, n)
        if hit:
            found[cid] = {"rule": hit[0], "eval": caption, "train": hit[1]}
    return found


def _first_rule(norm: str, exact: Mapping[str, str], prefix: Mapping[str, str],
                grams: Mapping[tuple[str, ...], str], prefix_chars: int,
                n: int) -> tuple[str, str] | None:
    if norm in exact:
        return "exact", exact[norm]
    if len(norm) >= prefix_chars and norm[:prefix_chars] in prefix:
        return "prefix40", prefix[norm[:prefix_chars]]
    for g in ngrams(norm, n):
        if g in grams:
            return "ngram13", grams[g]
    return None


def phash_bits(paths: Sequence[Path], hash_size: int = 8) -> np.ndarray:
    """pHash of each image as a bool array [n, hash_size**2]; unreadable files raise."""
    rows = []
    for p in paths:
        try:
            with Image.open(p) as im:
                rows.append(imagehash.phash(im, hash_size=hash_size).hash.flatten())
        except (OSError, ValueError) as e:
            raise ContractError(f"{p}: cannot read image ({e}); regenerate or re-download it") \
                from e
    return np.asarray(rows, dtype=bool).reshape(len(paths), hash_size * hash_size)


def image_duplicates(bits_a: np.ndarray, bits_b: np.ndarray, max_distance: int,
                     *, same: bool = False) -> list[tuple[int, int, int]]:
    """(row in a, row in b, Hamming distance) for every pair within `max_distance` bits.
    With `same=True` (a and b are one set) each unordered pair is listed once."""
    out: list[tuple[int, int, int]] = []
    pa, pb = np.packbits(bits_a, axis=1), np.packbits(bits_b, axis=1)  # [n, bytes] uint8
    for i in range(0, len(pa), 256):
        d = np.bitwise_count(pa[i:i + 256, None, :] ^ pb[None]).sum(-1, dtype=np.int32)  # [r, m]
        for r, c in zip(*np.nonzero(d <= max_distance), strict=True):
            if not same or i + r < c:
                out.append((int(i + r), int(c), int(d[r, c])))
    return out


def clean_mask(ids: Sequence[str], flagged: Iterable[str]) -> np.ndarray:
    """True for rows whose id is not flagged (the clean subset)."""
    bad = set(flagged)
    return np.array([i not in bad for i in ids], dtype=bool)


def rescore(outcome: np.ndarray, mask: np.ndarray) -> dict[str, float | int]:
    """Mean per-query outcome on all rows and on the clean rows."""
    if outcome.shape != mask.shape or not mask.any():
        raise ValueError(f"rescore: {outcome.shape} outcomes, mask {mask.shape} with "
                         f"{int(mask.sum())} clean rows; need the same rows and one clean row")
    return {"n": int(outcome.size), "n_clean": int(mask.sum()), "full": float(outcome.mean()),
            "clean": float(outcome[mask].mean()),
            "shift": float(outcome[mask].mean() - outcome.mean())}


def scan(dataset: Path, image_dir: Path | None, *, prefix_chars: int = 40, n: int = 13,
         max_distance: int = 4, hash_size: int = 8) -> dict[str, Any]:
    """The contamination report of one Karpathy-split data set (runs/contamination.json)."""
    corpus = load_karpathy(dataset)
    check_splits(corpus)
    train = corpus.split("train")
    train_texts = [c for p in train for c in p.captions]
    report: dict[str, Any] = {
        "schema": str(CONTAMINATION), "dataset": str(dataset),
        "params": {"prefix_chars": prefix_chars, "ngram": n, "max_distance": max_distance,
                   "hash_size": hash_size, "imagehash": imagehash.__version__,
                   "eval_caption": "first sentence of each photo"},
        "captions": {}, "images": {}, "clean_ids": {}}
    flagged: dict[str, set[str]] = {s: set() for s in EVAL_SPLITS}
    for split in EVAL_SPLITS:
        photos = corpus.split(split)
        found = caption_overlap({p.id: p.captions[0] for p in photos}, train_texts,
                                prefix_chars=prefix_chars, n=n)
        counts = {r: sum(v["rule"] == r for v in found.values()) for r in TEXT_RULES}
        report["captions"][split] = {"n": len(photos), "n_flagged": len(found), "counts": counts,
                                     "examples": [{"id": k, **v} for k, v in
                                                  list(found.items())[:N_EXAMPLES]]}
        flagged[split] |= set(found)
    if image_dir is not None:
        # names each unreadable photo with its record
        check_image_files(corpus, image_dir, dvc_cache_dir())
        report["images"] = _image_report(corpus, image_dir, max_distance, hash_size, flagged)
    for split in EVAL_SPLITS:
        report["clean_ids"][split] = [p.id for p in corpus.split(split)
                                      if p.id not in flagged[split]]
    return report


def _image_report(corpus: Any, image_dir: Path, max_distance: int, hash_size: int,
                  flagged: dict[str, set[str]]) -> dict[str, Any]:
    splits = {s: corpus.split(s) for s in ("train", *EVAL_SPLITS)}
    bits = {s: phash_bits(photo_paths(ps, image_dir, dvc_cache_dir()), hash_size)
            for s, ps in splits.items()}
    out = {}
    for a, b in (("val", "train"), ("test", "train"), ("test", "val")):
        pairs = image_duplicates(bits[a], bits[b], max_distance)
        flagged[a] |= {splits[a][i].id for i, _, _ in pairs}
        out[f"{a}~{b}"] = {"n_pairs": len(pairs),
                           "n_eval_photos": len({i for i, _, _ in pairs}),
                           "examples": [{"eval": splits[a][i].filename,
                                         "other": splits[b][j].filename, "distance": d}
                                        for i, j, d in pairs[:N_EXAMPLES]]}
    return out
