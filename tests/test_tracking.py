"""harness.tracking without a server: an unreachable MLFLOW_TRACKING_URI stops the train stage
before any work (the server tests themselves are in test_mlflow_server.py)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import services
import tiny_world

from harness.tracking import mlflow_runs as tracking
from prh.io import ContractError

ROOT = Path(__file__).resolve().parents[1]


def test_unreachable_server_stops_train_with_one_line_before_any_work(tmp_path):
    """Nothing listens on the port: exit 2 and one error line naming the URI and the fix,
    within seconds, before the data set is even read (here it does not exist)."""
    shutil.copy2(ROOT / "params.yaml", tmp_path / "params.yaml")
    url = f"http://127.0.0.1:{services.free_port()}"
    start = time.monotonic()
    out = subprocess.run(tiny_world.train_cmd("bad", 0), cwd=tmp_path, capture_output=True,
                         text=True, env=tiny_world.env(MLFLOW_TRACKING_URI=url))
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"error: MLflow tracking server {url} (MLFLOW_TRACKING_URI) "
                                 "does not answer")
    assert "unset MLFLOW_TRACKING_URI" in out.stderr and len(out.stderr.splitlines()) == 1
    assert time.monotonic() - start < 30
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("check", [["--check"], []], ids=["check", "run"])
def test_unreachable_server_stops_harness_run_before_any_stage(tmp_path, check):
    """`harness run` asks the server before `dvc repro`: no stage (the world's generation
    included) runs against a store that would refuse the trainings' runs."""
    shutil.copy2(ROOT / "params.yaml", tmp_path / "params.yaml")
    url = f"http://127.0.0.1:{services.free_port()}"
    out = subprocess.run(["harness", "run", *check], cwd=tmp_path, capture_output=True,
                         text=True, env=tiny_world.env(MLFLOW_TRACKING_URI=url))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"error: MLflow tracking server {url} (MLFLOW_TRACKING_URI) does not answer" in \
        out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_a_local_database_needs_no_server_check(tmp_path):
    tracking.check_server(f"sqlite:///{tmp_path / 'mlflow.db'}")  # returns: nothing to reach
    with pytest.raises(ContractError, match="http://127.0.0.1:9 "):
        tracking.check_server("http://127.0.0.1:9")


def test_artifacts_live_beside_the_database_not_in_the_first_workspace(tmp_path, monkeypatch):
    """Two workspaces sharing one mlflow.db (the container's /runs) share its mlruns/ too."""
    shared = tmp_path / "runs"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{shared / 'mlflow.db'}")
    for workspace in ("ws1", "ws2"):
        (tmp_path / workspace).mkdir()
        monkeypatch.chdir(tmp_path / workspace)
        (tmp_path / workspace / "curve.json").write_text(f'["{workspace}"]')
        with tracking.tracked_run(workspace, {"w": workspace}, {}) as run:
            tracking.log_artifacts([tmp_path / workspace / "curve.json"])
        assert run.info.artifact_uri.startswith((shared / "mlruns").as_uri() + "/")
        stored = Path(run.info.artifact_uri.removeprefix("file://")) / "curve.json"
        assert stored.read_text() == f'["{workspace}"]'
    assert not (tmp_path / "ws1" / "mlruns").exists()


@pytest.mark.parametrize("store", ["no database", "other runs", "dead server"])
def test_final_scores_need_no_run_in_the_store(tmp_path, monkeypatch, capsys, store):
    """A teammate's `dvc pull` workspace has no mlflow.db, or one without the training's run,
    and a server may be down: the align stage's log_final warns in one line and returns False
    within seconds (the run file holds the numbers), never raises nor makes a database."""
    uri = (f"http://127.0.0.1:{services.free_port()}" if store == "dead server"
           else f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    if store == "other runs":
        with tracking.tracked_run("good-s0", {}, {}):
            pass
        capsys.readouterr()
    start = time.monotonic()
    logged = tracking.log_final("0" * 32, {"r_at_1": {"value": 0.5, "ci": [0.4, 0.6]}}, {}, {})
    assert logged is False and time.monotonic() - start < 60
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: the final scores were not logged to "
                                               f"MLflow run {'0' * 32} in {uri}")
    assert (tmp_path / "mlflow.db").exists() == (store == "other runs")


def test_dirty_means_a_file_of_the_commit_changed_not_a_new_one(tmp_path, monkeypatch):
    """`dvc exp run` stages each `cache: false` output as it writes it (the seed plan's before
    any training): a staged new file, like an untracked one, leaves the runs clean; dvc.lock
    rewritten too; a committed file edited makes them dirty."""
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "params.yaml").write_text("seeds: [0]\n")
    (tmp_path / "dvc.lock").write_text("a\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.json").write_text("{}\n")
    (tmp_path / "dvc.lock").write_text("b\n")
    git("add", "plan.json", "dvc.lock")
    assert tracking.git_state()["git_dirty"] is False
    (tmp_path / "params.yaml").write_text("seeds: [0, 1]\n")
    assert tracking.git_state()["git_dirty"] is True
