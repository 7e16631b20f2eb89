"""Every file format the stages hand each other, as a name, a version and, for the files the
audit and the report compute from, the typed record of the fields they read (a TypedDict). A
writer stamps `str(SCHEMA)`; a reader calls `SCHEMA.check`, which refuses a file of another
format or version, or one missing a field its record declares or holding it as another type,
with the line that fixes it (rerun the stage that writes it), and returns it as that record.

`shape_of` turns a record into the shape `shape_problem` checks: a type (`str`, `int`,
`NUMBER`: an int or a float, never a bool, for a `float` field), a tuple of the words allowed
(a verdict, a status: `Annotated[str, WORDS]`), `[shape]` (a `list`), or a mapping of field ->
shape, where `?field` may be absent (`NotRequired`) and `*` stands for every key (a
`dict[str, ...]`: an arm, a metric, a seed), or `Nullable(shape)` for an `X | None` field; a
field not declared is allowed (readers ignore it)."""

from __future__ import annotations

import functools
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    Generic,
    NotRequired,
    TypedDict,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from prh.io import ContractError

Record = TypeVar("Record", bound=Mapping[str, Any])


@dataclass(frozen=True)
class Schema(Generic[Record]):
    """A format (`prh.results`) at a version (1), written as `prh.results/1`; `stage` is the
    DVC stage that writes it; `record` the TypedDict of the fields its readers need (None: the
    stamp only)."""

    name: str
    version: int
    stage: str
    record: type[Record] | None = None

    @property
    def shape(self) -> Any:
        """The record as `shape_problem` checks it (`shape_of`); None for the stamp only."""
        return None if self.record is None else shape_of(self.record)

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
              error: type[ContractError] = ContractError) -> Record:
        """`doc` as this format's record when it is a mapping stamped with this schema whose
        fields have the record's types; else `error` naming `where` and the fix: `fix`, or the
        stage to rerun (`stage`, default this format's own)."""
        problem = self.unreadable(doc)
        if problem:
            raise error(f"{where}: {problem}; {fix or f'rerun `dvc repro {stage or self.stage}`'}")
        return dict(doc)  # type: ignore[return-value]  # checked against the record above

    def unreadable(self, doc: Any) -> str | None:
        """What keeps this code from reading `doc` (another format or version, a field its
        readers need missing or mistyped), or None; `check` without the fix."""
        found = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
        return self.problem(found) or shape_problem(doc, self.shape, "")


NUMBER = "number"  # an int or a float (JSON's number), never a bool
_TYPES = {str: "a string", int: "an integer", NUMBER: "a number", bool: "true or false"}


@dataclass(frozen=True)
class Nullable:
    """The shape of an `X | None` field: `shape`, or null."""

    shape: Any


@functools.cache
def shape_of(record: Any) -> Any:
    """The shape (module docstring) of a TypedDict, or of one field's type within it; cached
    (the same object each call: read it, never change it)."""
    if is_typeddict(record):
        hints = get_type_hints(record, include_extras=True)
        return {("?" if get_origin(t) is NotRequired else "") + name: shape_of(t)
                for name, t in hints.items()}
    origin, args = get_origin(record), get_args(record)
    if origin is NotRequired:
        return shape_of(args[0])
    if origin in (types.UnionType, Union) and len(args) == 2 and type(None) in args:  # X | None
        return Nullable(shape_of(next(a for a in args if a is not type(None))))
    if origin is Annotated:  # Annotated[str, WORDS]: one of the words
        return tuple(args[1])
    if origin is list:
        return [shape_of(args[0])]
    if origin is dict:  # dict[str, X]: every key; dict[str, Any]: any object
        return {} if args[1] is Any else {"*": shape_of(args[1])}
    if record is float:
        return NUMBER
    if record in _TYPES:
        return record
    raise TypeError(f"{record!r}: a record's field is str, int, float, bool, Annotated[str, "
                    "WORDS], list[...], dict[str, ...], a TypedDict, or one of them | None")


def shape_problem(value: Any, shape: Any, at: str) -> str | None:
    """None when `value` has `shape` (module docstring), else the first field that differs,
    by its path (`arms.good.metrics.r_at_1.mean: missing`)."""
    if shape is None:
        return None
    if isinstance(shape, Nullable):
        return None if value is None else shape_problem(value, shape.shape, at)
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
    if isinstance(shape, Nullable):
        inner = shape_rows(shape.shape, at)
        if len(inner) == 1 and inner[0].startswith(f"- `{at}`: "):
            return [f"{inner[0]} or null"]
        return [f"- `{at}`: null, or as below", *inner]
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
class TwoLevelRecord(TypedDict):
    """harness.stats.estimators.TwoLevel.to_dict, the fields its from_dict reads back (the
    audit's verdicts) and the interval the report and the tracking show."""

    estimate: float
    se: float
    df: float
    method: str
    n_seeds: int
    n_pairs: int
    n_resamples: int
    seed_var: float | None  # None: one seed (borrowed or not estimated)
    pair_var: float
    ci: list[float]
    se_population: NotRequired[float]  # absent in entries written before they existed
    df_population: NotRequired[float]
    method_population: NotRequired[str]
    noise_var: NotRequired[float | None]


class SeedSpread(TypedDict):
    """harness.stats.estimators.seed_spread: one quantity over an arm's seeds."""

    values: dict[str, float]
    n: int
    mean: float
    std: float | None  # None for one seed
    min: float
    max: float


class MetricSummary(TypedDict):
    """One arm's metric over its seeds (harness.records.results.aggregate_runs)."""

    mean: float
    ci: NotRequired[list[float]]  # [lo, hi] over test pairs; absent for a seed spread only
    two_level: NotRequired[TwoLevelRecord]  # a score's: seeds and test pairs (the audit's)


class Control(TypedDict):
    mean: float


class Calibrated(TypedDict):
    """One metric's permutation calibration over seeds (aggregate_calibrated); the report's
    calibrated table."""

    n_permutations: int
    alpha: float
    raw: NotRequired[SeedSpread]
    p_value: NotRequired[SeedSpread]
    calibrated: NotRequired[SeedSpread]


class PairFree(TypedDict):
    """An arm's pair-free scores over seeds (aggregate_pair_free); {} when none ran."""

    status: NotRequired[dict[str, str]]  # seed -> prh.pairfree's status
    r_at_1: NotRequired[SeedSpread]
    foscttm: NotRequired[SeedSpread]


class ArmResults(TypedDict):
    seeds: list[int]
    metrics: dict[str, MetricSummary]
    controls: NotRequired[dict[str, Control]]
    calibrated: NotRequired[dict[str, Calibrated]]  # metric -> its calibration
    pair_free: NotRequired[PairFree]


class Gap(TypedDict):
    """Arm a minus arm b on one metric, paired over test pairs."""

    a: str
    b: str
    metric: str
    diff: float
    ci: NotRequired[list[float]]
    two_level: NotRequired[TwoLevelRecord]


class Results(TypedDict):
    """runs/results.json."""

    profile: str
    params_hash: str  # Params.hash of the profile it was aggregated under (the CI gate's check)
    data_hash: NotRequired[str]  # shown in the report's provenance
    # the prepare stage's differences from the published split (the aggregate stage always
    # writes it; a file without it reads as none, so hand-built results need not carry it)
    data_warnings: NotRequired[list[str]]
    k: int
    n_test: int
    arms: dict[str, ArmResults]
    gaps: list[Gap]
    mlflow_run_id: NotRequired[str | None]  # the aggregate's MLflow run (None: not tracked)
    runs: NotRequired[list[str]]  # the align run files it was computed from


# what the aggregate, the report and harness diff read of one align run: docs/contracts.md
class RunIdentity(TypedDict):
    arm: str
    seed: int
    params_hash: str  # Params.arm_hash it was scored under (aggregate compares it)


class RunMetric(TypedDict):
    value: float
    ci: NotRequired[list[float]]


class RunRecord(TypedDict):
    """runs/align/ARM-sSEED.json."""

    k: int
    run: RunIdentity
    metrics: dict[str, RunMetric]
    per_query: NotRequired[str]


# what the audit reads of the public encoders' scores (harness.records.reference's lookups,
# harness.audit.setting's comparison with the paper's setting): docs/contracts.md, "Reference"
class DataStamp(TypedDict):
    n: int
    sha256: str


class Protocol(TypedDict):
    name: str
    k: int


class TextEncoder(TypedDict):
    hidden: int
    layers: int


class VisionEncoder(TypedDict):
    timm: str


class Aligned(TypedDict):
    """One (text, vision, metric) entry: its best layer pair's score and, with per-item
    scores, its interval over the items (results.json's `ci` shape)."""

    text: str
    vision: str
    metric: str
    best: float
    ci: NotRequired[list[float]]


class StsScore(TypedDict):
    spearman: float
    n: int


class CocoScores(TypedDict):
    data: DataStamp
    alignment: dict[str, Aligned]


class Reference(TypedDict):
    """runs/reference/wit1024.json."""

    data: DataStamp
    protocol: Protocol
    text: dict[str, TextEncoder]
    vision: dict[str, VisionEncoder]
    alignment: dict[str, Aligned]
    sts: dict[str, StsScore]
    coco: NotRequired[CocoScores]


ARM_TRAIN = Schema("prh.arm_train", 1, "config@ARM")  # runs/config/ARM.json
RUN = Schema("prh.metrics", 2, "align@ARM-SEED", RunRecord)  # runs/align/ARM-sSEED.json
PER_QUERY = Schema("prh.per_query", 1, "align@ARM-SEED")  # runs/align/ARM-sSEED.npz
RESULTS = Schema("prh.results", 2, "aggregate", Results)  # runs/results.json
THEORY = Schema("prh.theory", 1, "theory")  # runs/theory.json
PROBE = Schema("prh.probe", 1, "probe")  # runs/probe.json
CONTAMINATION = Schema("harness.contamination", 1, "contamination")  # runs/contamination.json
CHECKLIST = Schema("prh.checklist", 1, "report")  # reports/checklist.json
# runs/reference/wit1024.json
REFERENCE = Schema("prh.reference", 3, "reference", Reference)
RECAP_SUBSET = Schema("prh.recap_subset", 2, "recap")  # data/recap/subset/summary.json
RECAP_RUN = Schema("prh.recap_run", 1, "recap_train")  # runs/recap/ARM/run.json
RECAP_PARAPHRASE = Schema("prh.recap_paraphrase", 1, "recap_paraphrase")  # data/recap/paraphrase
RECAP_SCORES = Schema("prh.recap_scores", 4, "recap_score")  # runs/recap_scores.json
DIFF = Schema("prh.diff", 1, "")  # `harness diff --format json`: no stage writes it
