"""The web-text subset as training samples: its tokenised texts on Hugging Face `datasets`
(map-style, Arrow files memory-mapped from disk), and a sample order that is a pure function
of (seed, sample position), so a killed run resumes to the same batches.

Why this engine (chosen among MosaicML Streaming, LitData, WebDataset and Hugging Face
datasets): `mosaicml-streaming` 0.13 requires an older transformers, numpy and huggingface_hub
than this project pins; WebDataset's tar streams and `datasets`' own streaming mode resume
from a shard and a shuffle buffer whose contents their state does not hold, so a resumed run
would see other batches. A memory-mapped Arrow table can be read at any row, so the order is
an index permutation per epoch and the whole state of the stream is one integer, the samples
drawn; 940M rows of token ids stay on disk, paged in as read.

- The subset is deduplicated when it is built (prh.recap_subset), so a row is an image. The
  samples are the n rows with a text of the run's sources; the sample at position p (0, 1,
  ... over the run) is rows[perm_e[p mod n]] of epoch e = p div n, perm_e the permutation of
  0 .. n-1 from (seed, e) (`epoch_permutation`). Step s reads positions s*G .. (s+1)*G - 1,
  G = batch_size x world size; rank r takes every world-th of them from r. The global batch
  does not depend on the number of ranks.
- Ranks hold nothing per row (the way Megatron-LM shares its shuffle index): rank 0 writes
  each epoch's rows[perm_e] once, before step 0, as one .npy file (uint32) per epoch
  (`EpochOrder.write`), and every rank memory-maps them (`EpochOrder.rows`). Within an epoch
  no row is drawn twice, so the unique images after S samples are min(S, n).
- A sample is one image: every text of the chosen sources (`StreamData.sample_texts`). A
  good-view sample reads them all (the views draw among them); a bad-view and a next-token
  sample read one, drawn uniformly (`read_texts`), as prh.views.choose_captions and
  prh.batches.ntp_groups draw on Flickr30k.
- Checkpoints at sample counts on a log-spaced schedule (`log_schedule`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prh.io import ContractError
from prh.recap import TOKENS


class StreamError(ContractError):
    """The tokenised subset or the stream's settings do not fit."""


@dataclass(frozen=True)
class StreamConfig:
    """params.yaml's `recap.train` run length and sources (harness.config.recap_train).

    sources: whose texts a sample holds (recap.sources' names; Table 7 sets alt-text alone,
    alt-text with recaptions and recaptions alone against each other). samples: images drawn
    over the run (Appendix C's 21.6M). warmup_samples: the learning rate's linear warmup.
    first_checkpoint, per_decade: the scored checkpoints (`log_schedule`). save_every: steps
    between resume checkpoints (a scored checkpoint also writes one)."""

    sources: tuple[str, ...]
    samples: int
    warmup_samples: int
    first_checkpoint: int
    per_decade: int
    save_every: int

    def validate(self) -> None:
        """Raise StreamError naming the key and the fix."""
        checks = [(len(self.sources) >= 1, "sources", "name at least one of recap.sources"),
                  (self.samples >= 1, "samples", "draw at least one sample"),
                  (0 <= self.warmup_samples <= self.samples, "warmup_samples", "use 0..samples"),
                  (1 <= self.first_checkpoint <= self.samples, "first_checkpoint",
                   "use 1..samples"),
                  (self.per_decade >= 1, "per_decade", "use 1 or more checkpoints per decade"),
                  (self.save_every >= 1, "save_every", "use 1 or more steps")]
        for ok, key, fix in checks:
            if not ok:
                raise StreamError(f"recap.train.{key}={getattr(self, key)!r}: {fix}")

    def checkpoints(self) -> tuple[int, ...]:
        """The sample counts scored (`log_schedule`)."""
        return log_schedule(self.first_checkpoint, self.samples, self.per_decade)


def log_schedule(first: int, last: int, per_decade: int) -> tuple[int, ...]:
    """Sample counts first * 10^(i / per_decade), rounded, below `last`, then `last`: evenly
    spaced on the log axis where next-token's curve is read against good views' score."""
    points = []
    i = 0
    while (value := round(first * 10 ** (i / per_decade))) < last:
        if not points or value > points[-1]:
            points.append(value)
        i += 1
    return (*points, last)


def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    """perm_e: 0 .. n-1 shuffled by numpy's generator from (seed, epoch), uint32 (4n bytes)."""
    out = np.arange(n, dtype=np.uint32)
    np.random.default_rng([seed, epoch]).shuffle(out)
    return out


def _fingerprint(folders: list[Path], sources: Sequence[str]) -> str:
    """sha256 (16 hex) of the sources read and, per folder, its summary.json and tokenizer
    files and its token files' names and sizes: what changes when the texts do (their counts
    per source, the tokenizer), read in milliseconds where hashing 940M rows would take
    minutes."""
    import hashlib

    h = hashlib.sha256(repr(list(sources)).encode())
    for folder in folders:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            rel = path.relative_to(folder).as_posix()
            h.update(f"{rel}:{path.stat().st_size}\n".encode())
            if path.name == "summary.json" or rel.startswith("tokenizer/"):
                h.update(path.read_bytes())
    return h.hexdigest()[:16]


def sample_rows(seed: int, start: int, count: int, rows: np.ndarray) -> np.ndarray:
    """Rows of sample positions start .. start + count - 1 (the module's order), computed in
    memory: the definition `EpochOrder` writes to files."""
    positions = np.arange(start, start + count, dtype=np.int64)
    n, out = rows.size, np.empty(count, dtype=np.int64)
    for epoch in np.unique(positions // n):
        at = positions // n == epoch
        out[at] = rows[epoch_permutation(seed, int(epoch), n)[positions[at] % n]]
    return out


class EpochOrder:
    """The order files of one (samples, seed): folder/eNNNN.npy, epoch e's rows[perm_e] as
    uint32, memory-mapped (each rank pages in only its positions)."""

    def __init__(self, folder: Path, n: int) -> None:
        self.folder, self.n = Path(folder), n
        self._open: dict[int, np.ndarray] = {}

    @classmethod
    def write(cls, folder: Path, seed: int, data: StreamData, samples: int) -> EpochOrder:
        """Write the files of the epochs `samples` samples reach (one process, before step 0;
        a file already there is kept: its name fixes its content)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob(".e*.tmp"):  # a write killed before its rename
            stale.unlink()
        for epoch in range(math.ceil(samples / data.available)):
            path = folder / f"e{epoch:04d}.npy"
            if path.exists():
                continue
            tmp = folder / f".{path.name}.{os.getpid()}.tmp"
            order = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint32,
                                              shape=(data.available,))
            at = 0
            for rows in data.texted_batches():  # the rows, a record batch at a time
                order[at:at + rows.size] = rows
                at += rows.size
            # rows[perm_e] in place, through a plain ndarray view: numpy shuffles a memmap
            # (a subclass) element by element, 150 times slower (4M rows: 17 s against .12 s)
            np.random.default_rng([seed, epoch]).shuffle(np.asarray(order))
            order.flush()
            del order
            os.replace(tmp, path)
        return cls(folder, data.available)

    def rows(self, start: int, count: int) -> np.ndarray:
        """Rows of sample positions start .. start + count - 1."""
        positions = np.arange(start, start + count, dtype=np.int64)
        out = np.empty(count, dtype=np.int64)
        for epoch in np.unique(positions // self.n):
            e = int(epoch)
            if e not in self._open:
                path = self.folder / f"e{e:04d}.npy"
                if not path.is_file():
                    raise StreamError(f"{path}: no order file for epoch {e}; the run's rank 0 "
                                      "writes them before step 0 (EpochOrder.write)")
                self._open[e] = np.load(path, mmap_mode="r")
            at = positions // self.n == epoch
            out[at] = self._open[e][positions[at] % self.n]
        return out


def read_texts(texts: Sequence[Sequence[int]], good_views: bool,
               rng: np.random.Generator) -> list[Sequence[int]]:
    """The texts a sample reads: all of them for good views; one drawn uniformly otherwise."""
    return list(texts) if good_views else [texts[int(rng.integers(len(texts)))]]


@dataclass(frozen=True)
class StreamData:
    """The tokenised subset, memory-mapped, restricted to `sources`: its samples are the rows
    (images) with at least one text of those sources, `available` of them."""

    table: Any  # datasets.Dataset
    sources: tuple[str, ...]
    available: int
    fingerprint: str  # what the samples are (`_fingerprint`): part of a run's identity

    @classmethod
    def open(cls, subset: Path, sources: Sequence[str],
             paraphrase: Path | None = None) -> StreamData:
        """The subset folder's tokenised texts (prh.recap_subset writes them), and the
        paraphrase source's beside them when `paraphrase` holds it
        (harness.stages.recap_paraphrase)."""
        import datasets

        path = Path(subset) / TOKENS
        table = open_tokens(path)
        if table is None:
            raise StreamError(f"{path}: no tokenised subset; run the recap stage "
                              "(`dvc repro pipelines/recap/dvc.yaml`)")
        extra = Path(paraphrase) / TOKENS if paraphrase else None
        more = open_tokens(extra) if extra is not None else None
        if more is not None:
            if more.num_rows != table.num_rows:
                raise StreamError(f"{extra}: {more.num_rows} rows for the subset's "
                                  f"{table.num_rows}; rerun the recap_paraphrase stage")
            table = datasets.concatenate_datasets([table, more], axis=1)
        missing = [s for s in sources if s not in table.column_names]
        if missing:
            raise StreamError(f"{path}: no source {missing} (it has {table.column_names}); "
                              "name sources the recap stage wrote in recap.train.sources, add "
                              "them to recap.sources, or set recap.paraphrase.model for "
                              "paraphrase")
        available = sum(int(np.count_nonzero(c)) for c in _texted(table, sources))
        if available == 0:
            raise StreamError(f"{path}: no image has a text of {list(sources)}")
        return cls(table.with_format(None), tuple(sources), available,
                   _fingerprint([Path(subset), *([extra.parent] if more is not None else [])],
                                sources))

    def texted_batches(self) -> Any:
        """The samples' rows (uint32), one record batch's at a time."""
        start = 0
        for texted in _texted(self.table, self.sources):
            yield (np.flatnonzero(texted) + start).astype(np.uint32)
            start += texted.size

    def texted_rows(self) -> np.ndarray:
        """The samples' rows at once (4 bytes each: the tests' and sample_rows' input)."""
        return np.concatenate(list(self.texted_batches()))

    def sample_texts(self, rows: np.ndarray) -> list[list[list[int]]]:
        """Per row drawn: its texts' token ids, sources in order."""
        picked = self.table.select_columns(list(self.sources))[np.asarray(rows).tolist()]
        return [[t for s in self.sources for t in picked[s][i]] for i in range(len(rows))]


def _texted(table: Any, sources: Sequence[str]) -> Any:
    """Per record batch of a tokens table: which rows hold a text of `sources` (one batch's
    arrays at a time, whatever the subset's size)."""
    import pyarrow.compute as pc

    for batch in table.data.table.select(list(sources)).to_batches():
        yield sum(pc.list_value_length(batch.column(s)).fill_null(0).to_numpy(
            zero_copy_only=False) for s in sources) > 0


def open_tokens(folder: Path) -> Any:
    """The Arrow files of a tokens folder (prh.recap_subset.tokenize_file writes them, one per
    shard) as one memory-mapped `datasets.Dataset`, or None when it holds none."""
    import datasets

    files = sorted(Path(folder).glob("*.arrow")) if Path(folder).is_dir() else []
    if not files:
        return None
    return datasets.concatenate_datasets([datasets.Dataset.from_file(str(f)) for f in files])


# an account row (prh.train_stream): the step, Accounting.row, the mean loss since the last
# row and the learning rate of the row's step
ACCOUNT = ("step", "samples", "texts", "tokens", "view_tokens", "unique_images", "loss", "lr")


@dataclass
class Accounting:
    """What a run has read, summed over ranks: samples (images drawn), texts and their tokens
    (cut at max_len - 2, what the encoder can see), view tokens (what the encoder computed on),
    and the unique images among the samples: min(samples, available), as every epoch draws
    each of the `available` images once (module docstring)."""

    samples: int
    texts: int
    tokens: int
    view_tokens: int
    available: int

    @classmethod
    def start(cls, available: int) -> Accounting:
        return cls(0, 0, 0, 0, available)

    def row(self) -> dict[str, int]:
        return {"samples": self.samples, "texts": self.texts, "tokens": self.tokens,
                "view_tokens": self.view_tokens,
                "unique_images": min(self.samples, self.available)}

    def state(self) -> dict[str, Any]:
        """Plain data for a checkpoint."""
        return {"samples": self.samples, "texts": self.texts, "tokens": self.tokens,
                "view_tokens": self.view_tokens, "available": self.available}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Accounting:
        return cls(d["samples"], d["texts"], d["tokens"], d["view_tokens"], d["available"])


def steps_for(samples: int, global_batch: int) -> int:
    """Steps that draw at least `samples` samples."""
    return math.ceil(samples / global_batch)
