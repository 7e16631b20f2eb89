"""MLflow tracking: one run per (arm, seed) with every parameter, per-epoch metrics and tags
for the git commit, dirty flag, DVC stage, params hash, data hash and environment.

Backend: `MLFLOW_TRACKING_URI` when set (e.g. a shared server on PostgreSQL), else a SQLite
file `mlflow.db` at the repository root with artifacts in `mlruns/` beside it (MLflow's file
store is deprecated: from MLflow 3.13 `file:` tracking raises unless MLFLOW_ALLOW_FILE_STORE=true).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

EXPERIMENT = "prh-rerun"
# MLflow 3's UI opens GenAI views for an experiment it cannot classify; this tag (the UI's
# ExperimentKind for classic training) makes it show the experiment's training runs.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def repo_root() -> Path:
    """The git work tree containing the current directory (or the current directory)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, check=True)
        return Path(out.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return Path.cwd()


def git_state() -> dict[str, Any]:
    """Commit and dirty flag. Dirty means a tracked file differs from the commit, ignoring
    dvc.lock, which `dvc repro` itself rewrites while the pipeline runs."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"git_commit": "unknown (not a git checkout)", "git_dirty": True}
    changed = [line[3:] for line in status.splitlines() if line[3:].strip() != "dvc.lock"]
    return {"git_commit": commit, "git_dirty": bool(changed)}


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_root() / 'mlflow.db'}"


def _experiment_id(mlflow: Any) -> str:
    found = mlflow.get_experiment_by_name(EXPERIMENT)
    if found is not None:
        for key, value in EXPERIMENT_KIND.items():
            if found.tags.get(key) != value:
                mlflow.MlflowClient().set_experiment_tag(found.experiment_id, key, value)
        return found.experiment_id
    location = None
    if tracking_uri().startswith("sqlite:"):
        location = (repo_root() / "mlruns").as_uri()
    return mlflow.create_experiment(EXPERIMENT, artifact_location=location, tags=EXPERIMENT_KIND)


def ui_url(host: str = "http://127.0.0.1:5000") -> str | None:
    """The `mlflow ui` page of this project's training runs (None before the first run)."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    found = mlflow.get_experiment_by_name(EXPERIMENT)
    return None if found is None else f"{host}/#/experiments/{found.experiment_id}"


@contextlib.contextmanager
def tracked_run(name: str, params: dict[str, Any], tags: dict[str, Any]) -> Iterator[Any]:
    """Start an MLflow run named `name`, log flattened `params` and `tags`; the run ends
    FINISHED when the block succeeds and FAILED when it raises."""
    import logging

    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(tracking_uri())
    with mlflow.start_run(run_name=name, experiment_id=_experiment_id(mlflow)) as run:
        for start in range(0, len(params), 100):  # MLflow's batch limit is 100 params
            chunk = dict(list(params.items())[start:start + 100])
            mlflow.log_params({k: str(v)[:6000] for k, v in chunk.items()})
        mlflow.set_tags({k: str(v) for k, v in tags.items()})
        yield run


def log_artifacts(paths: list[Path]) -> None:
    """Files of the active run (its resolved config, its curves) as MLflow artifacts."""
    import mlflow

    for path in paths:
        mlflow.log_artifact(str(path))


def log_epoch(metrics: dict[str, float], epoch: int) -> None:
    """Per-epoch metrics of the active run (finite numbers only)."""
    import math

    import mlflow

    clean = {k: float(v) for k, v in metrics.items()
             if isinstance(v, int | float) and math.isfinite(float(v))}
    if clean:
        mlflow.log_metrics(clean, step=epoch)
