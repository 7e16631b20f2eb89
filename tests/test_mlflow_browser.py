"""The address `harness run` prints (harness.tracking.mlflow_runs.ui_url) opens the runs table
in a real `mlflow ui` in headless Chromium: the page lists the training runs by name. The
experiment's bare address (`#/experiments/ID`) opens MLflow 3's overview tab instead, where no
run name shows: the test checks that too, so it would fail on the old address. CI's services
section; skipped without Debian's chromium."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import services
from typeset import CHROMIUM

from harness.tracking import mlflow_runs as tracking

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")]
NAMES = ("good-s0", "ntp-s1")


def page_text(url: str, wait_s: float = 60) -> str:
    """The visible text of `url` once a run name shows (or after `wait_s`)."""
    from playwright.sync_api import TimeoutError as Timeout
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url)
            try:
                page.get_by_text(NAMES[0]).first.wait_for(timeout=wait_s * 1000)
            except Timeout:
                pass
            return page.inner_text("body")
        finally:
            browser.close()


def test_the_printed_address_opens_the_runs_table(tmp_path: Path, monkeypatch) -> None:
    db = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    monkeypatch.chdir(tmp_path)
    for name in NAMES:
        with tracking.tracked_run(name, {"arm": name.split("-")[0]}, {}):
            pass
    port = services.free_port()
    host = f"http://127.0.0.1:{port}"
    url = tracking.ui_url(host)
    assert url is not None and url.endswith("/runs")
    log = tmp_path / "ui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(services.BIN / "mlflow"), "ui", "--backend-store-uri",
                                 f"sqlite:///{db}", "--host", "127.0.0.1", "--port", str(port),
                                 "--workers", "1"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        services.wait_health(host, proc, log)
        table = page_text(url)
        assert all(name in table for name in NAMES), table[:2000]
        overview = page_text(url.removesuffix("/runs"), wait_s=20)  # the table showed in less
        assert not any(name in overview for name in NAMES), overview[:2000]
    finally:
        services.stop(proc)
