"""Stage `config@ARM`: the train section of params.yaml as one arm reads it
(prh.config.arm_section), one file per arm. The arm's train and align stages depend on this
file rather than on the train section, so a SIGReg knob (lamb, the views, the projector) reruns
the JEPA arms and leaves next-token's runs as they are: DVC compares the file's content."""

from __future__ import annotations

from pathlib import Path

from harness.config.params import load_params
from harness.records.armtrain import arm_train_doc
from harness.stages.common import add_arm_arg, fail, stage_parser
from prh.io import ContractError, write_json


def main(argv: list[str]) -> int:
    """Write params.yaml's train section as --arm reads it to --out."""
    parser = add_arm_arg(stage_parser("config", main.__doc__))
    parser.add_argument("--out", type=Path, required=True, help="the arm's train JSON")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
    except ContractError as e:
        return fail(e)
    write_json(args.out, arm_train_doc(params, args.arm))
    print(f"config: {args.out}")
    return 0
