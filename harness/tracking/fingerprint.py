"""The environment fingerprint that MLflow tags and the report prints.

Every value is a string, so the dict goes straight into MLflow tags and JSON. It records what
moves numbers between reruns: Python, platform, torch with its CUDA and cuDNN builds, the GPUs
and driver (from `nvidia-smi`), the versions of the key libraries, and the pinned image (the
build arguments the Dockerfile copies into `PRH_*` variables). `hash` is a short digest of all
the other entries, so two runs in the same environment show the same hash.

The rerun article ("Our rerun") is the reason this exists: it could state its library versions
(torch 2.15 against the authors' PyTorch 2.11) only because someone wrote them down.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from collections import Counter
from importlib import metadata

from prh.io import file_sha256

NOT_IN_IMAGE = "not in the pinned image"
NONE = "none"

# Libraries whose versions change numbers or file formats (torch is read from the module itself).
PACKAGES = ("numpy", "scipy", "transformers", "tokenizers", "timm", "torchvision", "mlflow", "dvc")

# Fingerprint key -> variable the Dockerfile sets from its build arguments (docker/README.md).
IMAGE_VARIABLES = {
    "image_digest": "PRH_IMAGE_DIGEST",
    "image_git_commit": "PRH_GIT_COMMIT",
    "image_build_date": "PRH_BUILD_DATE",
    "image_base": "PRH_BASE_IMAGE",
}
# Set by the Dockerfile to the lock file it installed from; hashed at run time.
LOCK_VARIABLE = "PRH_LOCK_FILE"

NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]


def environment_fingerprint() -> dict[str, str]:
    """Return the fingerprint of this process's environment: str -> str, plus `hash`."""
    fp = {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        **torch_versions(),
        **gpu_inventory(),
        **{name: package_version(name) for name in PACKAGES},
        **image_provenance(),
    }
    fp["hash"] = fingerprint_hash(fp)
    return fp


def fingerprint_hash(fp: dict[str, str]) -> str:
    """First 12 hex digits of the SHA-256 of the sorted JSON of every entry but `hash`."""
    body = json.dumps({k: v for k, v in fp.items() if k != "hash"}, sort_keys=True)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:12]


def package_version(name: str) -> str:
    """Installed distribution version from its metadata (no import), or "not installed"."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def torch_versions() -> dict[str, str]:
    """torch, the CUDA it was built with (torch.version.cuda), cuDNN, and devices it sees."""
    try:
        import torch
    except ImportError:
        return {"torch": "not installed", "cuda": NONE, "cudnn": NONE, "cuda_devices": "0"}
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda or f"{NONE} (CPU build)",
        "cudnn": cudnn_version_string(cudnn) if cudnn else NONE,
        "cuda_devices": str(torch.cuda.device_count()),
    }


def cudnn_version_string(version: int) -> str:
    """Decode torch.backends.cudnn.version(): cuDNN >= 9 encodes 10000*major + 100*minor +
    patch (91002 -> 9.10.2); cuDNN 8 encodes 1000*major + 100*minor + patch (8906 -> 8.9.6)."""
    if version >= 90000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


def gpu_inventory() -> dict[str, str]:
    """GPU names and driver from `nvidia-smi`; "none" when it is absent or finds no GPU."""
    try:
        out = subprocess.run(NVIDIA_SMI_QUERY, capture_output=True, text=True, timeout=20)
    except (FileNotFoundError, PermissionError):
        return {"gpu": NONE, "driver": NONE}
    except subprocess.TimeoutExpired:
        return {"gpu": f"{NONE} (nvidia-smi timed out)", "driver": NONE}
    if out.returncode != 0:
        reason = (out.stderr or out.stdout).strip().splitlines()[:1] or [f"exit {out.returncode}"]
        return {"gpu": f"{NONE} (nvidia-smi: {reason[0]})", "driver": NONE}
    return parse_nvidia_smi(out.stdout)


def parse_nvidia_smi(csv_text: str) -> dict[str, str]:
    """Summarise `name, driver_version` lines: "2 x NVIDIA H200" and the distinct drivers."""
    rows = [line.rsplit(",", 1) for line in csv_text.splitlines() if line.strip()]
    rows = [(name.strip(), driver.strip()) for name, driver in (r for r in rows if len(r) == 2)]
    if not rows:
        return {"gpu": NONE, "driver": NONE}
    names = Counter(name for name, _ in rows)
    drivers = dict.fromkeys(driver for _, driver in rows)
    return {
        "gpu": "; ".join(f"{n} x {name}" for name, n in names.items()),
        "driver": ", ".join(drivers),
    }


def image_provenance() -> dict[str, str]:
    """The `PRH_*` build arguments of the pinned image and the SHA-256 of its lock file.

    Outside the image (the variables unset or empty) every entry says "not in the pinned
    image". Inside it, `PRH_IMAGE_DIGEST` may be empty when the build did not stamp it; the
    entry then says how to pass it at run time (an image cannot contain its own digest).
    """
    env = {key: os.environ.get(var, "").strip() for key, var in IMAGE_VARIABLES.items()}
    in_image = bool(env["image_base"])
    out = {key: value or NOT_IN_IMAGE for key, value in env.items()}
    if in_image and not env["image_digest"]:
        out["image_digest"] = ("unknown: run with -e PRH_IMAGE_DIGEST=$(docker image inspect "
                               "-f '{{.Id}}' IMAGE)")
    out["image_lock_sha256"] = lock_sha256(os.environ.get(LOCK_VARIABLE, "").strip())
    return out


def lock_sha256(path: str) -> str:
    """SHA-256 of the lock file the image was installed from; says so when it is missing."""
    if not path:
        return NOT_IN_IMAGE
    try:
        return file_sha256(path)
    except OSError as e:
        return f"missing: {path} ({e.strerror})"
