"""`harness diff A B`: two sets of runs side by side, with paired intervals and CI gates.

A set of runs is one of
- a folder of run files (`runs/align`), optionally filtered: `runs/align:good@0,1` (arm good,
  seeds 0 and 1), `runs/align:good` (every seed of good), `runs/align:@0` (seed 0 of each arm);
- a git revision or a DVC experiment's name, `rev:HEAD~1[:FOLDER][:SELECT]` or
  `rev:EXPNAME` (FOLDER defaults to runs/align): the files at that commit, read through
  `dvc.api.DVCFileSystem`, so DVC-tracked outputs come from the DVC cache and git-tracked ones
  from git; the revision's `params.yaml` gives its params;
- MLflow run ids, `mlflow:ID[,ID...]`: the `final.*` scores the align stage logs, params and
  `env.*` tags from the tracking store (MLFLOW_TRACKING_URI, else the repository's
  sqlite:///mlflow.db).

Whatever the source, a run's metrics carry the run file's names (`r_at_1`, not `final.r_at_1`)
and its params are harness.config.runparams.run_params (what the train stage logs), so one
`--fail-if` works on every source and the params table lists the same keys.

Output, per arm and metric: both sides' seed means and the delta B − A; where both sides hold
per-query outcomes for the same test pairs (the `.npz` beside each run file, docs/contracts.md)
the delta gets a paired bootstrap interval (harness.stats.estimators.paired_bootstrap_diff over the
seed-mean outcome of each pair). Then the params, provenance and environment entries that
differ. `--fail-if 'r_at_1<-0.01'` exits 1 when a delta crosses the tolerance, so the command
can gate CI: `dvc metrics diff` has no tolerance to gate on (DVC issue #10408 asks for one).
Exit codes: 0 no gate failed, 1 a gate failed, 2 bad input (the message names it).
"""

from __future__ import annotations

import argparse
import json
import operator
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from harness.compare.revs import DiffError, Files
from harness.config.params import flatten
from harness.records import names
from harness.records.perquery import read_per_query
from harness.records.runfile import RUN_FILE, check_run_file, run_name
from harness.records.schemas import DIFF
from harness.tracking.mlflow_runs import FINAL
from prh.config import ARMS
from prh.io import ContractError

PROVENANCE_KEYS = ("profile", "params_hash", "data_hash", "git_commit", "git_dirty")
GATE = re.compile(r"^\s*(?:(?P<arm>[A-Za-z0-9_]+)\.)?(?P<metric>[A-Za-z0-9_]+)\s*"
                  r"(?P<op><=|>=|<|>)\s*(?P<value>[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?)\s*$")
OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


@dataclass
class Run:
    """One run of a set: its metrics, optional per-query outcomes and its provenance."""

    label: str
    arm: str
    seed: int | None
    source: str
    metrics: dict[str, float]
    per_query: dict[str, np.ndarray] | None = None
    ids: np.ndarray | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunSet:
    spec: str
    runs: list[Run]


@dataclass(frozen=True)
class Spec:
    kind: str  # "dir" | "rev" | "mlflow"
    where: str  # folder, or comma-separated run ids
    rev: str | None = None
    arm: str | None = None
    seeds: frozenset[int] | None = None


def parse_spec(spec: str) -> Spec:
    """`PATH[:SELECT]`, `rev:REV[:PATH][:SELECT]` or `mlflow:ID[,ID]`; SELECT is `ARM`,
    `ARM@S1,S2` or `@S1,S2` (a part that is a known arm name or holds `@`)."""
    if spec.startswith("mlflow:"):
        ids = spec[len("mlflow:"):]
        if not ids:
            raise DiffError(f"{spec!r}: no MLflow run id; write mlflow:ID[,ID...]")
        return Spec("mlflow", ids)
    kind, rest = ("rev", spec[len("rev:"):]) if spec.startswith("rev:") else ("dir", spec)
    parts = rest.split(":")
    rev = parts.pop(0) if kind == "rev" else None
    if kind == "rev" and not rev:
        raise DiffError(f"{spec!r}: no git revision; write rev:REV[:FOLDER][:ARM@SEEDS]")
    arm = seeds = None
    if parts and "/" not in parts[-1] and ("@" in parts[-1] or parts[-1] in ARMS):
        arm_text, _, seed_text = parts.pop().partition("@")
        arm = arm_text or None
        try:
            seeds = frozenset(int(s) for s in seed_text.split(",")) if seed_text else None
        except ValueError as e:
            raise DiffError(f"{spec!r}: seeds after '@' must be integers like good@0,1") from e
    where = ":".join(parts) or ("runs/align" if kind == "rev" else "")
    if not where:
        raise DiffError(f"{spec!r}: no folder of run files; write e.g. runs/align:good@0")
    return Spec(kind, where, rev, arm, seeds)


def run_from_file(files: Files, folder: str, name: str) -> Run:
    """One `ARM-sSEED.json` and, when it names one, its per-query `.npz`."""
    path = f"{folder.rstrip('/')}/{name}"
    raw = files.read(path) or b""
    try:
        data = json.loads(raw)
    except ValueError as e:  # JSONDecodeError, or UnicodeDecodeError for bytes that are no text
        why = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8 text"
        raise DiffError(f"{files.where(path)}: not valid JSON ({why}); rerun its align "
                        "stage") from e
    try:
        check_run_file(name, data, files.where(path))
    except ContractError as e:
        raise DiffError(str(e)) from e
    m = RUN_FILE.match(name)
    assert m is not None  # check_run_file refuses other names
    metrics = {k: float(v["value"]) for k, v in data.get("metrics", {}).items()
               if isinstance(v, Mapping) and isinstance(v.get("value"), int | float)}
    run = Run(label=run_name(m["arm"], int(m["seed"])), arm=m["arm"], seed=int(m["seed"]),
              source=files.where(path), metrics=metrics,
              provenance={k: data.get("run", {}).get(k) for k in PROVENANCE_KEYS},
              environment=dict(data.get("environment") or {}))
    if data.get("per_query"):
        npz_path = f"{folder.rstrip('/')}/{data['per_query']}"
        raw = files.read(npz_path)
        if raw is None:
            raise DiffError(f"{files.where(npz_path)}: per-query file named by "
                            f"{files.where(path)} not found; rerun its align stage")
        try:
            ids, run.per_query = read_per_query(raw, files.where(npz_path))
        except ContractError as e:
            raise DiffError(str(e)) from e
        run.ids = ids.astype(str)
    return run


def load_files_set(spec: Spec, text: str) -> RunSet:
    files = Files(spec.rev)
    names = [n for n in files.names(spec.where) if RUN_FILE.match(n)]
    if not names:
        raise DiffError(f"{text!r}: no ARM-sSEED.json run files in "
                        f"{files.where(spec.where)}; run the align stages or name another folder")
    chosen = [n for n in names if selected(spec, RUN_FILE.match(n))]
    if not chosen:
        raise DiffError(f"{text!r}: the selection matches none of {', '.join(names)}")
    runs = [run_from_file(files, spec.where, n) for n in chosen]
    raw = files.read("params.yaml")
    for run in runs:
        run.params = params_of(raw, run.arm, run.seed)
    return RunSet(text, runs)


def params_of(raw: bytes | None, arm: str, seed: int | None) -> dict[str, Any]:
    """The run's params from its tree's params.yaml (run_params, as MLflow logs them); a file
    that is not a valid params.yaml gives its own keys flattened, no file gives none."""
    from harness.config.params import load_params
    from harness.config.runparams import run_params

    if raw is None:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "params.yaml"
        path.write_bytes(raw)
        try:
            return run_params(load_params(path), arm, seed or 0)
        except ContractError:
            return {**flatten(yaml.safe_load(raw) or {}), "arm": arm, "seed": seed}


def selected(spec: Spec, m: re.Match) -> bool:
    return ((spec.arm is None or m["arm"] == spec.arm)
            and (spec.seeds is None or int(m["seed"]) in spec.seeds))


def load_mlflow_set(spec: Spec, text: str) -> RunSet:
    """Runs from the tracking store: latest value of each metric, params, `env.*` tags."""
    from harness.tracking.mlflow_runs import read_run

    runs = []
    for rid in spec.where.split(","):
        try:
            r = read_run(rid.strip())
        except ContractError as e:
            raise DiffError(str(e)) from e
        tags = r.data.tags
        arm = tags.get("arm", rid)
        seed = int(tags["seed"]) if tags.get("seed", "").isdigit() else None
        label = run_name(arm, seed) if seed is not None else rid
        final = {k[len(FINAL):]: v for k, v in r.data.metrics.items()
                 if k.startswith(FINAL) and not k.endswith((".ci_lo", ".ci_hi"))}
        if not final:
            raise DiffError(f"mlflow:{rid}: no {FINAL}* scores (its align stage logs them); "
                            "run `dvc repro` so the run is scored, or diff its run files")
        runs.append(Run(label=label, arm=arm, seed=seed,
                        source=f"mlflow:{rid}", metrics=final,
                        provenance={k: tags.get(k) for k in PROVENANCE_KEYS},
                        environment={k[4:]: v for k, v in tags.items() if k.startswith("env.")},
                        params=dict(r.data.params)))
    return RunSet(text, runs)


def load_set(text: str) -> RunSet:
    spec = parse_spec(text)
    return load_mlflow_set(spec, text) if spec.kind == "mlflow" else load_files_set(spec, text)


def merged(dicts: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Key -> the value, or `v1 | v2` when the runs of one set disagree."""
    values: dict[str, set[str]] = {}
    for d in dicts:
        for k, v in d.items():
            values.setdefault(k, set()).add(str(v))
    return {k: " | ".join(sorted(v)) for k, v in sorted(values.items())}


def arm_pairs(a: RunSet, b: RunSet) -> list[tuple[str, str]]:
    """Which arm of A is compared with which arm of B: the only arm of each when each side
    has one (two seeds of one arm, or two arms), else the arms both sides have."""
    arms_a = sorted({r.arm for r in a.runs})
    arms_b = sorted({r.arm for r in b.runs})
    if len(arms_a) == 1 and len(arms_b) == 1:
        return [(arms_a[0], arms_b[0])]
    common = [x for x in arms_a if x in arms_b]
    if not common:
        raise DiffError(f"{a.spec!r} has arms {arms_a}, {b.spec!r} has arms {arms_b}: none in "
                        "common; select one arm on each side (e.g. runs/align:good)")
    return [(x, x) for x in common]


def check_same_pairs(runs: Sequence[Run]) -> None:
    """Refuse a paired interval unless every run scored the same test pairs in the same order."""
    ref = runs[0]
    for r in runs[1:]:
        if len(r.ids) != len(ref.ids) or (r.ids != ref.ids).any():
            if len(r.ids) != len(ref.ids):
                detail = f"{len(ref.ids)} vs {len(r.ids)} test pairs"
            else:
                i = int(np.flatnonzero(r.ids != ref.ids)[0])
                detail = f"first difference at row {i}: id {ref.ids[i]!r} vs {r.ids[i]!r}"
            raise DiffError(f"paired diff refused: {ref.source} and {r.source} were scored on "
                            f"different test pairs ({detail}); rerun both on the same split, or "
                            "pass --unpaired for deltas without an interval")


def compare_metric(runs_a: Sequence[Run], runs_b: Sequence[Run], metric: str, *, paired: bool,
                   n_resamples: int, level: float) -> dict[str, Any]:
    """Seed means of both sides, delta B − A, and the paired interval where possible."""
    mean_a = float(np.mean([r.metrics[metric] for r in runs_a]))
    mean_b = float(np.mean([r.metrics[metric] for r in runs_b]))
    row: dict[str, Any] = {"metric": metric, "a": mean_a, "b": mean_b, "delta": mean_b - mean_a,
                           "n_seeds_a": len(runs_a), "n_seeds_b": len(runs_b), "ci": None,
                           "ci_method": None, "n": None, "n_resamples": None}
    both = [*runs_a, *runs_b]
    key = names.outcome_of(metric, both[0].per_query or {})
    if not paired or key is None or any(r.per_query is None or key not in r.per_query
                                        for r in both):
        return row
    check_same_pairs(both)
    from harness.stats.estimators import paired_bootstrap_diff

    outcome_a = np.mean([r.per_query[key] for r in runs_a], axis=0)
    outcome_b = np.mean([r.per_query[key] for r in runs_b], axis=0)
    diff, ci = paired_bootstrap_diff(outcome_b, outcome_a, level=level, n_resamples=n_resamples)
    row.update(ci=[ci.lo, ci.hi], ci_method=f"{ci.method}, seed-mean outcome per pair",
               n=ci.n, n_resamples=ci.n_resamples, per_query_delta=diff)
    return row


def diff_sets(a: RunSet, b: RunSet, *, paired: bool = True, n_resamples: int = 10_000,
              level: float = 0.95) -> dict[str, Any]:
    """The whole comparison as one JSON-ready dict (schema prh.diff/1)."""
    rows = []
    for arm_a, arm_b in arm_pairs(a, b):
        runs_a = [r for r in a.runs if r.arm == arm_a]
        runs_b = [r for r in b.runs if r.arm == arm_b]
        names = set.intersection(*(set(r.metrics) for r in [*runs_a, *runs_b]))
        for metric in sorted(names):
            row = compare_metric(runs_a, runs_b, metric, paired=paired, n_resamples=n_resamples,
                                 level=level)
            rows.append({"arm_a": arm_a, "arm_b": arm_b, **row})
    return {"schema": str(DIFF),
            "a": {"spec": a.spec, "runs": [r.label for r in a.runs],
                  "sources": [r.source for r in a.runs]},
            "b": {"spec": b.spec, "runs": [r.label for r in b.runs],
                  "sources": [r.source for r in b.runs]},
            "level": level, "metrics": rows,
            "params": differing(merged([r.params for r in a.runs]),
                                merged([r.params for r in b.runs])),
            "provenance": differing(merged([r.provenance for r in a.runs]),
                                    merged([r.provenance for r in b.runs])),
            "environment": differing(merged([r.environment for r in a.runs]),
                                     merged([r.environment for r in b.runs]))}


def differing(a: Mapping[str, str], b: Mapping[str, str]) -> list[dict[str, str | None]]:
    return [{"key": k, "a": a.get(k), "b": b.get(k)} for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]


def parse_gate(text: str) -> re.Match:
    """`[ARM.]METRIC OP VALUE`, or DiffError saying how to write one (checked before any run is
    read, so a typo costs no loading)."""
    m = GATE.match(text)
    if not m:
        raise DiffError(f"--fail-if {text!r}: write [ARM.]METRIC<VALUE, e.g. r_at_1<-0.01 "
                        "or good.r_at_5<=-0.005 (operators < <= > >=)")
    return m


def apply_gates(result: dict[str, Any], gates: Sequence[str]) -> list[dict[str, Any]]:
    """`[ARM.]METRIC OP VALUE` on the delta B − A; a gate naming no compared metric is an
    error, so a typo never passes CI silently."""
    out = []
    for text in gates:
        m = parse_gate(text)
        rows = [r for r in result["metrics"] if r["metric"] == m["metric"]
                and (m["arm"] is None or m["arm"] in (r["arm_a"], r["arm_b"]))]
        if not rows:
            have = sorted({f"{r['arm_a']}.{r['metric']}" for r in result["metrics"]})
            raise DiffError(f"--fail-if {text!r}: no compared metric matches; compared: "
                            f"{', '.join(have) or 'none'}")
        for r in rows:
            hit = OPS[m["op"]](r["delta"], float(m["value"]))
            out.append({"gate": text.strip(), "arm_a": r["arm_a"], "arm_b": r["arm_b"],
                        "metric": r["metric"], "delta": r["delta"], "failed": hit})
    return out


def fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v).replace("|", "\\|")


def to_markdown(result: Mapping[str, Any]) -> str:
    pct = round(100 * result["level"])
    lines = ["# harness diff", "",
             f"- A: `{result['a']['spec']}` ({', '.join(result['a']['runs'])})",
             f"- B: `{result['b']['spec']}` ({', '.join(result['b']['runs'])})", "",
             "## Metrics (seed means; delta = B − A)", "",
             f"| arm A | arm B | metric | A | B | delta | {pct}% paired interval | n |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in result["metrics"]:
        ci = f"[{r['ci'][0]:.4f}, {r['ci'][1]:.4f}]" if r["ci"] else "— (no per-query outcomes)"
        lines.append(f"| {r['arm_a']} | {r['arm_b']} | {r['metric']} | {fmt(r['a'])} | "
                     f"{fmt(r['b'])} | {r['delta']:+.4f} | {ci} | {fmt(r['n'])} |")
    for title, key in (("Params that differ", "params"),
                       ("Provenance that differs", "provenance"),
                       ("Environment that differs", "environment")):
        lines += ["", f"## {title}", ""]
        if result[key]:
            lines += ["| key | A | B |", "|---|---|---|"]
            lines += [f"| {d['key']} | {fmt(d['a'])} | {fmt(d['b'])} |" for d in result[key]]
        else:
            lines.append("none")
    if result.get("gates"):
        lines += ["", "## Gates", ""]
        lines += [f"- `{g['gate']}` checked on {g['metric']}, B {g['arm_b']} − A {g['arm_a']}: "
                  f"delta {g['delta']:+.4f} -> {'FAILED' if g['failed'] else 'passed'}"
                  for g in result["gates"]]
    return "\n".join(lines) + "\n"


def cli(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="harness diff", description=__doc__.split("\n\n")[0],
                                 epilog="A and B: FOLDER[:ARM@SEEDS] | rev:REV[:FOLDER][:ARM@SEEDS]"
                                        " | mlflow:ID[,ID]")
    ap.add_argument("a", help="the baseline runs (see the forms below)")
    ap.add_argument("b", help="the runs compared with A (deltas are B - A)")
    ap.add_argument("--fail-if", action="append", default=[], metavar="[ARM.]METRIC<VALUE",
                    help="exit 1 when the delta B − A of METRIC satisfies the comparison")
    ap.add_argument("--format", choices=("md", "json"), default="md",
                    help="markdown tables (default) or one JSON document")
    ap.add_argument("--unpaired", action="store_true",
                    help="deltas only, no paired interval (when the test pairs differ)")
    ap.add_argument("--n-resamples", type=int, default=10_000,
                    help="bootstrap resamples of the paired interval (default: 10000)")
    ap.add_argument("--level", type=float, default=0.95,
                    help="the interval's level, a fraction (default: 0.95)")
    args = ap.parse_args(argv)
    try:
        for text in args.fail_if:
            parse_gate(text)
        result = diff_sets(load_set(args.a), load_set(args.b), paired=not args.unpaired,
                           n_resamples=args.n_resamples, level=args.level)
        result["gates"] = apply_gates(result, args.fail_if)
    except ContractError as e:
        print(f"harness diff: {e}", file=sys.stderr)
        return 2
    result["failed"] = any(g["failed"] for g in result["gates"])
    if args.format == "json":
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(to_markdown(result), end="")
    return 1 if result["failed"] else 0
