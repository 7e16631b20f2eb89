"""MLflow on a real server: PostgreSQL (Debian's package) behind `mlflow server`, both on
127.0.0.1, with two `harness train` processes logging to it at once; then the same server going
away in the middle of a run. `.ci/run` installs PostgreSQL and runs these (`slow`) tests in its
"services" section."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import services
import tiny_world

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(services.pg_bin() is None,
                                 reason="PostgreSQL is not installed (.ci/run installs it)")]
METRICS = ("loss", "r_at_1_fit", "r_at_1_test")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("mlflow_pg")
    (base / "artifacts").mkdir()
    with services.postgres() as db, \
            services.mlflow_server(db, base / "artifacts") as url:
        yield {"url": url, "db": db, "artifacts": base / "artifacts"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return tiny_world.build_upstream(tiny_world.copy_project(tmp_path_factory.mktemp("repo")))


def test_two_trainings_at_once_log_params_epochs_and_artifacts_to_postgres(server, repo,
                                                                           tmp_path):
    import mlflow

    runs = [("good", 0), ("ntp", 1)]
    env = tiny_world.env(MLFLOW_TRACKING_URI=server["url"])
    procs = [subprocess.Popen(tiny_world.train_cmd(arm, seed), cwd=repo, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for arm, seed in runs]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outs)

    client = mlflow.MlflowClient(server["url"])
    for arm, seed in runs:
        folder = repo / "runs" / "text" / f"{arm}-s{seed}"
        record = json.loads((folder / "run.json").read_text())
        curve = json.loads((folder / "curve.json").read_text())
        run = client.get_run(record["mlflow_run_id"])
        assert run.info.status == "FINISHED" and run.info.run_name == f"{arm}-s{seed}"
        assert run.data.params["arm"] == arm and run.data.params["seed"] == str(seed)
        assert run.data.params["train.max_len"] == "48"  # the tiny world's, not the default
        assert run.data.params["train.epochs"] == "2"
        assert run.data.tags["git_dirty"] == "False"
        for name in METRICS:
            history = sorted(client.get_metric_history(run.info.run_id, name),
                             key=lambda m: m.step)
            assert [m.step for m in history] == [row["epoch"] for row in curve]
            assert [m.value for m in history] == pytest.approx([row[name] for row in curve])
        # artifacts go through the server (mlflow-artifacts:), not a path on this machine
        assert run.info.artifact_uri.startswith("mlflow-artifacts:")
        assert {a.path for a in client.list_artifacts(run.info.run_id)} >= \
            {"config.json", "curve.json"}
        got = client.download_artifacts(run.info.run_id, "curve.json", str(tmp_path))
        assert json.loads(Path(got).read_text()) == curve


def test_server_gone_mid_run_buffers_epochs_then_sends_or_names_them(server, tmp_path,
                                                                    monkeypatch, capsys):
    """A second server on the same database stands in for the first: it goes away after
    epoch 1, comes back before epoch 3 (epoch 2 arrives late, nothing lost), then goes away
    for good before the run ends (epoch 4 is named as lost)."""
    import mlflow

    from harness.tracking import mlflow_runs as tracking

    port = services.free_port()
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    monkeypatch.chdir(tmp_path)
    first = services.mlflow_server(server["db"], server["artifacts"], port)
    first.__enter__()
    with tracking.tracked_run("outage", {"arm": "good"}, {"t": 1}) as run:
        tracking.log_epoch({"loss": 1.0}, 1)
        first.__exit__(None, None, None)
        start = time.monotonic()
        tracking.log_epoch({"loss": 2.0}, 2)  # server down: buffered, training goes on
        assert time.monotonic() - start < 30
        assert "unreachable at epoch 2; 1 epoch(s) of metrics buffered" in capsys.readouterr().err
        with services.mlflow_server(server["db"], server["artifacts"], port):
            tracking.log_epoch({"loss": 3.0}, 3)  # back: epochs 2 and 3 are sent
            assert tracking.lost_items() == ""
        tracking.log_epoch({"loss": 4.0}, 4)
    err = capsys.readouterr().err
    assert f"did not take metrics loss of epoch(s) 4 of run {run.info.run_id}" in err
    assert "stays RUNNING on the server" in err
    assert mlflow.active_run() is None
    mend = err.split("mark it FAILED with: ")[1].strip().splitlines()[0]
    assert mend == tracking.mend_command(run.info.run_id, "FAILED")
    with services.mlflow_server(server["db"], server["artifacts"], port):  # back: mend it
        subprocess.run(mend, shell=True, check=True, env={**os.environ, "PATH": os.pathsep.join(
            [str(Path(sys.executable).parent), os.environ["PATH"]])})
        assert mlflow.MlflowClient(url).get_run(run.info.run_id).info.status == "FAILED"
    history = mlflow.MlflowClient(server["url"]).get_metric_history(run.info.run_id, "loss")
    assert sorted((m.step, m.value) for m in history) == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES") is None  # the quick calls' only
