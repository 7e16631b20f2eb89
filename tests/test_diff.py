"""harness.compare.diff: seeds of one arm, commits, MLflow runs, gates and refused paired diffs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.compare.diff import (
    DiffError,
    Spec,
    apply_gates,
    cli,
    diff_sets,
    load_set,
    parse_spec,
    to_markdown,
)
from harness.records.perquery import read_per_query, write_per_query
from harness.stats.estimators import paired_bootstrap_diff

ALIGN = Path(__file__).parent / "fixtures" / "pipeline" / "align"
N_RES = 2000


def hits(name: str) -> np.ndarray:
    with np.load(ALIGN / f"{name}.npz") as z:
        return z["r_at_1_hit"].astype(float)


def row(result: dict, metric: str, arm: str | None = None) -> dict:
    return next(r for r in result["metrics"]
                if r["metric"] == metric and (arm is None or r["arm_a"] == arm))


@pytest.mark.parametrize(("text", "spec"), [
    ("runs/align", Spec("dir", "runs/align")),
    ("runs/align:good@0,1", Spec("dir", "runs/align", None, "good", frozenset({0, 1}))),
    ("runs/align:ntp", Spec("dir", "runs/align", None, "ntp", None)),
    ("runs/align:@2", Spec("dir", "runs/align", None, None, frozenset({2}))),
    ("rev:HEAD~1", Spec("rev", "runs/align", "HEAD~1")),
    ("rev:main:other/dir:bad@3", Spec("rev", "other/dir", "main", "bad", frozenset({3}))),
    ("mlflow:abc,def", Spec("mlflow", "abc,def")),
])
def test_parse_spec(text: str, spec: Spec) -> None:
    assert parse_spec(text) == spec


@pytest.mark.parametrize("text", ["mlflow:", "rev:", "runs/align:good@x", "good@0"])
def test_parse_spec_refuses(text: str) -> None:
    with pytest.raises(DiffError, match="write|integers"):
        parse_spec(text)


def test_two_seeds_of_one_arm_paired() -> None:
    result = diff_sets(load_set(f"{ALIGN}:good@0"), load_set(f"{ALIGN}:good@1"),
                       n_resamples=N_RES)
    r = row(result, "r_at_1")
    a, b = hits("good-s0"), hits("good-s1")
    assert r["a"] == pytest.approx(a.mean()) and r["b"] == pytest.approx(b.mean())
    assert r["delta"] == pytest.approx(b.mean() - a.mean())
    _, ci = paired_bootstrap_diff(b, a, n_resamples=N_RES)
    assert r["ci"] == [ci.lo, ci.hi] and ci.lo <= r["delta"] <= ci.hi
    assert r["n"] == 40 and r["n_resamples"] == N_RES
    assert row(result, "r_at_1_fit")["ci"] is None  # no per-query outcome for the fit score
    assert result["provenance"] == [{"key": "git_dirty", "a": "False", "b": "True"}]
    assert result["environment"] == []


def test_seed_sets_pair_on_the_seed_mean_outcome() -> None:
    result = diff_sets(load_set(f"{ALIGN}:bad"), load_set(f"{ALIGN}:good@0,1"),
                       n_resamples=N_RES)
    r = row(result, "r_at_1")
    outcome_a = (hits("bad-s0") + hits("bad-s1")) / 2
    outcome_b = (hits("good-s0") + hits("good-s1")) / 2
    assert (r["arm_a"], r["arm_b"], r["n_seeds_a"], r["n_seeds_b"]) == ("bad", "good", 2, 2)
    assert r["delta"] == pytest.approx(outcome_b.mean() - outcome_a.mean())
    _, ci = paired_bootstrap_diff(outcome_b, outcome_a, n_resamples=N_RES)
    assert r["ci"] == [ci.lo, ci.hi]


def test_all_arms_against_one_seed_match_arm_by_arm() -> None:
    result = diff_sets(load_set(str(ALIGN)), load_set(f"{ALIGN}:@1"), n_resamples=200)
    assert {(r["arm_a"], r["arm_b"]) for r in result["metrics"]} == {
        ("bad", "bad"), ("good", "good"), ("ntp", "ntp")}


def run_cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    rc = cli([*args, "--n-resamples", "200"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_fail_if_exit_codes(capsys: pytest.CaptureFixture) -> None:
    a, b = f"{ALIGN}:good@0", f"{ALIGN}:good@1"  # r_at_1 delta is +0.05, mknn10 -0.01
    assert run_cli(capsys, a, b, "--fail-if", "r_at_1<-0.01")[0] == 0
    rc, out, _ = run_cli(capsys, a, b, "--fail-if", "r_at_1<-0.01", "--fail-if", "mknn10<-0.005")
    assert rc == 1 and "FAILED" in out and "passed" in out
    assert run_cli(capsys, a, b, "--fail-if", "good.r_at_1>0.04")[0] == 1
    assert run_cli(capsys, a, b, "--fail-if", "bad.r_at_1>0.04")[0] == 2  # no such arm compared
    rc, _, err = run_cli(capsys, a, b, "--fail-if", "r_at_1 ~ 0.1")
    assert rc == 2 and "write [ARM.]METRIC<VALUE" in err
    rc, _, err = run_cli(capsys, a, b, "--fail-if", "r_at_l<0")
    assert rc == 2 and "no compared metric matches" in err


def test_json_output(capsys: pytest.CaptureFixture) -> None:
    rc, out, _ = run_cli(capsys, f"{ALIGN}:good@0", f"{ALIGN}:good@1", "--format", "json",
                         "--fail-if", "r_at_1>0")
    doc = json.loads(out)
    assert rc == 1 and doc["schema"] == "prh.diff/1" and doc["failed"] is True
    assert doc["gates"][0]["delta"] == pytest.approx(hits("good-s1").mean()
                                                     - hits("good-s0").mean())


def copy_with_ids(tmp_path: Path, ids: np.ndarray) -> Path:
    out = tmp_path / "other"
    out.mkdir()
    shutil.copy(ALIGN / "good-s1.json", out / "good-s1.json")
    write_per_query(out / "good-s1.npz", ids, read_per_query(ALIGN / "good-s1.npz")[1])
    return out


def test_different_test_pairs_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with np.load(ALIGN / "good-s1.npz") as z:
        ids = z["ids"].copy()
    ids[[3, 4]] = ids[[4, 3]]
    other = copy_with_ids(tmp_path, ids)
    with pytest.raises(DiffError, match=r"different test pairs \(first difference at row 3"):
        diff_sets(load_set(f"{ALIGN}:good@0"), load_set(str(other)), n_resamples=200)
    rc, _, err = run_cli(capsys, f"{ALIGN}:good@0", str(other))
    assert rc == 2 and "good-s0.json" in err and "good-s1.json" in err and "--unpaired" in err
    rc, out, _ = run_cli(capsys, f"{ALIGN}:good@0", str(other), "--unpaired")
    assert rc == 0 and "no per-query outcomes" in out


def test_different_number_of_test_pairs_is_refused(tmp_path: Path) -> None:
    with np.load(ALIGN / "good-s1.npz") as z:
        ids = z["ids"]
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(ALIGN / "good-s1.json", other / "good-s1.json")
    outcomes = read_per_query(ALIGN / "good-s1.npz")[1]
    write_per_query(other / "good-s1.npz", ids[:30], {k: v[:30] for k, v in outcomes.items()})
    with pytest.raises(DiffError, match="40 vs 30 test pairs"):
        diff_sets(load_set(f"{ALIGN}:good@0"), load_set(str(other)), n_resamples=200)


def test_a_per_query_name_with_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    doc = json.loads((ALIGN / "good-s1.json").read_text())
    doc["per_query"] = "good-s1.npz\n"
    (other / "good-s1.json").write_text(json.dumps(doc))
    shutil.copy(ALIGN / "good-s1.npz", other / "good-s1.npz")
    with pytest.raises(DiffError, match=r"per_query 'good-s1.npz\\n' is not a file name"):
        load_set(str(other))


def test_a_per_query_link_out_of_the_run_folder_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(ALIGN / "good-s1.npz", outside / "secret.npz")
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(ALIGN / "good-s1.json", other / "good-s1.json")
    (other / "good-s1.npz").symlink_to(outside / "secret.npz")
    with pytest.raises(DiffError, match=r"good-s1.npz: a link to .*secret.npz, outside its run "
                       "folder"):
        load_set(str(other))


def test_empty_selection_names_the_files() -> None:
    with pytest.raises(DiffError, match="matches none of bad-s0.json"):
        load_set(f"{ALIGN}:good@7")


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd,
                   check=True, capture_output=True)


def test_diff_between_two_commits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ALIGN, repo / "runs" / "align")
    (repo / "params.yaml").write_text("train:\n  lamb: 0.02\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")
    run = json.loads((repo / "runs/align/good-s0.json").read_text())
    run["metrics"]["r_at_1_fit"]["value"] = 0.5
    (repo / "runs/align/good-s0.json").write_text(json.dumps(run))
    (repo / "params.yaml").write_text("train:\n  lamb: 0.04\n")
    git(repo, "commit", "-qam", "second")
    monkeypatch.chdir(repo)
    result = diff_sets(load_set("rev:HEAD~1:good@0"), load_set("rev:HEAD:good@0"),
                       n_resamples=200)
    assert row(result, "r_at_1_fit")["delta"] == pytest.approx(0.5 - 0.9)
    assert row(result, "r_at_1")["delta"] == 0 and row(result, "r_at_1")["ci"] == [0.0, 0.0]
    assert result["params"] == [{"key": "train.lamb", "a": "0.02", "b": "0.04"}]
    assert result["a"]["sources"] == ["runs/align/good-s0.json@HEAD~1"]
    rc, _, _ = run_cli(capsys, "rev:HEAD~1:good@0", "rev:HEAD:good@0", "--fail-if",
                       "r_at_1_fit<-0.1")
    assert rc == 1
    rc, _, err = run_cli(capsys, "rev:nosuchrev", "rev:HEAD")
    assert rc == 2 and "nosuchrev" in err
    # a DVC experiment by its name: the ref `dvc exp run -n lamb04` leaves on its commit
    git(repo, "update-ref", f"refs/exps/ab/{'c' * 38}/lamb04", "HEAD")
    git(repo, "update-ref", "refs/exps/celery/stash", "HEAD~1")  # DVC's own: never a name
    by_name = diff_sets(load_set("rev:HEAD~1:good@0"), load_set("rev:lamb04:good@0"),
                        n_resamples=200)
    assert row(by_name, "r_at_1_fit")["delta"] == pytest.approx(0.5 - 0.9)
    assert by_name["params"] == result["params"]
    rc, _, err = run_cli(capsys, "rev:stash", "rev:HEAD")
    assert rc == 2 and "neither a commit nor a DVC experiment" in err
    git(repo, "update-ref", f"refs/exps/12/{'3' * 38}/lamb04", "HEAD~1")
    rc, _, err = run_cli(capsys, "rev:lamb04", "rev:HEAD")
    assert rc == 2 and "2 DVC experiments have this name" in err


def test_diff_between_mlflow_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    # the file store (opt-in since MLflow 3.13) reads through the same MlflowClient.get_run as
    # sqlite, without the seconds of schema migration a fresh sqlite store costs
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("t")
    ids = []
    for seed, (r1, torch) in enumerate(((0.20, "2.14.1"), (0.23, "2.15.0"))):
        with mlflow.start_run() as run:
            mlflow.log_params({"lamb": 0.02, "batch_size": 32 * (seed + 1)})
            mlflow.log_metrics({"final.r_at_1": r1, "final.r_at_1.ci_lo": r1 - 0.1,
                                "r_at_1_test": r1})  # a per-epoch curve, not a final score
            mlflow.set_tags({"arm": "good", "seed": seed, "env.torch": torch,
                             "params_hash": f"h{seed}"})
            ids.append(run.info.run_id)
    result = diff_sets(load_set(f"mlflow:{ids[0]}"), load_set(f"mlflow:{ids[1]}"))
    assert row(result, "r_at_1")["delta"] == pytest.approx(0.03)
    assert row(result, "r_at_1")["ci"] is None
    assert [r["metric"] for r in result["metrics"]] == ["r_at_1"]
    assert result["params"] == [{"key": "batch_size", "a": "32", "b": "64"}]
    assert result["environment"] == [{"key": "torch", "a": "2.14.1", "b": "2.15.0"}]
    assert {"key": "params_hash", "a": "h0", "b": "h1"} in result["provenance"]
    with pytest.raises(DiffError, match="not found"):
        load_set("mlflow:0123456789abcdef")


@given(st.floats(-1, 1), st.floats(-1, 1))
def test_gate_fails_exactly_when_the_comparison_holds(delta: float, tol: float) -> None:
    result = {"metrics": [{"arm_a": "good", "arm_b": "good", "metric": "r_at_1",
                           "delta": delta}]}
    lt, ge = apply_gates(result, [f"r_at_1<{tol!r}", f"r_at_1>={tol!r}"])
    assert lt["failed"] == (delta < tol) and ge["failed"] == (delta >= tol)


def test_markdown_escapes_pipes_and_lists_gates() -> None:
    result = {"a": {"spec": "A", "runs": ["good-s0"]}, "b": {"spec": "B", "runs": ["good-s1"]},
              "level": 0.95, "metrics": [], "params": [{"key": "k", "a": "1 | 2", "b": "3"}],
              "provenance": [], "environment": [],
              "gates": [{"gate": "good.r_at_1<0", "arm_a": "bad", "arm_b": "good",
                         "metric": "r_at_1", "delta": -0.1, "failed": True}]}
    md = to_markdown(result)
    assert "| k | 1 \\| 2 | 3 |" in md
    assert "`good.r_at_1<0` checked on r_at_1, B good − A bad: delta -0.1000 -> FAILED" in md


def test_a_gate_names_the_arms_it_checked() -> None:
    """bad against good: a gate on good.r_at_1 is the delta good − bad, reported as such."""
    result = diff_sets(load_set(f"{ALIGN}:bad@0"), load_set(f"{ALIGN}:good@0"), n_resamples=200)
    (gate,) = apply_gates(result, ["good.r_at_1<-1"])
    assert (gate["arm_a"], gate["arm_b"]) == ("bad", "good")
    assert gate["delta"] == pytest.approx(row(result, "r_at_1")["delta"])


def test_folders_and_mlflow_give_the_same_params_and_metric_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Two seeds of one arm, read from their run files and from the MLflow runs the train and
    align stages log (run_params, final.*): the same params table (seed 0 against 1), the same
    metric names, and the same --fail-if works on both."""
    import mlflow

    from harness.config.params import load_params
    from harness.config.runparams import run_params

    root = Path(__file__).resolve().parents[1]
    shutil.copytree(ALIGN, tmp_path / "runs" / "align")
    shutil.copy(root / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("t")
    params, ids = load_params("params.yaml"), []
    for seed in (0, 1):
        scores = json.loads((tmp_path / f"runs/align/good-s{seed}.json").read_text())["metrics"]
        with mlflow.start_run() as run:
            mlflow.log_params({k: str(v) for k, v in run_params(params, "good", seed).items()})
            mlflow.log_metrics({f"final.{k}": v["value"] for k, v in scores.items()})
            mlflow.set_tags({"arm": "good", "seed": seed})
            ids.append(run.info.run_id)
    files = diff_sets(load_set("runs/align:good@0"), load_set("runs/align:good@1"),
                      paired=False)
    tracked = diff_sets(load_set(f"mlflow:{ids[0]}"), load_set(f"mlflow:{ids[1]}"))
    assert files["params"] == tracked["params"] == [{"key": "seed", "a": "0", "b": "1"}]
    assert [r["metric"] for r in files["metrics"]] == [r["metric"] for r in tracked["metrics"]]
    assert [r["delta"] for r in files["metrics"]] == pytest.approx(
        [r["delta"] for r in tracked["metrics"]])
    for a, b in (("runs/align:good@0", "runs/align:good@1"), (f"mlflow:{ids[0]}",
                                                              f"mlflow:{ids[1]}")):
        rc, out, _ = run_cli(capsys, a, b, "--fail-if", "r_at_1<-2", "--unpaired")
        assert rc == 0 and "`r_at_1<-2` checked on r_at_1, B good − A good" in out
