"""The web-text subset written for training (pipelines/recap/dvc.yaml, stage `recap`), built as
datatrove pipeline steps (Hugging Face `datatrove`: one pipeline run by `LocalPipelineExecutor`, a
process pool, on one machine; tasks are the shards, so memory per worker is one shard's, whatever
the subset's size).

The subset of N images (prh.recap's definition): the N distinct keys with the smallest
h = `key_order(seed, key)` among rows with a non-blank text of a source, each key's row its first
in canonical order. Steps, each writing under the build's work folder:

1. signature (a task per shard): (h, row, texts) of the shard's rows with a text, sorted by (h,
   row) into sig/NNNNN.bin (`Signature`).
2. select (one task): the sorted signatures merged a window of each at a time (no file held
   open); the first N distinct h are kept, each shard's kept (row, h) appended to
   select/NNNNN.bin, with the counts (`Select`).
3. texts (a task per shard): the kept rows' texts per source, in row order, as
   texts-NNNNN.parquet (row, key, h, one list column per source) (`Texts`).
4. tokenizer (one task): WordPiece trained on the texts of the first kept keys in h order, up to
   `tokenizer_sample` texts: a sample that does not depend on shard order (`TrainTokenizer`).
5. tokens (a task per shard): `Tokenizer.encode_arrow` per source into tokens/NNNNN.arrow
   (uint16 ids where the vocabulary fits), read memory-mapped by prh.stream (`Tokens`).

A killed build resumes at task granularity: datatrove marks each finished task in the work folder
and skips it on the next run (`skip_completed`). On SLURM (`harness launch`) each step's tasks
are split among node jobs (`build_part`: datatrove's local_tasks and local_rank_offset on a
LocalPipelineExecutor per node, in the same work folder); the stage then finds every task done
and only gathers. The paraphrase stage tokenises its texts the same way (`tokenize_file`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from datatrove.pipeline.base import PipelineStep

from prh.recap import (
    TOKENS,
    RecapConfig,
    RecapError,
    Shard,
    check_shards,
    key_order,
    source_texts,
    text_counts,
)

SIGNATURE = np.dtype([("h", "<u8"), ("row", "<u4"), ("texts", "<u2")])  # 14 bytes, raw files
KEPT = np.dtype([("row", "<u4"), ("h", "<u8")])
MERGE_RECORDS = 1 << 20  # signatures the select step reads per round, all shards together
MIN_CHUNK = 1024  # each shard's window at least (many shards: rounds over MERGE_RECORDS)
ENCODE_ROWS = 8_192  # rows tokenised at once, one Arrow record batch (tokenize_file)
RERUN = "rerun once mended (a changed shard starts the build over, else it resumes)"


class _Step(PipelineStep):
    """A build step over the checked shards: task `rank` is shard `rank` (or the one task)."""

    type = "prh-recap"
    per_shard = True  # False: the step's one task reads every shard's output

    def __init__(self, cfg: RecapConfig, shards: Sequence[Shard], work: Path) -> None:
        super().__init__()
        self.cfg, self.shards, self.work = cfg, list(shards), Path(work)

    def __call__(self, data: Any = None, rank: int = 0, world_size: int = 1) -> None:
        """The task, timed into datatrove's stats (logs/STEP/stats.json: time_stats); a task
        that fails says which step and shard before its error (a corrupt page behind a sound
        footer), wherever it ran. An OSError with an errno (a full disk, a read-only file
        system) is the machine's: it goes on as it is, to the CLI's one-line fault report."""
        try:
            with self.track_time("task"):
                self.run(data, rank, world_size)
        except Exception as e:
            if isinstance(e, OSError) and e.errno is not None:
                raise
            where = (f"{self.shards[rank].path}: {self.name} step" if self.per_shard
                     else f"{self.work}: the {self.name} step")
            raise RecapError(f"{where}: {type(e).__name__}: {' '.join(str(e).split())}; "
                             f"{RERUN}") from e

    def write_stats(self, kind: str, rank: int, stats: dict[str, Any]) -> None:
        path = self.work / "stats" / f"{kind}-{rank:05d}.json"
        _tmp(path).write_text(json.dumps(stats))
        os.replace(_tmp(path), path)


class Signature(_Step):
    """Step 1: sig/NNNNN.npy, the shard's rows with a key and a text as (h, row, texts) sorted
    by (h, row); stats: rows read, rows without a text, rows without a key (and the first)."""

    name = "signature"

    def run(self, data: Any = None, rank: int = 0, world_size: int = 1) -> None:
        import pyarrow.parquet as pq

        cfg, shard = self.cfg, self.shards[rank]
        parts, texted, keyless, first_keyless, start = [], 0, 0, None, 0
        for batch in pq.ParquetFile(shard.path).iter_batches(batch_size=1 << 16,
                                                             columns=cfg.columns):
            counts = sum(text_counts(batch, cols) for _, cols in cfg.sources)
            null = np.asarray(batch.column(cfg.key).is_null(), dtype=bool)
            if null.any() and first_keyless is None:
                first_keyless = start + int(np.flatnonzero(null)[0])
            keyless += int(null.sum())
            texted += int((counts > 0).sum())
            at = np.flatnonzero((counts > 0) & ~null)
            keys = batch.column(cfg.key).take(at)
            rec = np.empty(at.size, SIGNATURE)
            rec["h"] = key_order(cfg.seed, keys)
            rec["row"] = at + start
            rec["texts"] = np.minimum(counts[at], np.iinfo(np.uint16).max)
            parts.append(rec)
            start += batch.num_rows
        sig = np.concatenate(parts) if parts else np.empty(0, SIGNATURE)
        sig = sig[np.lexsort((sig["row"], sig["h"]))]
        path = self.work / "sig" / f"{rank:05d}.bin"
        sig.tofile(_tmp(path))
        os.replace(_tmp(path), path)
        self.write_stats("signature", rank, {"rows": start, "without_text": start - texted,
                                             "without_key": keyless,
                                             "first_without_key": first_keyless})


class Select(_Step):
    """Step 2 (one task): the first `images` distinct h over every shard's signature. Each round
    reads a window of every shard's file (MERGE_RECORDS / shards records, at least MIN_CHUNK;
    a window grows while it is one h) and takes every signature below the smallest last h of
    the windows with more behind them, so no h is split between rounds; memory is the
    windows', whatever the corpus. Writes select/NNNNN.bin (KEPT records, h order) and
    select/summary.json (kept, rows repeating a kept key, the last kept h, and the h up to
    which the kept keys' texts make the tokenizer's sample)."""

    name = "select"
    per_shard = False

    def run(self, data: Any = None, rank: int = 0, world_size: int = 1) -> None:
        cfg, out = self.cfg, self.work / "select"
        shutil.rmtree(out, ignore_errors=True)  # a killed select starts over
        out.mkdir(parents=True)
        paths = [self.work / "sig" / f"{i:05d}.bin" for i in range(len(self.shards))]
        sizes = [p.stat().st_size // SIGNATURE.itemsize for p in paths]
        read = [0] * len(paths)  # records read from each file into its window
        windows = [np.empty(0, SIGNATURE) for _ in paths]
        chunk = max(MIN_CHUNK, MERGE_RECORDS // max(len(paths), 1))
        kept = repeats = sample_texts = 0
        last = sample_h = None
        while kept < cfg.images:
            for i, path in enumerate(paths):  # top up each window; one h alone: read on
                while read[i] < sizes[i] and (windows[i].size < chunk
                                              or windows[i]["h"][0] == windows[i]["h"][-1]):
                    more = np.fromfile(path, SIGNATURE, count=chunk,
                                       offset=read[i] * SIGNATURE.itemsize)
                    windows[i], read[i] = np.concatenate([windows[i], more]), read[i] + more.size
            live = [i for i, w in enumerate(windows) if w.size]
            if not live:
                break
            behind = [int(windows[i]["h"][-1]) for i in live if read[i] < sizes[i]]
            top = min(behind) if behind else None  # below it, every window is complete
            take = []
            for i in live:
                h = np.ascontiguousarray(windows[i]["h"])
                end = h.size if top is None else int(np.searchsorted(h, top, side="left"))
                take.append((np.full(end, i, np.int64), windows[i][:end]))
                windows[i] = windows[i][end:]
            shard = np.concatenate([s for s, _ in take])
            rec = np.concatenate([p for _, p in take])
            order = np.lexsort((rec["row"], shard, rec["h"]))
            shard, rec = shard[order], rec[order]
            first = np.r_[True, rec["h"][1:] != rec["h"][:-1]]
            firsts = np.flatnonzero(first)[:cfg.images - kept]
            if firsts.size < first.sum():  # the subset ends inside this round
                cut = np.searchsorted(rec["h"], rec["h"][firsts[-1]], side="right")
                shard, rec, first = shard[:cut], rec[:cut], first[:cut]
            repeats += int(first.size - firsts.size)
            kept += int(firsts.size)
            last = int(rec["h"][firsts[-1]])
            texts = np.cumsum(rec["texts"][firsts].astype(np.int64)) + sample_texts
            if sample_h is None and texts.size:
                if texts[-1] >= cfg.tokenizer_sample:
                    sample_h = int(rec["h"][firsts[np.searchsorted(texts, cfg.tokenizer_sample)]])
                sample_texts = int(texts[-1])
            self._append(out, shard[firsts], rec[firsts])
        summary = {"kept": kept, "repeats": repeats, "last_h": last,
                   "sample_h": last if sample_h is None else sample_h}
        (out / "summary.json").write_text(json.dumps(summary))

    @staticmethod
    def _append(out: Path, shard: np.ndarray, rec: np.ndarray) -> None:
        order = np.argsort(shard, kind="stable")
        shard, rec = shard[order], rec[order]
        bounds = np.flatnonzero(np.r_[True, shard[1:] != shard[:-1], True])
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            block = np.empty(b - a, KEPT)
            block["row"], block["h"] = rec["row"][a:b], rec["h"][a:b]
            with open(out / f"{int(shard[a]):05d}.bin", "ab") as f:
                f.write(block.tobytes())


class Texts(_Step):
    """Step 3: texts-NNNNN.parquet, the shard's kept rows in row order with their texts per
    source; stats: texts and images without one, per source."""

    name = "texts"

    def run(self, data: Any = None, rank: int = 0, world_size: int = 1) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        cfg, path = self.cfg, self.work / "select" / f"{rank:05d}.bin"
        kept = np.sort(np.fromfile(path, KEPT), order="row") if path.exists() else None
        names = [name for name, _ in cfg.sources]
        stats = {n: {"texts": 0, "images_without": 0} for n in names}
        if kept is not None and kept.size:
            table = pq.read_table(self.shards[rank].path, columns=cfg.columns)
            table = table.take(pa.array(kept["row"].astype(np.int64)))
            offset = sum(s.rows for s in self.shards[:rank])
            texts = source_texts(table, cfg.sources)
            out = pa.table({"row": pa.array(kept["row"].astype(np.int64) + offset),
                            "key": table.column(cfg.key).cast(pa.string()),
                            "h": pa.array(kept["h"]), **texts})
            pq.write_table(out, _tmp(self.work / "texts" / f"texts-{rank:05d}.parquet"))
            os.replace(_tmp(self.work / "texts" / f"texts-{rank:05d}.parquet"),
                       self.work / "texts" / f"texts-{rank:05d}.parquet")
            for name in names:
                lengths = texts[name].value_lengths().to_numpy()
                stats[name] = {"texts": int(lengths.sum()),
                               "images_without": int((lengths == 0).sum())}
        self.write_stats("texts", rank, stats)


class TrainTokenizer(_Step):
    """Step 4 (one task): the tokenizer trained on the kept texts of h <= select's sample_h,
    in h order, sources in params order, cut at `tokenizer_sample` texts."""

    name = "tokenizer"
    per_shard = False

    def run(self, data: Any = None, rank: int = 0, world_size: int = 1) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from prh.tokenizer import train_tokenizer

        cfg = self.cfg
        names = [name for name, _ in cfg.sources]
        bound = json.loads((self.work / "select" / "summary.json").read_text())["sample_h"]
        parts = []
        for path in sorted((self.work / "texts").glob("texts-*.parquet")):
            table = pq.read_table(path, columns=["h", *names])
            parts.append(table.filter(pc.less_equal(table.column("h"),
                                                    pa.scalar(bound or 0, pa.uint64()))))
        table = pa.concat_tables(parts) if parts else None
        sample: list[str] = []
        if table is not None and table.num_rows:
            table = table.take(pc.sort_indices(table.column("h")))
            columns = [table.column(n).to_pylist() for n in names]
            sample = [t for row in zip(*columns, strict=True) for texts in row
                      for t in texts][:cfg.tokenizer_sample]
        tokenizer = train_tokenizer(sample, cfg.vocab_size)
        shutil.rmtree(self.work / "tokenizer", ignore_errors=True)
        tokenizer.save(self.work / "tokenizer")
        self.write_stats("tokenizer", 0, {"sample_texts": len(sample),
                                          "vocab_size": tokenizer.vocab_size})


class Tokens(_Step):
    """Step 5: tokens/NNNNN.arrow from texts-NNNNN.parquet (`tokenize_file`); stats per
    source: tokens, [UNK]s, texts longer than `cut` tokens."""

    name = "tokens"

    def __init__(self, cfg: RecapConfig, shards: Sequence[Shard], work: Path, cut: int) -> None:
        super().__init__(cfg, shards, work)
        self.cut = cut

    def run(self, data: Any = None, rank: int = 0, world_size: int = 1) -> None:
        from prh.tokenizer import Tokenizer

        src = self.work / "texts" / f"texts-{rank:05d}.parquet"
        names = [name for name, _ in self.cfg.sources]
        stats = ({n: {"tokens": 0, "unk_tokens": 0, "texts_cut": 0} for n in names}
                 if not src.exists() else
                 tokenize_file(src, names, Tokenizer.load(self.work / "tokenizer"),
                               self.work / TOKENS / f"{rank:05d}.arrow", self.cut))
        self.write_stats("tokens", rank, stats)


def tokenize_file(src: Path, names: Sequence[str], tokenizer: Any, dest: Path,
                  cut: int) -> dict[str, dict[str, int]]:
    """The list columns `names` of parquet file `src` tokenised (one list of token-id lists per
    row and source, uint16 ids where the vocabulary fits) into Arrow stream file `dest`, which
    prh.stream memory-maps; per source: its tokens, of them the [UNK]s (a word the tokenizer
    cannot spell, a 10,000-character one say, is one [UNK]), and its texts longer than `cut`."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    ids = pa.uint16() if tokenizer.vocab_size <= 1 << 16 else pa.uint32()
    stats = {name: {"tokens": 0, "unk_tokens": 0, "texts_cut": 0} for name in names}
    schema = pa.schema([(name, pa.list_(pa.list_(ids))) for name in names])
    with pa.OSFile(str(_tmp(dest)), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        for batch in pq.ParquetFile(src).iter_batches(batch_size=ENCODE_ROWS, columns=names):
            columns = []  # one record batch: its own offsets (int32 per batch, whatever the file)
            for name in names:
                lists = batch.column(name)
                inner = tokenizer.encode_arrow(pc.list_flatten(lists), ids)
                columns.append(pa.ListArray.from_arrays(
                    pc.subtract(lists.offsets, lists.offsets[0]), inner))
                lengths = pc.list_value_length(inner).to_numpy()
                flat = pc.list_flatten(inner).to_numpy()
                stats[name]["tokens"] += len(flat)
                stats[name]["unk_tokens"] += int((flat == tokenizer.unk_id).sum())
                stats[name]["texts_cut"] += int((lengths > cut).sum())
            w.write_batch(pa.record_batch(columns, schema=schema))
    os.replace(_tmp(dest), dest)
    return stats


STEPS = tuple(c.name for c in (Signature, Select, Texts, TrainTokenizer, Tokens))  # in order


def work_folder(out: Path, cfg: RecapConfig, cut: int) -> Path:
    """The build's work folder beside `out`, named by what the build reads (the recap
    section, the cut, every shard's path, size and time): a resumed build reuses only its own."""
    blob = json.dumps({"cfg": asdict(cfg), "cut": cut, "shards": [
        (p.as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(Path(cfg.data).rglob("*.parquet"))]}, sort_keys=True, default=str)
    return out.parent / f".{out.name}.build-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def steps(cfg: RecapConfig, shards: Sequence[Shard], work: Path,
          cut: int) -> list[tuple[_Step, int]]:
    """The five steps in order, each with its task count."""
    return [(Signature(cfg, shards, work), len(shards)), (Select(cfg, shards, work), 1),
            (Texts(cfg, shards, work), len(shards)), (TrainTokenizer(cfg, shards, work), 1),
            (Tokens(cfg, shards, work, cut), len(shards))]


def run_step(step: _Step, tasks: int, workers: int, node: int = 0, nodes: int = 1) -> None:
    """`step`'s tasks on `workers` processes, or node `node`'s contiguous share of them when
    `nodes` split them (finished tasks are skipped)."""
    from datatrove.executor import LocalPipelineExecutor

    share = math.ceil(tasks / nodes)
    offset, count = node * share, max(0, min(share, tasks - node * share))
    if count:
        LocalPipelineExecutor([step], tasks=tasks, workers=max(1, min(workers, count)),
                              logging_dir=str(step.work / "logs" / step.name),
                              local_tasks=count, local_rank_offset=offset,
                              start_method="spawn").run()


def check_selected(cfg: RecapConfig, work: Path) -> dict[str, Any]:
    """The select step's summary; RecapError when it kept fewer keys than `cfg.images`."""
    selected = json.loads((work / "select" / "summary.json").read_text())
    if selected["kept"] < cfg.images:
        raise RecapError(f"{cfg.data}: {selected['kept']:,} distinct keys with a text of "
                         f"recap.sources, fewer than recap.images = {cfg.images:,}; copy more "
                         "shards or lower recap.images")
    return selected


def pending(cfg: RecapConfig, out: Path, cut: int) -> list[tuple[str, int]]:
    """(name, tasks) of the steps whose tasks are not all done in `out`'s work folder
    (datatrove's completion markers), in order; the shards' footers are checked first."""
    shards = check_shards(cfg.data, cfg.columns, cfg.images, cfg.text_columns)
    work = work_folder(out, cfg, cut)
    return [(step.name, tasks) for step, tasks in steps(cfg, shards, work, cut)
            if len(list((work / "logs" / step.name / "completions").glob("*"))) < tasks]


def build_part(cfg: RecapConfig, out: Path, cut: int, name: str, node: int, nodes: int,
               workers: int) -> None:
    """Node `node` of `nodes`' share of step `name` (a SLURM job of `harness launch`), in
    the work folder the stage will read."""
    shards = check_shards(cfg.data, cfg.columns, cfg.images, cfg.text_columns)
    step, tasks = steps(cfg, shards, work_folder(out, cfg, cut), cut)[STEPS.index(name)]
    run_step(step, tasks, workers, node, nodes)
    if name == "select":
        check_selected(cfg, step.work)


def build_subset(cfg: RecapConfig, out: Path, cut: int, work: Path,
                 workers: int | None = None) -> dict[str, Any]:
    """Run the five steps with `workers` processes (default: the cores) in `work`, move the
    texts, tokenizer and tokens into `out`, and return the summary's counts. `work` keeps the
    finished tasks of a killed build (and the files `out` links to until then); the caller
    removes it once `out` is in place."""
    shards = check_shards(cfg.data, cfg.columns, cfg.images, cfg.text_columns)  # footers first
    workers = max(1, workers or os.cpu_count() or 1)
    for step, tasks in steps(cfg, shards, work, cut):
        run_step(step, tasks, workers)
        if isinstance(step, Select):
            selected = check_selected(cfg, work)
    sums: dict[str, Counter[str]] = {name: Counter() for name, _ in cfg.sources}
    for part in ("texts", "tokens"):  # the per-task counts of each source, summed
        for path in sorted((work / "stats").glob(f"{part}-*.json")):
            stats = json.loads(path.read_text())
            for name, total in sums.items():
                total.update(stats[name])
    read = [json.loads(p.read_text()) for p in sorted((work / "stats").glob("signature-*.json"))]
    tok = json.loads((work / "stats" / "tokenizer-00000.json").read_text())
    written = sorted(p.name for p in (work / "texts").glob("texts-*.parquet"))
    for name in written:  # linked, not moved: a gather killed half-way can be done again
        _link(work / "texts" / name, out / name)
    shutil.copytree(work / "tokenizer", out / "tokenizer", copy_function=_link)
    shutil.copytree(work / TOKENS, out / TOKENS, copy_function=_link)
    return {"images": cfg.images, "seed": cfg.seed, "unique_images": selected["kept"],
            "rows_read": sum(r["rows"] for r in read),
            "rows_without_text": sum(r["without_text"] for r in read),
            "rows_without_key": sum(r["without_key"] for r in read),
            "first_without_key": next(
                ({"path": s.path.relative_to(cfg.data).as_posix(), "row": r["first_without_key"]}
                 for s, r in zip(shards, read, strict=True)
                 if r["first_without_key"] is not None), None),
            "duplicate_key_rows": selected["repeats"],
            "shards_read": [{"path": s.path.relative_to(cfg.data).as_posix(), "rows": s.rows}
                            for s in shards],
            "sources": {name: {"columns": list(cols), **sums[name],
                               "tokens_per_text": sums[name]["tokens"]
                               / max(sums[name]["texts"], 1)}
                        for name, cols in cfg.sources},
            "tokenizer": {"vocab_size": tok["vocab_size"], "sample_texts": tok["sample_texts"]},
            "cut_at": cut, "written": written}


def _link(src: str | Path, dst: str | Path) -> None:
    """A hard link of `src` at `dst` (a copy across file systems)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _tmp(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.tmp")
