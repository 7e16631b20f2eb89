"""Stage `theory`: the good/bad-view threshold grid over random finite worlds and the
Theorem 3 kernel-gap bound (prh.theory)."""

from __future__ import annotations

import time
from pathlib import Path

from harness.config.params import load_params
from harness.records.schemas import THEORY
from harness.stages.common import fail, stage_parser
from prh.io import ContractError, write_json


def main(argv: list[str]) -> int:
    """Run the threshold grid and the bound check with the profile's theory settings; write
    them to --out."""
    from prh.theory import run_bound_check, run_grid, summary

    parser = stage_parser("theory", main.__doc__)
    parser.add_argument("--out", type=Path, required=True, help="theory JSON")
    args = parser.parse_args(argv)
    try:
        cfg = load_params(args.params).theory_config()
    except ContractError as e:
        return fail(e)
    start = time.perf_counter()
    grid = run_grid(n_worlds=cfg.n_worlds, n_states=cfg.n_states, k=cfg.k,
                    n_points=cfg.n_points, seed=cfg.seed)
    print(f"theory: {summary('grid', grid, time.perf_counter() - start)}")
    start = time.perf_counter()
    bound = run_bound_check(n_worlds=cfg.bound_worlds, seed=cfg.seed)
    print(f"theory: {summary('bound', bound, time.perf_counter() - start)}")
    write_json(args.out, {"schema": str(THEORY), "grid": grid, "bound": bound})
    return 0
