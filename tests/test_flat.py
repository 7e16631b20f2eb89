"""harness.records.flat: the numbers-only files DVC shows, cut from the pipeline's rich JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.records.flat import aggregate_metrics, curve_rows, run_metrics

PIPE = Path(__file__).parent / "fixtures" / "pipeline"


def numbers_only(obj) -> bool:
    if isinstance(obj, dict):
        return all(numbers_only(v) for v in obj.values())
    return isinstance(obj, float | int) and not isinstance(obj, bool)


def test_run_metrics_are_flat_rounded_numbers_of_the_run_file():
    run = json.loads((PIPE / "align" / "good-s0.json").read_text())
    flat = run_metrics(run["metrics"], 10)
    assert flat["r_at_1"] == round(run["metrics"]["r_at_1"]["value"], 4) == 0.525
    assert (flat["r_at_1_lo"], flat["r_at_1_hi"]) == (0.375, 0.675)
    assert flat["chance"] == 0.025 and numbers_only(flat)
    assert all(not isinstance(v, dict) for v in flat.values())
    assert len(json.dumps(flat)) < 400


def test_aggregate_metrics_hold_each_arm_and_gap_with_its_interval():
    results = json.loads((PIPE / "results.json").read_text())
    flat = aggregate_metrics(results, 10)
    assert set(flat) == {"good", "bad", "ntp", "good-bad", "good-ntp", "bad-ntp"}
    good = results["arms"]["good"]["metrics"]["r_at_1"]
    assert flat["good"]["r_at_1"] == pytest.approx(good["mean"], abs=5e-5)
    gap = next(g for g in results["gaps"] if (g["a"], g["b"], g["metric"]) ==
               ("good", "bad", "r_at_1"))
    assert flat["good-bad"]["r_at_1_lo"] == pytest.approx(gap["ci"][0], abs=5e-5)
    assert flat["good-bad"]["r_at_1_lo"] < 0 < flat["good-bad"]["r_at_1"]
    assert numbers_only(flat) and len(json.dumps(flat)) < 1000


def test_curve_rows_keep_the_plotted_fields_of_the_evaluated_epochs():
    """Epoch 2 has no evaluation (eval_every 2 evaluates epochs 1, 3, ...): DVC would refuse
    the whole plot for a record without its y field."""
    curve = [{"epoch": 1, "r_at_1_test": 0.1, "loss": 2.0, "extra": "x"}, {"epoch": 2, "loss": 1},
             {"epoch": 3, "r_at_1_test": None}]
    assert curve_rows(curve, ("epoch", "r_at_1_test")) == [{"epoch": 1, "r_at_1_test": 0.1}]
