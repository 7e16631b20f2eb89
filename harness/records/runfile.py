"""The per-run files of the arm x seed matrix: their names (`ARM-sSEED`) and the one reader of
an align stage's `ARM-sSEED.json` (harness.records.schemas.RUN, prh.metrics/2), shared by
aggregate, report and diff whatever the bytes come from (disk or a git revision)."""

from __future__ import annotations

import re
from typing import Any

from harness.records.schemas import RUN, RunRecord
from prh.io import ContractError

RUN_FILE = re.compile(r"^(?P<arm>[A-Za-z0-9_]+)-s(?P<seed>\d+)\.json\Z")
PER_QUERY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.npz")  # a bare name: no / nor ..


def run_name(arm: str, seed: int) -> str:
    """The name of one run of the matrix (its text folder, align files and DVC stage item) and
    of a web-text run (its folder under runs/recap and its key in the recap scores)."""
    return f"{arm}-s{seed}"


def check_run_file(name: str, data: Any, where: str) -> RunRecord:
    """`data` read from the run file `name` (shown as `where`), checked: the schema, and the
    arm and seed its `run` record names against the file name. Raises ContractError."""
    m = RUN_FILE.match(name)
    if m is None:
        raise ContractError(f"{where}: not a run file name (ARM-sSEED.json)")
    data = RUN.check(data, where, f"align@{m['arm']}-{m['seed']}")
    run = data["run"]
    if run.get("arm") != m["arm"] or str(run.get("seed")) != m["seed"]:
        raise ContractError(f"{where}: its 'run' record says arm {run.get('arm')!r} seed "
                            f"{run.get('seed')!r}, the file name says otherwise")
    per_query = data.get("per_query")  # a string when present (RUN's shape)
    if per_query is not None and not PER_QUERY_NAME.fullmatch(per_query):
        raise ContractError(f"{where}: per_query {per_query!r} is not a file name beside the run "
                            "file (ARM-sSEED.npz, no folder); readers open nothing outside the "
                            "run folder: rerun its align stage")
    return data
