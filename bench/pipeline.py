"""Wall time of the main job (`harness run` on the default `world` profile) on this machine.

Copies the tracked pipeline files into a fresh temporary git repository, runs every stage once
with `dvc repro --single-item` in pipeline order, and prints the time of each stage and the
total (target on two CPU cores: <= 10 minutes). Usage: python bench/pipeline.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COPY = ["prh", "harness", "reports/templates", "dvc.yaml", "params.yaml", ".dvc/config",
        ".dvc/.gitignore", ".gitignore"]


def stage_order(repo: Path) -> list[str]:
    """Stage names in pipeline order, matrix stages expanded (from params.yaml)."""
    params = yaml.safe_load((repo / "params.yaml").read_text())
    runs = [f"{a}-{s}" for a in params["arms"] for s in params["seeds"]]
    return (["world", "prepare", "image"] + [f"config@{a}" for a in params["arms"]]
            + [f"train@{r}" for r in runs]
            + [f"align@{r}" for r in runs] + ["probe", "theory", "contamination", "aggregate",
                                              "audit", "report"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it")
    args = parser.parse_args()
    repo = args.keep or Path(tempfile.mkdtemp(prefix="prh-bench-"))
    for item in COPY:
        dst = repo / item
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / item).is_dir() else shutil.copy2)(ROOT / item, dst)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@b",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "b@b"}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "bench"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    for stage in stage_order(repo):
        t0 = time.perf_counter()
        out = subprocess.run(["dvc", "repro", "--single-item", stage], cwd=repo, env=env,
                             capture_output=True, text=True)
        timings[stage] = round(time.perf_counter() - t0, 1)
        print(f"{stage:<18} {timings[stage]:7.1f} s", flush=True)
        if out.returncode != 0:
            print(out.stdout[-3000:], out.stderr[-3000:], file=sys.stderr)
            return 1
    total = time.perf_counter() - start
    print(json.dumps({"total_s": round(total, 1), "cores": os.cpu_count(), "stages": timings}))
    print(f"main job wall time: {total / 60:.1f} min (target <= 10 min)")
    if not args.keep:
        shutil.rmtree(repo)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
