"""prh.train: config loading, the LR schedule, resume-equals-uninterrupted, a real signal."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from train_helpers import CPU, jepa_batch, ntp_batch

from prh.batches import tokenize_captions
from prh.data import Photo
from prh.encode_text import load_text_encoder
from prh.io import ContractError
from prh.tokenizer import train_tokenizer
from prh.train import (
    FINAL_LR_RATIO,
    WARMUP_START,
    build_state,
    lr_at,
    step_loss,
    train_text_encoder,
)
from prh.train_config import TrainConfig, encoder_config, resolved_lamb, view_config
from prh.views import ViewError

COLOURS = ["red", "blue", "green", "black", "white", "brown"]
ANIMALS = ["dog", "cat", "horse", "bird"]
PLACES = ["on the grass", "in the snow", "near a lake", "on a street"]
TINY_MODEL = {"hidden": 16, "layers": 1, "heads": 2, "intermediate": 32, "dropout": 0.1,
              "proj_dim": 16, "proj_hidden": 32}


def toy_photos(n: int = 16) -> list[Photo]:
    """Photos whose 3 captions describe one scene in different words."""
    photos = []
    for i in range(n):
        c, a, p = COLOURS[i % 6], ANIMALS[i % 4], PLACES[(i // 4) % 4]
        captions = (f"a {c} {a} runs {p}", f"there is a {c} {a} {p}",
                    f"the {a} is {c} and stands {p} today")
        photos.append(Photo(id=str(i), filename=f"{i}.jpg", split="train", captions=captions))
    return photos


@pytest.fixture(scope="module")
def corpus():
    photos = toy_photos()
    return photos, train_tokenizer([c for p in photos for c in p.captions], vocab_size=120)


def tiny_cfg(**kw) -> TrainConfig:
    d = {"arm": "good", "seed": 3, "epochs": 3, "batch_size": 4, "lr": 1e-3, "warmup_epochs": 1,
         "n_slices": 16, "max_len": 16, "eval_every": 1, "device": "cpu", "grad_clip": 1.0,
         "model": TINY_MODEL, "speed": {"checkpoint_every": 1}}
    return TrainConfig.from_dict({**d, **kw})


# ---------------------------------------------------------------- config


def test_defaults_round_trip_through_a_dict() -> None:
    d = TrainConfig().to_dict()
    assert TrainConfig.from_dict(d) == TrainConfig()
    assert d["views"] == {"n_global": 2, "n_local": 6, "global_scale": [0.5, 1.0],
                          "local_scale": [0.15, 0.5], "mask_ratio": 0.15}
    assert TrainConfig.from_dict({"lr": 1}).lr == 1.0  # an int is a valid float


@pytest.mark.parametrize(("d", "message"), [
    ({"epoch": 3}, r"train: unknown key\(s\) \['epoch'\]"),
    ({"views": {"max_len": 32}}, r"train.views: unknown key\(s\) \['max_len'\]"),
    ({"model": {"width": 8}}, r"train.model: unknown key\(s\) \['width'\]"),
    ({"epochs": "10"}, r"train.epochs='10' has type str; expected int"),
    ({"amp": 1}, r"train.amp=1 has type int; expected bool"),
    ({"batch_size": True}, r"train.batch_size=True has type bool; expected int"),
    ({"views": {"local_scale": [0.1]}}, r"train.views.local_scale=\[0.1\]: expected a list of 2"),
    ({"arm": "jepa"}, r"train.arm='jepa': use one of \['good', 'bad', 'ntp'\]"),
    ({"lamb": -0.01}, r"train.lamb=-0.01 is out of range: use 0 or a positive SIGReg weight"),
    ({"sigreg_weight": -1}, r"train.sigreg_weight=-1.0 is out of range: use 0 \(lamb as given"),
    ({"epochs": 0}, r"train.epochs=0 is out of range: train for at least 1 epoch"),
    ({"max_len": 2}, r"train.max_len=2: the views cannot fit .*raise train.max_len"),
    ({"views": {"local_scale": [0.6, 0.5]}}, r"train.views: ViewConfig.local_scale"),
    ({"model": {"hidden": 10, "heads": 4}}, r"train.model.hidden=10 .*multiple of model.heads"),
    ({"speed": {"pad_multiple": 0}}, r"train.speed.pad_multiple=0 is out of range: use 1"),
    ({"speed": {"compile": "fast"}}, r"train.speed.compile='fast': use one of \['none', "),
    ({"speed": {"passes": 2}}, r"train.speed.passes=2: use one of \['auto', 'one', 'split'\]"),
    ({"speed": {"checkpoint_every": 0}}, r"train.speed.checkpoint_every=0 is out of range"),
])
def test_bad_configs_name_the_key_and_the_fix(d: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict(d)


def test_a_config_is_validated_when_made_and_resolved_once_a_run(corpus, tmp_path: Path,
                                                                 monkeypatch) -> None:
    """TrainConfig is frozen and checks itself when made (no later call re-validates it); a
    training resolves what the config implies once (the lamb the loss uses, config.json's
    effective weight), or not at all when the caller passes its own (the train stage)."""
    import prh.train
    from prh.train_config import resolve

    with pytest.raises(ValueError, match="train.epochs=0 is out of range"):
        tiny_cfg(epochs=0)
    calls = []
    monkeypatch.setattr(prh.train, "resolve", lambda *a: calls.append(a) or resolve(*a))
    photos, tok = corpus
    train_text_encoder(tiny_cfg(epochs=1), photos, tok, tmp_path / "a")
    assert len(calls) == 1
    train_text_encoder(tiny_cfg(epochs=1), photos, tok, tmp_path / "b",
                       resolved=resolve(tiny_cfg(epochs=1), 1))
    assert len(calls) == 1
    with pytest.raises(ValueError, match="resolved for 2 processes, run on 1"):
        train_text_encoder(tiny_cfg(epochs=1), photos, tok, tmp_path / "c",
                           resolved=resolve(tiny_cfg(epochs=1), 2))


def test_captions_longer_than_max_len_are_refused_before_anything_is_written(
        corpus, tmp_path: Path) -> None:
    photos, tok = corpus
    with pytest.raises(ViewError, match="exceed max_len - 2 = 2 tokens.*raise train.max_len"):
        train_text_encoder(tiny_cfg(max_len=4), photos, tok, tmp_path / "run")
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- schedule


def test_lr_schedule_hand_values() -> None:
    assert lr_at(0, 100, 10, 1.0) == pytest.approx(WARMUP_START)
    assert lr_at(5, 100, 10, 1.0) == pytest.approx(WARMUP_START + (1 - WARMUP_START) / 2)
    assert lr_at(10, 100, 10, 1.0) == pytest.approx(1.0)
    assert lr_at(55, 100, 10, 1.0) == pytest.approx((1 + FINAL_LR_RATIO) / 2)  # cos(pi/2) = 0
    assert lr_at(100, 100, 10, 1.0) == pytest.approx(FINAL_LR_RATIO)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 50), st.integers(1, 500), st.integers(0, 500))
def test_lr_stays_in_range_and_decays_after_warmup(warmup: int, extra: int, step: int) -> None:
    total = warmup + extra
    lr = lr_at(step, total, warmup, 2e-4)
    assert 2e-4 * min(WARMUP_START, FINAL_LR_RATIO) - 1e-18 <= lr <= 2e-4
    if step >= warmup:
        assert lr_at(step + 1, total, warmup, 2e-4) <= lr


# ---------------------------------------------------------------- training


def test_one_padded_pass_gives_the_loss_of_separate_global_and_local_passes(corpus) -> None:
    photos, tok = corpus
    cfg = tiny_cfg(model={**TINY_MODEL, "dropout": 0.0})
    ids, views = tokenize_captions(photos, tok), view_config(cfg, tok)
    losses = []
    for split in (True, False):
        state = build_state(cfg, encoder_config(cfg, tok), CPU)
        groups = jepa_batch(photos[:4], cfg, views, tok, ids, np.random.default_rng(0), split)
        assert len(groups) == (2 if split else 1)
        assert sum(len(t) for t, _ in groups) == 8 * 4  # V * B rows
        losses.append(step_loss(state, groups)[1])
    for k in ("loss", "inv", "sigreg"):
        torch.testing.assert_close(losses[0][k], losses[1][k], rtol=1e-5, atol=1e-6)


def test_padding_to_a_multiple_changes_the_widths_not_the_loss(corpus) -> None:
    """pad_multiple 8: every group is 8 or max_len (16) wide, the added columns are padding,
    and the loss is the one of the tightly cut batch (masked padding)."""
    photos, tok = corpus
    base = {"model": {**TINY_MODEL, "dropout": 0.0}}
    out = {}
    for multiple in (1, 8):
        cfg = tiny_cfg(**base, speed={"pad_multiple": multiple})
        ids, views = tokenize_captions(photos, tok), view_config(cfg, tok)
        state = build_state(cfg, encoder_config(cfg, tok), CPU)
        groups = jepa_batch(photos[:4], cfg, views, tok, ids, np.random.default_rng(0))
        out[multiple] = groups, step_loss(state, groups)[1]
    for (t1, m1), (t8, m8) in zip(out[1][0], out[8][0], strict=True):
        assert t8.shape[1] in (8, 16) and t8.shape[1] >= t1.shape[1]
        assert torch.equal(t8[:, : t1.shape[1]], t1) and torch.equal(m8[:, : t1.shape[1]], m1)
        assert not m8[:, t1.shape[1]:].any()
    assert any(t.shape[1] % 8 for t, _ in out[1][0])  # the rounding did something
    for k in ("loss", "inv", "sigreg"):
        torch.testing.assert_close(out[1][1][k], out[8][1][k], rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # inductor compiles C++ kernels for half a minute: the pipeline section
def test_compiled_encoder_gives_the_eager_loss_and_gradients(corpus) -> None:
    """speed.compile (torch.compile; inductor on the CPU here): on one batch and the same
    weights, the loss and every gradient equal eager's to float rounding."""
    photos, tok = corpus
    cfg = {m: tiny_cfg(model={**TINY_MODEL, "dropout": 0.0},
                       speed={"compile": m, "pad_multiple": 8}) for m in ("none", "default")}
    ids, views = tokenize_captions(photos, tok), view_config(cfg["none"], tok)
    groups = jepa_batch(photos[:4], cfg["none"], views, tok, ids, np.random.default_rng(0))
    out = {}
    for mode, c in cfg.items():
        state = build_state(c, encoder_config(c, tok), CPU)
        assert (state.net.encoder.bert._compiled_call_impl is not None) == (mode != "none")
        loss, _ = step_loss(state, groups)
        loss.backward()
        out[mode] = loss.detach(), {k: p.grad for k, p in state.net.named_parameters()}
    torch._dynamo.reset()
    torch.testing.assert_close(out["default"][0], out["none"][0], rtol=1e-5, atol=1e-6)
    assert list(out["default"][1]) == list(out["none"][1])  # same names: checkpoints carry over
    for name, grad in out["none"][1].items():
        torch.testing.assert_close(out["default"][1][name], grad, rtol=1e-4, atol=1e-6,
                                   msg=name)


def _mean_norm_hook(texts: list[str]):
    def hook(epoch: int, encode) -> dict[str, float]:
        emb = encode(texts)
        return {"mean_norm": float(np.linalg.norm(emb, axis=1).mean())}
    return hook


class Killed(RuntimeError):
    pass


def _kill_after(epoch_to_die: int):
    def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
        if epoch == epoch_to_die:
            raise Killed(f"killed after epoch {epoch}")
    return on_epoch


@pytest.mark.parametrize("arm", ["good", "bad", "ntp"])
def test_killed_and_resumed_run_equals_uninterrupted_run(corpus, tmp_path: Path, arm: str) -> None:
    photos, tok = corpus
    cfg = tiny_cfg(arm=arm)
    hook = _mean_norm_hook([p.captions[0] for p in photos[:5]])
    full = train_text_encoder(cfg, photos, tok, tmp_path / "full", eval_hook=hook)

    with pytest.raises(Killed):
        train_text_encoder(cfg, photos, tok, tmp_path / "resumed", eval_hook=hook,
                           on_epoch=_kill_after(1))
    seen: list[int] = []
    resumed = train_text_encoder(cfg, photos, tok, tmp_path / "resumed", eval_hook=hook,
                                 on_epoch=lambda e, m: seen.append(e))
    assert seen == [1, 2, 3]  # epoch 1 replayed from the checkpoint, then 2 and 3 trained
    assert resumed == full
    assert set(full) >= {"epoch", "loss", "lr", "mean_norm"}
    assert ({"inv", "sigreg"} <= set(full)) == (arm != "ntp")
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)
    b = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)
    assert a["net"].keys() == b["net"].keys()
    for k in a["net"]:
        assert torch.equal(a["net"][k], b["net"][k]), k
    assert torch.equal(a["sigreg"]["step"], b["sigreg"]["step"])
    assert int(a["sigreg"]["step"]) == (0 if arm == "ntp" else 3 * 4)  # 3 epochs x 4 steps
    curve_a = json.loads((tmp_path / "full" / "curve.json").read_text())
    assert curve_a == json.loads((tmp_path / "resumed" / "curve.json").read_text())
    assert [r["epoch"] for r in curve_a] == [1, 2, 3]


def test_sparse_checkpoints_resume_from_the_last_one_to_the_same_result(corpus,
                                                                          tmp_path: Path) -> None:
    """checkpoint_every 2 over 4 epochs: killed after epoch 3, the run holds the epoch-2
    checkpoint, redoes epoch 3 and ends where the uninterrupted run (and the run that writes a
    checkpoint every epoch) ends."""
    photos, tok = corpus
    cfg = tiny_cfg(epochs=4, speed={"checkpoint_every": 2})
    every_epoch = train_text_encoder(tiny_cfg(epochs=4, speed={"checkpoint_every": 1}), photos,
                                     tok, tmp_path / "every")
    full = train_text_encoder(cfg, photos, tok, tmp_path / "full")
    with pytest.raises(Killed):
        train_text_encoder(cfg, photos, tok, tmp_path / "resumed", on_epoch=_kill_after(3))
    assert torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)["epoch"] == 2
    seen: list[int] = []
    resumed = train_text_encoder(cfg, photos, tok, tmp_path / "resumed",
                                 on_epoch=lambda e, m: seen.append(e))
    assert seen == [1, 2, 3, 4]  # the checkpoint's 1 and 2 replayed, 3 redone, then 4
    assert resumed == full == every_epoch
    nets = [torch.load(tmp_path / d / "checkpoint.pt", weights_only=True)["net"]
            for d in ("full", "resumed")]
    assert all(torch.equal(nets[0][k], nets[1][k]) for k in nets[0])


def test_sigreg_weight_holds_the_effective_weight_when_the_batch_changes(corpus,
                                                                          tmp_path: Path) -> None:
    """sigreg_weight 0.64 (= .02 x 4 photos x 8 views x 1 GPU): batch 4 runs lamb .02, batch 2
    runs lamb .04 (the rerun article's 128-at-.02 vs 256-at-.01, halved); the loss of every
    epoch is inv + that lamb x sigreg, and config.json records both."""
    photos, tok = corpus
    for batch, lamb in ((4, 0.02), (2, 0.04)):
        out = tmp_path / f"b{batch}"
        train_text_encoder(tiny_cfg(batch_size=batch, lamb=0.5, sigreg_weight=0.64), photos,
                           tok, out)
        config = json.loads((out / "config.json").read_text())
        assert config["lamb"] == pytest.approx(lamb, rel=1e-12)
        assert config["effective_sigreg_weight"] == pytest.approx(0.64, rel=1e-12)
        assert config["train"]["lamb"] == 0.5  # what the user set is kept as set
        for r in json.loads((out / "curve.json").read_text()):
            assert r["loss"] == pytest.approx(r["inv"] + lamb * r["sigreg"], rel=1e-5)
    two_gpus = resolved_lamb(tiny_cfg(sigreg_weight=0.64), world_size=2)
    assert two_gpus == pytest.approx(0.01, rel=1e-12)  # twice the GPUs, half the lamb
    plain = train_text_encoder(tiny_cfg(lamb=0.5), photos, tok, tmp_path / "plain")
    assert plain["loss"] == pytest.approx(plain["inv"] + 0.5 * plain["sigreg"], rel=1e-5)


def test_resume_under_other_speed_settings_continues_the_run(corpus, tmp_path: Path) -> None:
    """Speed settings are not part of a run's identity: a run killed under one compile mode,
    padding and checkpoint cadence resumes under others (a failed compile can go on eager)."""
    photos, tok = corpus
    with pytest.raises(Killed):
        train_text_encoder(tiny_cfg(), photos, tok, tmp_path / "run", on_epoch=_kill_after(1))
    seen: list[int] = []
    faster = tiny_cfg(speed={"passes": "one", "pad_multiple": 8, "checkpoint_every": 5})
    train_text_encoder(faster, photos, tok, tmp_path / "run", on_epoch=lambda e, m: seen.append(e))
    assert seen == [1, 2, 3]  # epoch 1 replayed from the checkpoint


def test_resume_refuses_a_checkpoint_from_another_config(corpus, tmp_path: Path) -> None:
    photos, tok = corpus
    train_text_encoder(tiny_cfg(epochs=1), photos, tok, tmp_path)
    before = (tmp_path / "checkpoint.pt").read_bytes()
    with pytest.raises(ContractError, match=r"written by config [0-9a-f]{16}, this run is "
                       r"config [0-9a-f]{16}; delete .* or restore the params"):
        train_text_encoder(tiny_cfg(epochs=1, lamb=0.05), photos, tok, tmp_path)
    assert (tmp_path / "checkpoint.pt").read_bytes() == before


def test_outputs_and_reloaded_encoder(corpus, tmp_path: Path) -> None:
    photos, tok = corpus
    texts = [p.captions[1] for p in photos[:6]]
    got = {}

    def hook(epoch: int, encode) -> dict[str, float]:
        got["emb"] = encode(texts)
        return {}

    train_text_encoder(tiny_cfg(epochs=1), photos, tok, tmp_path, eval_hook=hook)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["effective_sigreg_weight"] == pytest.approx(0.02 * 4 * 8 * 1)  # lamb B V W
    assert config["encoder"]["causal"] is False and config["world_size"] == 1
    encode = load_text_encoder(tmp_path)
    emb = encode(texts)
    assert emb.shape == (6, 16) and emb.dtype == np.float32
    np.testing.assert_array_equal(emb, got["emb"])  # pooled encoder output, not the projector
    assert encode([]).shape == (0, 16)


def test_good_views_learn_a_real_signal_on_a_toy_corpus(corpus, tmp_path: Path) -> None:
    """The LeJEPA loss falls, and a photo's differently worded captions end up nearest
    neighbours: R@1 of caption 0 -> caption 2 over the 16 photos (chance 1/16)."""
    photos, tok = corpus

    def r_at_1(epoch: int, encode) -> dict[str, float]:
        a, b = (encode([p.captions[j] for p in photos]) for j in (0, 2))
        a /= np.linalg.norm(a, axis=1, keepdims=True)
        b /= np.linalg.norm(b, axis=1, keepdims=True)
        return {"r_at_1": float(((a @ b.T).argmax(1) == np.arange(len(photos))).mean())}

    curve = []
    train_text_encoder(tiny_cfg(epochs=10, lr=3e-3, n_slices=64, eval_every=10,
                                model={**TINY_MODEL, "dropout": 0.0}),
                       photos, tok, tmp_path, eval_hook=r_at_1,
                       on_epoch=lambda e, m: curve.append(m))
    assert all(math.isfinite(r["loss"]) for r in curve)
    assert curve[-1]["loss"] < 0.8 * curve[0]["loss"]
    assert curve[-1]["inv"] < 0.5 * curve[0]["inv"]
    assert curve[-1]["r_at_1"] >= 0.5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bf16_run_and_reload(corpus, tmp_path: Path) -> None:
    """The GPU path: bf16 autocast, SIGReg in fp32, pinned batch copies, the evaluation hook
    every epoch, checkpoint moved back to the CPU; also with the encoder compiled into CUDA
    graphs (training and evaluation shapes)."""
    photos, tok = corpus
    runs = {"good": {}, "ntp": {}, "good-cudagraphs": {"compile": "reduce-overhead",
                                                       "pad_multiple": 8}}
    for arm, speed in runs.items():
        out = train_text_encoder(tiny_cfg(arm=arm.split("-")[0], epochs=2, device="cuda",
                                          amp=True, speed=speed), photos, tok, tmp_path / arm,
                                 eval_hook=_mean_norm_hook([p.captions[0] for p in photos]))
        assert math.isfinite(out["loss"]) and math.isfinite(out["mean_norm"])
        config = json.loads((tmp_path / arm / "config.json").read_text())
        assert config["device"].startswith("cuda")
        emb = load_text_encoder(tmp_path / arm)([p.captions[0] for p in photos])
        assert emb.shape == (16, 16) and np.isfinite(emb).all()


def _ddp_worker(rank: int, port: int, out: str, compile_mode: str) -> None:
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2",
                      RANK=str(rank), LOCAL_RANK=str(rank))
    photos = toy_photos()
    tok = train_tokenizer([c for p in photos for c in p.captions], vocab_size=120)
    train_text_encoder(tiny_cfg(epochs=2, speed={"compile": compile_mode, "pad_multiple": 8,
                                                 "checkpoint_every": 1}),
                       photos, tok, Path(out) / f"rank{rank}")


@pytest.mark.slow
@pytest.mark.parametrize("compile_mode", ["none", "default"])
def test_two_rank_gloo_run_keeps_replicas_identical(tmp_path: Path, compile_mode: str) -> None:
    """torchrun-style env on CPU (gloo): both ranks train in step, only rank 0 writes, and
    config.json records world size 2 and the SIGReg weight it implies (lamb B V W); also with
    a compiled encoder under DDP."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ddp_worker, args=(port, str(tmp_path), compile_mode), nprocs=2, join=True)
    config = json.loads((tmp_path / "rank0" / "config.json").read_text())
    assert config["world_size"] == 2
    assert config["effective_sigreg_weight"] == pytest.approx(0.02 * 4 * 8 * 2)
    assert not (tmp_path / "rank1").exists()  # only rank 0 writes
    curve = json.loads((tmp_path / "rank0" / "curve.json").read_text())
    assert [r["epoch"] for r in curve] == [1, 2] and all(math.isfinite(r["loss"]) for r in curve)


def test_training_loop_batches_equal_jepa_batch(corpus) -> None:
    """The loop draws batches from one caption bank of all photos; `jepa_batch` (a bank of
    the batch's photos) gives the same groups for the same generator."""
    from prh.batches import CaptionBank, jepa_groups, ntp_groups

    photos, tok = corpus
    for arm in ("good", "bad", "ntp"):
        cfg = tiny_cfg(arm=arm)
        ids, views = tokenize_captions(photos, tok), view_config(cfg, tok)
        bank = CaptionBank.build(photos, ids, views, tok.pad_id)
        rows = np.array([5, 2, 11, 7])
        batch = [photos[i] for i in rows]
        rng_a, rng_b = np.random.default_rng(4), np.random.default_rng(4)
        if arm == "ntp":
            a = ntp_batch(batch, cfg, tok, ids, rng_a)
            b = ntp_groups(bank, rows, cfg.max_len, tok, rng_b)
        else:
            a = jepa_batch(batch, cfg, views, tok, ids, rng_a)
            b = jepa_groups(bank, rows, arm == "good", views, tok, rng_b)
        assert len(a) == len(b)
        for (ta, ma), (tb, mb) in zip(a, b, strict=True):
            assert torch.equal(ta, tb) and torch.equal(ma, mb)
            assert ta.dtype == ma.dtype == torch.long
            assert torch.equal(ma.bool(), ta != tok.pad_id)


# ---------------------------------------------------------------- packed (padding-free) steps


def packed_and_padded_steps(corpus, arm: str):
    """Loss and gradients of one step, padded (one pass) and packed, on one batch and one
    net: 2 layers, dropout 0, fp32 on CPU."""
    from prh.batches import CaptionBank, step_groups

    photos, tok = corpus
    model = {**TINY_MODEL, "dropout": 0.0, "layers": 2, "hidden": 32, "heads": 4}
    out = {}
    for pack in (False, True):
        cfg = tiny_cfg(arm=arm, max_len=24, batch_size=8, model=model,
                       speed={"pack": pack, "passes": "one"})
        views = view_config(cfg, tok)
        bank = CaptionBank.build(photos, tokenize_captions(photos, tok), views, tok.pad_id)
        batch = step_groups(bank, np.arange(8), cfg, views, tok, np.random.default_rng(5),
                            torch.device("cpu"))
        state = build_state(cfg, encoder_config(cfg, tok), CPU)
        loss, _ = step_loss(state, batch)
        loss.backward()
        out[pack] = (loss.detach(), {n: p.grad for n, p in state.net.named_parameters()
                                     if p.grad is not None}, batch)
    return out


@pytest.mark.parametrize("arm", ["good", "bad", "ntp"])
def test_packed_step_equals_the_padded_step_in_loss_and_every_gradient(corpus, arm):
    out = packed_and_padded_steps(corpus, arm)
    (loss0, grads0, padded), (loss1, grads1, packed) = out[False], out[True]
    tokens, mask, rows = packed[0][:3]
    assert torch.equal(tokens, padded[0][0])                    # the same batch, packed
    assert int(mask.sum()) == int((rows != corpus[1].pad_id).sum())
    assert rows.numel() <= tokens.numel()                        # never more tokens computed
    assert abs(loss1.item() - loss0.item()) <= 1e-5
    assert grads0.keys() == grads1.keys() and len(grads0) > 10
    worst = max((grads1[n] - g).abs().max().item() for n, g in grads0.items())
    assert worst <= 1e-5, worst


def test_packed_ntp_is_causal_within_each_segment_and_blind_across_segments(corpus):
    """Changing a sequence's last token changes no output of its earlier tokens and no output
    of the sequences packed beside it."""
    from prh.batches import pack_group
    from prh.models import TextEncoder

    _, tok = corpus
    torch.manual_seed(0)
    enc = TextEncoder(encoder_config(tiny_cfg(arm="ntp", model={**TINY_MODEL, "dropout": 0.0}),
                                     tok)).eval()
    tokens = torch.randint(5, tok.vocab_size, (3, 6))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 5 + [0]])
    tokens = tokens * mask
    group = pack_group((tokens, mask), 16)
    assert group[2].shape[0] == 1                              # all three share one row
    four = pack_group((tokens, mask), 16, row_multiple=4)      # rows of padding added
    assert four[2].shape == (4, 16) and (four[2][1:] == tok.pad_id).all()
    with torch.no_grad():
        torch.testing.assert_close(enc(*four), enc(*group), atol=1e-6, rtol=0)
    edited = tokens.clone()
    edited[1, 3] = (edited[1, 3] + 1) % tok.vocab_size
    with torch.no_grad():
        a, b = enc(*group), enc(*pack_group((edited, mask), 16))
        ref = enc(tokens, mask)
    torch.testing.assert_close(a * mask[..., None], ref * mask[..., None], atol=1e-5, rtol=0)
    torch.testing.assert_close(a[1, :3], b[1, :3], atol=0, rtol=0)   # causal inside
    assert not torch.allclose(a[1, 3], b[1, 3])
    torch.testing.assert_close(a[[0, 2]], b[[0, 2]], atol=0, rtol=0)  # blind across
