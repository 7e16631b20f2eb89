"""kill -9 per stage: each stage of the tiny world's chain (world, prepare, image, plan, config,
train, align, aggregate) killed with SIGKILL part-way (as soon as its output's temp appears, else
at 0.6 of its wall time, halved while a quick stage ends first), then run again. Nothing
half-written is left (its output is absent, or whole and equal to an uninterrupted run's), and
the rerun's outputs equal the uninterrupted run's byte for byte, with no temp file of the killed
write left.

Slow (`.ci/run`'s pipeline section): every stage runs three times."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from tiny_world import copy_project, env

STAGES = [  # (stage, dvc.yaml's command on the world profile, its outputs)
    ("world", "harness world --params params.yaml --inputs data/world/raw --out data/world/raw",
     ["data/world/raw"]),
    ("prepare", "harness prepare --params params.yaml --dataset data/world/raw/dataset.json "
     "--images data/world/raw/images --out data/world/prepared", ["data/world/prepared"]),
    ("image", "harness image --params params.yaml --raw data/world/raw --out runs/image",
     ["runs/image"]),
    ("plan", "harness plan --params params.yaml --claims harness/audit/claims.yaml --looks "
     "runs/looks.json --out runs/plan.json --table runs/plan.md",
     ["runs/plan.json", "runs/plan.md", "runs/looks.json"]),
    ("config", "harness config --params params.yaml --arm good --out runs/config/good.json",
     ["runs/config/good.json"]),
    ("train", "harness train --params params.yaml --arm good --seed 0 --dataset "
     "data/world/raw/dataset.json --prepared data/world/prepared --image runs/image --config "
     "runs/config/good.json --work runs/.work --out runs/text/good-s0", ["runs/text/good-s0"]),
    ("align", "harness align --params params.yaml --arm good --seed 0 --image runs/image "
     "--text runs/text/good-s0 --config runs/config/good.json --out runs/align/good-s0.json "
     "--per-query runs/align/good-s0.npz "
     "--metrics runs/metrics/good-s0.json", ["runs/align/good-s0.json", "runs/align/good-s0.npz",
                                             "runs/metrics/good-s0.json"]),
    ("aggregate", "harness aggregate --params params.yaml --align-dir runs/align --prepared "
     "data/world/prepared --out runs/results.json --metrics runs/metrics/aggregate",
     ["runs/results.json", "runs/metrics/aggregate"]),
]
KILL_AT = 0.6  # of the stage's uninterrupted wall time, unless its write begins earlier


# What differs between two whole runs by design: the training's MLflow run id (a fresh
# training opens a new run; run.json and the align stage's run file carry it).
VOLATILE = "mlflow_run_id"


def content(p: Path) -> bytes:
    """A file's bytes; a JSON file's without the VOLATILE key, wherever it is nested."""
    if p.suffix != ".json":
        return p.read_bytes()

    def drop(x):  # noqa: ANN001, ANN202
        if isinstance(x, dict):
            return {k: drop(v) for k, v in x.items() if k != VOLATILE}
        return [drop(v) for v in x] if isinstance(x, list) else x

    return json.dumps(drop(json.loads(p.read_bytes())), sort_keys=True).encode()


def digest(path: Path) -> dict[str, str] | None:
    """sha256 of a file, or of each file of a folder by relative name (None: absent)."""
    if not path.exists():
        return None
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path.parent)): hashlib.sha256(content(p)).hexdigest()
            for p in files}


def temps(repo: Path, outs: list[str]) -> list[str]:
    """The `.NAME.*.tmp*` siblings an interrupted atomic write of `outs` leaves."""
    return sorted(str(p) for out in outs for p in (repo / out).parent.glob(
        f".{Path(out).name}.*.tmp*"))


def run(repo: Path, cmd: str, outs: list[str], kill_after: float | None = None
        ) -> float | None:
    """`cmd` in its own process group, to its end; with `kill_after`, SIGKILL the group as soon
    as a temp sibling of an output appears (the write has begun), or after `kill_after`
    seconds. Returns the wall time; None when it ended (whole) before it could be killed."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd.split(), cwd=repo, env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    if kill_after is None:
        err = proc.communicate(timeout=900)[1]
        assert proc.returncode == 0, f"{cmd}:\n{err[-3000:]}"
        return time.monotonic() - start
    while proc.poll() is None and time.monotonic() - start < kill_after \
            and not temps(repo, outs):
        time.sleep(0.01)
    if proc.poll() is not None:  # a quick stage, its first run slowed by a loaded machine
        assert proc.returncode == 0, proc.communicate()[1][-3000:]
        return None
    print(f"killed {cmd.split()[1]} at {time.monotonic() - start:.2f} s, "
          f"{'while writing' if temps(repo, outs) else 'before writing'}")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    return time.monotonic() - start


@pytest.mark.slow
def test_every_stage_killed_9_then_rerun_equals_the_uninterrupted_run(tmp_path):
    repo = copy_project(tmp_path / "repo")
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    raw.update(arms=["good"], seeds=[0])  # the one run the aggregate below reads
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    seconds, whole = {}, {}
    for stage, cmd, outs in STAGES:
        seconds[stage] = run(repo, cmd, outs) or 0.0
        whole[stage] = [digest(repo / o) for o in outs]
        assert None not in whole[stage]
    for stage, cmd, outs in STAGES:
        kill_after: float = KILL_AT * seconds[stage]
        for _ in range(5):
            for out in outs:  # as DVC does before it runs a stage: its outputs removed
                path = repo / out
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.exists():
                    path.unlink()
            if run(repo, cmd, outs, kill_after=kill_after) is not None:
                break
            kill_after /= 2
        else:
            raise AssertionError(f"{stage} ended each time before it could be killed")
        for out, expected in zip(outs, whole[stage], strict=True):
            assert digest(repo / out) in (None, expected), f"{stage}: {out} half-written"
        run(repo, cmd, outs)
        assert [digest(repo / o) for o in outs] == whole[stage], f"{stage}: rerun differs"
        assert temps(repo, outs) == [], f"{stage}: leftovers"
