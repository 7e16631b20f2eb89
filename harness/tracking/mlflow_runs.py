"""MLflow tracking: one run per (arm, seed) with every parameter, per-epoch metrics and tags
for the git commit, dirty flag, DVC stage, params hash, data hash and environment.

Backend: `MLFLOW_TRACKING_URI` when set (e.g. a shared server on PostgreSQL), else a SQLite
file `mlflow.db` at the root of the user's workspace with artifacts in `mlruns/` beside it
(MLflow's file store is deprecated: from MLflow 3.13 `file:` tracking raises unless
MLFLOW_ALLOW_FILE_STORE=true). The workspace is DVC's `DVC_ROOT` when DVC runs the stage: `dvc
exp run --queue` and `--temp` run in a clone under .dvc/tmp/exps that DVC deletes afterwards,
and point DVC_ROOT at the workspace they came from, so their runs land in its mlflow.db.

Tracking is recorded, never required: only training opens a run; a later stage that finds the
store unreachable or without the run warns and writes its outputs all the same.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.records.runfile import run_name
from prh.io import ContractError

EXPERIMENT = "prh-rerun"
# MLflow 3's UI opens GenAI views for an experiment it cannot classify; this tag (the UI's
# ExperimentKind for classic training) makes it show the experiment's training runs.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def repo_root() -> Path:
    """The user's workspace: DVC_ROOT when DVC runs the stage (for a queued or temp experiment,
    the workspace it was queued from, not its temp clone), else the git work tree containing
    the current directory (or the current directory)."""
    if os.environ.get("DVC_ROOT"):
        return Path(os.environ["DVC_ROOT"])
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, check=True)
        return Path(out.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return Path.cwd()


def git_state() -> dict[str, Any]:
    """Commit and dirty flag. Dirty means a file of the commit differs from it, ignoring
    dvc.lock, which `dvc repro` itself rewrites while the pipeline runs; a new file is not
    counted, untracked or staged (`dvc exp run` stages each `cache: false` output as it is
    written, such as the seed plan's before any training)."""
    # a DVC experiment's run: its name and the commit it was branched from (the commit below is
    # then the executor's, with the experiment's params applied on top: dirty)
    names = (("dvc_exp_name", "DVC_EXP_NAME"), ("dvc_exp_baseline", "DVC_EXP_BASELINE_REV"))
    experiment = {key: os.environ[env] for key, env in names if os.environ.get(env)}
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"git_commit": "unknown (not a git checkout)", "git_dirty": True, **experiment}
    changed = [line[3:] for line in status.splitlines()
               if line[3:].strip() != "dvc.lock" and not line.startswith("A")]
    return {"git_commit": commit, "git_dirty": bool(changed), **experiment}


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_root() / 'mlflow.db'}"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///PATH` store; None for a server or another store."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


@contextlib.contextmanager
def _first_use_lock() -> Iterator[None]:
    """On the SQLite default, one process at a time creates the database and the experiment:
    runs started together on a fresh mlflow.db otherwise race through MLflow's schema
    migrations ("table ... already exists") and all fail. The lock is flock on the database
    file itself, which SQLite's own (fcntl) locks ignore."""
    import fcntl

    path = sqlite_path(tracking_uri())
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _experiment_id(mlflow: Any) -> str:
    found = mlflow.get_experiment_by_name(EXPERIMENT)
    if found is not None:
        for key, value in EXPERIMENT_KIND.items():
            if found.tags.get(key) != value:
                mlflow.MlflowClient().set_experiment_tag(found.experiment_id, key, value)
        return found.experiment_id
    location = None  # a server keeps its own (mlflow-artifacts:)
    database = sqlite_path(tracking_uri())
    if database is not None:  # beside the database, which several workspaces may share
        location = (database.parent / "mlruns").as_uri()
    try:
        return mlflow.create_experiment(EXPERIMENT, artifact_location=location,
                                        tags=EXPERIMENT_KIND)
    except mlflow.exceptions.MlflowException as e:  # a run started together created it first
        if e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return mlflow.get_experiment_by_name(EXPERIMENT).experiment_id


def ui_url(host: str = "http://127.0.0.1:5000") -> str | None:
    """The `mlflow ui` page of this project's runs table (None before the first run): the
    experiment's own address opens MLflow 3's overview tab, its `/runs` the table."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    found = mlflow.get_experiment_by_name(EXPERIMENT)
    return None if found is None else f"{host}/#/experiments/{found.experiment_id}/runs"


# While a run is live, a call to the server gives up after one try and 10 s, so an outage costs
# seconds per epoch, not MLflow's default 7 retries with growing back-off per call.
QUICK = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
_pending: list[tuple[dict[str, float], int]] = []  # epochs the server has not taken yet
_unsent: list[str] = []  # artifacts the server did not take
_logged: dict[str, set[int]] = {}  # metric -> steps a resumed run held already (log_epoch skips)


@contextlib.contextmanager
def _quick_calls() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in QUICK}
    os.environ.update(QUICK)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def check_server(uri: str | None = None) -> None:
    """Refuse to start when the tracking store cannot be used, with one line and before any
    training: an http(s) server that does not answer its /health page within 10 s, or a SQLite
    store that cannot be written or read (`check_sqlite`)."""
    import urllib.request

    uri = uri or tracking_uri()
    database = sqlite_path(uri)
    if database is not None:
        check_sqlite(database)
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=10) as answer:
            answer.read()
    except OSError as e:
        raise ContractError(
            f"MLflow tracking server {uri} (MLFLOW_TRACKING_URI) does not answer: {e}; start "
            "it, or unset MLFLOW_TRACKING_URI to log to mlflow.db in the repository") from e


# bytes a SQLite store's disk must have free before a training starts: MLflow's schema is about
# 0.5 MB and a run's rows a few kB an epoch; below it the store fails mid-run
MIN_FREE = 16 * 2 ** 20


def check_sqlite(path: Path) -> None:
    """A SQLite store must be writable: its folder's disk writable with MIN_FREE bytes free; a
    store that does not exist yet is made now (its schema and this project's experiment), and
    removed again if that fails, so none is left half-created; one that exists must open and
    hold MLflow's tables."""
    import sqlite3

    folder = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    if free < MIN_FREE:
        raise ContractError(f"{path}: its disk has {free:,} bytes free, less than the "
                            f"{MIN_FREE // 2 ** 20} MiB a tracking store needs; make room there "
                            "or point MLFLOW_TRACKING_URI elsewhere")
    if not os.access(folder, os.W_OK):
        raise ContractError(f"{path}: {folder} is not writable (a read-only disk or "
                            "permissions); point MLFLOW_TRACKING_URI to a writable store")
    if not path.exists() or path.stat().st_size == 0:
        _create_store(path)
        return
    try:  # rw, not ro: a process killed mid-commit leaves a hot journal that only a writer
        # may roll back (SQLite's "attempt to write a readonly database" otherwise)
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=rw", uri=True)) as db:
            tables = {r[0] for r in db.execute("select name from sqlite_master")}
    except sqlite3.DatabaseError as e:
        raise ContractError(f"{path}: not a readable MLflow database ({e}); move it aside "
                            f"(`mv {path} {path}.broken`) and rerun: a new one is made") from e
    if tables and "runs" not in tables:
        raise ContractError(f"{path}: a SQLite file without MLflow's tables; point "
                            "MLFLOW_TRACKING_URI elsewhere or move the file aside")


def _create_store(path: Path) -> None:
    """Make the SQLite store at `path` (MLflow's schema and the experiment) under the first-use
    lock; on any failure remove what was made and raise one line."""
    import logging

    import mlflow

    for name in ("mlflow", "alembic"):  # their INFO lines on creating the schema
        logging.getLogger(name).setLevel(logging.WARNING)
    existed = path.exists()
    try:
        mlflow.set_tracking_uri(f"sqlite:///{path}")
        with _first_use_lock():
            _experiment_id(mlflow)
    except Exception as e:  # sqlalchemy's, MLflow's or the OS's error: one line, no store
        if not existed or path.stat().st_size == 0:
            path.unlink(missing_ok=True)
        reason = " ".join(str(e).split("[SQL:")[0].split())[:200]
        raise ContractError(f"{path}: the tracking store cannot be created ({reason}); make "
                            "room or fix permissions there, or point MLFLOW_TRACKING_URI "
                            "elsewhere") from None


def _resumable(mlflow: Any, run_id: str | None) -> str | None:
    """`run_id` when the store holds it and it did not finish (a killed attempt), else None."""
    if not run_id:
        return None
    try:
        with _quick_calls():
            found = mlflow.MlflowClient(tracking_uri()).get_run(run_id)
    except Exception:  # not in this store (another workspace's run): start a new one
        return None
    unfinished = found.info.status in ("RUNNING", "FAILED", "KILLED")
    return run_id if unfinished and found.info.lifecycle_stage == "active" else None


@contextlib.contextmanager
def tracked_run(name: str, params: dict[str, Any], tags: dict[str, Any],
                resume: Path | None = None) -> Iterator[Any]:
    """Start an MLflow run named `name`, log flattened `params` and `tags`; the run ends
    FINISHED when the block succeeds and FAILED when it raises. Metrics the server missed
    (log_epoch buffers them) are sent at the end; what still cannot be sent is named on stderr
    and in the run's `lost` tag, and the run ends FAILED. `resume`: a file keeping the run's
    id beside the training's checkpoints, so a resumed training continues the run it started
    (one run with every epoch, none left RUNNING) instead of opening another."""
    import logging

    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(tracking_uri())
    _pending.clear()
    _unsent.clear()
    with _first_use_lock():
        experiment_id = _experiment_id(mlflow)
    # system/* metrics (CPU, memory, disk, network; GPU where nvidia-ml-py is installed)
    # sampled every 10 s by MLflow's monitor thread while the run lives
    earlier = _resumable(mlflow, resume.read_text().strip() if resume and resume.is_file()
                         else None)
    run = mlflow.start_run(run_id=earlier, run_name=None if earlier else name,
                           experiment_id=experiment_id, log_system_metrics=True)
    _logged.clear()
    if earlier:  # a resumed training replays epochs the run may hold already: log each once
        _logged.update(_steps_logged(mlflow, earlier))
    if resume is not None:
        resume.parent.mkdir(parents=True, exist_ok=True)
        resume.write_text(run.info.run_id)
    if earlier:
        print(f"train: continuing MLflow run {earlier} of the interrupted attempt",
              file=sys.stderr)
    status = "FAILED"
    try:
        for start in range(0, len(params), 100):  # MLflow's batch limit is 100 params
            chunk = dict(list(params.items())[start:start + 100])
            mlflow.log_params({k: str(v)[:6000] for k, v in chunk.items()})
        mlflow.set_tags({k: str(v) for k, v in tags.items()})
        if earlier:
            attempts = int(run.data.tags.get("attempts", "1")) + 1
            mlflow.set_tag("attempts", attempts)
        yield run
        status = "FINISHED"
    finally:
        _send_pending()
        lost = lost_items()
        if lost:
            status = "FAILED"
            print(f"warning: MLflow server {tracking_uri()} did not take {lost} of run "
                  f"{run.info.run_id}; they are in the run's output folder", file=sys.stderr)
        with _quick_calls():
            if lost:
                with contextlib.suppress(Exception):  # named on stderr already
                    mlflow.set_tag("lost", lost[:5000])
            try:
                mlflow.end_run(status)
            except Exception:  # the server is gone (end_run has left the run already)
                if not _end_later(mlflow, run.info.run_id, status):
                    print(f"warning: MLflow {tracking_uri()} did not answer: run "
                          f"{run.info.run_id} stays RUNNING on the server; once it answers, "
                          f"mark it {status} with: {mend_command(run.info.run_id, status)}",
                          file=sys.stderr)


END_WAITS = (2, 5, 10)  # seconds before each further try to mark a run ended on a stalled store


def _end_later(mlflow: Any, run_id: str, status: str) -> bool:
    """Mark `run_id` ended with `status` after END_WAITS, for a store that stalled at the end
    of the run; True once it took it."""
    import time

    client = mlflow.MlflowClient(tracking_uri())
    for wait in END_WAITS:
        time.sleep(wait)
        try:
            client.set_terminated(run_id, status)
            return True
        except Exception:  # MLflow raises its own, requests' or the store's errors
            continue
    return False


def mend_command(run_id: str, status: str) -> str:
    """The one shell command that marks `run_id` ended with `status` in this store."""
    return (f"python -c \"import mlflow; mlflow.MlflowClient('{tracking_uri()}')"
            f".set_terminated('{run_id}', '{status}')\"")


def lost_items() -> str:
    """What the server has not taken: the epochs and names of buffered metrics, the unsent
    artifacts (empty when everything arrived)."""
    parts = []
    if _pending:
        names = sorted({k for metrics, _ in _pending for k in metrics})
        parts.append(f"metrics {', '.join(names)} of epoch(s) "
                     f"{', '.join(str(epoch) for _, epoch in _pending)}")
    if _unsent:
        parts.append(f"artifact(s) {', '.join(_unsent)}")
    return "; ".join(parts)


def log_artifacts(paths: list[Path], run_id: str | None = None) -> None:
    """Files as MLflow artifacts of run `run_id`, by default of the active run (its resolved
    config, its curves). A file the store does not take stops nothing: it is named in the
    active run's `lost` list, or on stderr for another run."""
    import mlflow

    unsent = []
    for path in paths:
        try:
            with _quick_calls():
                if run_id is None:
                    mlflow.log_artifact(str(path))
                else:
                    mlflow.MlflowClient(tracking_uri()).log_artifact(run_id, str(path))
        except Exception:  # MLflow raises its own, requests' or the store's errors
            unsent.append(str(path))
    if run_id is None:
        _unsent.extend(Path(u).name for u in unsent)
    elif unsent:
        print(f"warning: MLflow {tracking_uri()} did not take {', '.join(unsent)} as "
              f"artifacts of run {run_id}", file=sys.stderr)


FINAL = "final."  # the align stage's prefix for the run file's scores on the training run


def read_run(run_id: str) -> Any:
    """The MLflow run `run_id` (its data: metrics, params, tags) from the tracking store;
    ContractError naming the store when it does not hold it."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        return MlflowClient(tracking_uri=tracking_uri()).get_run(run_id)
    except MlflowException as e:
        raise ContractError(f"mlflow:{run_id}: not found in {tracking_uri()} ({e.message}); set "
                            "MLFLOW_TRACKING_URI to the store that holds it") from e


def log_final(run_id: str | None, metrics: dict[str, Any], calibrated: dict[str, dict[str, float]],
              pair_free: dict[str, Any]) -> bool:
    """The final scores and their interval ends as `final.*` metrics of the training run, each
    calibrated metric's fields as `final.calibrated.METRIC.FIELD` and the pair-free scores as
    `final.pair_free.FIELD`. Tracking is never required: a store that does not answer (one
    try, 10 s a call) or does not hold the run (a teammate's `dvc pull` workspace) gets a
    warning and False; the run file holds the same numbers."""
    import time

    import mlflow
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    rows = {}
    for key, m in metrics.items():
        rows[f"{FINAL}{key}"] = m["value"]
        if "ci" in m:
            rows[f"{FINAL}{key}.ci_lo"], rows[f"{FINAL}{key}.ci_hi"] = m["ci"][0], m["ci"][1]
    for key, fields in calibrated.items():
        rows.update({f"{FINAL}calibrated.{key}.{f}": v for f, v in fields.items()})
    rows.update({f"{FINAL}pair_free.{f}": v for f, v in pair_free.items()
                 if isinstance(v, int | float) and not isinstance(v, bool)})
    if not run_id:
        return False
    import logging

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # not "Creating initial tables"
    try:
        database = sqlite_path(tracking_uri())
        if database is not None and not database.exists():
            raise ContractError(f"Run with id={run_id} not found: there is no database")
        with _quick_calls():
            check_server()
            client = mlflow.MlflowClient(tracking_uri())
            client.get_run(run_id)
            items = [Metric(k, float(v), now, 0) for k, v in rows.items()]
            for start in range(0, len(items), 1000):  # MLflow's batch limit is 1000 metrics
                client.log_batch(run_id, metrics=items[start:start + 1000])
    except Exception as e:  # MLflow raises its own, requests' or the store's errors
        why = " ".join(str(getattr(e, "message", e)).split())[:200]
        print(f"warning: the final scores were not logged to MLflow run {run_id} in "
              f"{tracking_uri()} ({why}); the run file holds them", file=sys.stderr)
        return False
    return True


def _steps_logged(mlflow: Any, run_id: str) -> dict[str, set[int]]:
    """Metric -> the steps `run_id` already holds, read back from the store (system/* metrics,
    sampled by time, are left out); empty when the store cannot say."""
    try:
        with _quick_calls():
            client = mlflow.MlflowClient(tracking_uri())
            keys = [k for k in client.get_run(run_id).data.metrics if not k.startswith("system/")]
            return {k: {m.step for m in client.get_metric_history(run_id, k)} for k in keys}
    except Exception:  # the store stalled: a duplicate point is better than a lost run
        return {}


def _send_pending() -> None:
    """Send the buffered epochs in order; stop at the first the server does not take."""
    import mlflow

    with _quick_calls():
        while _pending:
            metrics, epoch = _pending[0]
            try:
                mlflow.log_metrics(metrics, step=epoch)
            except Exception:  # MLflow raises its own, requests' or the store's errors
                return
            _pending.pop(0)


def log_epoch(metrics: dict[str, float], epoch: int) -> None:
    """Per-epoch metrics of the active run (finite numbers only). When the server does not take
    them, training goes on: they are buffered and sent with the next epoch or at the run's end."""
    import math

    clean = {k: float(v) for k, v in metrics.items()
             if isinstance(v, int | float) and math.isfinite(float(v))
             and epoch not in _logged.get(k, ())}
    if clean:
        _pending.append((clean, epoch))
        _send_pending()
        if _pending:
            print(f"warning: MLflow server {tracking_uri()} unreachable at epoch {epoch}; "
                  f"{len(_pending)} epoch(s) of metrics buffered", file=sys.stderr)


ROLE = "prh.role"  # tag of the runs log_results makes: "pipeline" or "arm"
PARENT = "mlflow.parentRunId"  # the tag MLflow's UI nests runs by
MEMBERS = "prh.members"  # a result run's tag: the run ids it summarises, comma-separated


def _scores(prefix: str, entry: Mapping[str, Any]) -> dict[str, float]:
    """One entry of results.json (an arm's metric or a gap between arms) as flat metrics under
    `prefix`: its seed mean or gap, seed std, and the ends of its interval over test pairs
    (`ci_lo`, `ci_hi`) and of its seeds-on-these-test-pairs interval (`two_level_lo`,
    `two_level_hi`: harness.stats.estimators.TwoLevel.interval; over test pairs only below 3
    seeds)."""
    out = {f"{prefix}.{k}": float(entry[k]) for k in ("mean", "std", "diff")
           if entry.get(k) is not None}
    for label, ci in (("ci", entry.get("ci")), ("two_level", entry.get("two_level", {}).get("ci"))):
        if ci is not None:
            out[f"{prefix}.{label}_lo"], out[f"{prefix}.{label}_hi"] = float(ci[0]), float(ci[1])
    return out


def _find_or_create(client: Any, experiment_id: str, key: dict[str, str], name: str) -> str:
    """The id of the run tagged with every item of `key` (created when there is none), named
    `name`: a re-run finds the same run."""
    query = " and ".join(f"tags.`{k}` = '{v}'" for k, v in key.items())
    found = client.search_runs([experiment_id], query, max_results=1)
    if not found and "seeds" in key:  # a run made before seeds were part of its identity
        legacy = " and ".join(f"tags.`{k}` = '{v}'" for k, v in key.items() if k != "seeds")
        found = [r for r in client.search_runs([experiment_id], legacy)
                 if "seeds" not in r.data.tags][:1]
        if found:
            client.set_tag(found[0].info.run_id, "seeds", key["seeds"])
    if not found:
        return client.create_run(experiment_id, tags=key, run_name=name).info.run_id
    client.update_run(found[0].info.run_id, name=name)
    return found[0].info.run_id


def _nest(client: Any, experiment_id: str, parent: str, children: list[str]) -> list[str]:
    """Record `children` as `parent`'s members (its MEMBERS tag) and nest under it those not
    nested under another run that still lists them: MLflow gives a run one parent, so a seed
    run that two results share (an experiment that changed another arm) stays under the first
    and is listed by both. Runs nested under `parent` but no longer listed are un-nested (a
    retrained seed replaces its old run). Returns the children the store does not hold."""
    from mlflow.exceptions import MlflowException

    client.set_tag(parent, MEMBERS, ",".join(children))
    missing = []
    for child in children:
        try:
            now = client.get_run(child).data.tags.get(PARENT)
            if now not in (None, parent) and _lists(client, now, child):
                continue
            client.set_tag(child, PARENT, parent)
        except MlflowException as e:  # not in this store, or deleted there
            if e.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                raise
            missing.append(child)
    for run in client.search_runs([experiment_id], f"tags.`{PARENT}` = '{parent}'"):
        if run.info.run_id not in children:
            client.delete_tag(run.info.run_id, PARENT)
    return missing


def _lists(client: Any, run_id: str, child: str) -> bool:
    """Whether run `run_id` is in the store, not deleted, and lists `child` among its
    MEMBERS."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException:
        return False
    return (run.info.lifecycle_stage == "active"
            and child in run.data.tags.get(MEMBERS, "").split(","))


def _log_scores(client: Any, run_id: str, scores: dict[str, float]) -> None:
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in scores.items()])
    client.set_terminated(run_id, "FINISHED")


def log_results(stats: Mapping[str, Any], seed_runs: Mapping[tuple[str, int], str | None], *,
                profile: str, params_hash: str, data_hash: str) -> str | None:
    """MLflow's view of results.json (harness.records.results.aggregate_runs' `stats`): one run per
    (profile, params hash, seeds) with the gaps between arms, parent of one run per arm with each
    metric's seed mean, std and interval ends, parent in turn of that arm's seed runs
    (`seed_runs[arm, seed]`, the run files' `mlflow_run_id`). A re-run finds the same runs
    by their tags and updates them; under a DVC experiment each carries its name and baseline
    (`dvc_exp_name`, `dvc_exp_baseline`, of the experiment that last wrote it). Returns the top
    run's id; None, with a warning, when the store does not answer (results.json does not
    depend on it)."""
    import mlflow

    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    # one set of runs per (profile, params hash, seeds): a queued experiment with a third seed
    # makes its own instead of overwriting the workspace's two-seed numbers
    seeds = ",".join(map(str, sorted({s for b in stats["arms"].values() for s in b["seeds"]})))
    key = {ROLE: "pipeline", "profile": profile, "params_hash": params_hash, "seeds": seeds}
    # a DVC experiment's name and baseline on every run it writes, as its seed runs carry them
    experiment = {k: v for k, v in git_state().items() if k.startswith("dvc_exp_")}
    try:
        with _quick_calls():
            with _first_use_lock():
                experiment_id = _experiment_id(mlflow)
            top = _find_or_create(client, experiment_id, key, f"{profile} results")
            missing, arm_runs = [], []
            for arm, block in stats["arms"].items():
                arm_seeds = sorted(block["seeds"])
                run_id = _find_or_create(client, experiment_id,
                                         {**key, ROLE: "arm", "arm": arm,
                                          "seeds": ",".join(map(str, arm_seeds))},
                                         f"{arm} (seeds {','.join(map(str, arm_seeds))})")
                for tag, value in {"data_hash": data_hash, **experiment}.items():
                    client.set_tag(run_id, tag, value)
                ids = {s: seed_runs.get((arm, s)) for s in arm_seeds}
                lost = _nest(client, experiment_id, run_id, [i for i in ids.values() if i])
                missing += [run_name(arm, s) for s, i in ids.items() if not i or i in lost]
                _log_scores(client, run_id, {k: v for m, entry in block["metrics"].items()
                                             for k, v in _scores(m, entry).items()})
                arm_runs.append(run_id)
            _nest(client, experiment_id, top, arm_runs)
            for tag, value in {"data_hash": data_hash, **experiment}.items():
                client.set_tag(top, tag, value)
            _log_scores(client, top, {k: v for g in stats["gaps"] for k, v in
                                      _scores(f"{g['a']}-{g['b']}.{g['metric']}", g).items()})
    except Exception as e:  # MLflow raises its own, requests' or the store's errors
        print(f"warning: MLflow {uri} did not take the runs of results.json ({e}); "
              "results.json is written all the same", file=sys.stderr)
        return None
    if missing:
        print(f"warning: the MLflow runs of {', '.join(missing)} are not in {uri}, so their "
              "arm's run holds their numbers without nesting them", file=sys.stderr)
    return top


def log_study_run(role: str, key: Mapping[str, str], name: str, params: Mapping[str, Any],
                  scores: Mapping[str, float], artifacts: list[Path]) -> str | None:
    """A sequential study's run in MLflow (`role`: "plan", a registered plan; "look", one look
    taken under it), found again by its tags `key` (a re-run updates the same run) with
    `params`, `scores` and `artifacts`. Returns its id; None, with a warning, when the store
    does not answer (the study's files do not depend on it)."""
    import mlflow

    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    experiment = {k: v for k, v in git_state().items() if k in ("git_commit", "git_dirty")}
    try:
        with _quick_calls():
            with _first_use_lock():
                experiment_id = _experiment_id(mlflow)
            run_id = _find_or_create(client, experiment_id, {ROLE: role, **key}, name)
            for tag, value in experiment.items():
                client.set_tag(run_id, tag, str(value))
            logged = client.get_run(run_id).data.params
            for k, v in params.items():
                if k not in logged:
                    client.log_param(run_id, k, str(v)[:6000])
            _log_scores(client, run_id, dict(scores))
    except Exception as e:  # MLflow raises its own, requests' or the store's errors
        print(f"warning: MLflow {uri} did not take the {role} run ({e}); the study's files are "
              "written all the same", file=sys.stderr)
        return None
    log_artifacts(artifacts, run_id)
    return run_id
