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

- The sample at position p (0, 1, ... over the run) is row perm_e[p mod n] of epoch
  e = p div n, perm_e the permutation of the n rows from (seed, e) (`sample_rows`). Step s
  reads positions s*G .. (s+1)*G - 1, G = batch_size x world size; rank r takes every
  world-th of them from r. The global batch does not depend on the number of ranks.
- A sample is one image: every text of the chosen sources (`StreamData.sample_texts`). A
  good-view sample reads them all (the views draw among them); a bad-view and a next-token
  sample read one, drawn uniformly (`read_texts`), as prh.views.choose_captions and
  prh.batches.ntp_groups draw on Flickr30k.
- Checkpoints at sample counts on a log-spaced schedule (`log_schedule`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prh.io import ContractError
from prh.recap import KEY_ID, TOKENS


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


@functools.lru_cache(maxsize=2)
def _permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n).astype(np.int32)


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


def sample_rows(seed: int, start: int, count: int, n: int) -> np.ndarray:
    """Rows (0 .. n-1) of sample positions start .. start + count - 1 (the module's order)."""
    positions = np.arange(start, start + count, dtype=np.int64)
    out = np.empty(count, dtype=np.int64)
    for epoch in np.unique(positions // n):
        at = positions // n == epoch
        out[at] = _permutation(seed, int(epoch), n)[positions[at] % n]
    return out


def read_texts(texts: Sequence[Sequence[int]], good_views: bool,
               rng: np.random.Generator) -> list[Sequence[int]]:
    """The texts a sample reads: all of them for good views; one drawn uniformly otherwise."""
    return list(texts) if good_views else [texts[int(rng.integers(len(texts)))]]


@dataclass(frozen=True)
class StreamData:
    """The tokenised subset, memory-mapped, restricted to `sources`: `rows` are the table's
    rows with at least one text of those sources (the samples), `key_ids` their images."""

    table: Any  # datasets.Dataset
    sources: tuple[str, ...]
    rows: np.ndarray  # int32: 940M rows fit, at half the memory
    key_ids: np.ndarray  # int32
    n_keys: int
    fingerprint: str  # what the samples are (`_fingerprint`): part of a run's identity

    @classmethod
    def open(cls, subset: Path, sources: Sequence[str],
             paraphrase: Path | None = None) -> StreamData:
        """The subset folder's tokenised texts (prh.recap_subset writes them), and the
        paraphrase source's beside them when `paraphrase` holds it
        (harness.stages.recap_paraphrase)."""
        import datasets
        import pyarrow.compute as pc

        path = Path(subset) / TOKENS
        if not (path / "dataset_info.json").is_file():
            raise StreamError(f"{path}: no tokenised subset; run the recap stage "
                              "(`dvc repro pipelines/recap/dvc.yaml`)")
        table = datasets.load_from_disk(str(path))
        extra = Path(paraphrase) / TOKENS if paraphrase else None
        if extra is not None and (extra / "dataset_info.json").is_file():
            more = datasets.load_from_disk(str(extra))
            if more.num_rows != table.num_rows:
                raise StreamError(f"{extra}: {more.num_rows} rows for the subset's "
                                  f"{table.num_rows}; rerun the recap_paraphrase stage")
            table = datasets.concatenate_datasets([table, more], axis=1)
        missing = [s for s in sources if s not in table.column_names]
        if missing:
            have = [c for c in table.column_names if c != KEY_ID]
            raise StreamError(f"{path}: no source {missing} (it has {have}); name sources "
                              "the recap stage wrote in recap.train.sources, add them to "
                              "recap.sources, or set recap.paraphrase.model for paraphrase")
        arrow = table.data.table
        counts = sum(pc.list_value_length(arrow.column(s)).fill_null(0).to_numpy()
                     for s in sources)
        rows = np.flatnonzero(counts > 0).astype(np.int32)
        if rows.size == 0:
            raise StreamError(f"{path}: no image has a text of {list(sources)}")
        keys = arrow.column(KEY_ID).to_numpy()
        return cls(table.with_format(None), tuple(sources), rows,
                   keys[rows].astype(np.int32), int(keys.max()) + 1,
                   _fingerprint([Path(subset), *([extra.parent] if extra else [])], sources))

    def sample_texts(self, samples: np.ndarray) -> list[list[list[int]]]:
        """Per sample (indices into `rows`): its texts' token ids, sources in order."""
        picked = self.table.select_columns(list(self.sources))[self.rows[samples].tolist()]
        return [[t for s in self.sources for t in picked[s][i]] for i in range(len(samples))]


# an account row (prh.train_stream): the step, Accounting.row, the mean loss since the last
# row and the learning rate of the row's step
ACCOUNT = ("step", "samples", "texts", "tokens", "view_tokens", "unique_images", "loss", "lr")


@dataclass
class Accounting:
    """What a run has read, summed over ranks: samples (images drawn), texts and their tokens
    (cut at max_len - 2, what the encoder can see), view tokens (what the encoder computed on),
    and the unique images among the samples (`seen`, one flag per key)."""

    samples: int
    texts: int
    tokens: int
    view_tokens: int
    seen: np.ndarray

    @classmethod
    def start(cls, n_keys: int) -> Accounting:
        return cls(0, 0, 0, 0, np.zeros(n_keys, dtype=bool))

    def row(self) -> dict[str, int]:
        return {"samples": self.samples, "texts": self.texts, "tokens": self.tokens,
                "view_tokens": self.view_tokens, "unique_images": int(self.seen.sum())}

    def state(self) -> dict[str, Any]:
        """Plain data for a checkpoint (the flags packed 8 to a byte)."""
        return {**{k: v for k, v in self.row().items() if k != "unique_images"},
                "n_keys": int(self.seen.size),
                "seen": torch.from_numpy(np.packbits(self.seen))}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Accounting:
        seen = np.unpackbits(d["seen"].numpy(), count=d["n_keys"])
        return cls(d["samples"], d["texts"], d["tokens"], d["view_tokens"], seen.astype(bool))


def steps_for(samples: int, global_batch: int) -> int:
    """Steps that draw at least `samples` samples."""
    return math.ceil(samples / global_batch)
