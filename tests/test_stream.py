"""Web-text training on a stream (prh.stream, prh.train_stream) over the miniature Recap-style
corpus of tests/test_recap.py: the sample order, the account checked by hand, and a killed run
resumed to the same batches and weights as an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from harness.stages.recap import main as recap_main
from prh.stream import ACCOUNT, EpochOrder, StreamConfig, StreamData, log_schedule, sample_rows
from prh.tokenizer import Tokenizer
from prh.train_config import TrainConfig
from prh.train_stream import train_stream
from tests.test_recap import ROOT, write_corpus

TINY = {"hidden": 16, "layers": 1, "heads": 2, "intermediate": 32, "dropout": 0.1,
        "proj_dim": 16, "proj_hidden": 32}


@pytest.fixture(scope="module")
def subset(tmp_path_factory) -> Path:
    """The whole corpus, written by the recap stage (texts, tokenizer, tokens): 9 rows, 8
    images (k2 is listed twice)."""
    tmp = tmp_path_factory.mktemp("stream")
    root = write_corpus(tmp / "raw")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["recap"].update(data=str(root), images=8, vocab_size=60, tokenizer_sample=100)
    (tmp / "params.yaml").write_text(yaml.safe_dump(params))
    assert recap_main(["--params", str(tmp / "params.yaml"), "--out", str(tmp / "subset")]) == 0
    return tmp / "subset"


def cfg(arm: str = "good", **kw) -> TrainConfig:
    return TrainConfig.from_dict({"arm": arm, "seed": 5, "batch_size": 2, "lr": 1e-3,
                                  "n_slices": 8, "max_len": 12, "device": "cpu",
                                  "model": TINY, **kw})


def stream(**kw) -> StreamConfig:
    d = {"sources": ("alt", "recap"), "samples": 11, "warmup_samples": 2,
         "first_checkpoint": 2, "per_decade": 2, "save_every": 2}
    return StreamConfig(**{**d, **kw})


def test_log_schedule_is_even_on_the_log_axis_and_ends_at_the_run() -> None:
    assert log_schedule(100_000, 21_600_000, 4) == (
        100_000, 177_828, 316_228, 562_341, 1_000_000, 1_778_279, 3_162_278, 5_623_413,
        10_000_000, 17_782_794, 21_600_000)
    assert log_schedule(2, 11, 2) == (2, 6, 11)
    assert log_schedule(5, 5, 3) == (5,)
    assert log_schedule(1, 4, 8) == (1, 2, 3, 4)  # rounding never repeats a count


def test_each_epoch_is_a_permutation_and_the_order_ignores_how_it_is_read() -> None:
    rows = np.array([0, 2, 3, 5, 8, 9, 11])  # the rows with a text of the sources
    n = rows.size
    every = sample_rows(3, 0, 5 * n, rows)
    for e in range(5):
        assert sorted(every[e * n:(e + 1) * n]) == rows.tolist()
    assert not np.array_equal(every[:n], every[n:2 * n])  # each epoch reshuffles
    pieces = np.concatenate([sample_rows(3, s, c, rows) for s, c in ((0, 3), (3, 9), (12, 23))])
    assert np.array_equal(pieces, every)


def test_the_order_files_hold_the_order_and_ranks_read_them_in_any_pieces(
        subset: Path, tmp_path: Path) -> None:
    """EpochOrder.write's memory-mapped files against sample_rows, the order's definition;
    a second write keeps the files; a missing epoch is an error naming the file."""
    data = StreamData.open(subset, ["alt"])  # k4's row has no alt-text: 7 of the 8 images
    rows = data.texted_rows()
    assert data.available == rows.size == 7 and rows.dtype == np.uint32
    order = EpochOrder.write(tmp_path / "order", 3, data, 20)  # 20 samples: epochs 0 to 2
    assert sorted(p.name for p in (tmp_path / "order").iterdir()) == [
        "e0000.npy", "e0001.npy", "e0002.npy"]
    every = sample_rows(3, 0, 21, rows)
    for start, count in ((0, 21), (0, 3), (3, 9), (12, 9), (5, 1)):
        assert np.array_equal(order.rows(start, count), every[start:start + count])
    stamp = (tmp_path / "order" / "e0001.npy").stat().st_mtime_ns
    EpochOrder.write(tmp_path / "order", 3, data, 20)
    assert (tmp_path / "order" / "e0001.npy").stat().st_mtime_ns == stamp
    with pytest.raises(Exception, match=r"e0003\.npy: no order file for epoch 3"):
        order.rows(20, 2)


def test_a_source_the_subset_lacks_is_refused_naming_what_it_has(subset: Path) -> None:
    with pytest.raises(Exception, match=r"no source \['paraphrase'\] \(it has \['alt', "
                                        r"'recap'\]\)"):
        StreamData.open(subset, ["paraphrase"])


@pytest.mark.parametrize("arm", ["good", "bad", "ntp"])
def test_the_account_is_exact_against_the_drawn_samples(subset: Path, tmp_path: Path,
                                                        arm: str) -> None:
    """samples, unique images and texts by hand from the order and the written texts: a good-
    view sample reads every text of its sources, a bad-view or next-token sample one."""
    import pyarrow.parquet as pq

    data = StreamData.open(subset, ["alt", "recap"])
    tok = Tokenizer.load(subset / "tokenizer")
    rows = train_stream(cfg(arm), stream(), data, tok, tmp_path)
    assert [r["samples"] for r in rows] == [2, 6, 12]  # the step that reaches 2, 6 and 11
    assert all(list(r) == list(ACCOUNT) for r in rows)  # the row the report reads
    texts = [r for f in sorted(subset.glob("texts-*.parquet"))
             for r in pq.read_table(f).to_pylist()]
    assert len(texts) == 8 and data.available == 8  # every image has a text of alt or recap
    for row in rows:
        drawn = sample_rows(5, 0, row["samples"], np.arange(8))
        assert row["unique_images"] == len({texts[i]["key"] for i in drawn})
        assert row["unique_images"] == min(row["samples"], 8)
        offered = [len(texts[i]["alt"]) + len(texts[i]["recap"]) for i in drawn]
        assert row["texts"] == (sum(offered) if arm == "good" else row["samples"])
        assert row["tokens"] <= row["texts"] * (12 - 2)
    if arm == "good":  # every text read whole: the tokens are the texts' own, cut at 10
        drawn = sample_rows(5, 0, 12, np.arange(8))
        by_hand = sum(min(len(tok.encode(t)), 10) for i in drawn
                      for t in texts[i]["alt"] + texts[i]["recap"])
        assert rows[-1]["tokens"] == by_hand
    snaps = sorted((tmp_path / "snapshots").iterdir())
    assert [p.name for p in snaps] == [f"samples-{n:012d}.pt" for n in (2, 6, 12)]
    assert json.loads((tmp_path / "accounting.json").read_text()) == rows


@pytest.mark.parametrize("arm", ["good", "ntp"])
def test_a_killed_and_resumed_run_equals_an_uninterrupted_one(subset: Path, tmp_path: Path,
                                                              arm: str) -> None:
    """Killed after step 5 (scored at steps 1 and 3, saved at step 4: step 5 is lost), then
    resumed: the same account rows (loss included) and bitwise the same weights; with dropout
    on, so the random streams must line up too."""
    data = StreamData.open(subset, ["alt", "recap"])
    tok = Tokenizer.load(subset / "tokenizer")
    whole = train_stream(cfg(arm), stream(), data, tok, tmp_path / "whole")
    train_stream(cfg(arm), stream(), data, tok, tmp_path / "killed", stop_after=5)
    assert json.loads((tmp_path / "killed/accounting.json").read_text()) == whole[:2]
    assert torch.load(tmp_path / "killed/checkpoint.pt", weights_only=True)["step"] == 4
    # two more steps from the checkpoint reach step 6, the third scored one (a fresh start
    # would have reached step 2); then the rest
    assert train_stream(cfg(arm), stream(), data, tok, tmp_path / "killed",
                        stop_after=2) == whole[:3]
    resumed = train_stream(cfg(arm), stream(), data, tok, tmp_path / "killed")
    assert resumed == whole
    for name in ("samples-000000000006.pt", "samples-000000000012.pt"):
        a, b = (torch.load(tmp_path / run / "snapshots" / name, weights_only=True)["encoder"]
                for run in ("whole", "killed"))
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_another_runs_checkpoint_is_refused(subset: Path, tmp_path: Path) -> None:
    data = StreamData.open(subset, ["alt", "recap"])
    tok = Tokenizer.load(subset / "tokenizer")
    train_stream(cfg(), stream(), data, tok, tmp_path, stop_after=2)
    with pytest.raises(Exception, match="checkpoint.pt: written by run .* delete"):
        train_stream(cfg(), stream(samples=13), data, tok, tmp_path)


@pytest.mark.slow  # three trainings, one killed: .ci/run's pipeline section, beside test_kill
def test_a_stage_killed_by_sigkill_resumes_to_the_uninterrupted_account_and_weights(
        subset: Path, tmp_path: Path) -> None:
    """`harness recap_train` killed with SIGKILL soon after its first checkpoint leaves no
    output, and rerun it ends with the account rows and snapshot weights of a run never
    killed."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.test_recap import TINY_TRAIN

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["recap"]["train"] = {**TINY_TRAIN, "samples": 600, "save_every": 5}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "OMP_NUM_THREADS": "1"}

    def stage(name: str) -> list[str]:
        return [sys.executable, "-m", "harness.cli", "recap_train", "--params",
                str(tmp_path / "params.yaml"), "--arm", "good", "--seed", "0", "--subset",
                str(subset),
                "--work", str(tmp_path / name / "work"), "--out", str(tmp_path / name / "out")]

    subprocess.run(stage("whole"), env=env, check=True, capture_output=True, cwd=ROOT)
    proc = subprocess.Popen(stage("killed"), env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "killed/work").glob("*/checkpoint.pt")):
        assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint before the end"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL and not (tmp_path / "killed/out").exists()
    resumed = subprocess.run(stage("killed"), env=env, capture_output=True, text=True, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    whole, killed = (json.loads((tmp_path / n / "out/run.json").read_text())
                     for n in ("whole", "killed"))
    assert killed["account"] == whole["account"] and len(whole["account"]) == 6
    for snap in sorted((tmp_path / "whole/out/snapshots").iterdir()):
        a, b = (torch.load(d / snap.name, weights_only=True)["encoder"]
                for d in (snap.parent, tmp_path / "killed/out/snapshots"))
        assert all(torch.equal(a[k], b[k]) for k in a), snap.name


def _gloo_worker(rank: int, port: int, subset: str, out: str, arm: str) -> None:
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2",
                      RANK=str(rank), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    data = StreamData.open(Path(subset), ["alt", "recap"])
    train_stream(cfg(arm, batch_size=2, model={**TINY, "dropout": 0.0}), stream(), data,
                 Tokenizer.load(Path(subset) / "tokenizer"), Path(out) / f"rank{rank}",
                 orders=Path(out) / "order")  # rank 0 writes them, both read them


@pytest.mark.slow  # two processes per arm: .ci/run's pipeline section
@pytest.mark.parametrize("arm", ["ntp", "good"])
def test_a_two_process_gloo_run_reads_and_learns_as_one_process_on_the_global_batch(
        subset: Path, tmp_path: Path, arm: str) -> None:
    """Two ranks of 2 samples each (torchrun's environment, gloo on CPU) against one process
    of 4: the same samples, texts, tokens and unique images at every checkpoint, and only rank
    0 writes. Next-token's weights match too: its gradient is the mean over every target of the
    global batch (prh.train._token_share), so the gradients differ by float summation order
    alone (about 1e-7 relative in float32). Three AdamW steps at lr 1e-3 keep that far below
    the 1e-5 allowed, unless an element's gradient sits within rounding of 0 yet above Adam's
    eps (1e-8), which its update divides by (6e-8 measured here). The logged loss is the
    global token mean in both. Good views' weights differ: the projector's BatchNorm takes
    each rank's own statistics, as upstream's DDP does."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_gloo_worker, args=(port, str(subset), str(tmp_path), arm), nprocs=2, join=True)
    one = train_stream(cfg(arm, batch_size=4, model={**TINY, "dropout": 0.0}), stream(),
                       StreamData.open(subset, ["alt", "recap"]),
                       Tokenizer.load(subset / "tokenizer"), tmp_path / "one")
    two = json.loads((tmp_path / "rank0/accounting.json").read_text())
    assert not (tmp_path / "rank1").exists()
    keys = ("samples", "texts", "tokens", "view_tokens", "unique_images")
    assert [{k: r[k] for k in keys} for r in two] == [{k: r[k] for k in keys} for r in one]
    assert json.loads((tmp_path / "rank0/config.json").read_text())["world_size"] == 2
    a, b = (torch.load(tmp_path / run / "snapshots/samples-000000000012.pt",
                       weights_only=True)["encoder"] for run in ("rank0", "one"))
    if arm == "ntp":
        assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-5
        # the same global token mean over weights 6e-8 apart, summed in another order: about
        # 1e-7 relative apart; 1e-4 leaves three orders of magnitude for other BLAS
        assert [r["loss"] for r in two] == pytest.approx([r["loss"] for r in one], rel=1e-4)


def test_a_checkpoint_of_other_texts_is_never_resumed(subset: Path, tmp_path: Path) -> None:
    """A copy of the subset is the same samples; once its texts change (here the summary's
    counts, as a new column mapping would change them), the run's identity does too, so a
    checkpoint left by a killed run on the old texts is refused, not resumed."""
    import shutil

    copy = tmp_path / "subset"
    shutil.copytree(subset, copy)
    tok = Tokenizer.load(subset / "tokenizer")
    data = StreamData.open(copy, ["alt", "recap"])
    assert data.fingerprint == StreamData.open(subset, ["alt", "recap"]).fingerprint
    assert data.fingerprint != StreamData.open(subset, ["recap", "alt"]).fingerprint
    train_stream(cfg(), stream(), data, tok, tmp_path / "run", stop_after=2)
    summary = json.loads((copy / "summary.json").read_text())
    summary["sources"]["alt"]["tokens"] += 1
    (copy / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(Exception, match="checkpoint.pt: written by run .* delete"):
        train_stream(cfg(), stream(), StreamData.open(copy, ["alt", "recap"]), tok,
                     tmp_path / "run")
