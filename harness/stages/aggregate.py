"""Stage `aggregate`: every run's scores in one file, runs/results.json: per-arm seed spread,
intervals over test pairs of the seed-mean outcome, and paired intervals on the gaps between
arms (harness.records.results); per arm, the numbers read off its runs' per-epoch curves
(harness.stats.curves) and what its train + val map was fitted on."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from harness.config.params import load_params
from harness.records.runfile import run_name
from harness.stages.common import fail, stage_parser
from prh.io import ContractError, atomic_dir, read_json, write_json


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
    from harness.records.results import read_align_runs

    try:  # parse and load: every run file and per-query file, checked
        params = load_params(args.params)
        runs = read_align_runs(args.align_dir, params.arms, params.seeds,
                               {arm: params.arm_hash(arm) for arm in params.arms})
        summary = read_json(args.prepared / "summary.json")
    except ContractError as e:
        return fail(e)
    try:  # compute: a run file that cannot be combined with the others
        stats = gather(runs, params)
    except ValueError as e:
        return fail(ContractError(f"{args.align_dir}: {e}"))
    write(args, params, runs, summary, stats)
    return 0


def gather(runs: Any, params: Any) -> dict[str, Any]:
    """Every metric and gap of results.json (harness.records.results), and per arm its
    gallery-size curve (prh.gallery), calibrated and pair-free scores and epoch curves over
    its seeds, and what its train + val map was fitted on."""
    from harness.records.results import aggregate_calibrated, aggregate_pair_free, aggregate_runs
    from harness.stats.curves import arm_curve
    from prh.gallery import curve_over_seeds

    ev, arms, seeds = params.eval_config(), params.arms, params.seeds
    per_arm = {
        "gallery_curve": {a: curve_over_seeds(c)
                          for a, c in runs.by_arm("gallery_curve", arms, seeds).items()},
        "calibrated": aggregate_calibrated(
            {key: b["calibrated"] for key, b in runs.blocks.items()}, arms, seeds),
        "pair_free": aggregate_pair_free(
            {key: b["pair_free"] for key, b in runs.blocks.items()}, arms, seeds),
        "curve": {a: arm_curve({str(s): runs.epoch_curves[a, s] for s in seeds}) for a in arms},
        "trainval_map": {a: runs.blocks[a, seeds[0]]["trainval_map"] for a in arms}}
    stats = aggregate_runs(runs.per_query, runs.metrics, arms, seeds, k=ev.k,
                           level=ev.ci_level, n_resamples=ev.n_resamples,
                           seed=ev.bootstrap_seed)
    for arm in arms:
        stats["arms"][arm].update({block: values[arm] for block, values in per_arm.items()})
    return stats


def write(args: Any, params: Any, runs: Any, summary: dict[str, Any],
          stats: dict[str, Any]) -> None:
    """MLflow (a run per arm with the seed runs nested, under a run with the gaps), --out,
    the flat --metrics files, one line per arm."""
    from harness.records.flat import aggregate_metrics
    from harness.records.results import results_document
    from harness.tracking import mlflow_runs as tracking

    ev, arms, seeds = params.eval_config(), params.arms, params.seeds
    run_id = tracking.log_results(stats, runs.mlflow, profile=params.profile,
                                  params_hash=params.hash, data_hash=summary["data_hash"])
    write_json(args.out, results_document(
        stats, profile=params.profile, params_hash=params.hash, summary=summary,
        n_test=int(len(runs.ids)), mlflow_run_id=run_id,
        runs=[str(args.align_dir / f"{run_name(a, s)}.json")
              for a, s in itertools.product(arms, seeds)]))
    if run_id is not None:
        tracking.log_artifacts([args.out], run_id)
    if args.metrics is not None:
        with atomic_dir(args.metrics) as tmp:
            for name, flat in aggregate_metrics(stats, ev.k).items():
                write_json(tmp / f"{name}.json", flat)
    for arm in arms:
        r1 = stats["arms"][arm]["metrics"]["r_at_1"]
        print(f"aggregate: {arm:<4} R@1 mean {r1['mean']:.3f} over seeds {list(seeds)}, "
              f"{ev.ci_level:.0%} interval over test pairs [{r1['ci'][0]:.3f}, {r1['ci'][1]:.3f}]")
