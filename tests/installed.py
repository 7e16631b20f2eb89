"""Test-only helper: the project as users install it, not editable. `fresh_install` builds the
wheel from a copy of this tree and installs it into a new venv outside the source tree; the
dependencies come from the venv running the tests through a .pth line (that venv's own .pth
files, the editable install's finder among them, are not run), so `import harness` finds the
installed copy. `pip install --target` leaves the running venv's own install untouched."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "prh", "harness", "reports/templates")


def build_wheel(tmp: Path) -> Path:
    """The project's wheel, built from a copy of the tree (no build/ left in the checkout)."""
    src, dist = tmp / "wheel-build" / "src", tmp / "wheel-build" / "dist"
    for item in SOURCES:
        (src / item).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / item).is_dir():
            shutil.copytree(ROOT / item, src / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / item, src / item)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(dist), str(src)], check=True)
    return next(dist.glob("prh_rerun-*.whl"))


def fresh_install(tmp: Path) -> Path:
    """A new venv holding the project's wheel only, with `harness` and `dvc` scripts on its own
    python (the script's folder, not the working directory, leads sys.path, as in the image)."""
    wheel, venv = build_wheel(tmp), tmp / "wheel-build" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(site), str(wheel)], check=True)
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = venv / "bin" / "python"
    for tool, entry in (("harness", "harness.cli:main"), ("dvc", "dvc.cli:main")):
        module, func = entry.split(":")
        script = venv / "bin" / tool
        script.write_text(f"#!{python}\nimport sys\nfrom {module} import {func}\n"
                          f"sys.exit({func}())\n")
        script.chmod(0o755)
    return venv
