"""The stages on a tiny world (slow: real trainings, MLflow runs and an aggregate, built once for
this module and only read). The curve and the train + val map: epoch 1 is evaluated,
next-token logs its validation loss every epoch, results.json's curve numbers are the curve's,
and the train + val map's R@1 is a Procrustes fit done here by hand on the same embeddings.
All-caption scoring: the train stage embeds every test caption and the pair-free text pool,
align scores them with the map of the one-caption protocol and writes the gallery curve,
aggregate averages it over seeds."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from tiny_world import (
    build_upstream,
    commit_all,
    copy_code,
    tiny_params,
    train_align_aggregate,
)

from harness.audit.claims import load_claims
from harness.audit.rules import Context, rule_measured
from prh.checkpoint import read_checkpoint, tokenizer_from_files
from prh.data import load_karpathy
from prh.io import load_embeddings
from prh.models import TextEncoder, TextEncoderConfig

ARMS = ("good", "ntp")  # seed 0 of each, trained 4 epochs with eval_every 3:
EVALUATED = [1, 3, 4]  # the first, every third, the last
NEW = ("r_at_1_i2t_all", "r_at_1_t2i_all", "mknn10_captions", "mknn10_captions_other_photos")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """The tiny world's stages run by hand (dvc.yaml's commands), seed 0 of good and
    next-token trained 4 epochs with the per-epoch evaluation every 3rd, aligned with the
    gallery curve (pools of 10, 20 and every test photo, 3 draws) and aggregated."""
    repo = copy_code(tmp_path_factory.mktemp("staged"))
    raw = tiny_params(yaml.safe_load((repo / "params.yaml").read_text()), epochs=4)
    raw.update(arms=list(ARMS), seeds=[0])
    raw["world"]["train"]["eval_every"] = 3
    raw["world"]["eval"].update(gallery_sizes=[10, 20, 100], gallery_draws=3)
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return train_align_aggregate(build_upstream(commit_all(repo, "tiny world")), ARMS)


def hand_val_loss(run_dir: Path, captions: list[str]) -> float:
    """Next-token cross-entropy per target token of `captions`, one caption at a time with no
    padding, log-softmax in float64: an implementation apart from prh.encode_text's."""
    ckpt = read_checkpoint(run_dir / "checkpoint.pt")
    enc = TextEncoder(TextEncoderConfig(**ckpt["config"]["encoder"]))
    enc.load_state_dict({k.removeprefix("encoder."): v for k, v in ckpt["net"].items()
                         if k.startswith("encoder.")})
    enc.eval()
    tok, max_len = tokenizer_from_files(ckpt["tokenizer_files"]), enc.cfg.max_len
    total, count = 0.0, 0
    with torch.no_grad():
        for text in captions:
            ids = torch.tensor([[tok.cls_id, *tok.encode(text)[:max_len - 2], tok.sep_id]])
            hidden = enc(ids, torch.ones_like(ids))[0, :-1].double()
            logp = torch.log_softmax(hidden @ enc.word_embeddings.double().T, dim=-1)
            total -= float(logp[torch.arange(ids.shape[1] - 1), ids[0, 1:]].sum())
            count += ids.shape[1] - 1
    return total / count


@pytest.mark.slow
def test_curve_has_epoch_one_and_next_token_logs_its_val_loss_every_epoch(repo):
    corpus = load_karpathy(repo / "data/world/raw/dataset.json")
    val = [p.captions[0] for p in corpus.split("val")]  # the fit pairs' captions
    for arm in ARMS:
        curve = json.loads((repo / f"runs/text/{arm}-s0/curve.json").read_text())
        assert [r["epoch"] for r in curve if "r_at_1_test" in r] == EVALUATED
        losses = [r.get("val_loss") for r in curve]
        if arm == "good":
            assert losses == [None] * 4  # a JEPA arm has no next-token head
            continue
        assert all(np.isfinite(losses)) and len(losses) == 4
        assert losses[-1] == pytest.approx(hand_val_loss(repo / "runs/text/ntp-s0", val),
                                           rel=1e-4)  # float32 forward vs float64 here
    with sqlite3.connect(repo / "mlflow.db") as db:
        rows = db.execute("select r.name, m.key, m.step from metrics m join runs r "
                          "on m.run_uuid = r.run_uuid where m.key in "
                          "('val_loss', 'r_at_1_test')").fetchall()
    steps = {(name, key): sorted(s for n, k, s in rows if (n, k) == (name, key))
             for name, key, _ in rows}
    assert steps == {("good-s0", "r_at_1_test"): EVALUATED, ("ntp-s0", "r_at_1_test"): EVALUATED,
                     ("ntp-s0", "val_loss"): [1, 2, 3, 4]}


@pytest.mark.slow
def test_results_curve_numbers_are_the_curves_by_brute_force(repo):
    from harness.records.schemas import RESULTS

    results = RESULTS.check(json.loads((repo / "runs/results.json").read_text()), "results.json")
    for arm in ARMS:
        curve = json.loads((repo / f"runs/text/{arm}-s0/curve.json").read_text())
        scored = {r["epoch"]: r for r in curve if "r_at_1_test" in r}
        peak = max(scored, key=lambda e: (scored[e]["r_at_1_test"], -e))
        got = results["arms"][arm]["curve"]
        assert got["evaluated_epochs"] == EVALUATED
        assert got["runs"]["0"]["epoch1"] == {"epoch": 1, "r_at_1": scored[1]["r_at_1_test"]}
        assert got["runs"]["0"]["peak"] == {"epoch": peak, "r_at_1": scored[peak]["r_at_1_test"]}
        assert got["peak"]["r_at_1"]["mean"] == scored[peak]["r_at_1_test"]
        assert got["last"]["r_at_1"]["mean"] == results["arms"][arm]["metrics"]["r_at_1"]["mean"]
        if arm == "good":
            assert "val_loss" not in got and "early_stop" not in got
            continue
        low = min(curve, key=lambda r: r["val_loss"])
        stop = min(scored, key=lambda e: (scored[e]["val_loss"], e))
        assert got["runs"]["0"]["val_loss"] == {
            "min": low["val_loss"], "min_epoch": low["epoch"], "last": curve[-1]["val_loss"],
            "last_epoch": 4}
        assert got["runs"]["0"]["early_stop"] == {"epoch": stop, "val_loss": scored[stop][
            "val_loss"], "r_at_1": scored[stop]["r_at_1_test"]}
        assert got["early_stop"]["evaluated_epochs"] == EVALUATED


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.slow
def test_train_val_map_is_procrustes_on_every_train_pair_and_the_fit_pairs(repo):
    """R@1 of W = U V^T from the SVD of the centred train + val cross-covariance, by cosine
    in centred text space, a tie counting against the true pair; train pairs are each train
    photo with its first caption. The pair-free pools are the same rows as before."""
    load = {name: load_embeddings(repo / name) for name in (
        "runs/image/train.npz", "runs/image/val.npz", "runs/image/test.npz",
        "runs/image/pool_images.npz")}
    train = load_karpathy(repo / "data/world/raw/dataset.json").split("train")
    ids_train = [p.id for p in train]
    assert load["runs/image/train.npz"][0].tolist() == ids_train
    np.testing.assert_array_equal(load["runs/image/pool_images.npz"][1],
                                  load["runs/image/train.npz"][1][:60])
    results = json.loads((repo / "runs/results.json").read_text())
    for arm in ARMS:
        text = {s: load_embeddings(repo / f"runs/text/{arm}-s0/{s}.npz")
                for s in ("train_texts", "val", "test", "pool_texts")}
        assert text["train_texts"][0].tolist() == ids_train
        # the pool: every caption of the last 60 train photos, caption 0 the protocol's
        np.testing.assert_allclose(text["pool_texts"][1][::5], text["train_texts"][1][-60:],
                                   atol=1e-5)
        x = np.concatenate([load["runs/image/train.npz"][1], load["runs/image/val.npz"][1]])
        y = np.concatenate([text["train_texts"][1], text["val"][1]]).astype(np.float64)
        x = x.astype(np.float64)
        mx, my = x.mean(0), y.mean(0)
        u, _, vt = np.linalg.svd((x - mx).T @ (y - my), full_matrices=False)
        sims = unit((load["runs/image/test.npz"][1] - mx) @ (u @ vt)) @ unit(
            text["test"][1].astype(np.float64) - my).T
        true = np.diag(sims)
        hits = (sims < true[:, None]).sum(1) == sims.shape[1] - 1
        run = json.loads((repo / f"runs/align/{arm}-s0.json").read_text())
        with np.load(repo / f"runs/align/{arm}-s0.npz") as z:
            np.testing.assert_array_equal(z["r_at_1_trainval_hit"], hits)
        assert run["metrics"]["r_at_1_trainval"]["value"] == hits.mean()
        assert run["trainval_map"]["n_pairs"] == 120 + 40
        block = results["arms"][arm]
        assert block["metrics"]["r_at_1_trainval"]["mean"] == hits.mean()
        assert block["trainval_map"] == run["trainval_map"]
        assert "two_level" in block["metrics"]["r_at_1_trainval"]


@pytest.mark.slow
def test_flickr_claims_on_the_world_results_are_not_comparable(repo):
    results = json.loads((repo / "runs/results.json").read_text())
    claims = load_claims()
    ids = [c.id for c in claims.values() if c.setup.get("measure")]
    assert len(ids) == 15
    assert {rule_measured(claims[c], Context(claims, "world", results)).verdict
            for c in ids} == {"not comparable"}


@pytest.mark.slow
def test_train_embeds_every_test_caption_and_the_last_train_photos(repo):
    corpus = load_karpathy(repo / "data/world/raw/dataset.json")
    test, train = corpus.split("test"), corpus.split("train")
    ids, emb, meta = load_embeddings(repo / "runs/text/good-s0/test_captions.npz")
    assert ids.tolist() == [f"{p.id}:{j}" for p in test for j in range(5)]
    assert emb.shape[0] == 5 * len(test) == 200 and meta == {"arm": "good", "seed": 0}
    one_ids, one, _ = load_embeddings(repo / "runs/text/good-s0/test.npz")
    np.testing.assert_allclose(emb[::5], one, atol=1e-5)  # caption 0 is the protocol's
    pool_ids, pool, _ = load_embeddings(repo / "runs/text/good-s0/pool_texts.npz")
    assert pool_ids.tolist() == [f"{p.id}:{j}" for p in train[-60:] for j in range(5)]
    assert pool.shape[0] == 300  # every caption: the align stage prepares the pool's rows
    assert not {i.rpartition(":")[0] for i in pool_ids} & {p.id for p in train[:60]}


@pytest.mark.slow
def test_align_scores_every_caption_with_intervals_and_the_gallery_curve(repo):
    run = json.loads((repo / "runs/align/good-s0.json").read_text())
    with np.load(repo / "runs/align/good-s0.npz") as z:
        per = {k: z[k] for k in z.files}
    for key in NEW:
        m = run["metrics"][key]
        assert m["ci"][0] <= m["value"] <= m["ci"][1] and m["n"] == 40
    assert run["metrics"]["r_at_1_i2t_all"]["value"] == per["r_at_1_i2t_all_hit"].mean()
    assert run["metrics"]["r_at_1_t2i_all"]["value"] == per["r_at_1_t2i_all"].mean()
    curve = run["gallery_curve"]
    assert [(r["n_photos"], r["draws"], r["n_captions"]) for r in curve] == [
        (10, 3, 50.0), (20, 3, 100.0), (40, 1, 200.0)]
    full = curve[-1]["metrics"]
    assert full["r_at_1"] == run["metrics"]["r_at_1"]["value"]
    assert full["mknn10"] == run["metrics"]["mknn10"]["value"]
    for key in NEW:
        assert full[key] == run["metrics"][key]["value"]
    assert "mknn10" not in curve[0]["metrics"]  # 10 photos hold 9 neighbours
    assert curve[0]["chance"]["r_at_1_i2t_all"] == pytest.approx(0.1)


@pytest.mark.slow
def test_aggregate_averages_the_curve_over_seeds(repo):
    results = json.loads((repo / "runs/results.json").read_text())
    run = json.loads((repo / "runs/align/good-s0.json").read_text())
    curve = results["arms"]["good"]["gallery_curve"]
    assert [r["n_photos"] for r in curve] == [10, 20, 40]
    r1 = curve[-1]["metrics"]["r_at_1_i2t_all"]
    assert r1 == {"values": {"0": run["metrics"]["r_at_1_i2t_all"]["value"]},
                  "mean": run["metrics"]["r_at_1_i2t_all"]["value"], "std": None}
    for key in NEW:  # all-caption outcomes get intervals like the one-caption ones
        assert "ci" in results["arms"]["good"]["metrics"][key]
