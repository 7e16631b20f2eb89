"""Stage `recap_report` (pipelines/recap/dvc.yaml): the web-text report, one HTML file and a PDF
of the same HTML (harness.report.recap's context, harness.report.render's typesetting): the
subset's counts, what every arm's run read at each checkpoint and its scores there, and where
next-token reaches good views' score."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.stages.common import fail, stage_parser
from prh.io import ContractError, read_json, write_text


def main(argv: list[str]) -> int:
    """Read the subset's and the paraphrase source's summary.json, the run.json of each arm of
    recap.train's arms and seeds in --runs-dir and their --scores; write --html and --pdf."""
    parser = stage_parser("recap_report", main.__doc__)
    parser.add_argument("--subset", type=Path, required=True, help="the recap stage's folder")
    parser.add_argument("--runs-dir", type=Path, required=True,
                        help="the recap_train stages' folders' parent (runs/recap)")
    parser.add_argument("--paraphrase", type=Path, required=True,
                        help="the recap_paraphrase stage's folder")
    parser.add_argument("--scores", type=Path, required=True,
                        help="the recap_score stage's JSON")
    parser.add_argument("--audit", type=Path, required=True,
                        help="the recap pipeline's audit JSON (its web-text verdicts)")
    parser.add_argument("--html", type=Path, required=True, help="the HTML report to write")
    parser.add_argument("--pdf", type=Path, required=True, help="the PDF report to write")
    args = parser.parse_args(argv)
    from harness.report.recap import recap_context
    from harness.report.render import render, source_date, write_pdf

    try:
        summary, para, runs, scores, audit = read_inputs(args)
    except ContractError as e:
        return fail(e)
    html = render(recap_context(summary, para, runs, scores, source_date(), audit),
                  name="recap.html.j2")
    write_text(args.html, html)
    off = write_pdf(html, args.pdf)
    for line in off:
        print(f"recap_report: warning: off the page: {line}")
    print(f"recap_report: {args.html} and {args.pdf} ({len(runs)} run(s))")
    return 0

def read_inputs(args: Any) -> tuple[Any, ...]:
    """(the subset's summary, the paraphrase source's, every run.json of recap.train's arms
    and seeds, the scores, the audit), each checked against its schema."""
    from harness.config.recap import read_section, runs_of
    from harness.records.runfile import run_name
    from harness.records.schemas import (
        RECAP_PARAPHRASE,
        RECAP_RUN,
        RECAP_SCORES,
        RECAP_SUBSET,
    )
    from harness.records.verdicts import AUDIT

    names = [run_name(arm, seed) for arm, seed in runs_of(read_section(args.params))]
    summary = RECAP_SUBSET.check(read_json(args.subset / "summary.json"),
                                 str(args.subset / "summary.json"))
    runs = [RECAP_RUN.check(read_json(p / "run.json"), str(p / "run.json"))
            for p in (args.runs_dir / name for name in names)]
    scores = RECAP_SCORES.check(read_json(args.scores), str(args.scores))
    audit = AUDIT.check(read_json(args.audit), str(args.audit), "pipelines/recap/dvc.yaml")
    para = RECAP_PARAPHRASE.check(read_json(args.paraphrase / "summary.json"),
                                  str(args.paraphrase / "summary.json"))["paraphrase"]
    return summary, para, runs, scores, audit
