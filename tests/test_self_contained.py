"""The repository stands alone: no tracked file cites a file that a clone does not have.

The team's shared folder (research notes, the two articles' texts, the design notes) and its
issue tracker are not part of a clone, so code, docs, configs and tests state the fact they
rest on, and docs/sources.md gives its source. `BANNED` matches what pointed outside:

- `../shared`, `shared/research`, `shared/articles`: the shared folder and its parts;
- `<name>-anchors`, `anchors-<year>`, `feasibility.md`, `DESIGN.md`: the notes by name;
- the two article files, by the hash part of their names;
- `issue 7` / `Issues 3`: our own tracker's numbers, written without `#`. Upstream references
  keep theirs: `WeasyPrint issue #1553`, `lightly-ai/lightly issue #1920`, `pytorch #64947`
  and `.../issues/123` URLs put `#` or `/` before the number, so they do not match.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BANNED = re.compile(
    r"\.\./shared|shared/(?:research|articles)"
    r"|\b[\w-]+-anchors\b|\banchors-\d{4}|\bfeasibility\.md|\bDESIGN\.md"
    r"|000_03f36f523aa97921|001_3694a0dfbde3a8c0"
    r"|\b[Ii]ssues? \d"
)


def references(path: Path) -> list[tuple[int, str]]:
    """(line number, match) of every banned reference in `path`; [] for a binary file."""
    data = path.read_bytes()
    if b"\0" in data:
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return []
    return [(i, m.group(0)) for i, line in enumerate(text.splitlines(), 1)
            for m in BANNED.finditer(line)]


def tracked_files() -> list[Path]:
    """Every file git tracks that exists in the work tree, this test module left out."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no tracked files to scan")
    paths = (ROOT / p for p in out.decode("utf-8").split("\0") if p)
    return [p for p in paths if p.is_file() and p != Path(__file__).resolve()]


def test_no_tracked_file_cites_a_file_a_clone_lacks():
    files = tracked_files()
    assert files
    hits = [f"{path.relative_to(ROOT)}:{line}: {match}"
            for path in files for line, match in references(path)]
    assert not hits, "references to files a clone lacks:\n" + "\n".join(hits)


@pytest.mark.parametrize("line, banned", [
    ("see ../shared/research/notes.md", True),
    ("(method-anchors.md 1.1)", True),
    ("harness-anchors 2.4 says so", True),
    ("anchors-2026-12.md, section 4", True),
    ("feasibility.md, row 5c", True),
    ('DESIGN.md, "Profiles"', True),
    ("the rerun article, 000_03f36f523aa97921.txt", True),
    ("TARGET = 600  # issue 3: <= 10 minutes", True),
    ("(Issue 12)", True),
    ("WeasyPrint issue #1553 fixed it", False),
    ("lightly-ai/lightly issue #1920 / PR #1923", False),
    ("https://github.com/iterative/dvc/issues/10408", False),
    ("torch.quantile fails on large inputs (pytorch #64947)", False),
    ('<text text-anchor="middle">', False),
])
def test_the_guard_names_file_and_line_of_a_reference(tmp_path, line, banned):
    path = tmp_path / "module.py"
    path.write_text(f'"""A docstring."""\n\n# {line}\n', encoding="utf-8")
    hits = references(path)
    assert bool(hits) == banned
    if banned:
        assert hits[0][0] == 3 and hits[0][1] in line


def test_binary_files_are_not_scanned(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\0\x01../shared/research\0")
    assert references(path) == []
