"""The installed package renders its report: the wheel built from this tree, installed into a
fresh virtual environment outside the source tree, finds its templates (package data read with
importlib.resources) and writes the report from the fixture pipeline outputs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from installed import ROOT, build_wheel, fresh_install

FIX = ROOT / "tests" / "fixtures" / "pipeline"


def run(*cmd: str | Path, cwd: Path) -> str:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, f"{cmd}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def test_the_wheel_ships_the_templates_and_the_data_files(tmp_path):
    names = run(sys.executable, "-m", "zipfile", "-l", build_wheel(tmp_path), cwd=tmp_path)
    for name in ("harness/templates/report.html.j2", "harness/audit/claims.yaml",
                 "harness/config/provenance.yaml"):
        assert name in names, name


def test_wheel_installed_outside_the_tree_renders_the_report(tmp_path):
    venv = fresh_install(tmp_path)
    py = venv / "bin" / "python"
    work = tmp_path / "work"
    work.mkdir()
    where = run(py, "-c", "import harness, harness.report.render as r; print(harness.__file__); "
                "print(r.templates_dir())", cwd=work).split()
    assert all(str(ROOT) not in w and "site-packages" in w for w in where), where
    out = work / "report.html"
    run(py, "-m", "harness.cli", "report", "--results", FIX / "results.json",
        "--runs-dir", FIX / "align", "--theory", FIX / "theory.json",
        "--contamination", FIX / "contamination.json", "--audit", FIX / "audit.json",
        "--params", FIX / "params.yaml", "--provenance", FIX / "provenance.json",
        "--html", out, cwd=work)
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "Provenance</h2>" in html
