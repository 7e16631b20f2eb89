"""The main job: validate params.yaml and the profile's inputs, then `dvc repro` the whole
pipeline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.audit.gate import AUDIT_PATH, RECAP_AUDIT_PATH, add_gate_args, report_gate
from harness.config.params import WEB_TEXT, Params, ProbeConfig, read_top_level
from harness.stages.common import fail, preflight, stage_parser
from prh.io import ContractError, read_json

PROFILE_RAW = "data/{profile}/raw"  # the raw-data folder dvc.yaml names as data/${profile}/raw


def check_raw_data(params: Params, raw: Path) -> None:
    """The profile's caption file read and checked before any stage runs: every record, every
    file name confined to raw/images (prh.data.photo_paths), every photo's header (format and
    pixel count, prh.data.check_image_headers), the sizes params.yaml asks of it
    (harness.config.validate.check_data) and every text source the probe reads."""
    from harness.config.validate import check_data
    from harness.data.dvccache import dvc_cache_dir
    from prh.data import check_image_headers, check_splits, load_karpathy, photo_paths

    corpus = load_karpathy(raw / "dataset.json", min_captions=1)
    check_splits(corpus)
    paths = photo_paths(corpus.photos, raw / "images", dvc_cache_dir(raw))
    check_image_headers(corpus.photos, paths, str(raw / "images"))
    check_data(params, corpus)
    for source in params.config(ProbeConfig, "probe").text_sources:  # each one the probe reads
        load_karpathy(raw / "dataset.json", min_captions=1, source=source)


def busy_workspace(root: Path) -> str | None:
    """Why a whole `dvc repro` here would be refused now, as one line (None: free): another DVC
    command holds the repository lock (.dvc/tmp/lock, zc.lockfile as DVC takes it by default)
    or a live process holds stage outputs in .dvc/tmp/rwlock, which a whole repro touches. DVC
    itself is the guard (it refuses both); this turns its exit 255 and paragraph into one line
    before any work. A `core.hardlink_lock` lock is left to DVC."""
    import json

    import zc.lockfile

    lock, rwlock = root / ".dvc/tmp/lock", root / ".dvc/tmp/rwlock"
    if lock.exists():
        try:
            zc.lockfile.LockFile(str(lock)).close()
        except zc.lockfile.LockError:
            return (f"another DVC command holds {lock} (a `harness run` or `dvc` in this "
                    "workspace); wait for it to end, then rerun")
    try:
        held = json.loads(rwlock.read_text()) if rwlock.exists() else {}
    except (OSError, ValueError):
        held = {}
    for mode in ("write", "read"):
        entries = held.get(mode) if isinstance(held, dict) else None
        for path, infos in (entries if isinstance(entries, dict) else {}).items():
            for info in infos if isinstance(infos, list) else [infos]:
                pid = info.get("pid") if isinstance(info, dict) else None
                if isinstance(pid, int) and pid != os.getpid() and _alive(pid):
                    return (f"{path} is in use by PID {pid} ({info.get('cmd', '?')}); wait "
                            "for it to end, then rerun")
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def check_web_text(params: Path) -> str:
    """The recap profile's inputs checked before any stage: its sections, every arm's config,
    the scoring benchmarks' data and the footers of the shards the subset reads
    (prh.recap.check_shards). Returns the pipeline file."""
    from harness.config.recap import load_recap, read_score, read_section, runs_of
    from harness.config.recap_train import configs
    from harness.config.reference import recap_score_inputs
    from prh.recap import check_shards

    cfg = load_recap(params)
    for arm, seed in runs_of(read_section(params)):
        configs(params, arm, seed)
    recap_score_inputs(params, read_score(params))  # the benchmarks' data, before hours of training
    check_shards(cfg.data, cfg.columns, cfg.images, cfg.text_columns)
    return "pipelines/recap/dvc.yaml"


def gate_audit(path: str, fail_on: Any, baseline: Any) -> int:
    """`--fail-on` on the audit the pipeline just wrote at `path`: 1 when anything trips."""
    from harness.audit.gate import gate, ungated

    try:
        doc = read_json(path)
        return report_gate("run", gate(doc, fail_on, baseline), ungated(doc, fail_on, baseline))
    except ContractError as e:
        return fail(e)


def web_text(args: Any, fail_on: Any, baseline: Any) -> int:
    """`harness run` under `profile: recap`: check, then `dvc repro` the web-text pipeline,
    then `--fail-on` on its audit of the web-text claims."""
    from harness.tracking.mlflow_runs import check_server

    try:
        pipeline = check_web_text(args.params)
        check_server()
        why = None if args.check else busy_workspace(Path.cwd())
        if why:
            raise ContractError(f"harness run: {why}")
    except ContractError as e:
        return fail(e)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    if args.check:
        print(f"run: {args.params} (profile recap) and its inputs are valid; `dvc status` "
              "names the stages `harness run` would run:", flush=True)
        return subprocess.run(["dvc", "status", pipeline], env=env).returncode \
            if Path(".dvc").exists() else 0
    if not Path(".dvc").exists():
        subprocess.run(["dvc", "init", "-q"] + ([] if Path(".git").exists() else ["--no-scm"]),
                       check=True)
    code = subprocess.run(["dvc", "repro", pipeline, *args.dvc_args], env=env).returncode
    if code == 0 and "--dry" not in args.dvc_args:
        print("\nprofile recap: reports/recap.html and reports/recap.pdf are ready")
        if fail_on:
            return gate_audit(RECAP_AUDIT_PATH, fail_on, baseline)
    return code


def main(argv: list[str]) -> int:
    """Validate params.yaml and the profile's inputs, then run every stage of dvc.yaml that
    is not up to date."""
    parser = stage_parser("run", main.__doc__)
    parser.add_argument("dvc_args", nargs="*",
                        help="extra arguments for `dvc repro` (after --, e.g. -- --dry)")
    add_gate_args(parser)  # --fail-on, --baseline: as `harness audit` takes them
    parser.add_argument("--check", action="store_true",
                        help="validate params.yaml and the inputs, list the stages `dvc status` "
                             "finds stale, run nothing (`-- --dry` fails on a fresh clone: "
                             "DVC issue #9021)")
    args = parser.parse_args(argv)
    # imported after parsing, so `harness run --help` answers at once
    from harness.audit.gate import load_baseline, parse_fail_on, require_baseline
    from harness.config.validate import seed_warnings, validate_params

    try:
        root = next((d for d in Path.cwd().parents if (d / "dvc.yaml").is_file()), None)
        if not Path("dvc.yaml").is_file() and root is not None:  # would nest a DVC repo here
            raise ContractError(f"{Path.cwd()}: no dvc.yaml here; run `harness run` from the "
                                f"repository root, {root}")
        fail_on = parse_fail_on(args.fail_on)
        profile = read_top_level(args.params)["profile"]
        # read before `dvc repro` rewrites it: --baseline reports/audit.json is the last run's
        baseline = load_baseline(args.baseline, RECAP_AUDIT_PATH if profile in WEB_TEXT
                                 else AUDIT_PATH) if args.baseline else None
        require_baseline(fail_on, baseline)  # before any stage runs
        if profile in WEB_TEXT:
            return web_text(args, fail_on, baseline)
        raw = Path(PROFILE_RAW.format(profile=profile))
        params = preflight(args.params, raw)
        validate_params(params)
        if profile != "world":  # the world's data is generated from params.yaml's sizes
            check_raw_data(params, raw)
        from harness.tracking.mlflow_runs import check_server

        check_server()  # a tracking server that does not answer in 10 s: refused before any stage
        why = None if args.check else busy_workspace(Path.cwd())  # `dvc status` works then
        if why:
            raise ContractError(f"harness run: {why}")
    except ContractError as e:
        return fail(e)
    for line in seed_warnings(params):
        print(f"run: warning: {line}", file=sys.stderr)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    if args.check:
        print(f"run: {args.params} (profile {params.profile}) and its inputs are valid; "
              "`dvc status` names the stages `harness run` would run:", flush=True)
        return subprocess.run(["dvc", "status"], env=env).returncode if Path(".dvc").exists() \
            else 0
    if not Path(".dvc").exists():
        subprocess.run(["dvc", "init", "-q"] + ([] if Path(".git").exists() else ["--no-scm"]),
                       check=True)
    code = subprocess.run(["dvc", "repro", *args.dvc_args], env=env).returncode
    if code == 0 and "--dry" not in args.dvc_args:
        from harness.tracking.mlflow_runs import ui_url

        print(f"\nprofile {params.profile}: reports/audit.html and reports/audit.pdf are ready; "
              "`mlflow ui --backend-store-uri sqlite:///mlflow.db` serves the training runs at "
              f"{ui_url() or 'http://127.0.0.1:5000'}")
    if code == 0 and fail_on and "--dry" not in args.dvc_args:
        return gate_audit(AUDIT_PATH, fail_on, baseline)
    return code
