"""Test-only helper: a git work tree holding a tiny world's upstream outputs (world, prepare,
image), so tests can run real `harness train` processes against it (MLflow servers, SQLite,
the SLURM launcher) in seconds. The stage commands are dvc.yaml's, run as subprocesses."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def tiny_params(raw: dict, epochs: int = 2, seeds: tuple[int, ...] = (0, 1)) -> dict:
    """params.yaml scaled down to seconds per training: 120 training photos, a one-layer
    encoder, `epochs` epochs with the per-epoch evaluation on (one MLflow step per epoch), and
    a probe stage of one arm at one SIGReg weight for one epoch (trained twice); `seeds` per
    arm (2 by default: most tests need runs, not verdicts) and a seed plan of looks at 3 and 4
    seeds (the main job's test runs 3 and a second look)."""
    raw["seeds"] = list(seeds)
    raw["world"]["plan"]["looks"] = [3, 4]
    w = raw["world"]
    w["data"]["world"].update(n_train=120, n_fit=40, n_test=40)
    w["image"].update(epochs=1)
    w["train"].update(epochs=epochs, warmup_epochs=1, eval_every=1, batch_size=32, max_len=48)
    w["train"]["model"].update(hidden=32, layers=1, heads=2, intermediate=64)
    w["eval"].update(n_resamples=300, fit_sizes=[10, 20, 40], pairfree_pool=50,
                  pairfree={**w["eval"]["pairfree"], "restarts": 5})
    w["probe"].update(arms=["good"], epochs=1, lambdas=[0.02],  # two one-epoch trainings
                      text_sources=[])
    w["theory"].update(n_worlds=2, n_points=20, bound_worlds=4)
    return raw


def env(**extra: str) -> dict[str, str]:
    """The environment of a stage process: this venv first on PATH, one thread, no tracking URI
    unless `extra` sets one."""
    out = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "DVC_NO_ANALYTICS": "1", "OMP_NUM_THREADS": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    out.pop("MLFLOW_TRACKING_URI", None)
    return {**out, **extra}


def sh(cwd: Path, *cmd: str, check: bool = True, **extra: str) -> subprocess.CompletedProcess:
    """Run `cmd` in `cwd`; with `check`, a failure raises with the end of its output."""
    out = subprocess.run(cmd, cwd=cwd, env=env(**extra), capture_output=True, text=True)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-4000:]}"
                             f"\n{out.stderr[-4000:]}")
    return out


PROJECT = ("prh", "harness", "reports/templates", "dvc.yaml", "params.yaml", ".dvc/config",
           ".dvc/.gitignore", ".gitignore")


def copy_code(repo: Path) -> Path:
    """The project's code, templates, dvc.yaml and params.yaml copied into `repo`."""
    for item in PROJECT:
        src, dst = ROOT / item, repo / item
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst)
    return repo


def commit_all(repo: Path, message: str) -> Path:
    """`repo` as a git work tree with everything in it committed."""
    sh(repo, "git", "init", "-q")
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-qm", message)
    return repo


def copy_project(repo: Path, epochs: int = 2, seeds: tuple[int, ...] = (0, 1)) -> Path:
    """The project's code, dvc.yaml and a tiny params.yaml in `repo`, committed to git."""
    copy_code(repo)
    raw = tiny_params(yaml.safe_load((repo / "params.yaml").read_text()), epochs, seeds)
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return commit_all(repo, "tiny world")


def build_upstream(repo: Path) -> Path:
    """The world, prepare and image stages' outputs in `repo` (dvc.yaml's commands)."""
    sh(repo, "harness", "world", "--params", "params.yaml", "--inputs", "data/world/raw",
       "--out", "data/world/raw")
    sh(repo, "harness", "prepare", "--params", "params.yaml", "--dataset",
       "data/world/raw/dataset.json", "--images", "data/world/raw/images",
       "--out", "data/world/prepared")
    sh(repo, "harness", "image", "--params", "params.yaml", "--raw", "data/world/raw",
       "--out", "runs/image")
    return write_configs(repo)


def write_configs(repo: Path) -> Path:
    """The config stage's train section for every arm of `repo`'s params.yaml (dvc.yaml's
    config@ARM): rerun it after editing the train section."""
    for arm in yaml.safe_load((repo / "params.yaml").read_text())["arms"]:
        sh(repo, "harness", "config", "--params", "params.yaml", "--arm", arm, "--out",
           f"runs/config/{arm}.json")
    return repo


def train_cmd(arm: str, seed: int) -> list[str]:
    """dvc.yaml's train command for (arm, seed) on the world profile."""
    return ["harness", "train", "--params", "params.yaml", "--arm", arm, "--seed", str(seed),
            "--dataset", "data/world/raw/dataset.json", "--prepared", "data/world/prepared",
            "--image", "runs/image", "--config", f"runs/config/{arm}.json", "--work",
            "runs/.work", "--out", f"runs/text/{arm}-s{seed}"]


def train_align_aggregate(repo: Path, arms: list[str] | tuple[str, ...]) -> Path:
    """Seed 0 of each arm trained and aligned, then aggregated (dvc.yaml's commands), after
    `build_upstream`."""
    for arm in arms:
        sh(repo, *train_cmd(arm, 0))
        sh(repo, *align_cmd(arm, 0))
    sh(repo, "harness", "aggregate", "--params", "params.yaml", "--align-dir", "runs/align",
       "--prepared", "data/world/prepared", "--out", "runs/results.json")
    return repo


def align_cmd(arm: str, seed: int) -> list[str]:
    """dvc.yaml's align command for (arm, seed), without the metrics and plots files."""
    return ["harness", "align", "--params", "params.yaml", "--arm", arm, "--seed", str(seed),
            "--image", "runs/image", "--text", f"runs/text/{arm}-s{seed}", "--config",
            f"runs/config/{arm}.json", "--out", f"runs/align/{arm}-s{seed}.json",
            "--per-query", f"runs/align/{arm}-s{seed}.npz"]


def check_entrypoint_run(runs: Path) -> dict[str, str]:
    """The world pipeline that docker/entrypoint.sh ran into `runs` (one workspace, tiny params
    committed): both reports written, and in `runs`/mlflow.db six finished training runs and the
    seed plan's run (registered before them), none tagged git_dirty. Returns the env.* tags
    (the environment fingerprint) of the training runs, which must agree."""
    (work,) = runs.glob("workspace-*")
    assert (work / "reports" / "audit.html").stat().st_size > 0
    assert (work / "reports" / "audit.pdf").read_bytes().startswith(b"%PDF")
    with sqlite3.connect(runs / "mlflow.db") as con:  # PRH_RUNS_DIR holds the database
        states = con.execute(
            "SELECT r.status, t.value, COALESCE(role.value, 'training') FROM runs r JOIN tags t "
            "ON t.run_uuid = r.run_uuid AND t.key = 'git_dirty' LEFT JOIN tags role "
            "ON role.run_uuid = r.run_uuid AND role.key = 'prh.role'").fetchall()
        env = set(con.execute("SELECT t.key, t.value FROM runs r JOIN tags t "
                              "ON t.run_uuid = r.run_uuid AND t.key LIKE 'env.%'"))
    assert sorted(states) == [("FINISHED", "False", "plan")] + [("FINISHED", "False",
                                                                 "training")] * 6, states
    tags = dict(env)
    assert len(tags) == len(env), "the runs disagree on their environment"
    return tags
