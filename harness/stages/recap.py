"""Stage `recap` (pipelines/recap/dvc.yaml): the web-text profile's first step. Builds the
subset of `recap.images` images from the user's Recap-DataComp-1B shards (prh.recap: the
distinct keys of smallest md5(seed:key); prh.recap_subset: the datatrove steps, one task per
shard on `--workers` processes): their texts per source as parquet shards, the WordPiece
tokenizer, the tokens, and what the subset holds: images, rows left out, texts and tokens per
source. Those counts are what a run's samples and GPU-hours are projected from (a sample reads
one image's texts). A killed build resumes from its finished tasks (the work folder beside
--out, named by what the build reads; every such folder goes once --out is written)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from harness.config.recap import encoder_cut, load_recap
from harness.records.schemas import RECAP_SUBSET
from harness.stages.common import fail, stage_parser
from prh.io import ContractError, atomic_dir, write_json
from prh.recap_subset import build_subset, work_folder


def main(argv: list[str]) -> int:
    """Build the subset of recap.images images from recap.data's parquet shards and write
    their texts, the tokenizer, the tokens and summary.json (counts per source) to --out."""
    parser = stage_parser("recap", main.__doc__)
    parser.add_argument("--out", type=Path, required=True, help="the subset's folder")
    parser.add_argument("--workers", type=int, default=None,
                        help="build processes (default: the machine's cores)")
    args = parser.parse_args(argv)
    try:
        cfg, cut = load_recap(args.params), encoder_cut(args.params)
        work = work_folder(args.out, cfg, cut)
        with atomic_dir(args.out) as tmp:
            summary = build_subset(cfg, tmp, cut, work, args.workers)
            write_json(tmp / "summary.json", {"schema": str(RECAP_SUBSET), **summary})
        for done in args.out.parent.glob(f".{args.out.name}.build-*"):  # this one and stale ones
            shutil.rmtree(done, ignore_errors=True)
    except ContractError as e:
        return fail(e)
    per = ", ".join(f"{n} {s['texts']:,} texts / {s['tokens']:,} tokens"
                    for n, s in summary["sources"].items())
    print(f"recap: {summary['images']:,} images (seed {summary['seed']}) of "
          f"{summary['rows_read']:,} rows: {per} -> {args.out}")
    if summary["duplicate_key_rows"]:
        print(f"recap: warning: {summary['duplicate_key_rows']:,} row(s) repeat the key of a "
              "chosen image: each image is read once, from its first row", file=sys.stderr)
    if summary["rows_without_key"]:
        first = summary["first_without_key"]
        print(f"recap: warning: {summary['rows_without_key']:,} row(s) have no "
              f"{cfg.key!r} and are left out (the first: {first['path']} row {first['row']}); "
              "fix the shards or name another key column in recap.key", file=sys.stderr)
    for name, s in summary["sources"].items():
        if s["unk_tokens"]:
            print(f"recap: warning: {s['unk_tokens']:,} of {name}'s {s['tokens']:,} tokens are "
                  "[UNK] (words the tokenizer cannot spell)", file=sys.stderr)
        if s["texts_cut"]:
            print(f"recap: warning: {s['texts_cut']:,} of {name}'s {s['texts']:,} texts are "
                  f"longer than the {summary['cut_at']} tokens the encoder sees (max_len - 2): "
                  "it reads their beginning only", file=sys.stderr)
    return 0
