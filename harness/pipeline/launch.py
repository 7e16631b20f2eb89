"""`harness launch`: the arm x seed matrix's train and align stages as one SLURM job array
(submitit), each job running dvc.yaml's commands for its (arm, seed) in a checkout of the
current commit on shared storage whose DVC cache is the workspace's. When the jobs end, the
outputs of those that succeeded enter the workspace (`dvc commit`), so `dvc status` is clean for
them and `harness run` goes on with aggregate, audit and report; a job that failed or was
cancelled leaves its outputs absent and is listed with its log.

The workspace (and so its DVC cache and --shared) must be on storage the compute nodes see."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.pipeline.matrix import UPSTREAM
from harness.tracking import mlflow_runs as tracking
from prh.io import ContractError

POLL_S = 5.0


@dataclass(frozen=True)
class Item:
    """One (arm, seed) of the matrix: its DVC stages, their commands and output paths."""

    name: str
    stages: tuple[str, ...]
    cmds: tuple[str, ...]
    outs: tuple[str, ...]


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                          check=True).stdout


def _dvc(root: Path, *args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise ContractError(f"dvc {' '.join(args)} failed in {root}:\n{out.stderr[-3000:]}")


def matrix(root: Path) -> list[Item]:
    """The train@ARM-SEED and align@ARM-SEED pairs dvc.yaml expands from params.yaml."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        trains = [s for s in repo.index.stages if s.addressing.startswith("train@")]
        items = []
        for train in trains:
            key = train.addressing.removeprefix("train@")
            align = repo.stage.collect(f"align@{key}")[0]
            items.append(Item(key, (train.addressing, align.addressing), (train.cmd, align.cmd),
                              tuple(str(o.def_path) for s in (train, align) for o in s.outs)))
    return items


def prepare_checkout(root: Path, shared: Path) -> Path:
    """A checkout of HEAD under `shared`/checkouts/COMMIT using the workspace's DVC cache, with
    the upstream stages' outputs checked out from it. Refuses a workspace whose tracked files
    differ from HEAD (jobs run the commit, not the edits)."""
    dirty = [line[3:] for line in _git(root, "status", "--porcelain", "--untracked-files=no")
             .splitlines() if line[3:].strip() != "dvc.lock"]
    if dirty:
        raise ContractError(f"uncommitted changes in {', '.join(dirty)}: the jobs run a commit; "
                            "commit them (or stash them) and launch again")
    commit = _git(root, "rev-parse", "HEAD").strip()
    _dvc(root, "repro", *UPSTREAM)  # no-op when up to date; fills the cache
    checkout = shared / "checkouts" / commit
    if not checkout.exists():
        tmp = checkout.with_name(f".{commit}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        _git(root, "clone", "-q", "--no-checkout", str(root), str(tmp))
        _git(tmp, "checkout", "-q", "--detach", commit)
        tmp.rename(checkout)
    cache = subprocess.run([sys.executable, "-m", "dvc", "cache", "dir"], cwd=root,
                           capture_output=True, text=True, check=True).stdout.strip()
    _dvc(checkout, "config", "--local", "cache.dir", cache)
    shutil.copy2(root / "dvc.lock", checkout / "dvc.lock")
    _dvc(checkout, "checkout", "--allow-missing")  # the upstream outputs (and the raw data)
    return checkout


def run_item(checkout: str, cmds: tuple[str, ...], env: dict[str, str]) -> None:
    """One job: the stage commands in order, in the checkout (raises on the first failure)."""
    for cmd in cmds:
        subprocess.run(cmd, shell=True, cwd=checkout, env={**os.environ, **env}, check=True)


def submit(root: Path, shared: Path, cluster: str | None = None,
           slurm: dict[str, Any] | None = None) -> tuple[Path, list[Item], list[Any]]:
    """Submit one job per (arm, seed) as a job array; returns the checkout, items and jobs.
    `cluster`: submitit's ("slurm", "local"; None picks SLURM when sbatch is found)."""
    import submitit

    uri = tracking.tracking_uri()  # the workspace's, so every job logs to the same place
    tracking.check_server(uri)
    checkout = prepare_checkout(root, shared)
    items = matrix(root)
    executor = submitit.AutoExecutor(folder=shared / "logs" / checkout.name / "%j",
                                     cluster=cluster)
    executor.update_parameters(name="prh-matrix", **(slurm or {}))
    env = {"MLFLOW_TRACKING_URI": uri}
    with executor.batch():
        jobs = [executor.submit(run_item, str(checkout), item.cmds, env) for item in items]
    return checkout, items, jobs


def _slurm_state(job: Any) -> str | None:
    """A SLURM job's state from squeue/scontrol (None while it is queued or running); submitit
    asks sacct, which a cluster without accounting storage cannot answer."""
    queued = subprocess.run(["squeue", "-h", "-o", "%T", "-j", job.job_id], capture_output=True,
                            text=True)
    if queued.returncode == 0 and queued.stdout.strip():
        return None
    shown = subprocess.run(["scontrol", "-o", "show", "job", job.job_id], capture_output=True,
                           text=True).stdout
    return next((w.split("=", 1)[1] for w in shown.split() if w.startswith("JobState=")),
                "ENDED without a result (cancelled, killed or out of time)")


def _state(job: Any) -> str | None:
    """COMPLETED when `job` left a result, its end state otherwise, None while it runs."""
    import submitit

    if job.paths.result_pickle.exists():
        return "COMPLETED"
    if isinstance(job, submitit.SlurmJob):
        return _slurm_state(job)
    return job.state if job.done() else None


def wait_all(jobs: list[Any]) -> list[str]:
    """Block until every job has ended; their states, each read as soon as it ends (SLURM
    forgets an ended job after a while)."""
    import time

    states: list[str | None] = [None] * len(jobs)
    while None in states:
        states = [s or _state(job) for s, job in zip(states, jobs, strict=True)]
        if None in states:
            time.sleep(POLL_S)
    return [s for s in states if s is not None]


def collect(root: Path, checkout: Path, items: list[Item], jobs: list[Any]) -> list[str]:
    """Wait for the jobs; bring the outputs of those that succeeded into the workspace and
    `dvc commit` their stages. Returns one line per failed or cancelled job with its log."""
    failed, done = [], []
    for item, job, state in zip(items, jobs, wait_all(jobs), strict=True):
        if state == "COMPLETED":
            try:
                job.result()
                done.append(item)
                continue
            except Exception as e:  # submitit's FailedJobError: the stage command failed
                state = f"FAILED ({str(e).strip().splitlines()[-1]})"
        failed.append(f"{item.name}: {state}; log {job.paths.stderr}")
    for item in done:
        for out in item.outs:
            src, dst = checkout / out, root / out
            if dst.is_dir():
                shutil.rmtree(dst)
            dst.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    if done:
        _dvc(root, "commit", "-f", *[s for item in done for s in item.stages])
    return failed


def main(argv: list[str]) -> int:
    """Submit the matrix's train and align stages to SLURM, wait, bring the outputs in."""
    parser = argparse.ArgumentParser(prog="harness launch", description=main.__doc__)
    parser.add_argument("--shared", type=Path, default=Path("runs/.launch"),
                        help="checkouts and job logs, on storage the nodes see "
                             "(default: runs/.launch)")
    parser.add_argument("--partition", help="SLURM partition (default: the cluster's)")
    parser.add_argument("--time", type=int, default=120, help="minutes per job (default 120)")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs per job (default 0)")
    parser.add_argument("--cpus", type=int, default=1, help="CPUs per job (default 1)")
    parser.add_argument("--local", action="store_true",
                        help="run the jobs as local processes (submitit's local executor)")
    args = parser.parse_args(argv)
    root = Path(tracking.repo_root())
    slurm = {"timeout_min": args.time, "cpus_per_task": args.cpus}
    if not args.local:
        slurm.update({"gpus_per_node": args.gpus} if args.gpus else {})
        slurm.update({"slurm_partition": args.partition} if args.partition else {})
    try:
        checkout, items, jobs = submit(root, (root / args.shared).resolve(),
                                       "local" if args.local else None, slurm)
    except ContractError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"launch: {len(jobs)} job(s) from {checkout}: "
          + ", ".join(f"{i.name}={j.job_id}" for i, j in zip(items, jobs, strict=True)))
    failed = collect(root, checkout, items, jobs)
    print(f"launch: {len(items) - len(failed)} of {len(items)} done; their outputs are in the "
          "workspace (dvc commit); `harness run` goes on with aggregate, audit and report")
    if failed:
        print("failed (outputs absent, the rest kept):\n  " + "\n  ".join(failed),
              file=sys.stderr)
        return 1
    return 0
