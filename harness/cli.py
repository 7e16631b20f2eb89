"""`harness` command line: one sub-command per pipeline stage (harness/stages/) and the
harness tools. Each is a function `f(argv) -> int` named "module:function" and imported
lazily, so `harness --help` stays fast and each module owns its argument parsing."""

from __future__ import annotations

import importlib
import os
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("harness.pipeline.run:main",
            "validate params and inputs, then `dvc repro` everything"),
    "matrix": ("harness.pipeline.matrix:main",
               "the arm x seed trainings side by side, one per device"),
    "world": ("harness.stages.world:main", "generate the embedded world data set"),
    "prepare": ("harness.stages.prepare:main", "validate the captions, train the tokenizer"),
    "image": ("harness.stages.image:main", "image encoder embeddings of the fit/test photos"),
    "train": ("harness.stages.train:main", "train one text arm for one seed, tracked in MLflow"),
    "align": ("harness.stages.align:main", "align one text run to the image embeddings, score it"),
    "probe": ("harness.stages.probe:main",
              "short trainings: the SIGReg-weight sweep and a same-seed repeat"),
    "theory": ("harness.stages.theory:main", "the theory checks (threshold grid, bound)"),
    "contamination": ("harness.stages.contamination:main",
                      "evaluation captions/images found in training"),
    "reference": ("harness.stages.reference:main",
                  "evaluation only: public encoders on WIT-1024 and STS-B (wit1024 section)"),
    "aggregate": ("harness.stages.aggregate:main",
                  "every run's metrics, seed spread, paired gaps"),
    "audit": ("harness.stages.audit:main", "the claims registry against the reproduced numbers"),
    "report": ("harness.stages.report:main", "render the HTML and PDF report"),
    "diff": ("harness.compare.diff:cli", "compare two sets of runs (seeds, commits, run ids)"),
    "launch": ("harness.pipeline.launch:main", "train and align the matrix as a SLURM job array"),
}
EXAMPLES = """\
examples:
  harness run                                   # the whole pipeline on params.yaml's profile
  harness run --check                           # check params.yaml, list the stale stages
  harness run --fail-on differs,arithmetic      # a CI gate on the audit's verdicts
  harness diff runs/align:good@0 runs/align:good@1          # two seeds of one arm
  harness diff rev:HEAD~1 runs/align --fail-if 'r_at_1<-0.02'  # last commit against now
  harness train --help                          # one stage's arguments (paths: dvc.yaml)
"""


def dispatch(prog: str, commands: dict[str, tuple[str, str]], argv: list[str] | None) -> int:
    """Run `commands[argv[0]]` with the remaining arguments; print usage and examples on -h or
    no command, the version on --version."""
    args = sys.argv[1:] if argv is None else argv
    rows = "\n".join(f"  {name:<14} {text}" for name, (_, text) in commands.items())
    usage = f"usage: {prog} [--version] COMMAND [ARGS]\n\ncommands:\n{rows}\n"
    if not args or args[0] in {"-h", "--help"}:
        print(f"{usage}\n{EXAMPLES}")
        return 0
    if args[0] == "--version":
        from prh import __version__

        print(f"{prog} {__version__}")
        return 0
    if args[0] not in commands:
        print(f"{prog}: unknown command {args[0]!r}\n\n{usage}", file=sys.stderr)
        return 2
    module_name, func_name = commands[args[0]][0].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(args[1:]) or 0)


def main(argv: list[str] | None = None) -> int:
    """`harness`: a reader that closes the pipe early (`harness --help | head`) ends it quietly,
    as the Python docs' SIGPIPE note advises (stdout to devnull, exit 1), not with a traceback."""
    try:
        try:
            code = dispatch("harness", COMMANDS, argv)
        except SystemExit as e:  # argparse's --help and usage errors, flushed below
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
