"""runs/results.json (schema prh.results/2): the run files it is built from (`read_align_runs`),
its builder from every run's per-test-pair outcomes (`aggregate_runs`, `results_document`; the
estimators are harness.stats.estimators); its readers check it against
harness.records.schemas.RESULTS."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.records import names
from harness.records.perquery import read_per_query
from harness.records.runfile import check_run_file, run_name
from harness.records.schemas import RESULTS
from harness.stats.curves import run_curve
from harness.stats.estimators import (
    bootstrap_ci,
    paired_bootstrap_diff,
    seed_spread,
    two_level_gap,
    two_level_mean,
)
from prh.io import ContractError, check_same_ids, read_json


def aggregate_runs(per_query: Mapping[tuple[str, int], Mapping[str, np.ndarray]],
                   run_metrics: Mapping[tuple[str, int], Mapping[str, Mapping]],
                   arms: Sequence[str], seeds: Sequence[int], *, k: int, level: float,
                   n_resamples: int, seed: int) -> dict[str, object]:
    """Every run's scores gathered per arm: `{"arms": ..., "gaps": [...]}` of results.json.

    per_query[arm, seed][outcome] is the per-test-pair outcome vector [n] of one run (same
    test pairs in every run, e.g. "r_at_1_hit"); run_metrics[arm, seed] the run file's
    `metrics`. Per arm and metric: the seed spread of the run means and a bootstrap interval
    over test pairs of the per-pair outcome averaged over seeds; per pair of arms and metric:
    the paired bootstrap interval of the gap (same test pairs). Controls and chance levels are
    reported as seed spreads only. `two_level` (per metric and per gap): `two_level_mean` /
    `two_level_gap` (seeds on these test pairs, and seeds and test pairs), which the audit's
    verdicts read.
    """
    boot = {"level": level, "n_resamples": n_resamples, "seed": seed}
    outcomes = list(per_query[arms[0], seeds[0]])
    seed_mean = {(arm, m): np.mean([per_query[arm, s][m] for s in seeds], axis=0)
                 for arm in arms for m in outcomes}
    out_arms: dict[str, dict] = {}
    for arm in arms:
        block: dict[str, dict] = {"metrics": {}, "controls": {}}
        for m in outcomes:
            spread = seed_spread({str(s): float(np.mean(per_query[arm, s][m])) for s in seeds})
            ci = bootstrap_ci(seed_mean[arm, m], **boot)
            runs = np.stack([per_query[arm, s][m] for s in seeds])
            block["metrics"][names.metric_of(m)] = {
                **spread, **ci.to_dict(),
                "ci_method": f"{ci.method} (test pairs; per-pair outcome averaged over seeds)",
                "two_level": two_level_mean(runs).to_dict(level)}
        for extra in names.run_scalars(k):
            values = {str(s): run_metrics[arm, s].get(extra, {}).get("value") for s in seeds}
            if all(v is not None for v in values.values()):
                fit = names.row(extra, k).group == "fit"
                block["metrics" if fit else "controls"][extra] = seed_spread(values)
        out_arms[arm] = {"seeds": list(seeds), **block}
    gaps = []
    for a, b in itertools.combinations(arms, 2):
        for m in outcomes:
            diff, ci = paired_bootstrap_diff(seed_mean[a, m], seed_mean[b, m], **boot)
            pair = [np.stack([per_query[arm, s][m] for s in seeds]) for arm in (a, b)]
            gaps.append({"a": a, "b": b, "metric": names.metric_of(m), "diff": float(diff),
                         **ci.to_dict(),
                         "ci_method": f"{ci.method} (per-pair outcome averaged over seeds)",
                         "two_level": two_level_gap(*pair).to_dict(level)})
    return {"k": k, "arms": out_arms, "gaps": gaps}


CALIBRATION_CONSTANTS = ("n_permutations", "alpha")  # set by params.yaml's eval, not per seed


def _calibration_constants(run: Mapping[str, Mapping[str, float]]) -> dict[str, dict]:
    return {m: {f: fields[f] for f in CALIBRATION_CONSTANTS} for m, fields in run.items()}


def aggregate_calibrated(calibrated: Mapping[tuple[str, int], Mapping[str, Mapping[str, float]]],
                         arms: Sequence[str], seeds: Sequence[int]) -> dict[str, dict]:
    """Each arm's calibrated metrics over seeds: `results.json` arms.ARM.calibrated.

    calibrated[arm, seed] is a run file's `calibrated` block (prh.calibrate: per metric raw,
    null quantiles, threshold, p_value, calibrated, n_permutations, alpha). Per arm and metric:
    n_permutations and alpha, and the seed spread (`seed_spread`: every seed's value, mean,
    std, ...) of every other field. An arm whose runs were not calibrated gets {}.
    """
    out: dict[str, dict] = {}
    for arm in arms:
        runs = {str(s): calibrated[arm, s] for s in seeds}
        first = next(iter(runs.values()))
        constants = _calibration_constants(first)
        for seed, run in runs.items():
            if _calibration_constants(run) != constants:
                raise ValueError(f"{arm}: seed {seed} was calibrated on other metrics or settings "
                                 f"({sorted(run)}) than seed {next(iter(runs))} ({sorted(first)});"
                                 " rerun their align stages")
        out[arm] = {m: {**constants[m],
                        **{f: seed_spread({s: run[m][f] for s, run in runs.items()})
                           for f in fields if f not in CALIBRATION_CONSTANTS}}
                    for m, fields in first.items()}
    return out


def aggregate_pair_free(pair_free: Mapping[tuple[str, int], Mapping[str, Any]],
                        arms: Sequence[str], seeds: Sequence[int]) -> dict[str, dict]:
    """Each arm's pair-free scores over seeds: `results.json` arms.ARM.pair_free.

    pair_free[arm, seed] is a run file's `pair_free` block (prh.pairfree.score_pairfree; {}
    when eval.pairfree_pool is 0). Per arm: every seed's status, and the seed spread
    (`seed_spread`) of each numeric field. An arm with no pair-free runs gets {}.
    """
    out: dict[str, dict] = {}
    for arm in arms:
        runs = {str(s): pair_free[arm, s] for s in seeds}
        if not any(runs.values()):
            out[arm] = {}
            continue
        missing = [s for s, run in runs.items() if not run]
        if missing:
            raise ValueError(f"{arm}: seeds {missing} have no pair-free scores and others do; "
                             "rerun their align stages")
        first = next(iter(runs.values()))
        numeric = [f for f, v in first.items() if isinstance(v, int | float)
                   and not isinstance(v, bool)]
        out[arm] = {"status": {s: run["status"] for s, run in runs.items()},
                    **{f: seed_spread({s: float(run[f]) for s, run in runs.items()})
                       for f in numeric}}
    return out


Run = tuple[str, int]  # (arm, seed)
RUN_BLOCKS = ("gallery_curve", "calibrated", "trainval_map")  # every run file must have them


@dataclass
class AlignRuns:
    """Every align run file of the matrix and its per-query outcomes, keyed (arm, seed)."""

    metrics: dict[Run, dict] = field(default_factory=dict)  # the run file's `metrics`
    per_query: dict[Run, dict[str, np.ndarray]] = field(default_factory=dict)
    ids: np.ndarray | None = None  # the test pairs' row ids, the same in every run
    mlflow: dict[Run, str | None] = field(default_factory=dict)  # the training run's id
    blocks: dict[Run, dict[str, Any]] = field(default_factory=dict)  # RUN_BLOCKS, pair_free
    epoch_curves: dict[Run, dict] = field(default_factory=dict)  # harness.stats.curves

    def by_arm(self, block: str, arms: Sequence[str], seeds: Sequence[int]) -> dict[str, dict]:
        """arm -> seed (as text) -> that run's `block`."""
        return {a: {str(s): self.blocks[a, s][block] for s in seeds} for a in arms}


def read_align_runs(align_dir: Path, arms: Sequence[str], seeds: Sequence[int],
                    params_hashes: Mapping[str, str]) -> AlignRuns:
    """The run file and per-query file of every (arm, seed), checked: schema, arm and seed,
    the params hash they were scored under (`params_hashes[arm]`, Params.arm_hash), the blocks
    aggregate reads, the same test pairs. ContractError naming the file and the stage to
    rerun."""
    out = AlignRuns()
    for arm, seed in itertools.product(arms, seeds):
        name = run_name(arm, seed)
        path = align_dir / f"{name}.json"
        run = check_run_file(path.name, read_json(path), str(path))
        if run["run"]["params_hash"] != params_hashes[arm]:
            raise ContractError(f"{path}: params hash {run['run']['params_hash']} differs "
                                f"from params.yaml's {params_hashes[arm]}; rerun `harness run`")
        for block in (*RUN_BLOCKS, "curve", "per_query"):
            if block not in run:
                raise ContractError(f"{path}: no {block}; rerun its align stage "
                                    "(`harness run`)")
        out.metrics[arm, seed] = run["metrics"]
        out.blocks[arm, seed] = {**{b: run[b] for b in RUN_BLOCKS},
                                 "pair_free": run.get("pair_free", {})}
        try:
            out.epoch_curves[arm, seed] = run_curve(run["curve"])
        except ValueError as e:
            raise ContractError(f"{path}: {e}") from e
        out.mlflow[arm, seed] = run["run"].get("mlflow_run_id")
        npz = path.with_name(run["per_query"])
        if not npz.exists():
            raise ContractError(f"{npz}: missing; rerun its align stage (`harness run`)")
        ids, out.per_query[arm, seed] = read_per_query(npz)
        ids = ids.astype(str)
        if out.ids is None:
            out.ids = ids
        check_same_ids(out.ids, ids, "first run's test ids", f"{name}.npz test ids")
    return out


def results_document(stats: Mapping[str, Any], *, profile: str, params_hash: str,
                     summary: Mapping[str, Any], n_test: int, mlflow_run_id: str | None,
                     runs: Sequence[str]) -> dict[str, Any]:
    """runs/results.json: `stats` (aggregate_runs' arms and gaps, each arm completed by the
    stage) with what it was computed from."""
    return {"schema": str(RESULTS), "profile": profile, "params_hash": params_hash,
            "data_hash": summary["data_hash"], "n_test": n_test, "mlflow_run_id": mlflow_run_id,
            "data_warnings": summary.get("warnings", []), **stats, "runs": list(runs)}
