"""MLflow's view of results.json on a real SQLite store: the aggregate stage makes one run per
arm (seed mean, std, interval ends) with that arm's seed runs nested under it, under one run
of the pipeline (the gaps, results.json and the report as artifacts); a re-run updates the
same runs; a store that does not answer costs a warning, not the results."""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import time
from pathlib import Path

import pytest
import services

from harness.config.params import load_params
from harness.records.runfile import run_name
from harness.stages.aggregate import main as aggregate_main
from harness.stages.report import main as report_main
from harness.tracking import mlflow_runs as tracking

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "pipeline"


def two_seeds() -> Path:
    """params.yaml with seeds 0 and 1, those the fixture's runs hold for every arm."""
    import tempfile

    import yaml

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    path = Path(tempfile.mkdtemp(prefix="two-seeds-")) / "params.yaml"
    path.write_text(yaml.safe_dump({**raw, "seeds": [0, 1]}, sort_keys=False))
    return path


PARAMS_PATH = two_seeds()
PARAMS = load_params(PARAMS_PATH)  # world: arms good, bad, ntp; seeds 0, 1


def seed_run(name: str) -> str:
    with tracking.tracked_run(name, {"run": name}, {}) as run:
        return run.info.run_id


def align_dir(tmp: Path, ids: dict[tuple[str, int], str]) -> Path:
    """The fixture's align files of the world matrix, under this store's run ids and
    params.yaml's hash."""
    out = tmp / "align"
    out.mkdir(exist_ok=True)
    for (arm, seed), run_id in ids.items():
        data = json.loads((FIX / "align" / f"{run_name(arm, seed)}.json").read_text())
        data["run"].update(mlflow_run_id=run_id, params_hash=PARAMS.arm_hash(arm))
        (out / f"{run_name(arm, seed)}.json").write_text(json.dumps(data))
        shutil.copy2(FIX / "align" / f"{run_name(arm, seed)}.npz", out)
    return out


def aggregate(tmp: Path, align: Path) -> dict:
    (tmp / "prepared").mkdir(exist_ok=True)
    (tmp / "prepared" / "summary.json").write_text('{"data_hash": "d9e8f7a6"}')
    assert aggregate_main(["--params", str(PARAMS_PATH), "--align-dir", str(align),
                           "--prepared", str(tmp / "prepared"),
                           "--out", str(tmp / "results.json")]) == 0
    return json.loads((tmp / "results.json").read_text())


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    import mlflow

    return mlflow.MlflowClient(tracking.tracking_uri())


@pytest.fixture(scope="module")
def aggregated(tmp_path_factory):
    """One store with the world matrix's seed runs, aggregated once: (client, folder, seed run
    ids, results.json, the stage's stderr)."""
    tmp = tmp_path_factory.mktemp("aggregated")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        mp.chdir(tmp)
        import mlflow

        ids = {(a, s): seed_run(run_name(a, s)) for a in PARAMS.arms for s in PARAMS.seeds}
        with contextlib.redirect_stderr(io.StringIO()) as err:
            results = aggregate(tmp, align_dir(tmp, ids))
        yield mlflow.MlflowClient(tracking.tracking_uri()), tmp, ids, results, err.getvalue()


def children(client, parent: str) -> dict[str, str]:
    """name -> id of the runs nested under `parent`."""
    exp = client.get_run(parent).info.experiment_id
    return {r.info.run_name: r.info.run_id for r in
            client.search_runs([exp], f"tags.`mlflow.parentRunId` = '{parent}'")}


def test_arm_runs_nest_the_seed_runs_and_hold_their_mean_std_and_intervals(aggregated):
    store, tmp_path, ids, results, err = aggregated
    assert err == ""
    top = store.get_run(results["mlflow_run_id"])
    assert top.info.run_name == "world results" and top.info.status == "FINISHED"
    assert top.data.tags["params_hash"] == PARAMS.hash
    arms = children(store, top.info.run_id)
    assert set(arms) == {"good (seeds 0,1)", "bad (seeds 0,1)", "ntp (seeds 0,1)"}
    for arm in PARAMS.arms:
        arm_run = store.get_run(arms[f"{arm} (seeds 0,1)"])
        assert arm_run.info.status == "FINISHED" and arm_run.data.tags["arm"] == arm
        assert children(store, arm_run.info.run_id) == {run_name(arm, s): ids[arm, s]
                                                        for s in PARAMS.seeds}
        got = arm_run.data.metrics
        for metric in ("r_at_1", "r_at_5", "mknn10", "r_at_1_fit"):
            a, b = (json.loads((tmp_path / "align" / f"{run_name(arm, s)}.json").read_text())
                    ["metrics"][metric]["value"] for s in PARAMS.seeds)
            # two seeds by hand: mean (a + b) / 2, sample std |a - b| / sqrt(2)
            assert got[f"{metric}.mean"] == pytest.approx((a + b) / 2)
            assert got[f"{metric}.std"] == pytest.approx(abs(a - b) / math.sqrt(2))
        r1 = results["arms"][arm]["metrics"]["r_at_1"]
        assert [got["r_at_1.ci_lo"], got["r_at_1.ci_hi"]] == r1["ci"]
        assert [got["r_at_1.two_level_lo"], got["r_at_1.two_level_hi"]] == \
            r1["two_level"]["ci"]
        assert "r_at_1_fit.ci_lo" not in got  # a seed spread only: no interval to log
    gaps = top.data.metrics
    means = {arm: store.get_run(arms[f"{arm} (seeds 0,1)"]).data.metrics["r_at_1.mean"]
             for arm in PARAMS.arms}
    # the paired gap on the seed-mean outcome is the gap between the arms' means
    assert gaps["good-ntp.r_at_1.diff"] == pytest.approx(means["good"] - means["ntp"])
    gap = next(g for g in results["gaps"] if (g["a"], g["b"], g["metric"]) ==
               ("good", "ntp", "r_at_1"))
    assert [gaps["good-ntp.r_at_1.ci_lo"], gaps["good-ntp.r_at_1.ci_hi"]] == gap["ci"]
    logged = store.download_artifacts(top.info.run_id, "results.json", str(tmp_path / "dl"))
    assert Path(logged).read_text() == (tmp_path / "results.json").read_text()


def test_a_rerun_updates_the_same_runs_and_a_retrained_seed_replaces_its_old_run(store,
                                                                                tmp_path,
                                                                                capsys):
    ids = {(a, s): seed_run(run_name(a, s)) for a in PARAMS.arms for s in PARAMS.seeds}
    first = aggregate(tmp_path, align_dir(tmp_path, ids))
    exp = store.get_run(first["mlflow_run_id"]).info.experiment_id
    assert aggregate(tmp_path, align_dir(tmp_path, ids))["mlflow_run_id"] == \
        first["mlflow_run_id"]
    assert len(store.search_runs([exp])) == 6 + 1 + 3  # seed runs, pipeline run, arm runs
    old = ids["good", 0]
    ids["good", 0] = seed_run("good-s0")  # retrained
    ids["bad", 1] = "0" * 32  # a run this store does not hold
    again = aggregate(tmp_path, align_dir(tmp_path, ids))
    assert again["mlflow_run_id"] == first["mlflow_run_id"]
    assert len(store.search_runs([exp])) == 7 + 1 + 3
    arms = children(store, first["mlflow_run_id"])
    assert children(store, arms["good (seeds 0,1)"]) == {"good-s0": ids["good", 0],
                                                         "good-s1": ids["good", 1]}
    assert "mlflow.parentRunId" not in store.get_run(old).data.tags
    assert children(store, arms["bad (seeds 0,1)"]) == {"bad-s0": ids["bad", 0]}
    err = capsys.readouterr().err
    assert "the MLflow runs of bad-s1 are not in sqlite:///" in err


def test_a_seed_run_two_results_share_stays_nested_under_the_first_and_both_list_it(store,
                                                                                   tmp_path):
    """An experiment that changes one arm's params makes results of its own (another params
    hash) over the other arms' unchanged seed runs: MLflow gives a run one parent, so those
    stay under the workspace's arm runs, and each arm run lists its seed runs in a tag."""
    ids = {(a, s): seed_run(run_name(a, s)) for a in PARAMS.arms for s in PARAMS.seeds}
    first = aggregate(tmp_path, align_dir(tmp_path, ids))
    bad_again = {**ids, ("bad", 0): seed_run("bad-s0"), ("bad", 1): seed_run("bad-s1")}
    other = tracking.log_results(first, bad_again, profile="world", params_hash="0ther",
                                 data_hash="d9e8f7a6")
    assert other is not None and other != first["mlflow_run_id"]
    mine, theirs = children(store, first["mlflow_run_id"]), children(store, other)
    for arm in PARAMS.arms:
        name = f"{arm} (seeds 0,1)"
        seeds = {run_name(arm, s): bad_again[arm, s] for s in PARAMS.seeds}
        listed = store.get_run(theirs[name]).data.tags[tracking.MEMBERS].split(",")
        assert sorted(listed) == sorted(seeds.values())
        nested_first = children(store, mine[name])
        if arm == "bad":  # retrained under the experiment: its own seed runs
            assert children(store, theirs[name]) == seeds
        else:  # shared: still the workspace's
            assert nested_first == seeds and children(store, theirs[name]) == {}
    aggregate(tmp_path, align_dir(tmp_path, ids))  # the workspace again: nothing moves
    good = {run_name("good", s): ids["good", s] for s in PARAMS.seeds}
    assert children(store, mine["good (seeds 0,1)"]) == good
    store.delete_run(mine["good (seeds 0,1)"])  # deleted in the UI: its seed runs are free
    tracking.log_results(first, bad_again, profile="world", params_hash="0ther",
                         data_hash="d9e8f7a6")
    assert children(store, theirs["good (seeds 0,1)"]) == good


@pytest.mark.slow  # the report stage's WeasyPrint PDF (about 20 s): .ci/run's pipeline section
def test_the_report_is_logged_on_the_pipeline_run(aggregated, monkeypatch, capsys):
    store, tmp_path, _, results, _ = aggregated
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    html, pdf, checklist = (tmp_path / "reports" / name
                            for name in ("audit.html", "audit.pdf", "checklist.json"))
    assert report_main(["--params", str(PARAMS_PATH),
                        "--results", str(tmp_path / "results.json"),
                        "--runs-dir", str(tmp_path / "align"), "--theory",
                        str(FIX / "theory.json"), "--contamination",
                        str(FIX / "contamination.json"), "--audit", str(FIX / "audit.json"),
                        "--html", str(html), "--pdf", str(pdf),
                        "--checklist", str(checklist)]) == 0
    err = capsys.readouterr().err
    assert "MLflow" not in err and "past the margin" not in err  # the PDF fits its pages
    logged = {a.path: a.file_size for a in store.list_artifacts(results["mlflow_run_id"])}
    assert logged == {"results.json": (tmp_path / "results.json").stat().st_size,
                      "audit.html": html.stat().st_size, "audit.pdf": pdf.stat().st_size,
                      "checklist.json": checklist.stat().st_size}


def test_an_unreachable_server_costs_a_warning_not_the_results(tmp_path, monkeypatch, capsys):
    url = f"http://127.0.0.1:{services.free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    ids = {(a, s): "0" * 32 for a in PARAMS.arms for s in PARAMS.seeds}
    start = time.monotonic()
    results = aggregate(tmp_path, align_dir(tmp_path, ids))
    assert time.monotonic() - start < 30
    assert results["mlflow_run_id"] is None and set(results["arms"]) == set(PARAMS.arms)
    assert f"warning: MLflow {url} did not take the runs of results.json" in \
        capsys.readouterr().err


def test_another_seed_set_gets_its_own_runs_and_leaves_the_first_ones(store, tmp_path):
    """A queued experiment adding a seed aggregates under the same params hash: its pipeline
    and arm runs are new ones, and the runs of the workspace's seed set keep their numbers."""
    import yaml

    ids = {(a, s): seed_run(run_name(a, s)) for a in PARAMS.arms for s in PARAMS.seeds}
    raw = yaml.safe_load(PARAMS_PATH.read_text())
    raw["seeds"] = [0]
    one = tmp_path / "one" / "params.yaml"
    one.parent.mkdir()
    one.write_text(yaml.safe_dump(raw, sort_keys=False))
    align = align_dir(tmp_path, {k: v for k, v in ids.items() if k[1] == 0})
    (tmp_path / "prepared").mkdir()
    (tmp_path / "prepared" / "summary.json").write_text('{"data_hash": "d9e8f7a6"}')
    assert aggregate_main(["--params", str(one), "--align-dir", str(align), "--prepared",
                           str(tmp_path / "prepared"), "--out", str(tmp_path / "r0.json")]) == 0
    first = json.loads((tmp_path / "r0.json").read_text())["mlflow_run_id"]
    before = {name: store.get_run(i).data.metrics for name, i in children(store, first).items()}
    both = aggregate(tmp_path, align_dir(tmp_path, ids))["mlflow_run_id"]
    assert both != first and set(children(store, both)) == {f"{a} (seeds 0,1)"
                                                            for a in PARAMS.arms}
    assert set(before) == {f"{a} (seeds 0)" for a in PARAMS.arms}
    assert {name: store.get_run(i).data.metrics
            for name, i in children(store, first).items()} == before


def test_a_pipeline_run_from_before_seeds_were_its_identity_is_found_not_doubled(store,
                                                                                  tmp_path):
    """A store written by the earlier code holds a pipeline run keyed without `seeds`: the
    aggregate finds it, tags its seeds and updates it rather than opening a second one."""
    ids = {(a, s): seed_run(run_name(a, s)) for a in PARAMS.arms for s in PARAMS.seeds}
    exp = store.get_run(ids["good", 0]).info.experiment_id
    old = store.create_run(exp, run_name="world results", tags={
        tracking.ROLE: "pipeline", "profile": "world", "params_hash": PARAMS.hash}).info.run_id
    assert aggregate(tmp_path, align_dir(tmp_path, ids))["mlflow_run_id"] == old
    assert store.get_run(old).data.tags["seeds"] == "0,1"


def test_a_dvc_experiments_result_and_arm_runs_carry_its_name(store, tmp_path, monkeypatch):
    """Under `dvc exp run` (DVC sets DVC_EXP_NAME and DVC_EXP_BASELINE_REV in the stage's
    environment) the pipeline and arm runs aggregate adds carry the experiment's name and
    baseline, as its seed runs do."""
    monkeypatch.setenv("DVC_EXP_NAME", "three-seeds")
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", "0123abc")
    ids = {(a, s): seed_run(run_name(a, s)) for a in PARAMS.arms for s in PARAMS.seeds}
    top = aggregate(tmp_path, align_dir(tmp_path, ids))["mlflow_run_id"]
    for run_id in [top, *children(store, top).values()]:
        tags = store.get_run(run_id).data.tags
        assert (tags.get("dvc_exp_name"), tags.get("dvc_exp_baseline")) == ("three-seeds",
                                                                          "0123abc")
