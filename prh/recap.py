"""Recap-DataComp-1B's texts (Li et al. 2024, arXiv 2406.08478) from the user's parquet shards.

The paper trains its web-text encoders on the texts of Recap-DataComp images (Table 7,
Appendix C: 2.24M, 50M, 100M and 940M images); only the text columns are read, no image.

- Canonical order (assumed by us): the shard files sorted by their path inside the folder,
  rows in file order; one row is one image. The subset of N images is the first N rows of
  that order, so the subsets nest (2.24M inside 50M inside 100M inside 940M) and do not depend
  on how the files were listed or copied.
- Text sources are data: each source names its columns (`RecapConfig.sources`, e.g. the
  dataset card's `org_caption` alt-text and `re_caption` recaption); a sample's texts of a
  source are the non-blank strings among them (a null or blank cell is not a text).
- Every shard the subset reads is checked from its footer (columns, their types, row count)
  before any row is read; a null key is refused when it is met.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prh.io import ContractError

TOKENS = "tokens"  # the subset folder's tokenised texts (datasets.Dataset.save_to_disk)
KEY_ID = "key_id"  # their column naming the image: its index among the subset's unique keys
SUBSET_SIZES = (2_240_000, 50_000_000, 100_000_000, 940_000_000)  # Appendix C's image counts
OBTAIN = ("place Recap-DataComp-1B's parquet shards there (only the text columns are read; "
          "e.g. `huggingface-cli download UCSC-VLAA/Recap-DataComp-1B --repo-type dataset`)")


class RecapError(ContractError):
    """The shards or the recap section do not fit; the message names the file and the fix."""


@dataclass(frozen=True)
class RecapConfig:
    """params.yaml's `recap` section (harness.config.recap)."""

    data: Path
    images: int                                  # N: the first N rows of the canonical order
    sources: tuple[tuple[str, tuple[str, ...]], ...]  # (source, its columns), in params order
    key: str = "key"                             # the column naming the image
    vocab_size: int = 30522                      # BERT WordPiece size, as the flickr30k profile
    tokenizer_sample: int = 1_000_000            # texts the tokenizer is trained on (the first)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "recap") -> RecapConfig:
        """Strict build: unknown or missing keys, wrong types and empty sources raise."""
        known = {"data", "images", "sources", "key", "vocab_size", "tokenizer_sample",
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
        taken = sorted({"row", "key", KEY_ID} & set(raw))
        if taken:
            raise RecapError(f"{where}.sources: {taken} name(s) the written subset's own "
                             f"columns (row, key, {KEY_ID}); call the source something else")
        return cls(data=Path(d["data"]), images=d["images"], key=d.get("key", "key"),
                   sources=tuple((name, tuple(cols)) for name, cols in raw.items()),
                   vocab_size=d.get("vocab_size", 30522),
                   tokenizer_sample=d.get("tokenizer_sample", 1_000_000))

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
    """The shards the first `n_images` rows lie in, checked from their footers: each must be
    readable parquet holding every column, `text_columns` as strings (or all null), no null
    key (`columns[0]`) among those rows (a row group whose statistics count nulls is read to
    name the first, as the file numbers its rows), and the folder at least `n_images` rows.
    Shards past those rows are not opened."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out, total = [], 0
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
        _no_null_key(path, meta, columns[0], n_images - total)
        out.append(Shard(path, meta.num_rows))
        total += meta.num_rows
        if total >= n_images:
            return out
    raise RecapError(f"{root}: {total:,} rows in {len(out)} shard(s), fewer than recap.images = "
                     f"{n_images:,}; copy more shards or lower recap.images (Appendix C's "
                     f"sizes: {', '.join(f'{n:,}' for n in SUBSET_SIZES)})")


def _no_null_key(path: Path, meta: Any, key: str, rows: int) -> None:
    """RecapError naming the first row of `path`'s first `rows` rows whose `key` is null, from
    the row groups' null counts (a row group without statistics is read)."""
    import pyarrow.parquet as pq

    column = meta.schema.to_arrow_schema().get_field_index(key)
    start = 0
    for group in range(meta.num_row_groups):
        if start >= rows:
            return
        stats = meta.row_group(group).column(column).statistics
        n = meta.row_group(group).num_rows
        if stats is None or not stats.has_null_count or stats.null_count:
            values = pq.ParquetFile(path).read_row_group(group, columns=[key]).column(0)
            nulls = [i for i, v in enumerate(values.to_pylist()[:rows - start]) if v is None]
            if nulls:
                raise RecapError(f"{path}: row {start + nulls[0]} has no {key!r}; every image "
                                 "needs its key: fix the shard or name another key column in "
                                 "recap.key")
        start += n


def iter_subset(shards: Sequence[Shard], columns: Sequence[str], n_images: int,
                batch_rows: int = 65_536) -> Iterator[tuple[int, int, dict[str, list[Any]]]]:
    """(shard index, first row index, {column: values}) for consecutive batches of the first
    `n_images` rows in canonical order, reading only `columns`."""
    import pyarrow.parquet as pq

    row = 0
    for index, shard in enumerate(shards):
        for batch in pq.ParquetFile(shard.path).iter_batches(batch_size=batch_rows,
                                                             columns=list(columns)):
            take = min(batch.num_rows, n_images - row)
            if take <= 0:
                return
            yield index, row, batch.slice(0, take).to_pydict()
            row += take


def source_texts(batch: Mapping[str, list[Any]],
                 sources: Sequence[tuple[str, Sequence[str]]]) -> dict[str, list[list[str]]]:
    """Per source, per row: the non-blank strings among the source's columns, stripped."""
    n = len(next(iter(batch.values()))) if batch else 0
    return {name: [[v.strip() for c in cols for v in [batch[c][i]]
                    if isinstance(v, str) and v.strip()] for i in range(n)]
            for name, cols in sources}


def key_hashes(keys: Sequence[Any]) -> np.ndarray:
    """64-bit hashes (blake2b) of the image keys, for counting unique images in 8 bytes each
    (about n^2 / 2^65 collisions: .02 at 940M)."""
    return np.array([int.from_bytes(hashlib.blake2b(str(k).encode(), digest_size=8).digest(),
                                    "little") for k in keys], dtype=np.uint64)
