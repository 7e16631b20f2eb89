"""The README's table of the audit's words is the code's vocabulary: every verdict and every
relation status has its row, no row names a word the audit does not use, and every example
names a claim or relation of the registry."""

from __future__ import annotations

import re
from pathlib import Path

from harness.audit.claims import load_registry
from harness.records.verdicts import STATUSES, VERDICTS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def table(header: str) -> dict[str, str]:
    """First column -> example column of the README table whose header starts with `header`."""
    block = README.split(f"| {header} |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1:-1] for line in block.splitlines()[2:]]
    return {cells[0].strip(): cells[-1].strip() for cells in rows}


def test_every_verdict_and_status_is_defined_once_with_a_registry_example() -> None:
    verdicts, statuses = table("verdict"), table("relation status")
    assert list(verdicts) == list(VERDICTS)
    assert list(statuses) == list(STATUSES)
    reg = load_registry()
    known = set(reg.claims) | {r.id for r in reg.relations}
    for example in [*verdicts.values(), *statuses.values()]:
        (name,) = re.findall(r"`([a-z0-9_]+)`", example)[:1]
        assert name in known, example
