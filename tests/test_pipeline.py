"""The real pipeline: `harness run` (dvc repro) on a tiny world, then DVC's change tracking.

One module-scoped run in a temporary git repository, shared by the tests below: it produces
both reports and one finished MLflow run per (arm, seed) after the seed plan's; a second `dvc
status` is clean; a training parameter change marks exactly the stages that depend on it; a
queued experiment of the SIGReg weight reruns only the JEPA arms' stages and what follows,
logging to the workspace's mlflow.db, and `harness diff` tells the committed results from the
experiment's; the main job is look 1 of a two-look study, which `harness next` records and
carries to its decision. All slow
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
SEEDS = (0, 1, 2)  # the first look of the tiny world's plan (looks at 3 and 4 seeds)


def ran_stages(output: str) -> set[str]:
    return set(re.findall(r"Running stage '([^']+)'", output))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    repo = copy_project(tmp_path_factory.mktemp("pipeline"), seeds=SEEDS)
    first = sh(repo, "harness", "run")
    assert ran_stages(first.stdout) >= UPSTREAM | {"train@good-0", "report"}
    return repo


def test_main_job_writes_both_reports_and_one_finished_mlflow_run_per_arm_seed(pipeline):
    assert (pipeline / "reports/audit.html").stat().st_size > 1000
    assert (pipeline / "reports/audit.pdf").read_bytes()[:5] == b"%PDF-"
    with sqlite3.connect(pipeline / "mlflow.db") as db:
        rows = db.execute("select name, status from runs").fetchall()
    seeds = [(f"{a}-s{s}", "FINISHED") for a in ("good", "bad", "ntp") for s in SEEDS]
    arms = [(f"{a} (seeds 0,1,2)", "FINISHED") for a in ("good", "bad", "ntp")]
    plan = json.loads((pipeline / "runs/plan.json").read_text())
    assert sorted(rows) == sorted(seeds + arms + [("world results", "FINISHED"),
                                                  (f"plan {plan['hash']} (world)", "FINISHED")])
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
    assert {"train@good-0", "train@bad-2", "align@bad-2", "aggregate", "report"} <= ran
    with sqlite3.connect(pipeline / "mlflow.db") as db:
        runs = db.execute("select r.name, r.status, t.value from runs r join tags t on "
                          "t.run_uuid = r.run_uuid and t.key = 'dvc_exp_name'").fetchall()
    # the retrained runs, and the result runs of the new params (every arm's, ntp's included)
    assert sorted(runs) == sorted(
        [(f"{a}-s{s}", "FINISHED", "lamb2") for a in ("bad", "good") for s in SEEDS]
        + [(f"{a} (seeds 0,1,2)", "FINISHED", "lamb2") for a in ("bad", "good", "ntp")]
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
    assert diff["b"]["sources"][-1] == "runs/align/ntp-s2.json@lamb2"
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


# after the others: it runs look 2 in the workspace, which changes its arms and seeds
def test_the_main_job_is_look_1_of_a_study_that_next_carries_to_its_decision(pipeline):
    """The plan was registered before training (its MLflow run started before every
    training's) and the main job's audit is its look 1; `harness next --run` records look 1 in
    runs/looks.json (an MLflow look run with the plan's hash), runs look 2 for the arms an
    undecided claim reads (DVC restores their first 3 seeds: no retraining), and the final
    audit leaves no planned claim continuing; the report shows each planned claim's looks."""
    plan = json.loads((pipeline / "runs/plan.json").read_text())
    seq1 = json.loads((pipeline / "reports/audit.json").read_text())["sequential"]
    assert (seq1["plan_hash"], seq1["look"], seq1["seeds"]) == (plan["hash"], 1, 3)
    with sqlite3.connect(pipeline / "mlflow.db") as db:
        start = dict(db.execute("select name, start_time from runs"))
    trainings = [t for name, t in start.items() if re.fullmatch(r"\w+-s\d", name)]
    assert start[f"plan {plan['hash']} (world)"] < min(trainings)
    assert seq1["continuing_arms"], "the tiny study must take a second look: see its plan"
    out = sh(pipeline, "harness", "next", "--run")
    ran = ran_stages(out.stdout)
    assert {f"train@{a}-3" for a in seq1["continuing_arms"]} <= ran
    assert not {s for s in ran if re.fullmatch(r"train@\w+-[012]", s)}, ran
    ledger = json.loads((pipeline / "runs/looks.json").read_text())
    assert ledger["plan_hash"] == plan["hash"] and [e["look"] for e in ledger["looks"]] == [1]
    seq2 = json.loads((pipeline / "reports/audit.json").read_text())["sequential"]
    assert (seq2["look"], seq2["seeds"], seq2["final"]) == (2, 4, True)
    results = json.loads((pipeline / "runs/results.json").read_text())
    assert sorted(results["arms"]) == sorted(seq1["continuing_arms"])
    statuses = {s["status"] for s in seq2["claims"].values()}
    assert statuses <= {"decided", "decided earlier", "stopped", "stopped earlier",
                        "at the cap"}, statuses
    rows = {r["id"]: r for r in json.loads((pipeline / "reports/audit.json").read_text())[
        "claims"]}
    for cid, s in seq2["claims"].items():
        if s["status"] == "at the cap":
            assert rows[cid]["reason"].startswith(("inconclusive at 4 seeds (the plan's cap)",
                                                   "pattern not seen at 4 seeds")), cid
        if s["status"].endswith(" earlier"):
            assert rows[cid]["reason"].startswith(("decided at look 1", "stopped at look 1"))
    with sqlite3.connect(pipeline / "mlflow.db") as db:
        looks = db.execute("select t2.value from tags t join tags t2 on t.run_uuid = "
                           "t2.run_uuid where t.key = 'prh.role' and t.value = 'look' and "
                           "t2.key = 'prh.plan_hash'").fetchall()
    assert looks == [(plan["hash"],)]
    html = (pipeline / "reports/audit.html").read_text()
    assert "The seed plan and its looks" in html and plan["hash"] in html
    assert "look 1 (3 seeds)" in html
