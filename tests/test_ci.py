"""`.ci/run` runs every slow test: a file holding a test marked slow is named in one of its
sections' pytest commands, since the README's default command (`-m 'not slow'`) skips it and
nothing else would ever run it (test_matrix.py's and test_train.py's were in none until
2026-12)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOW = re.compile(r"^\s*(@pytest\.mark\.slow\b|pytestmark = .*pytest\.mark\.slow\b)", re.M)


def test_every_file_with_a_slow_test_is_run_by_a_ci_section():
    named = set(re.findall(r"tests/(test_\w+\.py)", (ROOT / ".ci/run").read_text()))
    slow = {p.name for p in (ROOT / "tests").glob("test_*.py") if SLOW.search(p.read_text())}
    assert slow, "no slow test found: the pattern above no longer matches how they are marked"
    assert slow <= named, f"slow tests no .ci/run section runs: {sorted(slow - named)}"
