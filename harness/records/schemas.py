"""Every file format the stages hand each other, as a name, a version and, for the files the
audit and the report compute from, the shape of the fields they read. A writer stamps
`str(SCHEMA)`; a reader calls `SCHEMA.check`, which refuses a file of another format or
version, or one missing a field its readers need or holding it as another type, with the line
that fixes it (rerun the stage that writes it).

A shape is a type (`str`, `int`, `NUMBER`: an int or a float, never a bool), a tuple of the
words allowed (a verdict, a status), `[shape]` (a list of it), or a mapping of field -> shape,
where `?field` may be absent and `*` stands for every key (an arm, a metric, a seed); a field
not named is allowed (readers ignore it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prh.io import ContractError


@dataclass(frozen=True)
class Schema:
    """A format (`prh.results`) at a version (1), written as `prh.results/1`; `stage` is the
    DVC stage that writes it."""

    name: str
    version: int
    stage: str
    shape: Any = None  # the fields its readers need (module docstring); None: the stamp only

    def __str__(self) -> str:
        return f"{self.name}/{self.version}"

    def problem(self, found: Any) -> str | None:
        """None when `found` (a file's `schema` field) is this one, else what is wrong."""
        if found == str(self):
            return None
        name, _, version = str(found).rpartition("/")
        if name == self.name:
            return f"version {version} of {self.name}, this code reads version {self.version}"
        return f"schema {found!r}, expected {str(self)!r}"

    def check(self, doc: Any, where: str, stage: str | None = None, fix: str | None = None,
              error: type[ContractError] = ContractError) -> dict[str, Any]:
        """`doc` when it is a mapping stamped with this schema; else `error` naming `where` and
        the fix: `fix`, or the stage to rerun (`stage`, default this format's own)."""
        problem = self.unreadable(doc)
        if problem:
            raise error(f"{where}: {problem}; {fix or f'rerun `dvc repro {stage or self.stage}`'}")
        return dict(doc)

    def unreadable(self, doc: Any) -> str | None:
        """What keeps this code from reading `doc` (another format or version, a field its
        readers need missing or mistyped), or None; `check` without the fix."""
        found = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
        return self.problem(found) or shape_problem(doc, self.shape, "")


NUMBER = "number"  # an int or a float (JSON's number), never a bool
_TYPES = {str: "a string", int: "an integer", NUMBER: "a number", bool: "true or false"}


def shape_problem(value: Any, shape: Any, at: str) -> str | None:
    """None when `value` has `shape` (module docstring), else the first field that differs,
    by its path (`arms.good.metrics.r_at_1.mean: missing`)."""
    if shape is None:
        return None
    if isinstance(shape, Mapping):
        if not isinstance(value, Mapping):
            return f"{at or 'the file'}: expected an object, found {type(value).__name__}"
        for key, sub in shape.items():
            name = key.lstrip("?")
            if key == "*":
                items = list(value.items())
            elif name in value:
                items = [(name, value[name])]
            elif key.startswith("?"):
                continue
            else:
                return f"{_path(at, name)}: missing"
            for k, v in items:
                if problem := shape_problem(v, sub, _path(at, k)):
                    return problem
        return None
    if isinstance(shape, tuple):
        return None if value in shape else f"{at}: {value!r:.40} is not one of {_words(shape)}"
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{at or 'the file'}: expected a list, found {type(value).__name__}"
        for i, v in enumerate(value):
            if problem := shape_problem(v, shape[0], f"{at}[{i}]"):
                return problem
        return None
    ok = (isinstance(value, int | float) if shape == NUMBER else isinstance(value, shape)) \
        and (shape is bool or not isinstance(value, bool))
    return None if ok else f"{at}: expected {_TYPES[shape]}, found {value!r:.40}"


def _words(words: tuple[str, ...]) -> str:
    return ", ".join(repr(w) for w in words)


def _path(at: str, key: object) -> str:
    return f"{at}.{key}" if at else str(key)


def shape_rows(shape: Any, at: str = "") -> list[str]:
    """A shape as docs/contracts.md lists it, one field a line: `- `arms.*.seeds[]`: an
    integer` (`?`: may be absent); tests/test_records.py keeps the docs equal to it."""
    if isinstance(shape, Mapping) and not shape:
        return [f"- `{at}`: an object"]
    if isinstance(shape, Mapping):
        return [row for key, sub in shape.items() for row in shape_rows(sub, _path(at, key))]
    if isinstance(shape, list):
        return shape_rows(shape[0], f"{at}[]")
    if isinstance(shape, tuple):
        return [f"- `{at}`: one of {_words(shape)}"]
    return [f"- `{at}`: {_TYPES[shape]}"]


# what the aggregate's readers (the audit, the report, the flat views, harness diff) compute
# from: docs/contracts.md, "Aggregate"
RESULTS_SHAPE = {
    "profile": str, "k": int, "n_test": int,
    "arms": {"*": {"seeds": [int], "metrics": {"*": {"mean": NUMBER, "?ci": [NUMBER]}},
                   "?controls": {"*": {"mean": NUMBER}}}},
    "gaps": [{"a": str, "b": str, "metric": str, "diff": NUMBER, "?ci": [NUMBER]}]}
# what the aggregate, the report and harness diff read of one align run: docs/contracts.md
RUN_SHAPE = {"k": int, "run": {"arm": str, "seed": int},
             "metrics": {"*": {"value": NUMBER, "?ci": [NUMBER]}}, "?per_query": str}

# what the audit reads of the public encoders' scores (harness.records.reference's lookups,
# harness.audit.setting's comparison with the paper's setting): docs/contracts.md, "Reference"
_ALIGNED = {"*": {"text": str, "vision": str, "metric": str, "best": NUMBER}}
REFERENCE_SHAPE = {
    "data": {"n": int, "sha256": str}, "protocol": {"name": str, "k": int},
    "text": {"*": {"hidden": int, "layers": int}}, "vision": {"*": {"timm": str}},
    "alignment": _ALIGNED, "sts": {"*": {"spearman": NUMBER, "n": int}},
    "?coco": {"data": {"n": int, "sha256": str}, "alignment": _ALIGNED}}


ARM_TRAIN = Schema("prh.arm_train", 1, "config@ARM")  # runs/config/ARM.json
RUN = Schema("prh.metrics", 2, "align@ARM-SEED", RUN_SHAPE)  # runs/align/ARM-sSEED.json
PER_QUERY = Schema("prh.per_query", 1, "align@ARM-SEED")  # runs/align/ARM-sSEED.npz
RESULTS = Schema("prh.results", 2, "aggregate", RESULTS_SHAPE)  # runs/results.json
THEORY = Schema("prh.theory", 1, "theory")  # runs/theory.json
PROBE = Schema("prh.probe", 1, "probe")  # runs/probe.json
CONTAMINATION = Schema("harness.contamination", 1, "contamination")  # runs/contamination.json
CHECKLIST = Schema("prh.checklist", 1, "report")  # reports/checklist.json
# runs/reference/wit1024.json
REFERENCE = Schema("prh.reference", 2, "reference", REFERENCE_SHAPE)
RECAP_SUBSET = Schema("prh.recap_subset", 1, "recap")  # data/recap/subset/summary.json
RECAP_RUN = Schema("prh.recap_run", 1, "recap_train")  # runs/recap/ARM/run.json
RECAP_PARAPHRASE = Schema("prh.recap_paraphrase", 1, "recap_paraphrase")  # data/recap/paraphrase
RECAP_SCORES = Schema("prh.recap_scores", 3, "recap_score")  # runs/recap_scores.json
DIFF = Schema("prh.diff", 1, "")  # `harness diff --format json`: no stage writes it
