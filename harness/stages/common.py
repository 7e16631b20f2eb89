"""What every stage command shares: its parser (`--params`), the one-line error exit, and the
check of params.yaml and of the profile's own inputs before any work."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.config.params import Params, load_params, weights_path
from prh.io import ContractError

FLICKR_HELP = """\
The flickr30k profile needs your own copy of Flickr30k and of the DINOv2 weights:
  {raw}/dataset.json
      the Karpathy split (dataset_flickr30k.json, from
      https://cs.stanford.edu/people/karpathy/deepimagesent/)
  {raw}/images/
      the 31,783 JPEGs (flickr30k-images, from the Flickr30k authors' request form)
  {raw}/weights/dinov2_vitb14.pth
      a DINOv2 ViT-B/14 state dict for timm's vit_base_patch14_dinov2 (download it on a
      machine with internet, e.g. timm's hub weights, and copy it here)
Then track them with `dvc add {raw}` and run `harness run` again."""


def stage_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """A stage's parser: its description is the stage function's docstring."""
    parser = argparse.ArgumentParser(prog=f"harness {prog}", description=doc)
    parser.add_argument("--params", type=Path, default=Path("params.yaml"),
                        help="the params file (default: params.yaml)")
    return parser


def add_arm_arg(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """--arm: one text arm."""
    from prh.config import ARMS

    parser.add_argument("--arm", required=True, choices=list(ARMS), help="text arm")
    return parser


def add_run_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """--arm and --seed: which run of the arm x seed matrix."""
    add_arm_arg(parser)
    parser.add_argument("--seed", required=True, type=int, help="training seed")
    return parser


def fail(err: Exception) -> int:
    """One error line on stderr and exit code 2 (bad input, never a traceback)."""
    print(f"error: {err}", file=sys.stderr)
    return 2


def missing_inputs(params: Params, raw: Path) -> list[str]:
    """Every path the profile needs under `raw` that is not there (the world makes its own)."""
    if params.profile == "world":
        return []
    needed = [raw / "dataset.json", raw / "images", weights_path(params.sections["image"], raw)]
    return [str(p) for p in needed if not p.exists()]


def preflight(params_path: Path, raw: Path) -> Params:
    """Read params.yaml and check the profile's inputs in `raw` before anything runs."""
    params = load_params(params_path)
    missing = missing_inputs(params, raw)
    if missing:
        raise ContractError(f"missing input(s) for the {params.profile} profile:\n  "
                            + "\n  ".join(missing) + "\n\n" + FLICKR_HELP.format(raw=raw))
    return params
