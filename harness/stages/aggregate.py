"""Stage `aggregate`: every run's scores in one file, runs/results.json: per-arm seed spread,
intervals over test pairs of the seed-mean outcome, and paired intervals on the gaps between
arms (harness.stats.aggregate_runs); per arm, the numbers read off its runs' per-epoch curves
(harness.curves) and what its train + val map was fitted on."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from prh.io import ContractError, atomic_dir, check_same_ids, read_json, write_json

from ..params import load_params
from ..runfiles import check_run_file, run_name
from .common import fail, stage_parser


def load_per_query(path: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The row ids and per-pair outcomes an align stage saved beside its run file."""
    if not path.exists():
        raise ContractError(f"{path}: missing; rerun its align stage (`harness run`)")
    with np.load(path, allow_pickle=False) as z:
        return z["ids"].astype(str), {k: z[k] for k in z.files if k != "ids"}


def main(argv: list[str]) -> int:
    """Gather the run files of --align-dir for every arm and seed of params.yaml; write the
    per-arm and per-gap statistics to --out (the data hash from --prepared's summary)."""
    parser = stage_parser("aggregate", main.__doc__)
    parser.add_argument("--align-dir", type=Path, required=True, help="align stages' folder")
    parser.add_argument("--prepared", type=Path, required=True, help="prepare stage's folder")
    parser.add_argument("--out", type=Path, required=True, help="results JSON")
    parser.add_argument("--metrics", type=Path, default=None,
                        help="folder for each arm's seed means and each gap as small flat "
                             "JSON files (ARM.json, A-B.json) for `dvc metrics show`")
    args = parser.parse_args(argv)
    # imported after parsing, so `harness aggregate --help` answers at once
    from prh.gallery import curve_over_seeds

    from .. import tracking
    from ..curves import arm_curve, run_curve
    from ..flat import aggregate_metrics
    from ..stats import aggregate_calibrated, aggregate_pair_free, aggregate_runs

    try:
        params = load_params(args.params)
        ev = params.eval_config()
        metrics, per_query, seed_runs, ids_ref = {}, {}, {}, None
        curves: dict[str, dict[str, list]] = {}  # arm -> seed -> the run's gallery curve
        calibrated = {}  # (arm, seed) -> the run's calibrated block (prh.calibrate)
        pair_free = {}  # (arm, seed) -> the run's pair-free block (prh.pairfree)
        epoch_curves: dict[str, dict[str, dict]] = {}  # arm -> seed -> harness.curves.run_curve
        trainval: dict[str, dict] = {}  # arm -> its first seed's train + val map record
        for arm, seed in itertools.product(params.arms, params.seeds):
            name = run_name(arm, seed)
            path = args.align_dir / f"{name}.json"
            run = check_run_file(path.name, read_json(path), str(path))
            if run["run"]["params_hash"] != params.hash:
                raise ContractError(f"{path}: params hash {run['run']['params_hash']} differs "
                                    f"from params.yaml's {params.hash}; rerun `harness run`")
            metrics[arm, seed] = run["metrics"]
            if "gallery_curve" not in run:
                raise ContractError(f"{path}: no gallery_curve; rerun its align stage "
                                    "(`harness run`)")
            curves.setdefault(arm, {})[str(seed)] = run["gallery_curve"]
            if "calibrated" not in run:
                raise ContractError(f"{path}: no calibrated block; rerun its align stage "
                                    "(`harness run`)")
            calibrated[arm, seed] = run["calibrated"]
            pair_free[arm, seed] = run.get("pair_free", {})
            if "trainval_map" not in run:
                raise ContractError(f"{path}: no trainval_map; rerun its align stage "
                                    "(`harness run`)")
            trainval.setdefault(arm, run["trainval_map"])
            try:
                epoch_curves.setdefault(arm, {})[str(seed)] = run_curve(run["curve"])
            except ValueError as e:
                raise ContractError(f"{path}: {e}") from e
            seed_runs[arm, seed] = run["run"].get("mlflow_run_id")
            ids, per_query[arm, seed] = load_per_query(path.with_name(run["per_query"]))
            if ids_ref is None:
                ids_ref = ids
            check_same_ids(ids_ref, ids, "first run's test ids", f"{name}.npz test ids")
        summary = read_json(args.prepared / "summary.json")
    except ContractError as e:
        return fail(e)
    try:  # each arm's gallery-size curve (prh.gallery) and calibrated metrics over its seeds
        gallery = {arm: curve_over_seeds(curves[arm]) for arm in params.arms}
        calibration = aggregate_calibrated(calibrated, params.arms, params.seeds)
        pair_free_arms = aggregate_pair_free(pair_free, params.arms, params.seeds)
        curve_arms = {arm: arm_curve(epoch_curves[arm]) for arm in params.arms}
    except ValueError as e:
        return fail(ContractError(f"{args.align_dir}: {e}"))
    stats = aggregate_runs(per_query, metrics, params.arms, params.seeds, k=ev.k,
                           level=ev.ci_level, n_resamples=ev.n_resamples,
                           seed=ev.bootstrap_seed)
    for arm in params.arms:
        stats["arms"][arm]["gallery_curve"] = gallery[arm]
        stats["arms"][arm]["calibrated"] = calibration[arm]
        stats["arms"][arm]["pair_free"] = pair_free_arms[arm]
        stats["arms"][arm]["curve"] = curve_arms[arm]
        stats["arms"][arm]["trainval_map"] = trainval[arm]
    # MLflow's view: a run per arm with the seed runs nested, under a run with the gaps
    run_id = tracking.log_results(stats, seed_runs, profile=params.profile,
                                  params_hash=params.hash, data_hash=summary["data_hash"])
    write_json(args.out, {
        "schema": "prh.results/1", "profile": params.profile, "params_hash": params.hash,
        "data_hash": summary["data_hash"], "n_test": int(len(ids_ref)), "mlflow_run_id": run_id,
        "data_warnings": summary.get("warnings", []), **stats,
        "runs": [str(args.align_dir / f"{run_name(a, s)}.json")
                 for a, s in itertools.product(params.arms, params.seeds)]})
    if run_id is not None:
        tracking.log_artifacts([args.out], run_id)
    if args.metrics is not None:
        with atomic_dir(args.metrics) as tmp:
            for name, flat in aggregate_metrics(stats).items():
                write_json(tmp / f"{name}.json", flat)
    for arm in params.arms:
        r1 = stats["arms"][arm]["metrics"]["r_at_1"]
        print(f"aggregate: {arm:<4} R@1 mean {r1['mean']:.3f} over seeds {list(params.seeds)}, "
              f"{ev.ci_level:.0%} interval over test pairs [{r1['ci'][0]:.3f}, {r1['ci'][1]:.3f}]")
    return 0
