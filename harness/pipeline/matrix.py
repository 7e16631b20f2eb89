"""`harness matrix`: the arm x seed matrix on one node, one training per device at a time.

`dvc repro` runs stages one after another and holds the repository lock while it runs, so two
`dvc repro train@...` cannot run side by side, and DVC's experiment queue gives its workers no
device of their own. This launcher therefore (1) runs the stages the trainings need with `dvc
repro` (prepare, image, config), (2) runs every stale `train@ARM-SEED` stage's own command, as
dvc.yaml resolves it, in a pool of one worker per device, each with CUDA_VISIBLE_DEVICES set to its
GPU (or to nothing, for a CPU worker, with the CPU's threads shared out), (3) records the
finished trainings in dvc.lock with `dvc commit` (the stage, its deps and its outs, as `dvc
repro` would have), and (4) runs `dvc repro` for the rest (align, aggregate, audit, report).
Each training tracks itself in MLflow, as under `dvc repro`. No home-made scheduler beyond a
queue of commands: a failed training stops nothing else, is named at the end, and leaves no
output (the train stage writes atomically); rerunning picks up what is still stale.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

# the stages whose outputs train and align read (dvc.yaml); `config` names every config@ARM
UPSTREAM = ("prepare", "image", "config")


def parse_devices(text: str) -> list[str]:
    """'0,1' or 'cuda:0,cuda:1' -> GPU ids; 'cpu,cpu' -> two CPU workers ('' each)."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        if item == "cpu":
            out.append("")
        elif item.removeprefix("cuda:").isdigit():
            out.append(item.removeprefix("cuda:"))
        else:
            raise ValueError(f"--devices: {item!r} is neither 'cpu' nor a GPU index "
                             "(e.g. --devices 0,1,2,3 or --devices cpu,cpu)")
    return out


def stale_trainings(env: dict[str, str]) -> dict[str, str]:
    """train@ARM-SEED -> its command, for every train stage `dvc status` finds stale."""
    from dvc.repo import Repo

    status = json.loads(subprocess.run(["dvc", "status", "--json"], env=env, check=True,
                                       capture_output=True, text=True).stdout or "{}")
    with Repo(".") as repo:
        return {s.addressing: s.cmd for s in repo.index.stages
                if s.addressing.startswith("train@") and s.addressing in status}


def worker_env(env: dict[str, str], device: str, n_workers: int) -> dict[str, str]:
    """One training's environment: its GPU, or no GPU and its share of the CPU threads."""
    out = {**env, "CUDA_VISIBLE_DEVICES": device}
    if device == "":
        out.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // n_workers)))
    return out


def run_pool(jobs: dict[str, str], devices: list[str], env: dict[str, str],
             log_dir: Path) -> dict[str, int]:
    """Run every command of `jobs`, at most one per device at a time; stage -> exit code.
    Each job's output goes to log_dir/STAGE.log."""
    todo: queue.Queue[tuple[str, str]] = queue.Queue()
    for item in sorted(jobs.items()):
        todo.put(item)
    codes: dict[str, int] = {}
    log_dir.mkdir(parents=True, exist_ok=True)

    def work(device: str) -> None:
        while True:
            try:
                name, cmd = todo.get_nowait()
            except queue.Empty:
                return
            start = time.perf_counter()
            with open(log_dir / f"{name}.log", "w") as log:
                code = subprocess.run(cmd, shell=True, stdout=log, stderr=subprocess.STDOUT,
                                      env=worker_env(env, device, len(devices))).returncode
            codes[name] = code
            where = f"GPU {device}" if device else "CPU"
            print(f"matrix: {name} on {where}: {'done' if code == 0 else f'failed ({code})'} "
                  f"in {time.perf_counter() - start:.0f} s", flush=True)

    threads = [threading.Thread(target=work, args=(d,)) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


def main(argv: list[str]) -> int:
    """Run the stale trainings of the arm x seed matrix side by side, one per device, then
    the rest of the pipeline."""
    parser = argparse.ArgumentParser(prog="harness matrix", description=main.__doc__)
    parser.add_argument("--devices", required=True,
                        help="one worker per entry: GPU indices (0,1,2,3) or cpu,cpu")
    parser.add_argument("--logs", type=Path, default=Path("runs/.logs"),
                        help="one log file per training (default runs/.logs)")
    parser.add_argument("--no-rest", action="store_true",
                        help="stop after the trainings (no align, aggregate, report)")
    args = parser.parse_args(argv)
    try:
        devices = parse_devices(args.devices)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    if subprocess.run(["dvc", "repro", *UPSTREAM], env=env).returncode:
        return 1
    jobs = stale_trainings(env)
    print(f"matrix: {len(jobs)} training(s) on {len(devices)} worker(s)", flush=True)
    codes = run_pool(jobs, devices, env, args.logs)
    done = sorted(n for n, c in codes.items() if c == 0)
    if done:
        subprocess.run(["dvc", "commit", "-f", "-q", *done], env=env, check=True)
    failed = sorted(set(jobs) - set(done))
    if failed:
        print(f"error: {len(failed)} training(s) failed: {', '.join(failed)}; see "
              f"{args.logs}/<stage>.log, fix, and run `harness matrix` again", file=sys.stderr)
        return 1
    return 0 if args.no_rest else subprocess.run(["dvc", "repro"], env=env).returncode
