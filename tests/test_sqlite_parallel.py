"""Parallel runs on the SQLite default (mlflow.db in the repository): runs started together on a
fresh database all used to fail in MLflow's schema migrations ("table latest_metrics already
exists"); harness.tracking now lets one process at a time create it. Every metric written is
read back. Slow (about 3 minutes): `.ci/run`'s "services" section runs it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest
import tiny_world

pytestmark = pytest.mark.slow
WRITER = """
import sys
from harness.tracking import mlflow_runs as tracking
name, n = sys.argv[1], int(sys.argv[2])
with tracking.tracked_run(name, {"writer": name}, {}) as run:
    for epoch in range(1, n + 1):
        tracking.log_epoch({"a": epoch, "b": epoch / 7, "c": -epoch}, epoch)
print(run.info.run_id)
"""


def metric_rows(db) -> dict[str, list[tuple[str, int, float]]]:
    """Every logged (key, step, value) per run id, read from the database itself."""
    rows: dict[str, list[tuple[str, int, float]]] = {}
    with sqlite3.connect(db) as con:
        for run, key, step, value in con.execute(
                "SELECT run_uuid, key, step, value FROM metrics ORDER BY run_uuid, key, step"):
            rows.setdefault(run, []).append((key, step, value))
    return rows


def test_four_writers_on_a_fresh_database_lose_no_metric(tmp_path):
    """4 processes x 100 epochs x 3 metrics = 1,200 values written at once, 1,200 read back."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, f"w{i}", "100"], cwd=tmp_path,
                              env=tiny_world.env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-2000:] for _, err in outs]
    assert not any("warning" in err for _, err in outs)  # nothing buffered, nothing lost
    rows = metric_rows(tmp_path / "mlflow.db")
    assert sorted(rows) == sorted(out.strip() for out, _ in outs)
    for got in rows.values():
        assert got == [(k, e, v) for k in "abc"
                       for e, v in ((e, {"a": e, "b": e / 7, "c": -e}[k]) for e in range(1, 101))]
    assert sum(map(len, rows.values())) == 1200


def test_two_train_stages_at_once_on_the_sqlite_default(tmp_path):
    """Two `harness train` processes, fresh mlflow.db: both runs FINISHED, every epoch of every
    curve metric in the database equals the run's curve.json."""
    repo = tiny_world.build_upstream(tiny_world.copy_project(tmp_path, epochs=3))
    runs = [("good", 0), ("bad", 0)]
    # the tiny runs last seconds: sample system metrics every second, not MLflow's 10 s
    env = tiny_world.env(MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL="1")
    procs = [subprocess.Popen(tiny_world.train_cmd(arm, seed), cwd=repo, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for arm, seed in runs]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outs)
    rows = metric_rows(repo / "mlflow.db")
    with sqlite3.connect(repo / "mlflow.db") as con:
        status = dict(con.execute("SELECT run_uuid, status FROM runs"))
    assert len(rows) == 2
    for arm, seed in runs:
        folder = repo / "runs" / "text" / f"{arm}-s{seed}"
        run_id = json.loads((folder / "run.json").read_text())["mlflow_run_id"]
        curve = json.loads((folder / "curve.json").read_text())
        assert status[run_id] == "FINISHED"
        expected = sorted((k, row["epoch"], float(row[k])) for row in curve for k in row)
        assert len(curve) == 3 and len(expected) >= 3 * 6  # epoch, loss, lr, R@1 fit/test...
        # MLflow's system metrics monitor sampled the machine while the run trained
        assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= \
            {key for key, _, _ in rows[run_id]}
        got = sorted(r for r in rows[run_id] if not r[0].startswith("system/"))
        assert [g[:2] for g in got] == [e[:2] for e in expected]
        assert [g[2] for g in got] == pytest.approx([e[2] for e in expected])
