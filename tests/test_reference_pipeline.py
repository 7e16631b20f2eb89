"""`dvc repro pipelines/wit1024/dvc.yaml` for real on a miniature WIT-1024 in the published
parquet layout with the real MiniLM, a tiny random Qwen2 and a random DINOv2: the scores, the
audit of them, nothing rerun when nothing changed, and only the scoring rerun when a wit1024
param changes (slow: CI's pipeline section)."""

from __future__ import annotations

import shutil

import pytest
import yaml
from reference_parts import dinov2_weights, minilm_dir, tiny_qwen, write_wit_parquet
from tiny_world import ROOT, commit_all, copy_code, sh

from harness.records.reference import read_reference
from prh.io import read_json

pytestmark = pytest.mark.slow


def test_dvc_repro_scores_the_public_encoders_and_audits_them(tmp_path):
    repo = copy_code(tmp_path / "repo")
    shutil.copytree(ROOT / "pipelines", repo / "pipelines")
    commit_all(repo, "code")
    write_wit_parquet(repo / "data" / "wit1024", 48)
    shutil.copytree(minilm_dir(), repo / "models" / "minilm")
    tiny_qwen(repo / "models" / "qwen")
    dinov2_weights(repo / "models" / "dinov2.safetensors")
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    raw["wit1024"].update(
        data="data/wit1024", n_rows=48, k=5, n_permutations=19, n_resamples=200, device="cpu",
        batch_size=16,
        text=[{"name": "Qwen/Qwen2.5-0.5B", "path": "models/qwen"},
              {"name": "sentence-transformers/all-minilm-l6-v2", "path": "models/minilm"}],
        vision=[{"name": "dinov2_vitb14", "timm": "vit_small_patch14_dinov2",
                 "weights": "models/dinov2.safetensors", "image_size": 56}])
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))

    first = sh(repo, "dvc", "repro", "pipelines/wit1024/dvc.yaml")
    assert "Running stage 'pipelines/wit1024/dvc.yaml:reference'" in first.stdout
    doc = read_reference(repo / "runs/reference/wit1024.json")
    assert len(doc["alignment"]) == 4 and doc["data"]["n"] == 48
    assert doc["text"]["Qwen/Qwen2.5-0.5B"]["identity"]
    audit = read_json(repo / "reports/audit_wit1024.json")
    rows = {r["id"]: r for r in audit["claims"]}
    assert rows["t3_mpnet_wit"]["verdict"] == "not rerun"  # not scored: mpnet is not listed
    qwen = rows["qwen05b_wit"]  # scored at k = 5: another setting, named, not "not scored"
    assert qwen["verdict"] == "not comparable" and "k = 5, the claim's k = 10" in qwen["reason"]
    assert "runs/reference/wit1024.json" in audit["inputs"]

    again = sh(repo, "dvc", "repro", "pipelines/wit1024/dvc.yaml")
    assert "Running stage" not in again.stdout
    raw["wit1024"]["q_outlier"] = 0.9
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    status = sh(repo, "dvc", "status", "pipelines/wit1024/dvc.yaml").stdout
    assert "dvc.yaml:reference:" in status and "modified:           wit1024" in status
    assert "dvc.yaml:audit:" not in status  # it reruns only once the scores it reads change
