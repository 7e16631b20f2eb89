"""The `harness` command line's manners: --version, examples in the top-level help, help text
for every option of every command, a quiet exit when the reader closes the pipe, and help that
imports none of the heavy libraries (bench/cli_help.py prints the wall times)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import COMMANDS, main
from prh import __version__

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "scipy", "mlflow", "matplotlib", "weasyprint", "jinja2", "pandas")
# stages whose modules import a heavy library before parsing (owned elsewhere, see the report)
EAGER = {"image", "audit"}


def help_of(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


def test_version_and_top_level_examples():
    assert help_of(["--version"]) == (0, f"harness {__version__}\n")
    code, text = help_of(["--help"])
    assert code == 0 and "examples:" in text and "harness run --check" in text
    assert all(name in text for name in COMMANDS)


def options_without_help(text: str) -> list[str]:
    """Options and positionals argparse prints with no help text: the invocation alone on its
    line (help follows after two spaces, or on the next line indented by 24 spaces)."""
    lines, bare, section = text.splitlines(), [], False
    for i, line in enumerate(lines):
        if line.endswith(":") and not line.startswith(" "):
            section = line in ("options:", "positional arguments:")
            continue
        if not section or not line.startswith("  ") or line.startswith("   "):
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if "  " not in line.strip() and not nxt.startswith(" " * 24):
            bare.append(line.strip())
    return bare


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_has_help_text(command):
    code, text = help_of([command, "--help"])
    assert code == 0 and text.startswith(f"usage: harness {command}")
    assert options_without_help(text) == []


def test_the_help_check_catches_an_option_without_help():
    import argparse

    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--level", type=float)
    parser.add_argument("--n-resamples-of-the-interval", type=int)
    parser.add_argument("--ok", help="documented")
    assert options_without_help(parser.format_help()) == [
        "--level LEVEL", "--n-resamples-of-the-interval N_RESAMPLES_OF_THE_INTERVAL"]


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - EAGER))
def test_help_imports_no_heavy_library(command):
    """`harness CMD --help` answers before torch, scipy, MLflow... load (each costs seconds)."""
    code = (f"import sys, contextlib, io\nfrom harness.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()): main([{command!r}, '--help'])\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout
    assert out.strip() == "[]"


def test_a_closed_pipe_ends_quietly():
    """`harness --help | head -0`: no BrokenPipeError traceback, exit 1 (Python's advice)."""
    script = "import sys; from harness.cli import main; sys.exit(main(['--help']))"
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 1 and err == ""


def test_a_write_fault_names_the_output_not_its_temp_file() -> None:
    from harness.cli import output_of

    assert output_of("/r/runs/.image.abcd1234.tmp/val.npz") == " /r/runs/image"
    assert output_of("/r/runs/.results.json.Ab3_x9zz.tmp") == " /r/runs/results.json"
    assert output_of("/r/runs/results.json") == " /r/runs/results.json"
    assert output_of(None) == ""
