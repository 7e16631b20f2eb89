"""Workspaces that tests only read, built once per session, and the threads of a pytest-xdist
worker (pyproject's addopts: two workers, a module each)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import yaml
from tiny_world import (
    STAGED_ARMS,
    build_upstream,
    commit_all,
    copy_code,
    tiny_params,
    train_align_aggregate,
)

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one thread a worker: two workers on two cores, each with torch's default of a thread a
    # core, spend their time waiting on each other's threads. The stages the tests start as
    # subprocesses run with one thread already (tiny_world.sh).
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def staged_world(tmp_path_factory) -> Path:
    """The tiny world's stages run by hand (dvc.yaml's commands), seed 0 of good and
    next-token trained 4 epochs with the per-epoch evaluation every 3rd, aligned with the
    gallery curve (pools of 10, 20 and every test photo, 3 draws) and aggregated: what
    tests/test_staged_world.py reads."""
    repo = copy_code(tmp_path_factory.mktemp("staged"))
    raw = tiny_params(yaml.safe_load((repo / "params.yaml").read_text()), epochs=4)
    raw.update(arms=list(STAGED_ARMS), seeds=[0])
    raw["world"]["train"]["eval_every"] = 3
    raw["world"]["eval"].update(gallery_sizes=[10, 20, 100], gallery_draws=3)
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return train_align_aggregate(build_upstream(commit_all(repo, "tiny world")), STAGED_ARMS)
