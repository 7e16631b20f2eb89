"""Wall time of `harness --help` and of every `harness COMMAND --help` (each a fresh process),
so the lazy imports' effect is measured, not asserted: python bench/cli_help.py"""

from __future__ import annotations

import subprocess
import sys
import time

from harness.cli import COMMANDS


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, check=True)
    return time.perf_counter() - start


if __name__ == "__main__":
    for argv in (["--help"], ["--version"], *([c, "--help"] for c in COMMANDS)):
        print(f"harness {' '.join(argv):<22} {wall(argv):6.2f} s")
