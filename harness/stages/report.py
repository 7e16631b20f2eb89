"""Stage `report`: the paper-vs-rerun report as one HTML file and a PDF of the same HTML
(context from harness.report, rendering by harness.report.render), also logged as MLflow artifacts
of the run that results.json names (the aggregate stage's run of the whole pipeline)."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.stages.common import stage_parser
from prh.io import write_json, write_text


def main(argv: list[str]) -> int:
    """Read the pipeline's files, write the report to --html and, with --pdf, print it."""
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
    parser.add_argument("--html", type=Path, required=True, help="the HTML report to write")
    parser.add_argument("--pdf", type=Path, default=None, help="the PDF report to write")
    parser.add_argument("--checklist", type=Path, default=None,
                        help="the reproducibility checklist as JSON (prh.checklist/1)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when a section is absent, a run file mismatches or the "
                             "PDF runs off a page (for CI)")
    args = parser.parse_args(argv)
    # imported after parsing, so `harness report --help` answers at once
    from harness.audit.claims import REGISTRY
    from harness.report.context import ReportPaths, build_context
    from harness.report.render import render, write_pdf
    from harness.tracking import mlflow_runs as tracking

    ctx = build_context(ReportPaths(args.results, args.runs_dir, args.theory, args.contamination,
                                    args.audit, args.params, args.provenance, args.prepared,
                                    args.probe, args.claims or REGISTRY))
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
    if ctx["mlflow_run_id"]:
        tracking.log_artifacts([p for p in (args.html, args.pdf, args.checklist) if p],
                               ctx["mlflow_run_id"])
    return 1 if args.strict and (ctx["warnings"] or ctx["summary"]["absent"] or off) else 0
