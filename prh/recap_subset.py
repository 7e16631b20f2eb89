"""The web-text subset written for training (pipelines/recap/dvc.yaml, stage `recap`): the
texts of the first `images` rows of the shards (prh.recap's order) as parquet shards, one per
shard read, the WordPiece tokenizer trained on the first `tokenizer_sample` texts, and every
text tokenised into a `datasets` table that prh.stream reads memory-mapped; with the counts a
run's samples and GPU-hours are projected from. The paraphrase stage tokenises its texts the
same way (`tokenize`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


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
