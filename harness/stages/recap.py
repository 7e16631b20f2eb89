"""Stage `recap` (pipelines/recap/dvc.yaml): the web-text profile's first step. Reads the
texts of the first `recap.images` rows of the user's Recap-DataComp-1B shards (prh.recap:
canonical order, sources as columns), writes them as parquet shards (one per shard read,
one list column per source), trains the WordPiece tokenizer on the first
`recap.tokenizer_sample` texts, and counts what the subset holds: images, unique images,
texts and tokens per source. Those counts are what a run's samples and GPU-hours are
projected from (a sample reads one image's texts)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from harness.records.schemas import RECAP_SUBSET
from harness.stages.common import fail, stage_parser
from prh.io import ContractError, atomic_dir, write_json


def load_recap(path: Path) -> Any:
    """params.yaml's `recap` section (prh.recap.RecapConfig), the file's top level checked."""
    from harness.config.params import read_top_level
    from prh.recap import RecapConfig

    return RecapConfig.from_dict(read_top_level(path).get("recap"), f"{path}: recap")


def encoder_cut(path: Path) -> int:
    """The tokens of a text the web-text encoder sees: its max_len less [CLS] and [SEP]
    (prh.views), max_len from recap.train.encoder, else the flickr30k profile's train section
    (as harness.stages.recap_train.configs merges them); one of them must say it."""
    from harness.config.params import read_top_level

    raw = read_top_level(path)
    over = ((raw.get("recap") or {}).get("train") or {}).get("encoder") or {}
    base = (raw.get("flickr30k") or {}).get("train") or {}
    max_len = over.get("max_len", base.get("max_len"))
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 3:
        raise ContractError(f"{path}: flickr30k.train.max_len (or recap.train.encoder.max_len) "
                            f"is {max_len!r}; set the encoder's tokens per text (the "
                            "repository's params.yaml: 64), the subset counts texts against it")
    return max_len - 2


def write_subset(cfg: Any, out: Path, cut: int) -> dict[str, Any]:
    """Write the subset's texts and tokenizer into `out`; return the counts, with the texts
    longer than `cut` tokens (what the encoder sees of them is their first `cut`)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from prh.recap import check_shards, iter_subset, key_hashes, source_texts
    from prh.tokenizer import train_tokenizer

    # footers, and every key of the subset's rows present (harness run --check does the same)
    shards = check_shards(cfg.data, cfg.columns, cfg.images, cfg.text_columns)
    names = [name for name, _ in cfg.sources]
    counts = {n: {"texts": 0, "images_without": 0, "tokens": 0} for n in names}
    sample: list[str] = []
    hashes, written, writer, current = [], [], None, -1
    for shard, first, batch in iter_subset(shards, cfg.columns, cfg.images):
        texts = source_texts(batch, cfg.sources)
        for name in names:
            counts[name]["texts"] += sum(map(len, texts[name]))
            counts[name]["images_without"] += sum(not t for t in texts[name])
        for i in range(len(batch[cfg.key])):
            if len(sample) >= cfg.tokenizer_sample:
                break
            sample += [t for name in names for t in texts[name][i]]
        hashes.append(key_hashes(batch[cfg.key]))
        n = len(batch[cfg.key])
        table = pa.table({"row": pa.array(np.arange(first, first + n), pa.int64()),
                          "key": pa.array([str(k) for k in batch[cfg.key]], pa.string()),
                          **{name: pa.array(texts[name], pa.list_(pa.string()))
                             for name in names}})
        if shard != current:  # one written shard per shard read, the same rows
            if writer is not None:
                writer.close()
            written.append(out / f"texts-{shard:05d}.parquet")
            writer, current = pq.ParquetWriter(written[-1], table.schema), shard
        writer.write_table(table)
    writer.close()
    sample = sample[:cfg.tokenizer_sample]
    tokenizer = train_tokenizer(sample, cfg.vocab_size)
    tokenizer.save(out / "tokenizer")
    keys, key_ids = np.unique(np.concatenate(hashes), return_inverse=True)
    tokens, unknown, longer = tokenize(written, names, tokenizer, key_ids, out, cut)
    for name in names:
        counts[name]["tokens"] = int(tokens[name])
        counts[name]["unk_tokens"] = int(unknown[name])
        counts[name]["texts_cut"] = int(longer[name])
    unique = int(keys.size)
    return {"images": cfg.images, "unique_images": unique,
            "duplicate_key_rows": cfg.images - unique,
            "shards_read": [{"path": s.path.relative_to(cfg.data).as_posix(), "rows": s.rows}
                            for s in shards],
            "sources": {name: {"columns": list(cols), **counts[name],
                               "tokens_per_text": counts[name]["tokens"]
                               / max(counts[name]["texts"], 1)}
                        for name, cols in cfg.sources},
            "tokenizer": {"vocab_size": tokenizer.vocab_size, "sample_texts": len(sample)},
            "cut_at": cut,
            "written": [p.name for p in written]}


def tokenize(written: list[Path], names: list[str], tokenizer: Any, key_ids: Any,
             out: Path, cut: int) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """The written texts tokenised, one list of token-id lists per source, with each row's
    image (prh.stream.KEY_ID; None: no such column), saved as a `datasets` table in out/tokens
    (prh.stream reads it memory-mapped); returns the tokens per source and, of them, the
    [UNK]s (a word the tokenizer cannot spell, a 10,000-character one say, is one [UNK]), and
    the texts longer than `cut` tokens."""
    import shutil

    import datasets
    import pyarrow.compute as pc

    from prh.recap import KEY_ID, TOKENS

    def encode(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        encoded = {}
        for name in names:
            ids = iter(tokenizer.encode_batch([t for texts in batch[name] for t in texts]))
            encoded[name] = [[next(ids) for _ in texts] for texts in batch[name]]
        return encoded

    datasets.disable_progress_bars()  # the stage prints its own line
    ids = datasets.List(datasets.List(datasets.Value("int32")))
    cache = out / ".cache"
    table = datasets.Dataset.from_parquet([str(p) for p in written], cache_dir=str(cache))
    table = table.map(encode, batched=True,
                      remove_columns=[c for c in table.column_names if c not in names],
                      features=datasets.Features({name: ids for name in names}),
                      cache_file_name=str(cache / "tokens.arrow"))
    if key_ids is not None:
        table = table.add_column(KEY_ID, key_ids.astype("int32"))  # 940M keys fit
    table.save_to_disk(str(out / TOKENS))
    arrow = table.data.table
    totals = {name: pc.sum(pc.list_value_length(pc.list_flatten(arrow.column(name)))).as_py()
              or 0 for name in names}
    unknown = {name: pc.sum(pc.equal(pc.list_flatten(pc.list_flatten(arrow.column(name))),
                                     tokenizer.unk_id)).as_py() or 0 for name in names}
    longer = {name: pc.sum(pc.greater(pc.list_value_length(pc.list_flatten(arrow.column(name))),
                                      cut)).as_py() or 0 for name in names}
    del table, arrow
    shutil.rmtree(cache)
    return totals, unknown, longer


def main(argv: list[str]) -> int:
    """Read the first recap.images rows of recap.data's parquet shards and write their texts,
    the tokenizer and summary.json (counts per source) to --out."""
    parser = stage_parser("recap", main.__doc__)
    parser.add_argument("--out", type=Path, required=True, help="the subset's folder")
    args = parser.parse_args(argv)
    try:
        cfg, cut = load_recap(args.params), encoder_cut(args.params)
        with atomic_dir(args.out) as tmp:
            summary = write_subset(cfg, tmp, cut)
            write_json(tmp / "summary.json", {"schema": str(RECAP_SUBSET), **summary})
    except ContractError as e:
        return fail(e)
    per = ", ".join(f"{n} {s['texts']:,} texts / {s['tokens']:,} tokens"
                    for n, s in summary["sources"].items())
    print(f"recap: {summary['images']:,} images ({summary['unique_images']:,} unique keys): "
          f"{per} -> {args.out}")
    if summary["duplicate_key_rows"]:
        print(f"recap: warning: {summary['duplicate_key_rows']:,} row(s) share an image key "
              "with an earlier row: unique images are counted by key", file=sys.stderr)
    for name, s in summary["sources"].items():
        if s["unk_tokens"]:
            print(f"recap: warning: {s['unk_tokens']:,} of {name}'s {s['tokens']:,} tokens are "
                  "[UNK] (words the tokenizer cannot spell)", file=sys.stderr)
        if s["texts_cut"]:
            print(f"recap: warning: {s['texts_cut']:,} of {name}'s {s['texts']:,} texts are "
                  f"longer than the {summary['cut_at']} tokens the encoder sees (max_len - 2): "
                  "it reads their beginning only", file=sys.stderr)
    return 0
