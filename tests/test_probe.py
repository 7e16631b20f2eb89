"""The probe stage: the lambda sweep's rows and the same-seed repeat, on a tiny world."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from tiny_world import ROOT, build_upstream, commit_all, copy_code, sh, tiny_params

from harness.config.params import ProbeConfig
from harness.stages.probe import probe_hash, run_differences, short_config
from prh.train_config import TrainConfig


def _run(scale: float = 1.0) -> dict:
    return {"curve": [{"epoch": 1, "loss": 2.0 * scale, "r_at_1_test": 0.1},
                      {"epoch": 2, "loss": 1.5, "r_at_1_test": 0.2}],
            "scores": {"r_at_1": 0.25, "mknn10": 0.125},
            "emb": {"val": np.ones((3, 2)), "test": np.zeros((2, 2))},
            "weights": {"w": np.arange(4.0)}}


def test_identical_runs_differ_by_zero_everywhere():
    diffs = run_differences(_run(), _run())
    assert diffs == {"curve.loss": 0.0, "curve.r_at_1_test": 0.0, "final.mknn10": 0.0,
                     "final.r_at_1": 0.0, "embeddings": 0.0, "weights": 0.0}


def test_one_changed_value_is_the_largest_difference_of_its_metric():
    other = _run(scale=1.25)  # epoch 1's loss 2.5 against 2.0
    other["weights"]["w"] = np.array([0.0, 1.0, 2.0, 3.0 + 1e-7])
    other["emb"]["test"] = np.full((2, 2), -0.5)
    diffs = run_differences(_run(), other)
    assert diffs["curve.loss"] == pytest.approx(0.5, abs=0)
    assert diffs["weights"] == pytest.approx(1e-7, rel=1e-6)
    assert diffs["embeddings"] == 0.5 and diffs["final.r_at_1"] == 0.0


@pytest.mark.parametrize("key, value, moves", [("pairfree_inputs", "first-caption", False),
                                                ("gallery_draws", 2, False),
                                                ("n_resamples", 2000, True), ("k", 5, True)])
def test_the_probes_hash_moves_with_the_eval_keys_it_reads_only(tmp_path, key, value, moves):
    """probe.json's params_hash covers the eval keys the probe reads (and its other sections),
    as dvc.yaml reruns it: an eval knob it does not read leaves the hash as it is."""
    from harness.config.params import load_params

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(raw))
    raw["world"]["eval"][key] = value
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(raw))
    a, b = (probe_hash(load_params(tmp_path / f)) for f in ("a.yaml", "b.yaml"))
    assert (a != b) == moves


def test_short_config_changes_only_epochs_warmup_eval_and_lambda():
    cfg = TrainConfig(epochs=20, warmup_epochs=8, eval_every=2, lamb=0.02)
    short = short_config(cfg, ProbeConfig(epochs=5), 0.08)
    assert (short.epochs, short.warmup_epochs, short.eval_every, short.lamb) == (5, 5, 5, 0.08)
    assert short_config(cfg, ProbeConfig(epochs=5), None).lamb == 0.02
    assert short.views == cfg.views and short.model == cfg.model and short.seed == cfg.seed


@pytest.mark.parametrize("section, needle", [
    ({"arms": ["good", "clip"]}, "use arms from"),
    ({"epochs": 0}, "at least 1 epoch"),
    ({"source_epochs": 0}, "at least 1 epoch"),
    ({"lambdas": [-0.1]}, "weights >= 0"),
])
def test_bad_probe_section_names_the_problem(section, needle):
    with pytest.raises(ValueError, match=needle):
        ProbeConfig(**{**ProbeConfig().__dict__, **section}).validate()


def run_probe(tmp_path, **probe) -> dict:
    """`harness probe` on a tiny world with one-epoch trainings and `probe` set; its JSON."""
    repo = copy_code(tmp_path / "repo")
    raw = tiny_params(yaml.safe_load((repo / "params.yaml").read_text()), epochs=1)
    raw["world"]["probe"].update(epochs=1, **probe)
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    build_upstream(commit_all(repo, "tiny"))
    sh(repo, "harness", "probe", "--params", "params.yaml", "--dataset",
       "data/world/raw/dataset.json", "--prepared", "data/world/prepared", "--image",
       "runs/image", "--out", "runs/probe.json")
    return json.loads((repo / "runs/probe.json").read_text())


@pytest.mark.slow  # three arms' short trainings through `harness probe`: the pipeline section
def test_probe_stage_sweeps_lambda_repeats_a_seed_and_sets_good_against_bad_per_source(tmp_path):
    """One `harness probe` run: the SIGReg sweep (each JEPA arm at each lambda, next-token
    once, at chance 1/40), the first arm trained twice with one seed bit for bit, and Table 7's
    design on the world: good and bad views on people's and on one captioner's texts, all
    scored on the people captions; each source's gap and the gaps' difference come with paired
    intervals over the test pairs, and at equal epochs people's pair is the lambda sweep's."""
    out = run_probe(tmp_path, arms=["good", "bad", "ntp"], lambdas=[0.0, 0.02],
                    text_sources=["people", "captioner"], source_epochs=1)
    assert [(r["arm"], r["lamb"]) for r in out["lambda_sweep"]] == [
        ("good", 0.0), ("good", 0.02), ("bad", 0.0), ("bad", 0.02), ("ntp", None)]
    assert all(r["chance_r_at_1"] == pytest.approx(1 / 40) for r in out["lambda_sweep"])
    det = out["determinism"]
    assert (det["arm"], det["lamb"], det["device"]) == ("good", 0.02, "cpu")
    assert det["bit_identical"] and set(det["max_abs_diff"].values()) == {0.0}
    assert {"weights", "embeddings", "final.r_at_1", "curve.loss"} <= set(det["max_abs_diff"])
    ts = out["text_sources"]
    assert ts["sources"] == ["people", "captioner"] and ts["lamb"] == {"good": 0.02, "bad": 0.02}
    assert ts["epochs"] == 1
    rows = {(r["source"], r["arm"]): r for r in ts["rows"]}
    sweep = {r["arm"]: r for r in out["lambda_sweep"] if r["lamb"] in (0.02, None)}
    for arm in ("good", "bad"):
        assert rows["people", arm]["r_at_1"] == sweep[arm]["r_at_1"]  # the same training
    gaps = {(g["metric"], g["source"]): g for g in ts["gaps"]}
    assert set(gaps) == {(m, s) for m in ("r_at_1", "mknn10")
                         for s in ("people", "captioner", "people - captioner")}
    for source in ("people", "captioner"):
        assert gaps["r_at_1", source]["value"] == pytest.approx(
            rows[source, "good"]["r_at_1"] - rows[source, "bad"]["r_at_1"], abs=1e-12)
    both = gaps["r_at_1", "people - captioner"]
    assert both["value"] == pytest.approx(gaps["r_at_1", "people"]["value"]
                                          - gaps["r_at_1", "captioner"]["value"], abs=1e-12)
    assert both["ci"][0] <= both["value"] <= both["ci"][1] and both["n"] == 40
    assert both["ci_method"] == "paired percentile bootstrap over test pairs"
