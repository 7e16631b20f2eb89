"""`harness` command line: one sub-command per pipeline stage or harness tool (the same
lazy dispatch as `prh`)."""

from __future__ import annotations

from prh.cli import dispatch

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("harness.stages:run_cli", "validate params and inputs, then `dvc repro` everything"),
    "world": ("harness.stages:world_cli", "generate the embedded world data set"),
    "data": ("harness.stages:data_cli", "validate the captions, train the tokenizer"),
    "image": ("harness.stages:image_cli", "image encoder embeddings of the fit/test photos"),
    "train": ("harness.stages:train_cli", "train one text arm for one seed, tracked in MLflow"),
    "align": ("harness.stages:align_cli", "align one text run to the image embeddings, score it"),
    "theory": ("harness.stages:theory_cli", "the theory checks (threshold grid, bound)"),
    "aggregate": ("harness.stages:aggregate_cli", "every run's metrics, seed spread, paired gaps"),
    "contamination": ("harness.contamination:cli", "evaluation captions/images in training"),
    "audit": ("harness.audit:cli", "the claims registry against the reproduced numbers"),
    "report": ("harness.report:cli", "render reports/audit.html and reports/audit.pdf"),
    "diff": ("harness.diff:cli", "compare two sets of runs (seeds, commits, run ids)"),
}


def main(argv: list[str] | None = None) -> int:
    return dispatch("harness", COMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
