"""`harness next`: after a look's audit, record the look in the ledger (runs/looks.json, with
an MLflow run tagged with the plan's hash and the look) and start the next look for the arms
that still feed an undecided claim, at the plan's next seeds per arm: a DVC experiment
(`dvc exp run -S arms=[...] -S seeds=[...]`; DVC's run cache restores the seeds already
trained), queued by default, or run now in the workspace (`--run`, with `--until-decided`
until the study is decided or at its cap). On a cluster, `--print` gives the command and
`harness launch` submits the look's trainings (README, "When you outgrow one machine")."""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.stages.common import fail, stage_parser
from prh.io import ContractError, read_json, write_json


def parser() -> argparse.ArgumentParser:
    p = stage_parser("next", main.__doc__)
    p.add_argument("--plan", type=Path, default=Path("runs/plan.json"),
                   help="the registered plan (default: %(default)s)")
    p.add_argument("--looks", type=Path, default=Path("runs/looks.json"),
                   help="the ledger of the looks taken (default: %(default)s)")
    p.add_argument("--audit", type=Path, default=Path("reports/audit.json"),
                   help="the look's audit (default: %(default)s)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--run", action="store_true",
                     help="run the next look now in the workspace (`dvc exp run`)")
    how.add_argument("--print", action="store_true", help="only print the next look's command")
    p.add_argument("--until-decided", action="store_true",
                   help="with --run: record and run look after look until the study is "
                        "decided or at the plan's cap")
    return p


def main(argv: list[str]) -> int:
    """Record the audited look in the ledger, then queue (or run, or print) the next look for
    the arms an undecided claim reads; say when the study is decided or at its cap."""
    args = parser().parse_args(argv)
    if args.until_decided and not args.run:
        return fail(ContractError("--until-decided runs the looks here: give --run too"))
    while True:
        try:
            seq, command = step(args)
        except ContractError as e:
            return fail(e)
        if command is None:
            return 0
        if args.print:
            print(" ".join(command))
            return 0
        if not args.run:
            command.append("--queue")
        print("$ " + " ".join(command), flush=True)
        code = subprocess.run(command).returncode
        if code != 0:
            print(f"harness next: `{' '.join(command)}` exited {code}; the look stays recorded: "
                  "mend and rerun the command", file=sys.stderr)
            return code
        if not args.run:
            name = command[command.index("-n") + 1]
            print(f"queued: `dvc queue start` runs it; when it has, `dvc exp apply {name}` "
                  "brings its audit here and `harness next` records it")
            return 0
        if not args.until_decided:
            return 0


def step(args: argparse.Namespace) -> tuple[dict[str, Any], list[str] | None]:
    """Record the audit's look; return its sequential block and the next look's command (None:
    the study is decided or at its cap)."""
    from harness.audit.looks import read_ledger, record
    from harness.audit.plan import check_plan
    from harness.config.params import load_params
    from harness.records.verdicts import AUDIT

    plan = check_plan(read_json(args.plan), str(args.plan))
    ledger = read_ledger(args.looks)
    audit = AUDIT.check(read_json(args.audit), str(args.audit))
    seq = audit.get("sequential")
    params = load_params(args.params)
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    updated = record(ledger, plan, audit, when, None)  # refuses an audit that is no new look
    assert seq is not None
    updated["looks"][-1]["mlflow_run_id"] = run_id = log_look(plan, seq)
    write_json(args.looks, updated)
    print(f"recorded look {seq['look']} of plan {plan['hash']} in {args.looks}"
          + (f" (MLflow run {run_id})" if run_id else ""))
    if not seq["next_seeds"]:
        undecided = [c for c, s in seq["claims"].items() if s["status"] == "at the cap"]
        print("the study is decided: every planned claim is decided or stopped" if not undecided
              else f"the study is at its cap ({plan['looks'][-1]} seeds per arm): "
                   f"{len(undecided)} claim(s) undecided there ({', '.join(undecided)})")
        return seq, None
    seeds = next_seeds(list(params.seeds), seq["next_seeds"])
    arms = seq["continuing_arms"]
    print(f"look {seq['look'] + 1}: {seq['next_seeds']} seeds per arm for {', '.join(arms)} "
          f"(the arms an undecided claim reads)")
    return seq, ["dvc", "exp", "run", "-S", f"arms=[{','.join(arms)}]", "-S",
                 f"seeds=[{','.join(map(str, seeds))}]", "-n",
                 f"look-{seq['look'] + 1}-{plan['hash'][:7]}"]


def next_seeds(seeds: list[int], n: int) -> list[int]:
    """The look's seeds: the ones run so far, then the smallest unused integers up to n."""
    out, candidate = list(seeds), 0
    while len(out) < n:
        if candidate not in out:
            out.append(candidate)
        candidate += 1
    return out[:n]


def log_look(plan: dict[str, Any], seq: dict[str, Any]) -> str | None:
    """The look's MLflow run (role "look", found again by plan hash and look)."""
    from harness.audit.looks import summary
    from harness.tracking.mlflow_runs import log_study_run

    counts = summary(seq)
    return log_study_run(
        "look", {"prh.plan_hash": plan["hash"], "prh.look": str(seq["look"])},
        f"look {seq['look']} of plan {plan['hash']}",
        {"seeds": seq["seeds"], "continuing_arms": ",".join(seq["continuing_arms"]) or "none",
         "next_seeds": seq["next_seeds"] or "none"},
        {f"claims_{k.replace(' ', '_')}": float(v) for k, v in counts.items()}, [])
