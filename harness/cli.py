"""`harness` command line: one sub-command per pipeline stage (harness/stages/) and the
harness tools. Each is a function `f(argv) -> int` named "module:function" and imported
lazily, so `harness --help` stays fast and each module owns its argument parsing."""

from __future__ import annotations

import errno
import importlib
import os
import re
import sys
from pathlib import Path

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("harness.pipeline.run:main",
            "validate params and inputs, then `dvc repro` everything"),
    "matrix": ("harness.pipeline.matrix:main",
               "the arm x seed trainings side by side, one per device"),
    "plan": ("harness.stages.plan:main",
             "the seed plan of the sampled claims, registered before training"),
    "next": ("harness.pipeline.study:main",
             "record a look of the plan, then run the arms an undecided claim reads"),
    "world": ("harness.stages.world:main", "generate the embedded world data set"),
    "prepare": ("harness.stages.prepare:main", "validate the captions, train the tokenizer"),
    "image": ("harness.stages.image:main", "image encoder embeddings of the fit/test photos"),
    "config": ("harness.stages.config:main", "the train section as one text arm reads it"),
    "train": ("harness.stages.train:main", "train one text arm for one seed, tracked in MLflow"),
    "align": ("harness.stages.align:main", "align one text run to the image embeddings, score it"),
    "probe": ("harness.stages.probe:main",
              "short trainings: the SIGReg-weight sweep and a same-seed repeat"),
    "theory": ("harness.stages.theory:main", "the theory checks (threshold grid, bound)"),
    "contamination": ("harness.stages.contamination:main",
                      "evaluation captions/images found in training"),
    "reference": ("harness.stages.reference:main",
                  "evaluation only: public encoders on WIT-1024 and STS-B (wit1024 section)"),
    "recap": ("harness.stages.recap:main",
              "web texts: a Recap-DataComp subset's texts, tokenizer and counts (recap section)"),
    "recap_paraphrase": ("harness.stages.recap_paraphrase:main",
                         "web texts: Table 7's paraphrase source, by a local instruction model"),
    "recap_train": ("harness.stages.recap_train:main",
                    "web texts: train one arm on the subset's stream, with its account"),
    "recap_score": ("harness.stages.recap_score:main",
                    "web texts: each run's snapshots scored on WIT-1024 and Flickr30k"),
    "recap_report": ("harness.stages.recap_report:main",
                     "web texts: the HTML and PDF report of the subset and its runs"),
    "aggregate": ("harness.stages.aggregate:main",
                  "every run's metrics, seed spread, paired gaps"),
    "audit": ("harness.stages.audit:main", "the claims registry against the reproduced numbers"),
    "report": ("harness.stages.report:main", "render the HTML and PDF report"),
    "diff": ("harness.compare.diff:cli", "compare two sets of runs (seeds, commits, run ids)"),
    "launch": ("harness.pipeline.launch:main",
               "the profile's trainings (the matrix, or the recap runs) as a SLURM job array"),
}
EXAMPLES = """\
examples:
  harness run                                   # the whole pipeline on params.yaml's profile
  harness run --check                           # check params.yaml, list the stale stages
  harness run --fail-on differs,arithmetic      # a CI gate on the audit's verdicts
  harness next                                  # record the look, queue the next one
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


# Faults of the machine, not of the input: one line and exit 1 (CPython ignores SIGXFSZ, so a
# file-size limit arrives as EFBIG). Every output is written atomically (prh.io), so none is
# left half-written, and the next run clears the temp files an interrupted one left.
# a write fault -> what happened and its fix
WRITE_FAULTS = {errno.EFBIG: ("a file-size limit (ulimit -f) stopped the write",
                              "lift the limit"),
                errno.ENOSPC: ("the disk is full", "make room"),
                errno.EDQUOT: ("the disk quota is used up", "make room or raise the quota"),
                errno.EROFS: ("the file system is read-only", "remount it read-write or run in "
                              "a writable copy of the repository"),
                errno.EACCES: ("permission denied", "give this user write access")}
TEMP_NAME = re.compile(r"^\.(?P<target>.+)\.[A-Za-z0-9_]{8}\.tmp[^/]*$")  # prh.io's atomic writes
INTERRUPTED = 130  # the shell's code for a process ended by SIGINT (128 + 2)


def output_of(filename: object) -> str:
    """' PATH' of the output a write fault hit: an atomic write's temp name (prh.io's
    `.NAME.XXXXXXXX.tmp`) is named by the output it stands for; '' when the error names none."""
    if not filename:
        return ""
    path = Path(str(filename))
    for part in (path, *path.parents):
        m = TEMP_NAME.match(part.name)
        if m:
            return f" {part.with_name(m['target'])}"
    return f" {path}"


def main(argv: list[str] | None = None) -> int:
    """`harness`: every fault ends in one line on stderr, never a traceback: bad input
    (ContractError, exit 2), a full disk or file-size limit (exit 1), Ctrl-C (exit 130); a
    reader that closes the pipe early (`harness --help | head`) ends it quietly, as the Python
    docs' SIGPIPE note advises (stdout to devnull, exit 1)."""
    from prh.io import ContractError

    args = sys.argv[1:] if argv is None else argv
    command = f"harness {args[0]}" if args else "harness"
    try:
        try:
            code = dispatch("harness", COMMANDS, args)
        except SystemExit as e:  # argparse's --help and usage errors, flushed below
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print(f"\n{command}: interrupted; no output was half-written, rerun it to go on "
              "(training resumes from its last checkpoint)", file=sys.stderr)
        return INTERRUPTED
    except ContractError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in WRITE_FAULTS:
            raise
        what, fix = WRITE_FAULTS[e.errno]
        print(f"error: {command}: cannot write{output_of(e.filename)}: {what} ({e.strerror}); "
              f"{fix} and rerun: nothing was left half-written", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
