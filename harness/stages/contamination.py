"""Stage `contamination`: evaluation captions found in the training captions (exact, prefix,
n-gram) and near-duplicate photos across splits (perceptual hash)."""

from __future__ import annotations

from pathlib import Path

from prh.io import ContractError, write_json

from .common import fail, stage_parser


def main(argv: list[str]) -> int:
    """Scan --dataset (and the photos in --image-dir) and write the counts, examples and the
    clean test ids to --out."""
    from ..contamination import scan

    parser = stage_parser("contamination", main.__doc__)
    parser.add_argument("--dataset", required=True, type=Path, help="Karpathy-split JSON")
    parser.add_argument("--image-dir", type=Path, default=None, help="folder of the photos")
    parser.add_argument("--out", type=Path, required=True, help="contamination JSON")
    parser.add_argument("--max-distance", type=int, default=4,
                        help="pHash Hamming distance that counts as a duplicate (default 4)")
    parser.add_argument("--ngram", type=int, default=13,
                        help="n of the n-gram overlap check (default 13)")
    args = parser.parse_args(argv)
    try:
        report = scan(args.dataset, args.image_dir, n=args.ngram, max_distance=args.max_distance)
    except ContractError as e:
        return fail(e)
    write_json(args.out, report)
    for split, c in report["captions"].items():
        print(f"{split}: {c['n_flagged']}/{c['n']} evaluation captions in training "
              f"({', '.join(f'{k} {v}' for k, v in c['counts'].items())})")
    for pair, d in report["images"].items():
        print(f"images {pair}: {d['n_pairs']} pairs within {args.max_distance} bits")
    return 0
