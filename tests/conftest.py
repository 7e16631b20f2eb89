"""The threads of a pytest-xdist worker (pyproject's addopts: two workers, a module each)."""

from __future__ import annotations

import os

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one thread a worker: two workers on two cores, each with torch's default of a thread a
    # core, spend their time waiting on each other's threads. The stages the tests start as
    # subprocesses run with one thread already (tiny_world.sh).
    torch.set_num_threads(1)
