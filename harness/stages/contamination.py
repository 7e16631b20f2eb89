"""Stage `contamination`: evaluation captions found in the training captions (exact, prefix,
n-gram) and near-duplicate photos across splits (perceptual hash)."""

from __future__ import annotations

from pathlib import Path

from harness.config.params import load_params
from harness.stages.common import fail, stage_parser
from prh.io import ContractError, write_json


def main(argv: list[str]) -> int:
    """Scan --dataset (and the photos in --image-dir) and write the counts, examples and the
    clean test ids to --out."""
    from harness.data.contamination import scan

    parser = stage_parser("contamination", main.__doc__)
    parser.add_argument("--dataset", required=True, type=Path, help="Karpathy-split JSON")
    parser.add_argument("--image-dir", type=Path, default=None, help="folder of the photos")
    parser.add_argument("--out", type=Path, required=True, help="contamination JSON")
    args = parser.parse_args(argv)
    try:  # the thresholds: params.yaml's PROFILE.contamination
        cfg = load_params(args.params).contamination_config()
        report = scan(args.dataset, args.image_dir, prefix_chars=cfg.prefix_chars, n=cfg.ngram,
                      max_distance=cfg.max_distance, hash_size=cfg.hash_size)
    except ContractError as e:
        return fail(e)
    write_json(args.out, report)
    for split, c in report["captions"].items():
        print(f"{split}: {c['n_flagged']}/{c['n']} evaluation captions in training "
              f"({', '.join(f'{k} {v}' for k, v in c['counts'].items())})")
    for pair, d in report["images"].items():
        print(f"images {pair}: {d['n_pairs']} pairs within {cfg.max_distance} bits")
    return 0
