"""The per-query file `runs/align/ARM-sSEED.npz` (schema prh.per_query/1): every outcome of
one run per test pair, with the pairs' row ids. One writer (the align stage) and one reader
(aggregate, the report's measures and `harness diff`, from disk or a git revision)."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from harness.records.schemas import PER_QUERY
from prh.io import ContractError, atomic_path

IDS, SCHEMA = "ids", "schema"  # the two arrays that are not outcomes


def write_per_query(path: Path, ids: np.ndarray, outcomes: Mapping[str, np.ndarray]) -> None:
    """Per-test-pair outcomes (float64) with their row ids, atomically."""
    clash = sorted({IDS, SCHEMA} & set(outcomes))
    if clash:
        raise ValueError(f"outcome names {clash} are reserved in {path.name}")
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, **{SCHEMA: np.array(str(PER_QUERY)), IDS: ids},
                 **{k: np.asarray(v, dtype=np.float64) for k, v in outcomes.items()})


def read_per_query(source: Path | bytes, where: str | None = None
                   ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(ids, outcome name -> [n] float64) of a per-query file (a path, or its bytes read from
    a git revision, shown as `where`). ContractError for a file that is not one, of another
    version, or whose outcomes do not match its ids."""
    shown = where or str(source)
    m = re.match(r"^(?P<arm>[A-Za-z0-9_]+)-s(?P<seed>\d+)\.npz$", Path(shown).name)
    stage = f"align@{m['arm']}-{m['seed']}" if m else PER_QUERY.stage
    if not zipfile.is_zipfile(io.BytesIO(source) if isinstance(source, bytes) else source):
        raise ContractError(f"{shown}: unreadable per-query file (not an .npz archive: "
                            f"truncated or another format); rerun `dvc repro {stage}`")
    try:
        with np.load(io.BytesIO(source) if isinstance(source, bytes) else source,
                     allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # truncated, not a zip
        raise ContractError(f"{shown}: unreadable per-query file ({type(e).__name__}: {e}); "
                            f"rerun `dvc repro {stage}`") from e
    found = str(arrays[SCHEMA]) if SCHEMA in arrays else "none"
    problem = PER_QUERY.problem(found)
    if problem:
        raise ContractError(f"{shown}: {problem}; rerun `dvc repro {stage}`")
    if IDS not in arrays:
        raise ContractError(f"{shown}: no row ids; rerun `dvc repro {stage}`")
    ids = arrays.pop(IDS)
    arrays.pop(SCHEMA)
    outcomes = {k: v.astype(np.float64) for k, v in arrays.items()}
    bad = sorted(k for k, v in outcomes.items() if v.shape != ids.shape)
    if bad:
        raise ContractError(f"{shown}: outcomes {bad} do not have one value per id "
                            f"({len(ids)}); rerun `dvc repro {stage}`")
    return ids, outcomes
