"""The CI gate on an audit document (`--fail-on`, names in harness.records.verdicts) and the
params-hash check of its inputs.

The rerun's own findings trip the gate as they stand. The articles' printed numbers are the same
on every rerun of one registry, so their checks trip it only as a change against a baseline
audit (another run's reports/audit.json, a file or `rev:REV`); without one they are counted in a
note, never gated. Every tripping item is named: `NAME: ID: what`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.audit.claims import AuditError
from harness.records.schemas import Results
from harness.records.verdicts import (
    AUDIT,
    FAIL_ON,
    GATE_PRINTED,
    GATE_VERDICTS,
    RERUN_CHECKS,
    Audit,
    gist,
)
from prh.io import read_json

Doc = Mapping[str, Any]
AUDIT_PATH = "reports/audit.json"  # the audit stage's output in dvc.yaml (tests/test_audit.py)
RECAP_AUDIT_PATH = "runs/recap_audit.json"  # pipelines/recap/dvc.yaml's audit stage output


def load_baseline(spec: str, path: str = AUDIT_PATH) -> Audit:
    """The baseline audit `spec` names: a file, or `rev:REV` (a commit, branch, tag or DVC
    experiment name), whose audit at `path` (reports/audit.json; the recap profile's
    RECAP_AUDIT_PATH) is read through DVC (harness.compare.diff)."""
    if not spec.startswith("rev:"):
        return AUDIT.check(read_json(Path(spec)), spec)
    from harness.compare.revs import Files

    files = Files(spec[len("rev:"):])
    raw = files.read(path)
    where = files.where(path)
    if raw is None:
        raise AuditError(f"--baseline {spec}: {where} is absent (no audit was run and committed "
                         "there, or the DVC cache lacks it: `dvc pull`); name another revision")
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise AuditError(f"{where}: not valid JSON; name another revision") from e
    # a past revision's audit: rerunning the audit here would not mend it
    return AUDIT.check(doc, where, error=AuditError, fix="an audit this code does not read; "
                       "name another revision, or rerun the audit there and commit it")


def parse_fail_on(text: str) -> frozenset[str]:
    """`differs,arithmetic` -> the names; an unknown name raises listing the known ones."""
    names = frozenset(x.strip() for x in text.split(",") if x.strip())
    unknown = sorted(names - set(FAIL_ON))
    if unknown:
        raise AuditError(f"--fail-on: unknown name(s) {unknown}; choose from {list(FAIL_ON)}")
    return names


def _printed(check: Mapping[str, Any]) -> bool:
    return check["check"] not in RERUN_CHECKS


def _statuses(doc: Doc) -> dict[str, str]:
    return {c["id"]: c["status"] for c in doc.get("arithmetic", [])}


def require_baseline(fail_on: Iterable[str], baseline: Doc | None) -> None:
    """Refuse `--fail-on changed` without a baseline to compare with (AuditError)."""
    if "changed" in set(fail_on) and baseline is None:
        raise AuditError("--fail-on changed: needs a baseline audit to compare with; pass "
                         "--baseline reports/audit.json (a saved copy) or --baseline rev:REV")


def gate(doc: Doc, fail_on: Iterable[str], baseline: Doc | None = None) -> list[str]:
    """One line per item that trips a `--fail-on` name, `NAME: ID: what` (empty: the gate
    passes). `changed` needs `baseline`; without it, `arithmetic` and `ambiguous` look only at
    the rerun's own checks."""
    names = set(fail_on)
    require_baseline(names, baseline)
    verdict_names, printed_names = names & set(GATE_VERDICTS), names & set(GATE_PRINTED)
    out = []
    for row in doc.get("claims", []):
        for name in verdict_names:
            if row["verdict"] in GATE_VERDICTS[name]:
                out.append(f"{name}: {row['id']}: {row['verdict']} ({gist(row['reason'])})")
    if "at-chance" in names:
        for arm, metrics in sorted((doc.get("at_chance") or {}).items()):
            out.append(f"at-chance: arm {arm}: at chance on {', '.join(sorted(metrics))}")
    before = _statuses(baseline) if baseline is not None else {}
    for check in doc.get("arithmetic", []):
        for name in printed_names:
            if check["status"] != GATE_PRINTED[name]:
                continue
            if not _printed(check):
                readers = ", ".join(check.get("claims") or []) or "no claim"
                out.append(f"{name}: {check['id']}: the rerun's {check['check']} "
                           f"{check['status']} ({check.get('detail', '')}); read by {readers}")
            elif baseline is not None and before.get(check["id"]) != check["status"]:
                was = before.get(check["id"], "absent")
                out.append(f"{name}: {check['id']}: {check['check']} {check['status']}, "
                           f"{was} in the baseline")
    if "changed" in names and baseline is not None:
        out += _changes(doc, baseline)
    return out


def _changes(doc: Doc, baseline: Doc) -> list[str]:
    """Every claim whose verdict and every check whose status differs from the baseline's,
    every claim one side has and the other lacks, and every check the baseline had that is gone
    or that is new and does not hold (a check added by newer code that holds is no change)."""
    verdicts = {r["id"]: r["verdict"] for r in doc.get("claims", [])}
    was = {r["id"]: r["verdict"] for r in baseline.get("claims", [])}
    out = [f"changed: {cid}: {was.get(cid, 'absent')} -> {verdicts.get(cid, 'absent')}"
           for cid in sorted(set(verdicts) | set(was)) if verdicts.get(cid) != was.get(cid)]
    now, before = _statuses(doc), _statuses(baseline)
    return out + [f"changed: {cid}: {before.get(cid, 'absent')} -> {now.get(cid, 'absent')}"
                  for cid in sorted(set(now) | set(before)) if now.get(cid) != before.get(cid)
                  and not (cid not in before and now[cid] in ("holds", "informational"))]


def ungated(doc: Doc, fail_on: Iterable[str], baseline: Doc | None) -> str | None:
    """What the gate did not look at: without a baseline, the articles' printed numbers whose
    checks fail or are ambiguous (constant across reruns of one registry), in one line."""
    names = set(fail_on) & set(GATE_PRINTED)
    if baseline is not None or not names:
        return None
    counts = {name: sum(1 for c in doc.get("arithmetic", [])
                        if _printed(c) and c["status"] == GATE_PRINTED[name]) for name in names}
    words = {"arithmetic": "fail", "ambiguous": "are ambiguous"}
    found = ", ".join(f"{n} {words[name]}" for name, n in sorted(counts.items()) if n)
    return (None if not found else
            f"not gated: checks of the articles' printed numbers ({found}; the same on every "
            "rerun of this registry); --baseline FILE|rev:REV gates their changes")


def add_gate_args(parser: argparse.ArgumentParser) -> None:
    """--fail-on and --baseline, as `harness audit` and `harness run` take them."""
    parser.add_argument("--fail-on", default="", help="exit 1 naming each claim or check that "
                        f"trips one of these (comma-separated: {', '.join(FAIL_ON)}), for CI "
                        "gates; the articles' printed numbers trip it only as a change against "
                        "--baseline")
    parser.add_argument("--baseline", metavar="FILE|rev:REV", help="a baseline audit (an earlier "
                        f"run's {AUDIT_PATH}, or rev:REV, a commit or DVC experiment name) for "
                        "--fail-on changed, arithmetic and ambiguous")


def report_gate(prog: str, tripped: list[str], note: str | None) -> int:
    """Print each tripped item and what was not gated (stderr); 1 when anything tripped."""
    if note:
        print(f"{prog}: {note}", file=sys.stderr)
    for line in tripped:
        print(f"{prog}: gate: {line}", file=sys.stderr)
    if tripped:
        print(f"{prog}: --fail-on tripped by {len(tripped)} item(s)", file=sys.stderr)
    return 1 if tripped else 0


def check_params_hash(results: Results, expected: str, path: str) -> None:
    """Refuse a metrics file produced under other params than the ones being audited."""
    got = results.get("params_hash")
    if got != expected:
        raise AuditError(f"{path}: params hash {got} differs from the expected {expected} "
                         "(params.yaml); rerun the pipeline (`dvc repro`) or pass the params "
                         "file the results were produced with")
