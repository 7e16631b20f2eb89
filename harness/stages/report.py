"""Stage `report`: the paper-vs-rerun report as one HTML file and a PDF of the same HTML
(context from harness.report, rendering by harness.report.render), also logged as MLflow artifacts
of the run that results.json names (the aggregate stage's run of the whole pipeline)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.stages.common import fail, stage_parser
from prh.io import ContractError, write_json, write_text

INPUTS = ("results", "theory", "contamination", "audit", "params", "provenance", "prepared",
          "probe", "plan")  # the file inputs --rev reads at the revision (and runs_dir, a folder)


def main(argv: list[str]) -> int:
    """Read the pipeline's files, write the report to --html and, with --pdf, print it."""
    args = report_parser().parse_args(argv)
    try:
        ctx = load(args)
    except ContractError as e:
        return fail(e)
    return write(args, ctx)


def report_parser() -> argparse.ArgumentParser:
    parser = stage_parser("report", main.__doc__)
    parser.add_argument("--results", type=Path, required=True, help="aggregate's results JSON")
    parser.add_argument("--runs-dir", type=Path, required=True, help="align stages' folder")
    parser.add_argument("--theory", type=Path, required=True, help="theory stage's JSON")
    parser.add_argument("--contamination", type=Path, required=True,
                        help="contamination stage's JSON")
    parser.add_argument("--audit", type=Path, required=True, help="audit stage's JSON")
    parser.add_argument("--provenance", type=Path, default=None,
                        help="JSON/YAML list of {key, value, source, citation} (default: "
                             "built from --params by harness.config.provenance)")
    parser.add_argument("--prepared", type=Path, default=None,
                        help="the prepare stage's summary.json, whose data-check warnings the "
                             "first page shows")
    parser.add_argument("--probe", type=Path, default=None,
                        help="the probe stage's JSON (SIGReg-weight sweep, determinism); "
                             "without it those panels say 'not run'")
    parser.add_argument("--claims", type=Path, default=None,
                        help="the claims registry the audit judged (default: the package's)")
    parser.add_argument("--plan", type=Path, default=None,
                        help="the registered seed plan (runs/plan.json); without it the plan's "
                             "section says 'not run'")
    parser.add_argument("--html", type=Path, required=True, help="the HTML report to write")
    parser.add_argument("--pdf", type=Path, default=None, help="the PDF report to write")
    parser.add_argument("--checklist", type=Path, default=None,
                        help="the reproducibility checklist as JSON (prh.checklist/1)")
    parser.add_argument("--rev", default=None, help="read every input as it was at this git "
                        "revision or DVC experiment name (through DVC: outputs from the cache), "
                        "so an experiment's report needs no checkout; nothing is logged to "
                        "MLflow then")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when a section is absent, a run file mismatches or the "
                             "PDF runs off a page (for CI)")
    return parser


def load(args: argparse.Namespace) -> dict[str, Any]:
    """The report's context from the files `args` names (at --rev when given)."""
    from harness.audit.claims import REGISTRY
    from harness.report.context import ReportPaths, build_context

    with tempfile.TemporaryDirectory(prefix="harness-report-") as tmp:
        if args.rev is not None:
            inputs_at(args, args.rev, Path(tmp))
        return build_context(ReportPaths(args.results, args.runs_dir, args.theory,
                                         args.contamination, args.audit, args.params,
                                         args.provenance, args.prepared, args.probe,
                                         args.claims or REGISTRY, args.plan))


def write(args: argparse.Namespace, ctx: dict[str, Any]) -> int:
    """Warnings to stderr, the HTML, the PDF, the checklist, the MLflow artifacts; 1 under
    --strict when anything is missing or runs off a page."""
    from harness.report.render import render, write_pdf
    from harness.tracking import mlflow_runs as tracking

    for w in ctx["warnings"]:
        print(f"harness report: warning: {w}", file=sys.stderr)
    for a in ctx["summary"]["absent"]:
        print(f"harness report: section {a['section']} absent: {a['path']} ({a['reason']}); "
              f"written by {a['stage']}", file=sys.stderr)
    html = render(ctx)
    write_text(args.html, html)
    off = write_pdf(html, args.pdf) if args.pdf is not None else []
    for line in off:
        print(f"harness report: warning: {args.pdf} {line}", file=sys.stderr)
    if args.checklist is not None:
        write_json(args.checklist, ctx["checklist"])
    if ctx["mlflow_run_id"] and args.rev is None:
        tracking.log_artifacts([p for p in (args.html, args.pdf, args.checklist) if p],
                               ctx["mlflow_run_id"])
    return 1 if args.strict and (ctx["warnings"] or ctx["summary"]["absent"] or off) else 0


def inputs_at(args: argparse.Namespace, rev: str, tmp: Path) -> None:
    """Point `args`' inputs at copies, under `tmp`, of the files as they were at `rev`
    (harness.compare.revs: a commit, branch, tag or DVC experiment name); a file absent there
    stays absent, so its section says so."""
    from harness.compare.revs import Files

    files, here = Files(rev), Path.cwd().resolve()

    def relative(path: Path) -> Path:
        if not path.is_absolute():
            return path
        if not path.resolve().is_relative_to(here):
            raise ContractError(f"--rev {rev}: {path} lies outside the repository here "
                                f"({here}); give the repository's relative paths")
        return path.resolve().relative_to(here)

    def fetch(rel: Path) -> Path:
        raw = files.read(rel.as_posix())
        if raw is not None:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(raw)
        return tmp / rel

    for name in INPUTS:
        if getattr(args, name) is not None:
            setattr(args, name, fetch(relative(getattr(args, name))))
    runs = relative(args.runs_dir)
    for name in files.names(runs.as_posix()):
        fetch(runs / name)
    args.runs_dir = tmp / runs
