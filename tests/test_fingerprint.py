"""harness.tracking.fingerprint: the environment record that MLflow tags and the report prints."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.tracking import fingerprint as fpm

IMAGE_KEYS = ["image_digest", "image_git_commit", "image_build_date", "image_base"]
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def no_image(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [*fpm.IMAGE_VARIABLES.values(), fpm.LOCK_VARIABLE]:
        monkeypatch.delenv(var, raising=False)


def fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """Put an `nvidia-smi` shell script first on PATH."""
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_digest_is_read_when_the_variable_is_set(no_image, monkeypatch):
    monkeypatch.setenv("PRH_IMAGE_DIGEST", DIGEST)
    fp = fpm.environment_fingerprint()
    assert fp["image_digest"] == DIGEST
    assert fp["hash"] == fpm.fingerprint_hash(fp)


def test_not_in_the_pinned_image_when_unset(no_image):
    fp = fpm.environment_fingerprint()
    assert [fp[k] for k in IMAGE_KEYS] == ["not in the pinned image"] * 4
    assert fp["image_lock_sha256"] == "not in the pinned image"


def test_empty_digest_counts_as_unset(no_image, monkeypatch):
    monkeypatch.setenv("PRH_IMAGE_DIGEST", "  ")
    assert fpm.image_provenance()["image_digest"] == fpm.NOT_IN_IMAGE


def test_in_image_without_a_stamped_digest_says_how_to_pass_it(no_image, monkeypatch):
    monkeypatch.setenv("PRH_BASE_IMAGE", "nvidia/cuda:13.0.3-cudnn-runtime-ubuntu24.04@sha256:00")
    monkeypatch.setenv("PRH_GIT_COMMIT", "eeb5af5")
    out = fpm.image_provenance()
    assert out["image_digest"].startswith("unknown: run with -e PRH_IMAGE_DIGEST=")
    assert out["image_git_commit"] == "eeb5af5"
    assert out["image_build_date"] == fpm.NOT_IN_IMAGE


def test_lock_file_hash(no_image, monkeypatch, tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_bytes(b"numpy==2.0.0 \\\n    --hash=sha256:00\n")
    monkeypatch.setenv("PRH_LOCK_FILE", str(lock))
    expected = hashlib.sha256(lock.read_bytes()).hexdigest()
    assert fpm.image_provenance()["image_lock_sha256"] == expected
    gone = tmp_path / "gone.lock"
    monkeypatch.setenv("PRH_LOCK_FILE", str(gone))
    assert fpm.image_provenance()["image_lock_sha256"].startswith(f"missing: {gone} (")


def test_every_value_is_a_string_and_the_hash_covers_them(no_image, monkeypatch):
    fp = fpm.environment_fingerprint()
    required = {"python", "platform", "torch", "cuda", "cudnn", "gpu", "driver", "numpy",
                "transformers", "timm", "mlflow", "dvc", "image_digest", "hash"}
    assert required <= fp.keys()
    assert all(isinstance(v, str) and v for v in fp.values())
    assert fp["numpy"] == np.__version__
    assert len(fp["hash"]) == 12
    changed = dict(fp, image_digest=DIGEST)
    assert fpm.fingerprint_hash(changed) != fp["hash"]
    # the hash ignores its own entry
    assert fpm.fingerprint_hash(dict(fp, hash="x")) == fp["hash"]


def test_torch_cuda_matches_the_module():
    torch = pytest.importorskip("torch")
    tv = fpm.torch_versions()
    assert tv["torch"] == torch.__version__
    assert tv["cuda"] == (torch.version.cuda or "none (CPU build)")
    assert tv["cuda_devices"] == str(torch.cuda.device_count())


@pytest.mark.parametrize(("code", "text"), [(8906, "8.9.6"), (8100, "8.1.0"), (90100, "9.1.0"),
                                             (91002, "9.10.2"), (92400, "9.24.0")])
def test_cudnn_version_decoding(code, text):
    assert fpm.cudnn_version_string(code) == text


@given(st.integers(9, 99), st.integers(0, 99), st.integers(0, 99))
def test_cudnn_9_encoding_round_trips(major, minor, patch):
    code = 10000 * major + 100 * minor + patch
    assert fpm.cudnn_version_string(code) == f"{major}.{minor}.{patch}"


def test_parse_nvidia_smi_counts_gpus_and_keeps_distinct_drivers():
    csv = "NVIDIA H200, 570.86.15\nNVIDIA H200, 570.86.15\nNVIDIA A100-SXM4-80GB, 570.86.15\n"
    assert fpm.parse_nvidia_smi(csv) == {"gpu": "2 x NVIDIA H200; 1 x NVIDIA A100-SXM4-80GB",
                                         "driver": "570.86.15"}
    assert fpm.parse_nvidia_smi("Odd, Name, 1.0\nX, 2.0\n") == {"gpu": "1 x Odd, Name; 1 x X",
                                                               "driver": "1.0, 2.0"}
    assert fpm.parse_nvidia_smi("\n") == {"gpu": "none", "driver": "none"}


def test_gpu_inventory_reads_nvidia_smi(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, 'echo "NVIDIA H200, 575.51.03"')
    assert fpm.gpu_inventory() == {"gpu": "1 x NVIDIA H200", "driver": "575.51.03"}


def test_gpu_inventory_when_nvidia_smi_fails(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch,
                    'echo "NVIDIA-SMI has failed because it couldn\'t communicate" >&2; exit 9')
    out = fpm.gpu_inventory()
    assert out == {"gpu": "none (nvidia-smi: NVIDIA-SMI has failed because it couldn't "
                          "communicate)", "driver": "none"}


def test_gpu_inventory_without_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert fpm.gpu_inventory() == {"gpu": "none", "driver": "none"}


def test_package_version_of_a_missing_distribution():
    assert fpm.package_version("prh-no-such-distribution") == "not installed"
