"""Stage `audit`: the claims registry against the reproduced numbers, one verdict per claim
with its evidence (harness.audit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prh.io import ContractError, file_sha256, read_json, write_json

from ..params import load_params
from .common import fail, stage_parser


def read_optional(path: Path) -> Any:
    """A pipeline file's content, or None when that stage has not written it."""
    return read_json(path) if path.exists() else None


def main(argv: list[str]) -> int:
    """Audit --claims against --results, --theory and --contamination under --params; write
    the verdicts to --out."""
    from ..audit import Context, audit, check_params_hash
    from ..claims import load_claims

    parser = stage_parser("audit", main.__doc__)
    parser.add_argument("--claims", type=Path, required=True, help="claims registry (YAML)")
    parser.add_argument("--results", type=Path, required=True, help="aggregate's results JSON")
    parser.add_argument("--theory", type=Path, required=True, help="theory stage's JSON")
    parser.add_argument("--contamination", type=Path, required=True,
                        help="contamination stage's JSON")
    parser.add_argument("--out", type=Path, required=True, help="audit JSON")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params, validate=False)
        results = read_optional(args.results)
        if results is not None:
            check_params_hash(results, params.hash, str(args.results))
        claims = load_claims(args.claims)
        doc = audit(claims, Context(claims, params.profile, results,
                                    read_optional(args.theory)))
    except ContractError as e:
        return fail(e)
    inputs = [args.claims, args.results, args.theory, args.contamination, args.params]
    doc["inputs"] = {str(p): file_sha256(p) for p in inputs if p.exists()}
    write_json(args.out, doc)
    for verdict, count in doc["summary"].items():
        print(f"{verdict:<17} {count}")
    bad = [r for r in doc["arithmetic"] if r["status"] != "holds"]
    print(f"arithmetic: {len(doc['arithmetic'])} checks, {len(bad)} not holding at printed "
          f"precision; wrote {args.out}")
    return 0
