"""`.ci/run` runs every slow test: a file that marks a test slow (a decorator, a `pytestmark`
list, a `pytest.param(..., marks=...)`) is named in one of its sections' pytest commands, since
the README's default command (`-m 'not slow'`) skips it and nothing else would ever run it
(test_matrix.py's and test_train.py's were in none until 2026-12)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "pytest.mark." + "slow"  # split so that this file does not mark itself


def test_every_file_with_a_slow_test_is_run_by_a_ci_section():
    commands = "\n".join(line for line in (ROOT / ".ci/run").read_text().splitlines()
                         if not line.lstrip().startswith("#"))
    named = set(re.findall(r"tests/(test_\w+\.py)", commands))
    slow = {p.name for p in (ROOT / "tests").glob("test_*.py") if MARK in p.read_text()}
    assert "test_matrix.py" in slow, "the search no longer finds how tests are marked slow"
    assert slow <= named, f"slow tests no .ci/run section runs: {sorted(slow - named)}"
