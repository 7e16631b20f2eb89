"""The web-text runs' snapshots scored (harness.stages.recap_score): every layer of a trained
encoder as prh.encode_text reads it, the best-layer mutual k-NN on a miniature WIT against a
random timm DINOv2 by brute force over the layer pairs, and where next-token first reaches good
views' score (harness.report.recap.reach) on rows whose answer is known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from reference_parts import dinov2_weights, write_wit_parquet

from harness.report.recap import reach
from harness.stages.recap_score import main as score_main
from prh import metrics
from prh.encode_text import load_snapshot, make_encode, make_layer_encode
from prh.layers import clip_outliers
from prh.stream import StreamData
from prh.tokenizer import Tokenizer
from prh.train_stream import train_stream
from tests.test_recap import ROOT
from tests.test_stream import cfg, stream, subset  # noqa: F401 (a fixture)

N, K = 32, 4


@pytest.fixture(scope="module")
def runs(subset: Path, tmp_path_factory) -> Path:  # noqa: F811
    """Snapshots of a good-view and a next-token run on the miniature corpus."""
    root = tmp_path_factory.mktemp("runs")
    data = StreamData.open(subset, ["alt", "recap"])
    tok = Tokenizer.load(subset / "tokenizer")
    for arm in ("good", "ntp"):
        rows = train_stream(cfg(arm, model={"hidden": 16, "layers": 2, "heads": 2,
                                            "intermediate": 32, "proj_dim": 16,
                                            "proj_hidden": 32}),
                            stream(), data, tok, root / f"{arm}-s0")
        (root / f"{arm}-s0" / "run.json").write_text(json.dumps({  # as recap_train writes it
            "schema": "prh.recap_run/1", "arm": arm, "seed": 0, "account": rows,
            "config": json.loads((root / f"{arm}-s0" / "config.json").read_text())}))
    return root


@pytest.mark.parametrize("arm", ["good", "ntp"])
def test_layers_end_at_the_embedding_and_do_not_depend_on_the_batch(runs: Path, arm: str) -> None:
    """The last of the L + 1 pooled hidden states is `make_encode`'s embedding; a text's
    layers are the same alone as padded in a batch. Padding is masked, so only the order of
    float32 sums differs with the batch's width: a few ulps (1e-7 relative) through 2 layers of
    width 16 with values of order 1, so 1e-5 holds on any BLAS."""
    encoder, tok, max_len, account = load_snapshot(runs / f"{arm}-s0" / "snapshots" /
                                                   "samples-000000000012.pt")
    assert account["samples"] == 12
    texts = ["a red dog runs on grass", "cat", "a white boat on a lake by a tall tree"]
    layers = make_layer_encode(encoder, tok, max_len, torch.device("cpu"))(texts)
    assert layers.shape == (3, 3, 16)
    embed = make_encode(encoder, tok, max_len, torch.device("cpu"))(texts)
    np.testing.assert_allclose(layers[:, -1], embed, atol=1e-5)
    alone = np.concatenate([make_layer_encode(encoder, tok, max_len, torch.device("cpu"))([t])
                            for t in texts])
    np.testing.assert_allclose(layers, alone, atol=1e-5)


def test_each_snapshot_is_scored_at_its_best_layer_pair_by_brute_force(
        runs: Path, subset: Path, tmp_path: Path) -> None:  # noqa: F811
    """The best pair against every pair's score; each item's score and each 800-of-1,024-style
    subsample's score (Appendix C's protocol, here 25 of 32 items) recomputed from scratch; the
    runs' setups as the audit matches them."""
    from harness.config.reference import load_reference
    from harness.data.benchmarks import vision_layers
    from prh.wit import read_wit

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["recap"]["train"]["arms"] = ["good", "ntp"]
    params["recap"]["score"] = ["wit1024"]
    params["wit1024"].update(data=str(write_wit_parquet(tmp_path / "wit", N)), n_rows=N, k=K,
                             device="cpu", n_resamples=200, batch_size=8,
                             vision=[{"name": "dinov2_vitb14", "timm": "vit_small_patch14_dinov2",
                                      "weights": str(dinov2_weights(tmp_path / "d.safetensors")),
                                      "image_size": 56}])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    out = tmp_path / "scores.json"
    assert score_main(["--params", str(tmp_path / "params.yaml"), "--subset", str(subset),
                       "--runs-dir", str(runs), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "prh.recap_scores/4" and doc["wit1024"]["n"] == N
    images = json.loads((subset / "summary.json").read_text())["images"]
    assert doc["setups"]["good-s0"] == {"arm": "good", "images": images, "seed": 0,
                                        "sources": ["alt", "recap"], "samples": [2, 6, 12],
                                        "world_size": 1}
    assert doc["wit1024"]["subsamples"]["size"] == 25  # round(32 x 800 / 1024)
    idx = metrics.subsample_indices(N, 200, params["wit1024"]["seed"])
    ref = load_reference(tmp_path / "params.yaml")
    wit = read_wit(ref.data, n_rows=N)
    vision = vision_layers(ref, wit)[0]["dinov2_vitb14"]
    for run in ("good-s0", "ntp-s0"):
        assert [e["samples"] for e in doc["runs"][run]] == [2, 6, 12]
        for entry in doc["runs"][run]:
            encoder, tok, max_len, _ = load_snapshot(runs / run / "snapshots" / entry["snapshot"])
            x = clip_outliers(make_layer_encode(encoder, tok, max_len, torch.device("cpu"))(
                wit.texts))
            grid = np.array([[metrics.mutual_knn(x[:, i], vision[:, j], K).mean()
                              for j in range(vision.shape[1])] for i in range(x.shape[1])])
            got = entry["wit1024"]  # the same features and neighbours: equal up to the mean's
            # float64 rounding (scores are multiples of 1 / (K N))
            assert got["best"] == pytest.approx(grid.max(), abs=1e-12)
            assert grid[tuple(got["pair"])] == pytest.approx(grid.max(), abs=1e-12)
            assert got["ci"][0] <= got["best"] <= got["ci"][1]
            assert np.mean(got["per_item"]) == pytest.approx(got["best"], abs=1e-12)
            t, v = got["pair"]
            assert len(got["subsamples"]) == 200
            for d in (0, 99, 199):
                rows = idx[d]
                assert len(set(rows)) == 25
                assert got["subsamples"][d] == pytest.approx(metrics.mutual_knn(
                    x[rows, t], vision[rows, v], K).mean(), abs=1e-12)
    # the audit reads these scores: a run on the miniature corpus speaks to no paper number
    from harness.stages.audit import main as audit_main

    assert audit_main(["--params", str(tmp_path / "params.yaml"), "--results", "",
                       "--theory", "", "--contamination", "", "--web-text", str(out),
                       "--out", str(tmp_path / "audit.json")]) == 0
    rows = {r["id"]: r for r in json.loads((tmp_path / "audit.json").read_text())["claims"]}
    assert rows["t7_captioner_good"]["verdict"] == "not comparable"
    assert f"images: claim 2.24M, run {images}" in rows["t7_captioner_good"]["reason"]
    assert rows["t7_alt_good_r1"]["verdict"] == "not rerun"  # Flickr30k R@1: not scored


def test_a_benchmark_without_its_data_is_refused_before_anything_is_scored(
        tmp_path: Path) -> None:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["wit1024"]["data"] = str(tmp_path / "no-wit")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert score_main(["--params", str(tmp_path / "params.yaml"), "--subset", str(tmp_path),
                       "--runs-dir", str(tmp_path), "--out", str(tmp_path / "s.json")]) == 2
    assert not (tmp_path / "s.json").exists()


def _arm(name: str, rows: list[tuple[int, int, int, float]]) -> dict:
    return {"arm": name, "run": f"{name}-s0",
            "rows": [{"samples": s, "tokens": t, "unique_images": u, "scores": [v]}
                     for s, t, u, v in rows]}


def test_next_token_reaches_the_goal_at_its_first_checkpoint_at_or_above_it() -> None:
    good = _arm("good", [(10, 300, 9, 0.05), (20, 600, 10, 0.10)])
    ntp = _arm("ntp", [(10, 100, 9, 0.02), (100, 1000, 60, 0.10), (400, 4000, 90, 0.2)])
    got = reach(good, ntp, 0, ["wit1024"])
    assert got["reached"] and got["samples"] == 100 and got["goal"] == 0.10
    assert got["ratios"] == [("samples", 5.0), ("tokens", 1000 / 600), ("unique_images", 6.0)]
    short = reach(good, _arm("ntp", [(10, 100, 9, 0.02), (40, 400, 30, 0.08)]), 0, ["wit1024"])
    assert not short["reached"] and short["at_least"] == 2.0 and short["best"] == 0.08


def test_the_report_shows_each_snapshots_score_beside_its_account(subset: Path,  # noqa: F811
                                                                  runs: Path,
                                                                  tmp_path: Path) -> None:
    """The scores JSON's numbers in the report's rows, and the reach line for the benchmark."""
    import re

    from harness.stages.recap_report import main as report_main

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["recap"]["train"]["arms"] = ["good", "ntp"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    scores = {"schema": "prh.recap_scores/4", "benchmarks": ["wit1024"], "runs": {},
              "wit1024": {"n": N, "sha256": "d" * 16, "k": K, "vision": {"name": "dino"},
                          "clip": {"q": 0.95, "mode": "per_sample"}}}
    for i, arm in enumerate(("good", "ntp")):
        rows = json.loads((runs / f"{arm}-s0" / "accounting.json").read_text())
        (tmp_path / f"{arm}-s0").mkdir()
        (tmp_path / f"{arm}-s0" / "run.json").write_text(json.dumps({
            "schema": "prh.recap_run/1", "arm": arm, "seed": 0, "account": rows,
            "config": json.loads((runs / f"{arm}-s0" / "config.json").read_text())}))
        scores["runs"][f"{arm}-s0"] = [{"samples": r["samples"],
                                        "wit1024": {"best": 0.1 * (j + 1) + i}}
                                       for j, r in enumerate(rows)]
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    (tmp_path / "audit.json").write_text(json.dumps({"schema": "prh.audit/1", "claims": [
        {"id": "t7_captioner_good", "rule": "web_text", "statement": "Good views .107.",
         "kind": "measured", "printed": "0.107", "where": "Table 7", "evidence": {},
         "verdict": "not comparable",
         "reason": "no run trained as the claim says: images: claim 2.24M, run 9"},
        {"id": "other", "rule": "measured", "kind": "measured", "statement": "x", "printed": "1",
         "where": "y", "evidence": {}, "verdict": "reproduced", "reason": "z"}],
        "arithmetic": [], "summary": {"not comparable": 1, "reproduced": 1}}))
    (tmp_path / "para").mkdir()
    (tmp_path / "para/summary.json").write_text(json.dumps({"schema": "prh.recap_paraphrase/1",
                                                            "paraphrase": None}))
    html = tmp_path / "recap.html"
    assert report_main(["--params", str(tmp_path / "params.yaml"), "--subset", str(subset),
                        "--runs-dir", str(tmp_path), "--scores", str(tmp_path / "scores.json"),
                        "--paraphrase", str(tmp_path / "para"), "--audit",
                        str(tmp_path / "audit.json"),
                        "--html", str(html), "--pdf", str(tmp_path / "recap.pdf")]) == 0
    text = html.read_text()
    for run in ("good-s0", "ntp-s0"):
        for entry in scores["runs"][run]:
            cell = re.search(rf'data-k="recap\.{run}\.{entry["samples"]}\.score0">([\d.]+)<',
                             text)
            assert cell and float(cell.group(1)) == round(entry["wit1024"]["best"], 3)
    # good's last score .3; next-token's first at or above it is its first (1.1), at 2 samples
    line = re.search(r'data-k="recap\.reach\.wit1024">(.*?)</li>', text)[1]
    assert "ntp-s0 reaches it at 2 samples: samples 0.2×" in line
    # the web-text claims' verdicts, and only theirs
    assert re.search(r'data-k="recap\.verdict\.t7_captioner_good"><b>not comparable</b>', text)
    assert "recap.verdict.other" not in text
