"""`harness launch` on a real one-node SLURM (Debian's slurm-wlm and munge, started by
.ci/slurm-single-node): the arm x seed matrix as a job array run in a checkout of the commit,
one job cancelled; the others' outputs enter the workspace and `dvc status` is clean for them."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess

import pytest
import tiny_world
import yaml

from harness.pipeline import launch
from prh.io import ContractError


def test_launch_refuses_a_workspace_with_uncommitted_changes(tmp_path):
    (tmp_path / "params.yaml").write_text("profile: world\n")
    tiny_world.sh(tmp_path, "git", "init", "-q")
    tiny_world.sh(tmp_path, "git", "add", "params.yaml")
    tiny_world.sh(tmp_path, "git", "commit", "-qm", "x")
    (tmp_path / "params.yaml").write_text("profile: flickr30k\n")
    with pytest.raises(ContractError, match="uncommitted changes in params.yaml: the jobs run"):
        launch.prepare_checkout(tmp_path, tmp_path / "shared")
    assert not (tmp_path / "shared").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("sbatch") is None,
                    reason="no SLURM here (.ci/slurm-single-node installs and starts one)")
def test_job_array_on_slurm_one_cancelled_the_rest_enter_the_workspace(tmp_path, monkeypatch):
    repo = tiny_world.copy_project(tmp_path / "ws")
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    raw["seeds"] = [0]
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    tiny_world.sh(repo, "git", "commit", "-qam", "one seed")
    for key, value in tiny_world.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(repo)

    checkout, items, jobs = launch.submit(repo, repo / "runs" / ".launch", "slurm",
                                          {"timeout_min": 20, "cpus_per_task": 1})
    assert [i.name for i in items] == ["good-0", "bad-0", "ntp-0"]
    assert len({j.job_id.split("_")[0] for j in jobs}) == 1  # one array
    subprocess.run(["scancel", jobs[2].job_id], check=True)
    failed = launch.collect(repo, checkout, items, jobs)

    # a task cancelled while pending leaves no record for scontrol: "ENDED without a result"
    assert len(failed) == 1
    assert re.match(r"ntp-0: (CANCELLED|ENDED without a result \(cancelled)", failed[0])
    assert f"log {repo / 'runs' / '.launch' / 'logs'}" in failed[0]
    assert not (repo / "runs" / "text" / "ntp-0").exists()
    assert not (repo / "runs" / "align" / "ntp-s0.json").exists()
    status = tiny_world.sh(repo, "dvc", "status", "train@good-0", "align@good-0",
                           "train@bad-0", "align@bad-0")
    assert "up to date" in status.stdout, status.stdout
    # what `harness run` has left to do before aggregate: the cancelled run, nothing else
    left = json.loads(tiny_world.sh(repo, "dvc", "status", "--with-deps", "--json",
                                    "aggregate").stdout)
    assert set(left) == {"train@ntp-0", "align@ntp-0", "aggregate"}, left
    with sqlite3.connect(repo / "mlflow.db") as con:
        runs = dict(con.execute("SELECT run_uuid, status FROM runs"))
    for arm in ("good", "bad"):
        record = json.loads((repo / "runs" / "text" / f"{arm}-s0" / "run.json").read_text())
        assert runs[record["mlflow_run_id"]] == "FINISHED"
        assert record["git_dirty"] is False
        assert record["git_commit"] == checkout.name  # the job ran the commit's checkout
        assert (repo / "runs" / "metrics" / f"{arm}-s0.json").exists()
