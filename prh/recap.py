"""Recap-DataComp-1B's texts (Li et al. 2024, arXiv 2406.08478) from the user's parquet shards.

The paper trains its web-text encoders on the texts of Recap-DataComp images (Table 7,
Appendix C: 2.24M, 50M, 100M and 940M images); only the text columns are read, no image.

- The subset of N images (assumed by us; the paper does not say how its subsets were drawn):
  the N distinct keys with the smallest h = md5(f"{seed}:{key}") (`key_order`, `recap.seed`)
  among rows with a non-blank text of a source; a key listed on several rows is one image,
  read from its first row in canonical order (the shard files sorted by their path inside
  the folder, rows in file order). It is deduplicated by construction, depends neither on how
  the files were listed or copied nor on how many workers build it, and the subsets nest
  (2.24M inside 50M inside 100M inside 940M: the N smallest h are among the M smallest).
- Text sources are data: each source names its columns (`RecapConfig.sources`, e.g. the
  dataset card's `org_caption` alt-text and `re_caption` recaption); a sample's texts of a
  source are the non-blank strings among them (a null or blank cell is not a text).
- Every shard is checked from its footer (columns, their types, row count) before any task
  reads a row. A row with a null key names no image: it is left out and counted (with the
  first such shard and row), as is a row without a text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prh.io import ContractError

TOKENS = "tokens"  # the subset folder's tokenised texts: one Arrow stream file per texts file
SUBSET_SIZES = (2_240_000, 50_000_000, 100_000_000, 940_000_000)  # Appendix C's image counts
OBTAIN = ("place Recap-DataComp-1B's parquet shards there (only the text columns are read; "
          "e.g. `huggingface-cli download UCSC-VLAA/Recap-DataComp-1B --repo-type dataset`)")


class RecapError(ContractError):
    """The shards or the recap section do not fit; the message names the file and the fix."""


@dataclass(frozen=True)
class RecapConfig:
    """params.yaml's `recap` section (harness.config.recap)."""

    data: Path
    images: int                                  # N: the N distinct keys of smallest h
    sources: tuple[tuple[str, tuple[str, ...]], ...]  # (source, its columns), in params order
    key: str = "key"                             # the column naming the image
    vocab_size: int = 30522                      # BERT WordPiece size, as the flickr30k profile
    tokenizer_sample: int = 1_000_000            # texts the tokenizer is trained on (h order)
    seed: int = 0                                # h's seed (`key_order`)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "recap") -> RecapConfig:
        """Strict build: unknown or missing keys, wrong types and empty sources raise."""
        known = {"data", "images", "sources", "key", "vocab_size", "tokenizer_sample", "seed",
                 "train", "score", "paraphrase"}  # the stages after the subset's own
        if not isinstance(d, Mapping):
            raise RecapError(f"{where}: expected a mapping with {sorted(known)}")
        unknown = sorted(set(d) - known)
        missing = sorted({"data", "images", "sources"} - set(d))
        if unknown or missing:
            raise RecapError(f"{where}: unknown key(s) {unknown}, missing key(s) {missing}; "
                             f"the keys are {sorted(known)}")
        for key in ("images", "vocab_size", "tokenizer_sample"):
            value = d.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**10:
                raise RecapError(f"{where}.{key}: a whole number from 1 to 1e10, got {value!r}")
        seed = d.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise RecapError(f"{where}.seed: a whole number from 0, got {seed!r}")
        for key in ("data", "key"):
            if not isinstance(d.get(key, "key"), str) or not d.get(key, "key"):
                raise RecapError(f"{where}.{key}: a non-empty string, got {d.get(key)!r}")
        raw = d["sources"]
        if not isinstance(raw, Mapping) or not raw or not all(
                isinstance(name, str) and name and isinstance(cols, list) and cols
                and all(isinstance(c, str) and c for c in cols) for name, cols in raw.items()):
            raise RecapError(f"{where}.sources: a mapping of source name to a non-empty list of "
                             f"column names (e.g. {{alt: [org_caption], recap: [re_caption]}}), "
                             f"got {raw!r:.80}")
        taken = sorted({"row", "key", "h"} & set(raw))
        if taken:
            raise RecapError(f"{where}.sources: {taken} name(s) the written subset's own "
                             "columns (row, key, h); call the source something else")
        return cls(data=Path(d["data"]), images=d["images"], key=d.get("key", "key"),
                   sources=tuple((name, tuple(cols)) for name, cols in raw.items()),
                   vocab_size=d.get("vocab_size", 30522),
                   tokenizer_sample=d.get("tokenizer_sample", 1_000_000), seed=seed)

    @property
    def text_columns(self) -> list[str]:
        """Every source's columns, each once, in params order."""
        out: list[str] = []
        for _, cols in self.sources:
            out += [c for c in cols if c not in out]
        return out

    @property
    def columns(self) -> list[str]:
        """The key column, then the text columns."""
        return [self.key, *(c for c in self.text_columns if c != self.key)]


@dataclass(frozen=True)
class Shard:
    path: Path
    rows: int


def list_shards(root: Path) -> list[Path]:
    """Every *.parquet file under `root`, in canonical order (module docstring)."""
    if not root.is_dir():
        raise RecapError(f"{root}: no such folder; {OBTAIN}")
    shards = sorted(root.rglob("*.parquet"), key=lambda p: p.relative_to(root).as_posix())
    if not shards:
        raise RecapError(f"{root}: no *.parquet file; {OBTAIN}")
    return shards


def check_shards(root: Path, columns: Sequence[str], n_images: int,
                 text_columns: Sequence[str] = ()) -> list[Shard]:
    """Every shard, checked from its footer before any row is read: each must be readable
    parquet holding every column and `text_columns` as strings (or all null); the folder must
    hold at least `n_images` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = []
    for path in list_shards(root):
        try:
            meta = pq.read_metadata(path)
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            raise RecapError(f"{path}: not a readable parquet file ({' '.join(str(e).split())})"
                             f"; download the shard again or remove it") from e
        schema = meta.schema.to_arrow_schema()
        absent = [c for c in columns if c not in schema.names]
        if absent:
            raise RecapError(f"{path}: no column(s) {absent} (it has {sorted(schema.names)}); "
                             "name the columns in params.yaml's recap.key and recap.sources")
        typed = [f"{c} ({schema.field(c).type})" for c in text_columns
                 if schema.field(c).type not in (pa.string(), pa.large_string(), pa.null())]
        if typed:
            raise RecapError(f"{path}: text column(s) {typed} do not hold strings; a source's "
                             "columns are text: fix recap.sources")
        out.append(Shard(path, meta.num_rows))
    total = sum(s.rows for s in out)
    if total < n_images:
        raise RecapError(f"{root}: {total:,} rows in {len(out)} shard(s), fewer than "
                         f"recap.images = {n_images:,}; copy more shards or lower recap.images "
                         f"(Appendix C's sizes: {', '.join(f'{n:,}' for n in SUBSET_SIZES)})")
    return out


def nonblank(values: Any) -> np.ndarray:
    """Per cell of a pyarrow string column: holds a non-blank string (Unicode whitespace
    trimmed, as str.strip)."""
    import pyarrow.compute as pc

    if values.type == "null":
        return np.zeros(len(values), bool)
    full = pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0)
    return np.asarray(pc.fill_null(full, False), dtype=bool)


def text_counts(table: Any, columns: Sequence[str]) -> np.ndarray:
    """Per row of a pyarrow batch or table: how many of `columns` hold a non-blank string."""
    return sum((nonblank(table.column(c)).astype(np.int64) for c in columns),
               np.zeros(table.num_rows, np.int64))


def source_texts(table: Any, sources: Sequence[tuple[str, Sequence[str]]]) -> dict[str, Any]:
    """Per source, a pyarrow list column: each row's non-blank strings among the source's
    columns, stripped, in column order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = {}
    for name, cols in sources:
        where, values = [np.zeros(0, np.int64)], [pa.array([], pa.string())]
        for j, c in enumerate(cols):
            at = np.flatnonzero(nonblank(table.column(c)))
            where.append(at * len(cols) + j)  # row-major, then the column's place
            values.append(pc.utf8_trim_whitespace(table.column(c).take(at).cast(pa.string()))
                          .combine_chunks())
        key = np.concatenate(where)
        order = np.argsort(key, kind="stable")
        offsets = np.r_[0, np.cumsum(np.bincount(key[order] // len(cols),
                                                  minlength=table.num_rows))]
        out[name] = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()),
                                             pa.concat_arrays(values).take(order))
    return out


def key_order(seed: int, keys: Any) -> np.ndarray:
    """h(key): the first 8 bytes of md5(f"{seed}:{key}") as a big-endian integer (uint64), the
    key's place in the subset's order (module docstring). Keys are read as strings. Two keys
    whose h agree count as one image (about n^2 / 2^65 pairs: .02 at 940M)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    prefix = f"{seed}:".encode()
    strings = pc.cast(keys, pa.string()).to_pylist()
    digest = b"".join(hashlib.md5(prefix + k.encode()).digest()[:8] for k in strings)
    return np.frombuffer(digest, ">u8").astype(np.uint64)
