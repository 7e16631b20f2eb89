"""bench/gpu_train.py runs end to end on the CPU (tiny preset), so a GPU session's one prepared
command does not die on a code path: the matrix writes one record per variant, and the
figures it prints are consistent with the token counts."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # the benchmarks run end to end: .ci/run's pipeline section
def test_gpu_bench_matrix_writes_figures_per_variant(tmp_path: Path) -> None:
    out = tmp_path / "matrix.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_train.py"), "--preset", "tiny", "--matrix",
         "--variants", "eager one-pass,eager split,eager ntp,eager packed", "--batch", "8",
         "--steps", "2",
         "--warmup", "1", "--device", "cpu", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = json.loads(out.read_text())
    assert [r["name"] for r in records] == ["eager packed", "eager one-pass", "eager split",
                                            "eager ntp"]
    for r in records:
        assert "error" not in r, r
        assert r["step_s"] > 0 and 0 < r["tokens_per_step"] <= r["padded_tokens_per_step"]
        assert r["checkpoints_per_arm"] == 20 and r["checkpoint_s"] > 0  # --checkpoint-every 10
        assert r["flickr_arm_s"] == pytest.approx(
            r["step_s"] * math.ceil(29_000 / 8) * 200 + 20 * r["checkpoint_s"])
    packed, one, split, ntp = records
    assert packed["speed"]["pack"] and packed["tokens_per_step"] == one["tokens_per_step"]
    assert packed["padded_tokens_per_step"] <= 1.15 * packed["tokens_per_step"]  # computed
    assert one["tokens_per_step"] > 8 * 8  # 8 photos x 8 views, at least [CLS] .. [SEP] each
    assert split["padded_tokens_per_step"] < one["padded_tokens_per_step"]  # less padding
    assert (one["speed"]["passes"], split["speed"]["passes"]) == ("one", "split")
    assert ntp["arm"] == "ntp"
    assert "projected 200-epoch Flickr30k arm" in proc.stdout


@pytest.mark.slow
def test_recap_bench_times_the_stream_step_and_projects_each_subset_size(tmp_path: Path) -> None:
    """bench/recap.py on a synthetic subset (tiny preset, CPU): the tokens/s it prints is its
    view tokens over its step time, and the projection is samples x view tokens per sample
    over the GPU figure it was given."""
    gpu = tmp_path / "gpu.json"
    gpu.write_text(json.dumps({"tokens_per_s": 1e6, "device": "cuda:0"}))
    out = tmp_path / "recap.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "recap.py"), "--preset", "tiny", "--batch", "8",
         "--steps", "2", "--images", "64", "--arm", "bad", "--gpu-figures", str(gpu),
         "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["texts_per_sample"] == 1.0 and r["tokens_per_sample"] <= 62  # one text, cut
    assert r["view_tokens_per_sample"] > 8 * 2  # 8 views, [CLS] and [SEP] at least
    rows = r["projection"]["rows"]
    assert [row["samples"] for row in rows] == [21_600_000, 2_240_000, 50_000_000,
                                                100_000_000, 940_000_000]
    for row in rows:
        assert row["hours"] == pytest.approx(row["samples"] * r["view_tokens_per_sample"]
                                             / 1e6 / 3600)
    assert "cuda:0" in proc.stdout
    # CPU seconds over wall: positive, and at most torch's threads plus the half core the
    # process's other threads (the interpreter, pyarrow's reader) may add in the same seconds
    assert 0 < r["cpu_share"] <= r["threads"] + 0.5
    assert f"of its {r['threads']} threads' cores busy" in proc.stdout


@pytest.mark.slow
def test_sequential_bench_compares_the_plan_with_fixed_designs(tmp_path: Path) -> None:
    """bench/sequential.py on a few studies: the sequential plan's arm-seeds lie between the
    first look's and the cap's for 3 arms, and each fixed design it tried runs 3 x n."""
    out = tmp_path / "sequential.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "sequential.py"), "--reps", "20",
                           "--out", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())
    for scenario in ("holds", "two_miss"):
        assert 9 <= r["sequential"][scenario] <= 30
    assert [f["arm_seeds"] for f in r["fixed"]] == [3 * f["seeds"] for f in r["fixed"]]
    assert r["fixed"][0]["seeds"] == 3
    if r["equal_seeds"] is not None:
        assert r["saved"] == pytest.approx(1 - r["sequential"]["holds"] / (3 * r["equal_seeds"]))
    assert "fewer GPU-hours" in proc.stdout or "no fixed design" in proc.stdout
