"""Stage `plan` (and the command `harness plan`): the seed plan of the profile's sampled claims,
registered before the first training it governs (dvc.yaml's config stage, which every training
follows, depends on it): runs/plan.json (hashed) and its table runs/plan.md, and an MLflow run
that holds both (harness.audit.plan). A plan that differs from the one the ledger's looks were
taken under is refused (harness.audit.looks.refuse_new_plan)."""

from __future__ import annotations

from pathlib import Path

from harness.stages.common import fail, stage_parser
from prh.io import ContractError, write_json, write_text


def main(argv: list[str]) -> int:
    """Plan the seeds of --claims' sampled claims for params.yaml's profile (its `plan`
    section); write --out and --table (and an empty ledger at --looks when there is none);
    refuse a plan other than the one --looks' looks were taken under."""
    parser = stage_parser("plan", main.__doc__)
    parser.add_argument("--claims", type=Path, default=Path("harness/audit/claims.yaml"),
                        help="claims registry (default: %(default)s)")
    parser.add_argument("--looks", type=Path, default=Path("runs/looks.json"),
                        help="the ledger of the looks taken (default: %(default)s), started "
                             "empty here when absent; `harness next` appends to it")
    parser.add_argument("--out", type=Path, default=Path("runs/plan.json"),
                        help="the plan (default: %(default)s)")
    parser.add_argument("--table", type=Path, default=Path("runs/plan.md"),
                        help="the plan as a table (default: %(default)s)")
    args = parser.parse_args(argv)
    from harness.audit.claims import load_registry
    from harness.audit.looks import read_ledger, refuse_new_plan
    from harness.audit.plan import build_plan, plan_table
    from harness.config.params import load_params

    try:  # parse and load, then plan: every bad input is one line before any training
        params = load_params(args.params)
        cfg = params.plan_config()
        plan = build_plan(cfg, load_registry(args.claims), params.profile, params.margins,
                          f"{args.params}: {params.profile}.plan")
        ledger = read_ledger(args.looks)
        refuse_new_plan(plan, ledger, str(args.out))
    except ContractError as e:
        return fail(e)
    if not args.looks.exists():
        write_json(args.looks, ledger)
    write_json(args.out, plan)
    write_text(args.table, plan_table(plan))
    run_id = register(plan, [args.out, args.table])
    print(f"plan {plan['hash']}: {len(plan['claims'])} claims, looks at {plan['looks']} seeds "
          f"per arm; wrote {args.out} and {args.table}"
          + (f"; MLflow run {run_id}" if run_id else ""))
    return 0


def register(plan: dict, files: list[Path]) -> str | None:
    """The plan's MLflow run (role "plan", found again by its hash) with its files."""
    from harness.tracking.mlflow_runs import log_study_run

    return log_study_run(
        "plan", {"prh.plan_hash": plan["hash"], "profile": plan["profile"]},
        f"plan {plan['hash']} ({plan['profile']})",
        {"looks": plan["looks"], "family_k": plan["family_k"], "claims": len(plan["claims"]),
         "spending": plan["spending"], "differs_miss": plan["differs_miss"]},
        {"fixed_seeds": float(plan["fixed_seeds"] or 0), "cap": float(plan["looks"][-1])},
        files)
