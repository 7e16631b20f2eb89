"""The main job: validate params.yaml and the profile's inputs, then `dvc repro` the whole
pipeline."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from prh.io import ContractError

from ..params import load_params
from .common import fail, preflight, stage_parser

PROFILE_RAW = "data/{profile}/raw"  # the raw-data folder dvc.yaml names as data/${profile}/raw


def main(argv: list[str]) -> int:
    """Validate params.yaml and the profile's inputs, then run every stage of dvc.yaml that
    is not up to date."""
    parser = stage_parser("run", main.__doc__)
    parser.add_argument("dvc_args", nargs="*",
                        help="extra arguments for `dvc repro` (after --, e.g. -- --dry)")
    args = parser.parse_args(argv)
    try:
        profile = load_params(args.params).profile
        params = preflight(args.params, Path(PROFILE_RAW.format(profile=profile)))
    except ContractError as e:
        return fail(e)
    if not Path(".dvc").exists():
        subprocess.run(["dvc", "init", "-q"] + ([] if Path(".git").exists() else ["--no-scm"]),
                       check=True)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    code = subprocess.run(["dvc", "repro", *args.dvc_args], env=env).returncode
    if code == 0:
        print(f"\nprofile {params.profile}: reports/audit.html and reports/audit.pdf are ready; "
              "`mlflow ui --backend-store-uri sqlite:///mlflow.db` shows the runs")
    return code
