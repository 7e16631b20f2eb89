"""`harness launch`: the trainings of params.yaml's profile as one SLURM job array (submitit),
each job running its stages' dvc.yaml commands in a checkout of the current commit on shared
storage whose DVC cache is the workspace's: the arm x seed matrix's train and align stages
(dvc.yaml), or under `profile: recap` each arm's recap_train stage (pipelines/recap/dvc.yaml).
Under `profile: recap` the subset's build runs on SLURM first when its stage is out of date:
each step of prh.recap_subset as `--build-jobs` jobs of `--cpus` workers splitting the shards,
one step after another, in the workspace's work folder; the recap stage then finds every task
done and only gathers (datatrove's completion markers).
With several processes per job (`--nodes`, `--procs-per-node`) the job's first stage, its
training, runs under torchrun on every node (rank 0 tracks and writes; the rest of the job's
stages run on the first node after it). When the jobs end, the outputs of those that succeeded
enter the workspace (`dvc commit`), so `dvc status` is clean for them and `harness run` goes on
with what follows (aggregate, audit and report; recap_score and recap_report); a job that failed
or was cancelled leaves its outputs absent and is listed with its log.

The workspace (and so its DVC cache and --shared) must be on storage the compute nodes see."""

from __future__ import annotations

import argparse
import os
import re
import shlex
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
PORT_BASE = 29500  # torchrun's default master port; a job adds its SLURM job id modulo PORT_SPAN
PORT_SPAN = 10000
ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit): ")  # a traceback's last


@dataclass(frozen=True)
class Pipeline:
    """What launch submits for a profile: the trainings' dvc.yaml, the stages they read (run
    where you call launch) and the stages of one job, in order (the first is the training,
    matrixed; the others share its matrix key)."""

    dvcfile: str
    upstream: tuple[str, ...]
    stages: tuple[str, ...]

    def address(self, name: str) -> str:
        """A stage's name as `dvc repro` and `dvc commit` take it."""
        return name if self.dvcfile == "dvc.yaml" else f"{self.dvcfile}:{name}"


MATRIX = Pipeline("dvc.yaml", UPSTREAM, ("train", "align"))
WEB_TEXT_RUNS = Pipeline("pipelines/recap/dvc.yaml", ("recap", "recap_paraphrase"),
                         ("recap_train",))


@dataclass(frozen=True)
class Spread:
    """How many machines one job spans and how many training processes each runs."""

    nodes: int = 1
    procs: int = 1

    @property
    def distributed(self) -> bool:
        return self.nodes * self.procs > 1


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


def pipeline_for(root: Path) -> Pipeline:
    """The trainings params.yaml's profile has: the web-text runs under `profile: recap` (their
    inputs checked first, as `harness run` does), the arm x seed matrix otherwise."""
    from harness.config.params import WEB_TEXT, read_top_level
    from harness.pipeline.run import check_web_text

    if read_top_level(root / "params.yaml").get("profile") in WEB_TEXT:
        check_web_text(root / "params.yaml")
        return WEB_TEXT_RUNS
    return MATRIX


def matrix(root: Path, pipeline: Pipeline = MATRIX) -> list[Item]:
    """One item per matrix key of the pipeline's first stage (train@ARM-SEED with its
    align@ARM-SEED; recap_train@ARM), as DVC expands them from params.yaml."""
    from dvc.repo import Repo

    first = f"{pipeline.stages[0]}@"
    with Repo(str(root)) as repo:
        trains = [s for s in repo.index.stages if s.name.startswith(first)
                  and s.dvcfile.relpath == pipeline.dvcfile]
        items = []
        for train in trains:
            key = train.name.removeprefix(first)
            stages = [train, *(repo.stage.collect(pipeline.address(f"{name}@{key}"))[0]
                               for name in pipeline.stages[1:])]
            items.append(Item(key, tuple(s.addressing for s in stages),
                              tuple(s.cmd for s in stages),
                              tuple(os.path.relpath(o.fs_path, root)
                                    for s in stages for o in s.outs)))
    return items


def refuse_edits(root: Path) -> None:
    """ContractError when the workspace's tracked files differ from HEAD (bar dvc.lock)."""
    dirty = [line[3:] for line in _git(root, "status", "--porcelain", "--untracked-files=no")
             .splitlines() if Path(line[3:].strip()).name != "dvc.lock"]
    if dirty:
        raise ContractError(f"uncommitted changes in {', '.join(dirty)}: the jobs run a commit; "
                            "commit them (or stash them) and launch again")


def prepare_checkout(root: Path, shared: Path, pipeline: Pipeline = MATRIX) -> Path:
    """A checkout of HEAD under `shared`/checkouts/COMMIT using the workspace's DVC cache, with
    the upstream stages' outputs checked out from it. Refuses a workspace whose tracked files
    differ from HEAD (jobs run the commit, not the edits)."""
    refuse_edits(root)
    commit = _git(root, "rev-parse", "HEAD").strip()
    _dvc(root, "repro", *map(pipeline.address, pipeline.upstream))  # fills the cache
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
    for lock in {"dvc.lock", str(Path(pipeline.dvcfile).with_suffix(".lock"))}:
        if (root / lock).exists():
            shutil.copy2(root / lock, checkout / lock)
    _dvc(checkout, "checkout", "--allow-missing")  # the upstream outputs (and the raw data)
    return checkout


def _subset_build(root: Path) -> tuple[Any, Path, int]:
    """The recap stage's (config, output folder, cut), as the stage reads them."""
    import yaml

    from harness.config.recap import encoder_cut, load_recap

    stage = yaml.safe_load((root / WEB_TEXT_RUNS.dvcfile).read_text())["stages"]["recap"]
    return (load_recap(root / "params.yaml"), Path(stage["outs"][0]),
            encoder_cut(root / "params.yaml"))


def build_part(root: str, step: str, node: int, nodes: int, workers: int) -> None:
    """One SLURM job of the subset's build: node `node` of `nodes`' share of `step`, in the
    workspace (prh.recap_subset.build_part), with the recap stage's params and output."""
    from prh.recap_subset import build_part as run_part

    os.chdir(root)  # params.yaml's paths are the workspace's, as the stage's
    cfg, out, cut = _subset_build(Path(root))
    run_part(cfg, out, cut, step, node, nodes, workers)


def build_on_slurm(root: Path, shared: Path, cluster: str | None, slurm: dict[str, Any],
                   jobs: int) -> int:
    """The recap stage's build as SLURM jobs, each step whose tasks are not all done, in order,
    when `dvc status` finds the stage out of date; returns the jobs submitted (0: nothing to
    build). A failed step raises naming its log."""
    import json

    import submitit

    from prh.recap_subset import RERUN, pending

    address = WEB_TEXT_RUNS.address("recap")
    status = subprocess.run([sys.executable, "-m", "dvc", "status", "--json", address],
                            cwd=root, capture_output=True, text=True, check=True).stdout
    if not json.loads(status or "{}"):
        return 0
    cwd = Path.cwd()
    os.chdir(root)  # the shards' and the work folder's paths are the workspace's
    try:
        todo = pending(*_subset_build(root))
    finally:
        os.chdir(cwd)
    executor = submitit.AutoExecutor(folder=shared / "logs" / "build" / "%j", cluster=cluster)
    executor.update_parameters(name="prh-recap-build", **{k: v for k, v in slurm.items()
                                                          if k != "gpus_per_node"})
    workers, submitted = int(slurm.get("cpus_per_task", 1)), 0
    for step, tasks in todo:
        parts = min(jobs, tasks)
        with executor.batch():
            running = [executor.submit(build_part, str(root), step, k, parts, workers)
                       for k in range(parts)]
        submitted += parts
        for job, state in zip(running, wait_all(running), strict=True):
            if state == "COMPLETED":
                try:
                    job.result()  # the task's own exception, when SLURM saw the job end well
                    continue
                except Exception:
                    state = "FAILED"
            line = error_line(job) if state == "FAILED" else None  # else no traceback
            fix = "" if line and RERUN in line else "; launch again to resume it"
            raise ContractError(f"the subset's {step} step failed on SLURM (job {job.job_id} "
                                f"{state}){f': {line}' if line else ''}; log "
                                f"{job.paths.stderr}{fix}")
    return submitted


def error_line(job: Any) -> str | None:
    """The error a failed job raised: the last `...Error: ...` line of its stderr (a task's
    RecapError without its class name), None when it holds none."""
    try:
        text = job.stderr() or ""
    except OSError:
        text = ""
    found = [line for line in text.splitlines() if ERROR_LINE.match(line)]
    return re.sub(r"^[\w.]*RecapError: ", "", found[-1]) if found else None


def under_torchrun(cmd: str, spread: Spread, node: int, master: str, port: int) -> list[str]:
    """A `harness STAGE ...` command as torchrun runs it on node `node` of `spread.nodes`
    (static rendezvous at master:port; one machine: torchrun's --standalone)."""
    argv = shlex.split(cmd)
    if argv[:1] != ["harness"]:
        raise ContractError(f"cannot run {cmd!r} under torchrun: not a harness stage command")
    where = (["--standalone"] if spread.nodes == 1 else
             ["--nnodes", str(spread.nodes), "--node-rank", str(node), "--master-addr", master,
              "--master-port", str(port)])
    return [sys.executable, "-m", "torch.distributed.run", *where, "--nproc-per-node",
            str(spread.procs), "-m", "harness.cli", *argv[1:]]


def run_item(checkout: str, cmds: tuple[str, ...], env: dict[str, str],
             spread: Spread = Spread()) -> None:
    """One job (on each of its nodes): the stage commands in order, in the checkout; the first
    under torchrun when the job has several processes, the rest on the first node only (raises
    on the first failure)."""
    node, master, port = 0, "", PORT_BASE
    if spread.nodes > 1:
        import submitit

        job = submitit.JobEnvironment()
        node, master = job.node, job.hostnames[0]
        port = PORT_BASE + int(os.environ.get("SLURM_JOB_ID", "0")) % PORT_SPAN
    run_env = {**os.environ, **env}
    for i, cmd in enumerate(cmds):
        if i == 0 and spread.distributed:
            subprocess.run(under_torchrun(cmd, spread, node, master, port), cwd=checkout,
                           env=run_env, check=True)
        elif node == 0:
            subprocess.run(cmd, shell=True, cwd=checkout, env=run_env, check=True)


def submit(root: Path, shared: Path, cluster: str | None = None,
           slurm: dict[str, Any] | None = None, spread: Spread = Spread(),
           build_jobs: int = 1) -> tuple[Path, list[Item], list[Any]]:
    """Submit one job per item of the profile's trainings as a job array, each on
    `spread.nodes` nodes; returns the checkout, items and jobs. `cluster`: submitit's
    ("slurm", "local"; None picks SLURM when sbatch is found). Under `profile: recap` the
    subset is built first (`build_on_slurm`, `build_jobs` jobs a step)."""
    import submitit

    pipeline = pipeline_for(root)
    if spread.nodes > 1 and cluster == "local":
        raise ContractError("--local runs on this machine: --nodes must be 1")
    uri = tracking.tracking_uri()  # the workspace's, so every job logs to the same place
    tracking.check_server(uri)
    if pipeline is WEB_TEXT_RUNS:
        refuse_edits(root)  # the build reads the workspace's params and code
        built = build_on_slurm(root, shared, cluster, slurm or {}, build_jobs)
        if built:
            print(f"launch: the subset's build ran as {built} job(s); the recap stage gathers it")
    checkout = prepare_checkout(root, shared, pipeline)
    items = matrix(root, pipeline)
    executor = submitit.AutoExecutor(folder=shared / "logs" / checkout.name / "%j",
                                     cluster=cluster)
    executor.update_parameters(name=f"prh-{pipeline.stages[0]}", **(slurm or {}),
                               **({"nodes": spread.nodes, "tasks_per_node": 1}
                                  if spread.nodes > 1 else {}))
    env = {"MLFLOW_TRACKING_URI": uri}
    with executor.batch():
        jobs = [executor.submit(run_item, str(checkout), item.cmds, env, spread)
                for item in items]
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
    """Submit the profile's trainings to SLURM (the matrix's train and align stages, or the
    recap profile's recap_train stages), wait, bring the outputs in."""
    parser = argparse.ArgumentParser(prog="harness launch", description=main.__doc__)
    parser.add_argument("--shared", type=Path, default=Path("runs/.launch"),
                        help="checkouts and job logs, on storage the nodes see "
                             "(default: runs/.launch)")
    parser.add_argument("--partition", help="SLURM partition (default: the cluster's)")
    parser.add_argument("--time", type=int, default=120, help="minutes per job (default 120)")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs per node (default 0)")
    parser.add_argument("--cpus", type=int, default=1, help="CPUs per node (default 1)")
    parser.add_argument("--nodes", type=int, default=1,
                        help="nodes per job; above 1 the training runs under torchrun on each "
                             "(default 1)")
    parser.add_argument("--procs-per-node", type=int, default=None,
                        help="training processes per node under torchrun (default: --gpus, "
                             "or 1 without GPUs)")
    parser.add_argument("--build-jobs", type=int, default=1,
                        help="profile recap: jobs each step of the subset's build splits the "
                             "shards among, each with --cpus workers (default 1)")
    parser.add_argument("--local", action="store_true",
                        help="run the jobs as local processes (submitit's local executor)")
    args = parser.parse_args(argv)
    root = Path(tracking.repo_root())
    os.chdir(root)  # params.yaml's paths are the repository's
    spread = Spread(args.nodes, args.procs_per_node or max(args.gpus, 1))
    slurm = {"timeout_min": args.time, "cpus_per_task": args.cpus}
    if not args.local:
        slurm.update({"gpus_per_node": args.gpus} if args.gpus else {})
        slurm.update({"slurm_partition": args.partition} if args.partition else {})
    try:
        if spread.nodes < 1 or spread.procs < 1 or args.build_jobs < 1:
            raise ContractError("--nodes, --procs-per-node and --build-jobs must be at least 1")
        checkout, items, jobs = submit(root, (root / args.shared).resolve(),
                                       "local" if args.local else None, slurm, spread,
                                       args.build_jobs)
    except ContractError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"launch: {len(jobs)} job(s) of {spread.nodes} node(s) x {spread.procs} process(es) "
          f"from {checkout}: "
          + ", ".join(f"{i.name}={j.job_id}" for i, j in zip(items, jobs, strict=True)))
    failed = collect(root, checkout, items, jobs)
    print(f"launch: {len(items) - len(failed)} of {len(items)} done; their outputs are in the "
          "workspace (dvc commit); `harness run` goes on with the stages after them")
    if failed:
        print("failed (outputs absent, the rest kept):\n  " + "\n  ".join(failed),
              file=sys.stderr)
        return 1
    return 0
