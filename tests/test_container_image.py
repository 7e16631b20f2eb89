"""The pinned image built and run for real. podman builds the repository's Dockerfile on a
Debian bookworm base bootstrapped here (debootstrap: the pinned nvidia/cuda base needs a
registry, which CI machines do not reach), from a build context whose params.yaml holds the
tiny world's parameters, committed, so the runs are not tagged dirty. The image's entrypoint
runs the world profile into a runs folder that the test then reads from outside: both reports,
six finished training runs and the seed plan's in MLflow, and a fingerprint naming the base,
the commit and the torch build the image holds. Every image it made is removed at the end.

podman keeps this test's images in a storage folder of its own under the test's temporary
folder (17.2 GB at the build's peak, measured), removed at the end with everything in it, so no
image of the machine's own storage is touched. Slow, and root only (podman's storage, the
base's chroot): `.ci/run` installs podman, runc and debootstrap, and its "image" section runs it
with PRH_IMAGE_REQUIRED=1, which turns a missing tool into a failure instead of a skip."""

from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiny_world

ROOT = Path(__file__).resolve().parents[1]
# What the image's build reads beside the project's code (tiny_world.PROJECT).
BUILD_FILES = ("Dockerfile", ".dockerignore", "docker", "pyproject.toml", "README.md")
TORCH_BUILD = "2.14.1+cu130"  # the lock's torch: PyPI's default CUDA 13.0 build


def unable() -> str:
    """Why this machine cannot build the image here, or ''."""
    if os.geteuid() != 0:
        return "the image test builds as root (podman's storage, debootstrap's chroot)"
    missing = [t for t in ("podman", "runc", "debootstrap") if shutil.which(t) is None]
    return f"{', '.join(missing)} not installed (.ci/run installs them before its image " \
        "section)" if missing else ""


REQUIRED = os.environ.get("PRH_IMAGE_REQUIRED") == "1"  # CI: a machine unable to build fails
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(unable()) and not REQUIRED, reason=unable() or "-")]


class Podman:
    """podman on a storage folder of its own, with this machine kind's engine settings."""

    def __init__(self, where: Path) -> None:
        where.mkdir(parents=True)
        self.where, self.conf = where, where / "containers.conf"
        self.conf.write_text(engine_conf())
        self.runroot = Path(tempfile.mkdtemp(prefix="prh-podman-"))  # podman: 50 chars at most
        self.flags = ["--root", str(where / "storage"), "--runroot", str(self.runroot)]

    def __call__(self, *args: str, timeout: int = 900, check: bool = True,
                 **kw) -> subprocess.CompletedProcess:
        """Raises with the end of podman's output when it fails (and `check`)."""
        out = subprocess.run(["podman", *self.flags, *args], capture_output=True, text=True,
                             timeout=timeout, env={**os.environ, "CONTAINERS_CONF": str(self.conf)},
                             **kw)
        if check and out.returncode != 0:
            raise AssertionError(f"podman {' '.join(args[:3])} failed ({out.returncode}):\n"
                                 f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        return out


def engine_conf() -> str:
    """runc, since crun refuses cgroups in hybrid mode; ulimits within the session's hard
    limits, since root here lacks CAP_SYS_RESOURCE and podman asks for 1048576 (nproc above
    32768 fails even under the hard limit on these machines)."""
    import resource

    def capped(limit: int, cap: int) -> int:
        hard = resource.getrlimit(limit)[1]
        return cap if hard == resource.RLIM_INFINITY else min(hard, cap)

    nofile, nproc = capped(resource.RLIMIT_NOFILE, 1 << 20), capped(resource.RLIMIT_NPROC, 32768)
    return (f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", '
            f'"nproc={nproc}:{nproc}"]\n[engine]\nruntime = "runc"\n')


def debian_mirror() -> str:
    """PRH_DEBIAN_MIRROR, else the host's first Debian archive, else deb.debian.org."""
    if os.environ.get("PRH_DEBIAN_MIRROR"):
        return os.environ["PRH_DEBIAN_MIRROR"]
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    found = re.search(r"^URIs:\s*(\S+/debian)\s*$", sources.read_text(), re.M) \
        if sources.exists() else None
    return found[1] if found else "http://deb.debian.org/debian"


def pip_config(key: str) -> str:
    """A pip setting of this host (environment first, then pip's config files), or ''."""
    env = os.environ.get("PIP_" + key.removeprefix("global.").upper().replace("-", "_"))
    if env:
        return env
    out = subprocess.run([sys.executable, "-m", "pip", "config", "get", key],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


def build_mounts(tmp: Path) -> list[str]:
    """The host's package-index settings for the build's RUN steps only (never in a layer):
    its CA bundle (a TLS-intercepting proxy's, on these machines) and an http(s) index."""
    conf, mounts = ["[global]"], []
    cert = pip_config("global.cert")
    if cert and Path(cert).is_file():  # not over the image's own bundle, which apt rewrites
        mounts += ["-v", f"{cert}:/tmp/host-ca.crt:ro"]
        conf.append("cert = /tmp/host-ca.crt")
    index = pip_config("global.index-url")
    if index.startswith(("http://", "https://")):
        conf.append(f"index-url = {index}")
    (tmp / "pip.conf").write_text("\n".join(conf) + "\n")
    return [*mounts, "-v", f"{tmp / 'pip.conf'}:/etc/pip.conf:ro"]


def build_context(ctx: Path) -> Path:
    """The project with the tiny world's params.yaml committed, plus what the build reads."""
    tiny_world.copy_project(ctx)
    for item in BUILD_FILES:
        if (ROOT / item).is_dir():
            shutil.copytree(ROOT / item, ctx / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / item, ctx / item)
    return ctx


@pytest.fixture
def engine(tmp_path) -> Iterator[Podman]:
    """podman on its own storage under tmp_path, with a Debian bookworm base imported from a
    debootstrapped folder as `base`; the storage is reset and removed afterwards."""
    if unable():
        pytest.fail(f"PRH_IMAGE_REQUIRED=1 and {unable()}")
    podman = Podman(tmp_path / "podman")
    rootfs = tmp_path / "rootfs"
    try:
        boot = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(rootfs),
                               debian_mirror()], capture_output=True, text=True, timeout=600)
        assert boot.returncode == 0, f"debootstrap failed:\n{boot.stderr[-3000:]}"
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        try:
            podman("import", "-q", "-", BASE, stdin=tar.stdout)
        finally:
            tar.stdout.close()
            tar_exit = tar.wait()
        assert tar_exit == 0, f"tar of {rootfs} exited {tar_exit}"
        shutil.rmtree(rootfs)
        yield podman
    finally:
        podman("system", "reset", "--force", check=False)
        shutil.rmtree(podman.where, ignore_errors=True)
        shutil.rmtree(podman.runroot, ignore_errors=True)


BASE, IMAGE = "localhost/prh-test-base:bookworm", "localhost/prh-rerun:test"


def test_the_image_builds_on_a_local_base_and_runs_the_world_to_the_report(engine, tmp_path):
    ctx = build_context(tmp_path / "ctx")
    commit = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=40"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    start = time.monotonic()
    engine("build", "--format", "docker", *build_mounts(tmp_path),
           "--build-arg", f"BASE_IMAGE={BASE}", "--build-arg", f"GIT_COMMIT={commit}",
           "--build-arg", f"BUILD_DATE={date}", "-t", IMAGE, str(ctx), timeout=1500)
    size = int(engine("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
    built = time.monotonic() - start
    print(f"image {IMAGE}: {size / 1e9:.2f} GB, built in {built:.0f} s")

    runs = tmp_path / "runs"
    runs.mkdir()
    os.chown(runs, 1000, 1000)  # the image runs as uid 1000
    start = time.monotonic()
    out = engine("run", "--rm", "--network", "host", "-e", "OMP_NUM_THREADS=1",
                 "-v", f"{runs}:/runs", IMAGE, "world", timeout=1200)
    assert "prh-entrypoint: done; reports in /runs/workspace-" in out.stderr
    print(f"world profile in the image: {time.monotonic() - start:.0f} s")

    env = tiny_world.check_entrypoint_run(runs)
    assert env["env.image_base"] == BASE
    assert env["env.image_git_commit"] == commit and env["env.image_build_date"] == date
    assert env["env.torch"] == TORCH_BUILD and env["env.cuda"] == "13.0"
    assert env["env.python"].startswith("CPython 3.11.")
