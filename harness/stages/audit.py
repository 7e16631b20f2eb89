"""Stage `audit`: the claims registry against the reproduced numbers, one verdict per claim
with its evidence (harness.audit.judge; margins from params.yaml, checked when it is read)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from harness.config.params import load_params
from harness.records.schemas import REFERENCE, RESULTS, THEORY, Schema
from harness.stages.common import fail, stage_parser
from prh.io import ContractError, file_sha256, read_json, write_json


def read_optional(path: Path | None, schema: Schema) -> Any:
    """A pipeline file's content checked against its schema, or None when that stage has not
    written it (or no path is given)."""
    return schema.check(read_json(path), str(path)) if path and path.exists() else None


def data_label(profile: str, results: Any) -> str:
    """What the run measured on, as the audit compares it with a claim's data set: the profile,
    or, when the prepare stage found the data differing from the published split (fewer test
    photos, other captions per photo), a label saying so, so that no claim about the published
    data set is taken as reproduced on a variant of it."""
    warnings = (results or {}).get("data_warnings") or []
    if not warnings:
        return profile
    return f"{profile} variant ({len(warnings)} difference(s) from the published split)"


def main(argv: list[str]) -> int:
    """Audit --claims against --results, --theory and --contamination under --params; write
    the verdicts to --out."""
    from harness.audit.claims import load_registry
    from harness.audit.gate import check_params_hash, gate, parse_fail_on
    from harness.audit.judge import audit
    from harness.audit.rules import Context

    parser = stage_parser("audit", main.__doc__)
    parser.add_argument("--claims", type=Path, required=True, help="claims registry (YAML)")
    parser.add_argument("--results", type=Path, help="aggregate's results JSON")
    parser.add_argument("--theory", type=Path, help="theory stage's JSON")
    parser.add_argument("--contamination", type=Path, help="contamination stage's JSON")
    parser.add_argument("--reference", type=Path, help="the reference stage's scores of public "
                        "encoders (runs/reference/wit1024.json); absent: their claims are not "
                        "rerun")
    parser.add_argument("--out", type=Path, required=True, help="audit JSON")
    parser.add_argument("--fail-on", default="", help="exit 1 when one of these occurs "
                        "(comma-separated: differs, arithmetic, ambiguous, inconclusive, "
                        "not-seen), for CI gates")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params)
        results = read_optional(args.results, RESULTS)
        if results is not None:
            check_params_hash(results, params.hash, str(args.results))
        fail_on = parse_fail_on(args.fail_on)
        registry = load_registry(args.claims)
        scores = read_optional(args.reference, REFERENCE)
        profile = "wit1024" if results is None and scores else data_label(params.profile,
                                                                          results)
        doc = audit(registry, Context(registry.claims, profile, results,
                                      read_optional(args.theory, THEORY),
                                      margins=params.margins, reference=scores))
    except ContractError as e:
        return fail(e)
    inputs = [args.claims, args.results, args.theory, args.contamination, args.reference,
              args.params]
    doc["inputs"] = {str(p): file_sha256(p) for p in inputs if p and p.exists()}
    write_json(args.out, doc)
    for verdict, count in doc["summary"].items():
        print(f"{verdict:<38} {count}")
    print(f"wrote {args.out}")
    tripped = gate(doc, fail_on)
    if tripped:
        print(f"audit: --fail-on {','.join(tripped)} tripped", file=sys.stderr)
    return 1 if tripped else 0
