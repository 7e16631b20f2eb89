"""The CI gate on an audit document (`--fail-on`) and the params-hash check of its inputs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.audit.claims import (
    AuditError,
)
from harness.records.verdicts import FAIL_ON


def parse_fail_on(text: str) -> frozenset[str]:
    """`differs,arithmetic` -> the names; an unknown name raises listing the known ones."""
    names = frozenset(x.strip() for x in text.split(",") if x.strip())
    unknown = sorted(names - set(FAIL_ON))
    if unknown:
        raise AuditError(f"--fail-on: unknown name(s) {unknown}; choose from {sorted(FAIL_ON)}")
    return names


def gate(doc: Mapping[str, Any], fail_on: Iterable[str]) -> list[str]:
    """The `--fail-on` names that the audit document trips (for CI: exit non-zero if any)."""
    summary = doc.get("summary", {})
    return sorted(name for name in fail_on if any(summary.get(k, 0) for k in FAIL_ON[name]))


def check_params_hash(results: Mapping[str, Any], expected: str, path: str) -> None:
    """Refuse a metrics file produced under other params than the ones being audited."""
    got = results.get("params_hash")
    if got != expected:
        raise AuditError(f"{path}: params hash {got} differs from the expected {expected} "
                         "(params.yaml); rerun the pipeline (`dvc repro`) or pass the params "
                         "file the results were produced with")
