"""Checkpoint files and random streams of a training run (prh.train).

A checkpoint is one torch file written atomically (`prh.io.atomic_path`) holding the modules,
the optimiser, the epoch, the curve so far, the tokenizer's files and every random state
(python, numpy, torch, CUDA), so a resumed run continues exactly where an uninterrupted one
would be (on CPU). Each epoch reseeds from (seed, epoch, rank), see `seed_epoch`; `resume`
loads a run's last checkpoint back into its modules.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from prh.io import ContractError, atomic_path
from prh.tokenizer import Tokenizer

CHECKPOINT_FORMAT = "prh.checkpoint/1"
STREAM_CHECKPOINT = "prh.stream_checkpoint/1"  # a web-text run's resume file (prh.train_stream)
SNAPSHOT = "prh.encoder_snapshot/1"  # a scored checkpoint: the encoder alone, and its account


def seed_epoch(seed: int, epoch: int, rank: int) -> np.random.Generator:
    """Seed python/numpy/torch from (seed, epoch, rank); return the views' generator."""
    ss = np.random.SeedSequence([seed, epoch, rank])
    s32, s64 = ss.generate_state(1)[0], int(ss.generate_state(2, np.uint64)[1])
    random.seed(int(s32))
    np.random.seed(int(s32))
    torch.manual_seed(s64 & (2**63 - 1))  # all devices: dropout
    return np.random.default_rng(ss.spawn(1)[0])


def rng_states() -> dict[str, Any]:
    """Every random state of the process (python, numpy, torch, CUDA) as plain data."""
    name, key, pos, has_gauss, gauss = np.random.get_state()
    states = {"python": random.getstate(), "numpy": [name, key.tolist(), pos, has_gauss, gauss],
              "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what `rng_states` returned."""
    random.setstate(states["python"])
    name, key, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((name, np.asarray(key, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


@contextlib.contextmanager
def rng_untouched() -> Iterator[None]:
    """Hooks (evaluation, callbacks) cannot move the training's random streams."""
    states = rng_states()
    try:
        yield
    finally:
        set_rng_states(states)


def tokenizer_files(tokenizer: Tokenizer) -> dict[str, bytes]:
    """The tokenizer's saved files (name -> bytes), so a checkpoint carries its tokenizer."""
    with tempfile.TemporaryDirectory() as d:
        tokenizer.save(d)
        return {p.name: p.read_bytes() for p in sorted(Path(d).iterdir()) if p.is_file()}


def tokenizer_from_files(files: dict[str, bytes]) -> Tokenizer:
    """The tokenizer `tokenizer_files` saved."""
    with tempfile.TemporaryDirectory() as d:
        for name, data in files.items():
            (Path(d) / name).write_bytes(data)
        return Tokenizer.load(d)


class UnreadableCheckpoint(ContractError):
    """A checkpoint file that torch cannot load or that is not a prh checkpoint."""


def read_checkpoint(path: Path, fmt: str = CHECKPOINT_FORMAT) -> dict[str, Any]:
    """A checkpoint's contents on the CPU; an unreadable file or one not of format `fmt`
    raises UnreadableCheckpoint."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated or foreign file
        why = " ".join(str(e).split())[:200]
        raise UnreadableCheckpoint(f"{path}: unreadable checkpoint ({why}); rerun the stage "
                                   "that wrote it (`dvc repro`)") from e
    if not isinstance(ckpt, dict) or ckpt.get("format") != fmt:
        raise UnreadableCheckpoint(f"{path}: not a {fmt} checkpoint; rerun the "
                                   "stage that wrote it (`dvc repro`)")
    return ckpt


def set_aside(path: Path, why: str) -> Path:
    """Rename an unreadable checkpoint to `NAME.unreadable` (kept for a look, never loaded
    again) and say so on stderr; the run then starts over from epoch 0."""
    aside = path.with_name(f"{path.name}.unreadable")
    os.replace(path, aside)
    print(f"warning: {why}; set aside as {aside}, training starts over from epoch 0",
          file=sys.stderr)
    return aside


def write_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write `state` to `path` atomically: a killed run leaves the previous checkpoint whole."""
    buf = io.BytesIO()
    torch.save(state, buf)
    with atomic_path(path, suffix=".pt") as tmp:
        tmp.write_bytes(buf.getvalue())


def resume(path: Path, identity: str, net: nn.Module, sigreg: nn.Module,
           optimizer: torch.optim.Optimizer) -> tuple[int, int, list[dict[str, float]]]:
    """Load the checkpoint at `path` into the modules; return (epoch, step, curve), or
    (0, 0, []) when there is none or it cannot be read (`set_aside`). A checkpoint of another
    run identity is refused."""
    if not path.exists():
        return 0, 0, []
    try:
        ckpt = read_checkpoint(path)
    except UnreadableCheckpoint as e:  # a kill mid-write cannot cause this (atomic); a disk can
        set_aside(path, str(e).split("; rerun")[0])
        return 0, 0, []
    if ckpt["identity"] != identity:
        raise ContractError(
            f"{path}: written by config {ckpt['identity']}, this run is config {identity}; "
            f"delete {path.parent} to start over, or restore the params that wrote it")
    net.load_state_dict(ckpt["net"])
    sigreg.load_state_dict(ckpt["sigreg"])
    optimizer.load_state_dict(ckpt["optimizer"])
    # Each epoch reseeds from (seed, epoch, rank); restoring the saved states as well leaves
    # the process exactly as an uninterrupted run left it after that epoch.
    set_rng_states(ckpt["rng"])
    return ckpt["epoch"], ckpt["step"], ckpt["curve"]
