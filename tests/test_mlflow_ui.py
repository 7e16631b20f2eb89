"""docker/README.md's way to browse the container's runs: the runs' artifact paths are the
container's (/runs/mlruns/...), which a host-side `mlflow ui` cannot open, so the README runs
the image's own `mlflow ui` on the mounted runs folder. Here that command line, with /runs
replaced by a runs folder the entrypoint's tracking URI logged to, serves a run's artifact."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
import services

from harness.tracking import mlflow_runs as tracking

ROOT = Path(__file__).resolve().parents[1]


def readme_ui_command() -> list[str]:
    """The `mlflow ui ...` words of docker/README.md's `docker run ... prh-rerun mlflow ui`."""
    text = (ROOT / "docker" / "README.md").read_text()
    (line,) = re.findall(r"prh-rerun \\\n\s*(mlflow ui [^\n]+)", text)
    return line.split()


@pytest.mark.slow  # a real `mlflow ui` server: .ci/run's services section
def test_the_images_mlflow_ui_on_the_runs_folder_serves_the_artifacts(tmp_path, monkeypatch):
    runs = tmp_path / "runs"  # /runs inside the container
    runs.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{runs}/mlflow.db")  # the entrypoint's
    monkeypatch.chdir(tmp_path)
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps([{"epoch": 1, "loss": 0.5}]))
    with tracking.tracked_run("good-s0", {"arm": "good"}, {}) as run:
        tracking.log_artifacts([curve])
    assert run.info.artifact_uri.startswith(f"file://{runs}/mlruns/")  # an absolute path

    words = [w.replace("/runs/", f"{runs}/").replace("0.0.0.0", "127.0.0.1")
             for w in readme_ui_command()]
    assert words[:3] == ["mlflow", "ui", "--host"] and f"sqlite:///{runs}/mlflow.db" in words
    port = services.free_port()
    log = tmp_path / "ui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(services.BIN / "mlflow"), *words[1:], "--port", str(port),
                                 "--workers", "1"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        services.wait_health(url, proc, log)
        query = f"{url}/get-artifact?path=curve.json&run_uuid={run.info.run_id}"
        with urllib.request.urlopen(query, timeout=30) as answer:
            assert answer.read() == curve.read_bytes()
    finally:
        services.stop(proc)
