"""The container's Python layer without Docker: the project installed as a wheel (not
editable) into a fresh Python 3.11 venv, its dependencies from this CI venv (the CPU
equivalent of the image's 3.2 GB CUDA lock, which tests/test_docker.py checks statically),
then the image's entrypoint runs the world pipeline in a clone of a source snapshot through to
the report. Slow: `.ci/run`'s "container" section runs it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import tiny_world
from installed import fresh_install

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def test_world_pipeline_runs_through_the_installed_package_and_the_entrypoint(tmp_path):
    venv = fresh_install(tmp_path)
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import harness, prh; print(harness.__file__, prh.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert str(ROOT) not in where and "site-packages" in where
    src = tiny_world.copy_project(tmp_path / "src")  # the image's snapshot (tiny params)
    runs = tmp_path / "runs"
    runs.mkdir()
    env = tiny_world.env(PATH=f"{venv / 'bin'}:/usr/bin:/bin", PRH_SRC_DIR=str(src),
                         PRH_RUNS_DIR=str(runs), PRH_DATA_DIR=str(tmp_path / "data"))
    out = subprocess.run(["bash", str(ROOT / "docker" / "entrypoint.sh"), "world"], env=env,
                         capture_output=True, text=True, cwd=runs, timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "reports in" in out.stderr
    tiny_world.check_entrypoint_run(runs)
