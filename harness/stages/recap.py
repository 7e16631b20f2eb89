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

from harness.config.recap import encoder_cut, load_recap
from harness.records.schemas import RECAP_SUBSET
from harness.stages.common import fail, stage_parser
from prh.io import ContractError, atomic_dir, write_json
from prh.recap_subset import write_subset


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
