"""Stage `world`: check every setting of params.yaml and the profile's inputs (the pipeline's
first stage, so every bad value and missing file is named before any work), then generate the
embedded world data set. Validating every config makes this stage depend on every config's
module: a code change there reruns it (seconds), and DVC stops at its unchanged output."""

from __future__ import annotations

from pathlib import Path

from harness.stages.common import fail, preflight, stage_parser
from prh.io import ContractError, atomic_dir

NOT_GENERATED = "NOT_GENERATED.txt"  # what the stage writes under another profile


def main(argv: list[str]) -> int:
    """Check params.yaml and the profile's inputs (--inputs), then write the generated world
    (dataset.json, images/, world.json) to --out."""
    parser = stage_parser("world", main.__doc__)
    parser.add_argument("--inputs", type=Path, required=True,
                        help="the profile's raw data folder to check (data/PROFILE/raw)")
    parser.add_argument("--out", type=Path, required=True, help="folder of the generated world")
    args = parser.parse_args(argv)
    # imported after parsing, so `harness world --help` answers at once
    from harness.config.validate import validate_params
    from prh.world import WorldConfig, write_world

    try:
        params = preflight(args.params, args.inputs)
        validate_params(params)  # the first stage: every config, before any work
        world = (params.config(WorldConfig, "data", "world") if params.profile == "world"
                 else None)
    except ContractError as e:
        return fail(e)
    with atomic_dir(args.out) as tmp:
        if world is None:  # the stage exists under every profile (dvc.yaml is one graph)
            (tmp / NOT_GENERATED).write_text(
                f"profile {params.profile}: the world is not generated; its inputs in "
                f"{args.inputs} were checked\n", encoding="utf-8")
            print(f"world: profile {params.profile}, inputs checked, no world generated")
            return 0
        summary = write_world(world, tmp)
    print(f"world: {summary}")
    return 0
