"""The real pipeline: `harness run` (dvc repro) on a tiny world, then DVC's change tracking.

One module-scoped run in a temporary git repository, shared by the tests below: it produces
both reports and one finished MLflow run per (arm, seed); a second `dvc status` is clean; a
training parameter change marks exactly the stages that depend on it; a queued experiment of
the SIGReg weight reruns only the JEPA arms' stages and what follows, logging to the
workspace's mlflow.db, and `harness diff` tells the
committed results from the experiment's. All slow
(`.ci/run`'s pipeline section): the main job alone takes two minutes, and one pytest process
builds it once for every test that reads it.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
import yaml
from tiny_world import copy_project, sh

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow
UPSTREAM = {"world", "prepare", "image", "theory", "contamination"}


def ran_stages(output: str) -> set[str]:
    return set(re.findall(r"Running stage '([^']+)'", output))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    repo = copy_project(tmp_path_factory.mktemp("pipeline"))
    first = sh(repo, "harness", "run")
    assert ran_stages(first.stdout) >= UPSTREAM | {"train@good-0", "report"}
    return repo


def test_main_job_writes_both_reports_and_one_finished_mlflow_run_per_arm_seed(pipeline):
    assert (pipeline / "reports/audit.html").stat().st_size > 1000
    assert (pipeline / "reports/audit.pdf").read_bytes()[:5] == b"%PDF-"
    with sqlite3.connect(pipeline / "mlflow.db") as db:
        rows = db.execute("select name, status from runs").fetchall()
    seeds = [(f"{a}-s{s}", "FINISHED") for a in ("good", "bad", "ntp") for s in (0, 1)]
    arms = [(f"{a} (seeds 0,1)", "FINISHED") for a in ("good", "bad", "ntp")]
    assert sorted(rows) == sorted(seeds + arms + [("world results", "FINISHED")])
    html = (pipeline / "reports/audit.html").read_text()
    results = json.loads((pipeline / "runs/results.json").read_text())
    for arm in ("good", "bad", "ntp"):
        r1 = results["arms"][arm]["metrics"]["r_at_1"]
        assert 0 <= r1["ci"][0] <= r1["mean"] <= r1["ci"][1] <= 1
        assert f"{r1['mean']:.3f}" in html


def test_second_run_does_no_work(pipeline):
    status = sh(pipeline, "dvc", "status")
    assert "Data and pipelines are up to date" in status.stdout


def double_lr(repo: Path) -> None:
    """Double world.train.lr in `repo`'s params.yaml: a value every training reads."""
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    raw["world"]["train"]["lr"] = raw["world"]["train"]["lr"] * 2
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))


def test_training_param_change_marks_exactly_the_dependent_stages(pipeline):
    """`dvc status` only: the module's outputs stay those of the first run (params restored)."""
    before = (pipeline / "params.yaml").read_text()
    double_lr(pipeline)
    changed = json.loads(sh(pipeline, "dvc", "status", "--json").stdout)
    (pipeline / "params.yaml").write_text(before)
    # train and align read the train section through the config stage's file per arm, so DVC
    # names them once config@ARM has rewritten it (test_stage_deps: a SIGReg knob reruns the
    # JEPA arms only); the probe trains; the report prints every params value
    assert set(changed) == {"config@good", "config@bad", "config@ntp", "probe", "report"}
    assert "Data and pipelines are up to date" in sh(pipeline, "dvc", "status").stdout


def test_diff_two_seeds_of_one_arm_on_real_outputs(pipeline):
    out = sh(pipeline, "harness", "diff", "runs/align:good@0", "runs/align:good@1",
             "--format", "json", "--n-resamples", "200")
    result = json.loads(out.stdout)
    text = json.dumps(result)
    assert "r_at_1" in text and "mknn10" in text
    gate = sh(pipeline, "harness", "diff", "runs/align:good@0", "runs/align:good@0",
              "--fail-if", "r_at_1<-0.5", "--n-resamples", "200")
    assert gate.returncode == 0


# a queued experiment: four trainings, their alignments, the probe and the report again
def test_a_queued_param_change_reruns_only_dependent_stages_logging_to_the_workspace(pipeline):
    """`dvc exp run --queue` with world.train.lamb doubled (the SIGReg weight, read by the two
    JEPA arms only) runs in a temporary clone DVC deletes afterwards: it reruns their trainings
    and what follows, nothing upstream and none of next-token's; its trainings and the result
    runs it aggregates land in the workspace's mlflow.db, FINISHED and tagged with the
    experiment's name and the commit it ran, none in the clone; and `harness diff` across the
    two revisions names lamb and gates on R@1."""
    sh(pipeline, "git", "add", "-A")
    sh(pipeline, "git", "commit", "-qm", "results before the queued experiment")
    lamb = yaml.safe_load((pipeline / "params.yaml").read_text())["world"]["train"]["lamb"] * 2
    sh(pipeline, "dvc", "exp", "run", "--queue", "-S", f"world.train.lamb={lamb}", "-n", "lamb2")
    sh(pipeline, "dvc", "exp", "run", "--run-all")  # exits 0 when the experiment fails, so:
    assert "lamb2" in sh(pipeline, "dvc", "exp", "list", "--name-only").stdout
    ran = ran_stages(sh(pipeline, "dvc", "queue", "logs", "lamb2").stdout)
    # config@ntp reruns (it reads world.train) and writes the same file, so nothing of ntp's
    assert not ran & UPSTREAM and not {s for s in ran if s.startswith(("train@ntp",
                                                                         "align@ntp"))}, ran
    assert {"train@good-0", "train@bad-1", "align@bad-1", "aggregate", "report"} <= ran
    with sqlite3.connect(pipeline / "mlflow.db") as db:
        runs = db.execute("select r.name, r.status, t.value from runs r join tags t on "
                          "t.run_uuid = r.run_uuid and t.key = 'dvc_exp_name'").fetchall()
    # the retrained runs, and the result runs of the new params (every arm's, ntp's included)
    assert sorted(runs) == sorted(
        [(f"{a}-s{s}", "FINISHED", "lamb2") for a in ("bad", "good") for s in (0, 1)]
        + [(f"{a} (seeds 0,1)", "FINISHED", "lamb2") for a in ("bad", "good", "ntp")]
        + [("world results", "FINISHED", "lamb2")])
    head = sh(pipeline, "git", "rev-parse", "HEAD").stdout.strip()
    with sqlite3.connect(pipeline / "mlflow.db") as db:  # the commit it ran, its params applied
        state = set(db.execute("select t.key, t.value from runs r join tags t on t.run_uuid = "
                               "r.run_uuid where r.name = 'good-s0' and t.key in "
                               "('git_commit', 'git_dirty', 'dvc_exp_baseline') and exists "
                               "(select 1 from tags e where e.run_uuid = r.run_uuid and "
                               "e.key = 'dvc_exp_name')"))
    assert state == {("git_commit", head), ("git_dirty", "True"), ("dvc_exp_baseline", head)}
    assert not list((pipeline / ".dvc/tmp/exps").rglob("mlflow.db"))
    diff = json.loads(sh(pipeline, "harness", "diff", "rev:HEAD", "rev:lamb2", "--format",
                         "json", "--n-resamples", "200").stdout)
    assert "lamb" in json.dumps(diff.get("params", diff))
    assert diff["b"]["sources"][-1] == "runs/align/ntp-s1.json@lamb2"
    failing = sh(pipeline, "harness", "diff", "rev:HEAD", "rev:lamb2", "--fail-if", "r_at_1>-2",
                 "--n-resamples", "200", check=False)
    assert failing.returncode == 1


# needs the pipeline's outputs; pushes and pulls them through a remote
def test_a_fresh_clone_pulls_the_main_jobs_outputs_as_the_readme_says(pipeline, tmp_path):
    """After the main job, with the evaluation-only and web-text pipelines beside it (which it
    never runs): `dvc push dvc.yaml` to a remote, and in a fresh clone `dvc pull dvc.yaml` exits
    0 and `dvc status dvc.yaml` is clean (a bare `dvc pull` would also ask for those pipelines'
    outputs, which no one produced)."""
    import shutil

    shutil.copytree(ROOT / "pipelines", pipeline / "pipelines")
    sh(pipeline, "dvc", "remote", "add", "-f", "-d", "team", str(tmp_path / "remote"))
    sh(pipeline, "git", "add", "-A")
    sh(pipeline, "git", "commit", "-qm", "the main job's results")
    sh(pipeline, "dvc", "push", "dvc.yaml")
    clone = tmp_path / "clone"
    sh(tmp_path, "git", "clone", "-q", str(pipeline), str(clone))
    sh(clone, "dvc", "pull", "dvc.yaml")
    assert "Data and pipelines are up to date" in sh(clone, "dvc", "status", "dvc.yaml").stdout
    assert (clone / "runs/results.json").is_file() and (clone / "runs/text/good-s0").is_dir()
    assert sh(clone, "dvc", "pull", check=False).returncode == 1  # why the README names dvc.yaml
