"""The installed package renders its report: the wheel built from this tree, installed into a
fresh virtual environment outside the source tree, finds its templates (package data read with
importlib.resources) and writes the report from the fixture pipeline outputs."""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "pipeline"
SOURCES = ("pyproject.toml", "README.md", "prh", "harness", "reports/templates")


def run(*cmd: str | Path, cwd: Path) -> str:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, f"{cmd}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def test_wheel_installed_outside_the_tree_renders_the_report(tmp_path):
    src = tmp_path / "src"
    for item in SOURCES:
        (src / item).parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (ROOT / item).is_dir() else shutil.copy2
        copy(ROOT / item, src / item)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
        "-w", tmp_path / "dist", src, cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("prh_rerun-*.whl"))
    names = run(sys.executable, "-m", "zipfile", "-l", wheel, cwd=tmp_path)
    assert "harness/templates/report.html.j2" in names and "harness/claims.yaml" in names

    env = tmp_path / "fresh"
    run(sys.executable, "-m", "venv", "--without-pip", env, cwd=tmp_path)
    py = env / "bin" / "python"
    fresh_site = Path(run(py, "-c", "import site; print(site.getsitepackages()[0])",
                          cwd=tmp_path).strip())
    # the wheel goes into the fresh environment; its dependencies come from this one's
    run(sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", fresh_site, wheel,
        cwd=tmp_path)
    (fresh_site / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    work = tmp_path / "work"
    work.mkdir()
    where = run(py, "-c", "import harness, harness.render as r; print(harness.__file__); "
                "print(r.templates_dir())", cwd=work).split()
    assert all(Path(w).is_relative_to(fresh_site) for w in where), where
    out = work / "report.html"
    run(py, "-m", "harness.cli", "report", "--results", FIX / "results.json",
        "--runs-dir", FIX / "align", "--theory", FIX / "theory.json",
        "--contamination", FIX / "contamination.json", "--audit", FIX / "audit.json",
        "--params", FIX / "params.yaml", "--provenance", FIX / "provenance.json",
        "--html", out, cwd=work)
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "Provenance</h2>" in html
