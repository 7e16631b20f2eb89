"""Stage `audit`: the claims registry against the reproduced numbers, one verdict per claim
with its evidence (harness.audit.judge; margins from params.yaml, checked when it is read)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.audit.gate import (
    AUDIT_PATH,
    add_gate_args,
    check_params_hash,
    gate,
    load_baseline,
    parse_fail_on,
    report_gate,
    ungated,
)
from harness.config.params import load_params, web_text_margins
from harness.records.schemas import (
    RECAP_SCORES,
    REFERENCE,
    RESULTS,
    THEORY,
    Record,
    Schema,
)
from harness.records.verdicts import family_line
from harness.stages.common import fail, stage_parser
from prh.io import ContractError, file_sha256, read_json, write_json


def maybe_path(text: str) -> Path | None:
    """An input path; '' for none (the evaluation-only pipeline's audit reads no training run)."""
    return Path(text) if text else None


def read_optional(path: Path | None, schema: Schema[Record]) -> Record | None:
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
    """Audit --claims against --results, --theory and --contamination under --params (by
    default the files the pipeline's audit stage reads); write the verdicts to --out, if given;
    with --fail-on, exit 1 naming every claim or check that trips the gate."""
    from harness.audit.judge import audit

    args = audit_parser().parse_args(argv)
    try:
        fail_on = parse_fail_on(args.fail_on)
        baseline = load_baseline(args.baseline) if args.baseline else None
        registry, ctx = audit_inputs(args)
        plan, ledger = study_inputs(args, ctx)
        doc = audit(registry, ctx, plan, ledger)
        tripped = gate(doc, fail_on, baseline)
    except ContractError as e:
        return fail(e)
    inputs = [args.claims, args.results, args.theory, args.contamination, args.reference,
              args.web_text, args.params, args.plan, args.looks]
    doc["inputs"] = {str(p): file_sha256(p) for p in inputs if p and p.exists()}
    for verdict, count in doc["summary"].items():
        print(f"{verdict:<38} {count}")
    print(family_line(doc))
    if doc.get("sequential"):
        print(look_line(doc["sequential"]))
    if args.out:
        write_json(args.out, doc)
        print(f"wrote {args.out}")
    return report_gate("audit", tripped, ungated(doc, fail_on, baseline))


def audit_inputs(args: argparse.Namespace) -> tuple[Any, Any]:
    """(the registry, the audit's Context): the web-text scores (the recap profile, with no
    training profile's params), else params.yaml, results.json checked against it, and the
    reference scores (the wit1024 profile when there are no results)."""
    from harness.audit.claims import load_registry
    from harness.audit.rules import Context

    web_text = read_optional(args.web_text, RECAP_SCORES)
    if web_text is not None:
        profile, margins, results = "recap", web_text_margins(args.params), None
    else:
        params = load_params(args.params)
        results = read_optional(args.results, RESULTS)
        if results is not None:
            check_params_hash(results, params.hash, str(args.results))
        profile, margins = data_label(params.profile, results), params.margins
    registry = load_registry(args.claims)
    scores = read_optional(args.reference, REFERENCE)
    if results is None and scores and web_text is None:
        profile = "wit1024"
    return registry, Context(registry.claims, profile, results, read_optional(args.theory, THEORY),
                             margins=margins, reference=scores, web_text=web_text)


def study_inputs(args: argparse.Namespace, ctx: Any) -> tuple[Any, Any]:
    """(the registered plan, the ledger of its looks) when the run has results and --plan
    exists, else (None, None); ContractError for a plan of another profile."""
    from harness.audit.looks import read_ledger
    from harness.audit.plan import check_plan

    if ctx.results is None or not args.plan or not args.plan.exists():
        return None, None
    plan = check_plan(read_json(args.plan), str(args.plan))
    profile = ctx.results.get("profile")
    if plan["profile"] != profile:
        raise ContractError(f"{args.plan}: the {plan['profile']} profile's plan, the results are "
                            f"the {profile} profile's; rerun `dvc repro plan`")
    return plan, read_ledger(args.looks) if args.looks else None


def look_line(seq: dict[str, Any]) -> str:
    """One line: which look of which plan, and how many planned claims stand where."""
    from harness.audit.looks import summary

    counts = ", ".join(f"{n} {s}" for s, n in summary(seq).items() if n)
    where = (f"look {seq['look']} of {len(seq['looks'])} ({seq['seeds']} seeds per arm)"
             if seq["look"] else f"{seq['seeds']} seeds per arm, no look of the plan")
    nxt = (f"; next: {seq['next_seeds']} seeds for {', '.join(seq['continuing_arms'])} "
           "(`harness next`)" if seq["next_seeds"] else "")
    return f"plan {seq['plan_hash']}, {where}: {counts}{nxt}"


def audit_parser() -> argparse.ArgumentParser:
    """`harness audit`'s options; the input paths default to those dvc.yaml's audit stage gives."""
    parser = stage_parser("audit", main.__doc__)
    parser.add_argument("--claims", type=Path, default=Path("harness/audit/claims.yaml"),
                        help="claims registry (YAML; default: %(default)s)")
    parser.add_argument("--results", type=maybe_path, default=Path("runs/results.json"),
                        help="aggregate's results JSON (default: %(default)s; '' for none)")
    parser.add_argument("--theory", type=maybe_path, default=Path("runs/theory.json"),
                        help="theory stage's JSON (default: %(default)s)")
    parser.add_argument("--contamination", type=maybe_path,
                        default=Path("runs/contamination.json"),
                        help="contamination stage's JSON (default: %(default)s)")
    parser.add_argument("--reference", type=Path, help="the reference stage's scores of public "
                        "encoders (runs/reference/wit1024.json); absent: their claims are not "
                        "rerun")
    parser.add_argument("--web-text", type=maybe_path, default=None,
                        help="the recap profile's scores (runs/recap_scores.json): the web-text "
                             "claims judged on its runs, the training profile's results unread")
    parser.add_argument("--plan", type=maybe_path, default=Path("runs/plan.json"),
                        help="the registered seed plan (`harness plan`; default: %(default)s; "
                             "'' for none): the run is judged as a look of its study")
    parser.add_argument("--looks", type=maybe_path, default=Path("runs/looks.json"),
                        help="the ledger of the plan's looks taken (`harness next`; default: "
                             "%(default)s)")
    parser.add_argument("--out", type=Path, help="audit JSON to write (the pipeline's: "
                        f"{AUDIT_PATH}); absent: the verdicts are only counted and gated")
    add_gate_args(parser)
    return parser
