"""Every file format the stages hand each other, as a name and a version. A writer stamps
`str(SCHEMA)`; a reader calls `SCHEMA.check`, which refuses a file of another format or
version with the line that fixes it (rerun the stage that writes it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prh.io import ContractError


@dataclass(frozen=True)
class Schema:
    """A format (`prh.results`) at a version (1), written as `prh.results/1`; `stage` is the
    DVC stage that writes it."""

    name: str
    version: int
    stage: str

    def __str__(self) -> str:
        return f"{self.name}/{self.version}"

    def problem(self, found: Any) -> str | None:
        """None when `found` (a file's `schema` field) is this one, else what is wrong."""
        if found == str(self):
            return None
        name, _, version = str(found).rpartition("/")
        if name == self.name:
            return f"version {version} of {self.name}, this code reads version {self.version}"
        return f"schema {found!r}, expected {str(self)!r}"

    def check(self, doc: Any, where: str, stage: str | None = None) -> dict[str, Any]:
        """`doc` when it is a mapping stamped with this schema; else ContractError naming
        `where` and the stage to rerun (`stage`, default this format's own)."""
        found = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
        problem = self.problem(found)
        if problem:
            raise ContractError(f"{where}: {problem}; rerun `dvc repro {stage or self.stage}`")
        return dict(doc)


ARM_TRAIN = Schema("prh.arm_train", 1, "config@ARM")  # runs/config/ARM.json
RUN = Schema("prh.metrics", 2, "align@ARM-SEED")  # runs/align/ARM-sSEED.json
PER_QUERY = Schema("prh.per_query", 1, "align@ARM-SEED")  # runs/align/ARM-sSEED.npz
RESULTS = Schema("prh.results", 2, "aggregate")  # runs/results.json
AUDIT = Schema("prh.audit", 1, "audit")  # reports/audit.json
THEORY = Schema("prh.theory", 1, "theory")  # runs/theory.json
PROBE = Schema("prh.probe", 1, "probe")  # runs/probe.json
CONTAMINATION = Schema("harness.contamination", 1, "contamination")  # runs/contamination.json
CHECKLIST = Schema("prh.checklist", 1, "report")  # reports/checklist.json
REFERENCE = Schema("prh.reference", 2, "reference")  # runs/reference/wit1024.json
RECAP_SUBSET = Schema("prh.recap_subset", 1, "recap")  # data/recap/subset/summary.json
RECAP_RUN = Schema("prh.recap_run", 1, "recap_train")  # runs/recap/ARM/run.json
RECAP_PARAPHRASE = Schema("prh.recap_paraphrase", 1, "recap_paraphrase")  # data/recap/paraphrase
RECAP_SCORES = Schema("prh.recap_scores", 3, "recap_score")  # runs/recap_scores.json
DIFF = Schema("prh.diff", 1, "")  # `harness diff --format json`: no stage writes it
