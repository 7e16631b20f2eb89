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


def workspace(repo, raw, message, monkeypatch):
    """`raw` as the repo's params.yaml, committed (jobs run a commit); the tests' environment
    with MLflow in the repo's mlflow.db; the repo as the working directory."""
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    tiny_world.sh(repo, "git", "commit", "-qam", message)
    for key, value in tiny_world.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(repo)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("sbatch") is None,
                    reason="no SLURM here (.ci/slurm-single-node installs and starts one)")
def test_job_array_on_slurm_one_cancelled_the_rest_enter_the_workspace(tmp_path, monkeypatch):
    repo = tiny_world.copy_project(tmp_path / "ws")
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    raw["seeds"] = [0]
    workspace(repo, raw, "one seed", monkeypatch)

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


def test_torchrun_command_keeps_the_stage_options_and_names_the_rendezvous():
    cmd = "harness recap_train --params params.yaml --arm good --out 'runs/recap/good'"
    one = launch.under_torchrun(cmd, launch.Spread(1, 4), 0, "", 0)
    assert one[1:] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                       "-m", "harness.cli", "recap_train", "--params", "params.yaml", "--arm",
                       "good", "--out", "runs/recap/good"]
    two = launch.under_torchrun(cmd, launch.Spread(2, 8), 1, "node7", 29517)
    assert two[3:13] == ["--nnodes", "2", "--node-rank", "1", "--master-addr", "node7",
                         "--master-port", "29517", "--nproc-per-node", "8"]
    with pytest.raises(ContractError, match="not a harness stage command"):
        launch.under_torchrun("python train.py", launch.Spread(1, 2), 0, "", 0)


KEYS = ("samples", "texts", "tokens", "view_tokens", "unique_images")


def recap_workspace(tmp_path, monkeypatch):
    """The project with a miniature Recap corpus under `profile: recap`, committed, as the
    working directory; MLflow in its mlflow.db."""
    from test_recap import TINY_TRAIN, recap_repo

    repo, raw = recap_repo(tmp_path, images=8, vocab_size=60, tokenizer_sample=100,
                           train=TINY_TRAIN, score=[])
    raw["profile"] = "recap"
    workspace(repo, raw, "recap profile", monkeypatch)
    return repo


def one_process_account(repo, arm, out, batch):
    """`arm`'s account trained in this process alone with a batch of `batch` samples."""
    import dataclasses

    from harness.config.recap_train import configs
    from prh.stream import StreamData
    from prh.tokenizer import Tokenizer
    from prh.train_stream import train_stream

    cfg, stream = configs(repo / "params.yaml", arm, 0)
    subset = repo / "data/recap/subset"
    rows = train_stream(dataclasses.replace(cfg, batch_size=batch), stream,
                        StreamData.open(subset, stream.sources),
                        Tokenizer.load(subset / "tokenizer"), out)
    return [{k: r[k] for k in KEYS} for r in rows]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("sbatch") is None,
                    reason="no SLURM here (.ci/slurm-single-node installs and starts one)")
def test_recap_runs_under_torchrun_on_slurm_read_what_one_process_reads(tmp_path, monkeypatch,
                                                                        capsys):
    """`profile: recap`: the subset built by SLURM jobs (two a step, splitting the three
    shards) equals one built here; then one job per arm, each recap_train under torchrun with
    two gloo processes; the runs enter the workspace, `harness run` goes on to the report
    without retraining, and each account equals one process's on the same global batch
    (2 x 2)."""
    import pyarrow.parquet as pq

    from harness.config.recap import encoder_cut, load_recap
    from prh.recap_subset import build_subset, work_folder

    repo = recap_workspace(tmp_path, monkeypatch)
    slurm = {"timeout_min": 20, "cpus_per_task": 2}
    work = work_folder(repo / "data/recap/subset", load_recap(repo / "params.yaml"),
                       encoder_cut(repo / "params.yaml"))
    # a shard whose footer reads but whose first data page is garbled: the signature step's
    # job fails, and launch says which shard, step and error, and where the log is
    shard = next((repo / "data/recap/raw").rglob("b-0001.parquet"))
    sound = shard.read_bytes()
    start = pq.ParquetFile(shard).metadata.row_group(0).column(0).data_page_offset
    shard.write_bytes(sound[:start + 8] + bytes(b ^ 0xFF for b in sound[start + 8:start + 40])
                      + sound[start + 40:])
    with pytest.raises(ContractError, match=r"signature step failed on SLURM \(job \S+ "
                       r"FAILED\): data/recap/raw/part/b-0001.parquet: signature step: "
                       r"OSError: .*; rerun once mended \(a changed shard starts the build "
                       r"over, else it resumes\); log .*\.err$"):
        launch.build_on_slurm(repo, repo / "runs" / ".launch", "slurm", slurm, 2)
    assert not (work / "logs/signature/completions/00001").exists()
    shard.write_bytes(sound)  # mended: a new work folder, the build starts over
    work = work_folder(repo / "data/recap/subset", load_recap(repo / "params.yaml"),
                       encoder_cut(repo / "params.yaml"))
    assert launch.build_on_slurm(repo, repo / "runs" / ".launch", "slurm", slurm, 2) == 8
    # every task done (2+1+2+1+2 jobs over 3+1+3+1+3 tasks) in the folder the stage will read
    assert [len(list((work / "logs" / s / "completions").iterdir()))
            for s in ("signature", "select", "texts", "tokenizer", "tokens")] == [3, 1, 3, 1, 3]
    checkout, items, jobs = launch.submit(repo, repo / "runs" / ".launch", "slurm", slurm,
                                          launch.Spread(1, 2), build_jobs=2)
    assert "the subset's build ran" not in capsys.readouterr().out  # nothing left to build
    here = tmp_path / "here"
    here.mkdir()
    local = build_subset(load_recap(repo / "params.yaml"), here,
                         encoder_cut(repo / "params.yaml"), tmp_path / "work", 1)
    subset = repo / "data/recap/subset"
    assert {k: v for k, v in json.loads((subset / "summary.json").read_text()).items()
            if k != "schema"} == local
    for name in local["written"]:
        assert (subset / name).read_bytes() == (here / name).read_bytes()
    assert not list(subset.parent.glob(".subset.build-*"))  # gathered, then removed
    assert [(i.name, i.stages, i.outs) for i in items] == [
        (f"{arm}-0", (f"pipelines/recap/dvc.yaml:recap_train@{arm}-0",), (f"runs/recap/{arm}-s0",))
        for arm in ("good", "ntp")]
    assert launch.collect(repo, checkout, items, jobs) == []
    status = tiny_world.sh(repo, "dvc", "status", "pipelines/recap/dvc.yaml:recap_train@good-0",
                           "pipelines/recap/dvc.yaml:recap_train@ntp-0")
    assert "up to date" in status.stdout, status.stdout
    with sqlite3.connect(repo / "mlflow.db") as con:
        states = dict(con.execute("SELECT run_uuid, status FROM runs"))
    for arm in ("good", "ntp"):
        run = json.loads((repo / "runs/recap" / f"{arm}-s0" / "run.json").read_text())
        assert (run["config"]["world_size"], run["config"]["global_batch"]) == (2, 4)
        assert states[run["mlflow_run_id"]] == "FINISHED"
        assert run["git_commit"] == checkout.name
        assert [{k: r[k] for k in KEYS} for r in run["account"]] == \
            one_process_account(repo, arm, tmp_path / "one" / arm, 4)
    out = tiny_world.sh(repo, "harness", "run")
    assert "Running stage 'pipelines/recap/dvc.yaml:recap_train" not in out.stdout  # launched
    assert "Running stage 'pipelines/recap/dvc.yaml:recap_report'" in out.stdout
    assert (repo / "reports/recap.pdf").exists()


@pytest.mark.slow
def test_a_two_node_job_rendezvouses_and_reads_what_one_process_reads(tmp_path, monkeypatch):
    """The two tasks of a two-node SLURM job, as srun starts them (each with its SLURM_NODEID
    and the job's node list; both nodes are this machine), each running launch's job function:
    torchrun's static rendezvous joins them into one run of 2 ranks, node 0 alone tracks and
    writes, and the account equals one process's on the same global batch."""
    import subprocess
    import sys

    repo = recap_workspace(tmp_path, monkeypatch)
    tiny_world.sh(repo, "dvc", "repro", "pipelines/recap/dvc.yaml:recap",
                  "pipelines/recap/dvc.yaml:recap_paraphrase")
    (item,) = [i for i in launch.matrix(repo, launch.WEB_TEXT_RUNS) if i.name == "good-0"]
    job = (f"from harness.pipeline import launch; launch.run_item({str(repo)!r}, "
           f"{item.cmds!r}, {{}}, launch.Spread(2, 1))")
    nodes = [subprocess.Popen([sys.executable, "-c", job], cwd=repo, env={
        **tiny_world.env(), "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "localhost,localhost", "SLURM_NODEID": str(node),
        "SLURM_NTASKS": "2", "SLURM_PROCID": str(node), "SLURM_LOCALID": "0",
        "SUBMITIT_EXECUTOR": "slurm",
        "MLFLOW_TRACKING_URI": f"sqlite:///{repo / 'mlflow.db'}"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for node in (0, 1)]
    logs = [p.communicate(timeout=300)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], logs
    run = json.loads((repo / "runs/recap/good-s0/run.json").read_text())
    assert (run["config"]["world_size"], run["config"]["global_batch"]) == (2, 4)
    assert "recap_train: good-s0: 12 samples" in logs[0] and "recap_train:" not in logs[1]
    assert [{k: r[k] for k in KEYS} for r in run["account"]] == \
        one_process_account(repo, "good", tmp_path / "one", 4)
