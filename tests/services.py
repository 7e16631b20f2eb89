"""Test-only helpers that start real services on 127.0.0.1: a PostgreSQL cluster (Debian's
`postgresql` package, run as its `postgres` user when the tests run as root) and an
`mlflow server` on it. `.ci/run` installs the package; the tests skip only where it is absent."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

BIN = Path(sys.executable).parent


def pg_bin() -> Path | None:
    """The folder holding Debian's initdb/pg_ctl (not on PATH there), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run `cmd` as the package's `postgres` user then."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A fresh cluster in a temporary folder of its own (outside pytest's, which other pytest
    sessions prune and which the `postgres` user cannot enter), listening on 127.0.0.1 only;
    yields its database URI (database `mlflow`, trust for local connections, no password)."""
    bindir = pg_bin()
    assert bindir is not None, "PostgreSQL is not installed (apt-get install postgresql)"
    with tempfile.TemporaryDirectory(prefix="prh-pg-") as tmp:
        folder = Path(tmp)
        data, sock = folder / "data", folder / "sock"
        sock.mkdir()
        if os.geteuid() == 0:
            for path in (folder, sock):
                shutil.chown(path, "postgres")
        port = free_port()
        subprocess.run(_as_postgres([str(bindir / "initdb"), "-D", str(data), "-U", "mlflow",
                                     "--auth=trust", "-E", "UTF8"]),
                       check=True, capture_output=True)
        subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-l",
                                     str(folder / "log"), "-w", "-o",
                                     f"-c listen_addresses=127.0.0.1 -p {port} -k {sock}",
                                     "start"]), check=True, capture_output=True)
        try:
            subprocess.run(_as_postgres([str(bindir / "createdb"), "-h", "127.0.0.1", "-p",
                                         str(port), "-U", "mlflow", "mlflow"]),
                           check=True, capture_output=True)
            # SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3; we ship psycopg2
            yield f"postgresql+psycopg2://mlflow@127.0.0.1:{port}/mlflow"
        finally:
            subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast",
                                         "stop"]), capture_output=True)


def wait_health(url: str, proc: subprocess.Popen, log: Path, seconds: float = 120) -> None:
    """Until the server at `url` answers /health; its log's end when it exits or times out."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5):
                return
        except OSError as e:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"mlflow server at {url} did not start ({e}):\n"
                                     f"{log.read_text()[-3000:]}") from e
            time.sleep(0.5)


@contextlib.contextmanager
def mlflow_server(backend: str, artifacts: Path, port: int | None = None) -> Iterator[str]:
    """`mlflow server` on `backend`, serving artifacts from `artifacts`, on 127.0.0.1; yields
    its URL."""
    port = port or free_port()
    log_path = artifacts.parent / f"mlflow-server-{port}.log"
    log = open(log_path, "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [str(BIN / "mlflow"), "server", "--backend-store-uri", backend,
         "--artifacts-destination", str(artifacts), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_health(url, proc, log_path)
        yield url
    finally:
        stop(proc)
        log.close()


def stop(proc: subprocess.Popen) -> None:
    """End `proc` and its children (the server's workers), which it leads as a session."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 15)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
