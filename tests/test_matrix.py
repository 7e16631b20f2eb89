"""`harness matrix` on CPU with two workers: the arm x seed trainings run side by side (their
MLflow runs overlap in time), each is tracked in MLflow, dvc.lock records them so `dvc repro`
does not train again, and the rest of the pipeline ends at the report."""

from __future__ import annotations

import sqlite3

import pytest
import yaml
from tiny_world import commit_all, copy_project, sh

from harness.pipeline.matrix import parse_devices, worker_env
from harness.records.runfile import RUN_FILE


def test_devices_and_worker_environment():
    assert parse_devices("0, cuda:3") == ["0", "3"] and parse_devices("cpu,cpu") == ["", ""]
    with pytest.raises(ValueError, match="'gpu0' is neither 'cpu' nor a GPU index"):
        parse_devices("gpu0")
    assert worker_env({"X": "1"}, "2", 4) == {"X": "1", "CUDA_VISIBLE_DEVICES": "2"}
    cpu = worker_env({}, "", 2)
    assert cpu["CUDA_VISIBLE_DEVICES"] == "" and int(cpu["OMP_NUM_THREADS"]) >= 1


@pytest.mark.slow
def test_two_cpu_workers_train_the_matrix_concurrently_tracked_and_recorded(tmp_path):
    repo = copy_project(tmp_path / "repo")
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    # two arms x two seeds: two seeds of one arm side by side, aggregated over seeds after
    (repo / "params.yaml").write_text(yaml.safe_dump({**raw, "arms": ["good", "ntp"]},
                                                     sort_keys=False))
    commit_all(repo, "two arms")
    out = sh(repo, "harness", "matrix", "--devices", "cpu,cpu")
    assert "matrix: 4 training(s) on 2 worker(s)" in out.stdout
    assert out.stdout.count(" on CPU: done") == 4
    assert (repo / "reports/audit.html").is_file()
    assert "Data and pipelines are up to date" in sh(repo, "dvc", "status").stdout
    with sqlite3.connect(repo / "mlflow.db") as db:
        runs = [r for r in db.execute("select name, status, start_time, end_time from runs")
                if RUN_FILE.match(f"{r[0]}.json")]  # the trainings, not aggregate's arm runs
    assert sorted((n, s) for n, s, _, _ in runs) == sorted(
        (f"{a}-s{s}", "FINISHED") for a in ("good", "ntp") for s in (0, 1))
    spans = [(start, end) for _, _, start, end in runs]
    running = [sum(s <= t < e for s, e in spans) for t, _ in spans]   # at each run's start
    assert max(running) == 2, spans    # two trainings side by side, never more than 2 workers


def test_a_failed_training_stops_no_other_and_is_reported_by_its_code(tmp_path):
    from harness.pipeline.matrix import run_pool

    jobs = {"train@good-0": "exit 3", "train@bad-0": "echo $CUDA_VISIBLE_DEVICES-ok",
            "train@ntp-0": "true"}
    codes = run_pool(jobs, ["5", "7"], {"PATH": "/usr/bin:/bin"}, tmp_path / "logs")
    assert codes == {"train@good-0": 3, "train@bad-0": 0, "train@ntp-0": 0}
    assert (tmp_path / "logs/train@bad-0.log").read_text().strip() in ("5-ok", "7-ok")
