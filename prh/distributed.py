"""torch.distributed for training: the process group of a torchrun launch (`process_group`),
the DDP wrapper (`ddp_wrap`), and small helpers read at call time (never cached at
construction).

stable-pretraining's `EppsPulley` (stable_pretraining/methods/lejepa.py) captures the world size
in `__init__`, so a loss built before `init_process_group` silently keeps world size 1. Every
helper here asks torch.distributed when it is called instead.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn


@dataclass(frozen=True)
class Process:
    """This process in the run: its rank, the world size and the device it trains on."""

    rank: int
    world: int
    device: torch.device
    owns_group: bool  # process_group called init_process_group, so it destroys the group


def torch_device(device: str) -> str:
    """"auto" -> "cuda" when a CUDA device is visible, else "cpu"; "cpu" and "cuda" as given
    ("cuda" with none visible is refused)."""
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device='cuda' but no CUDA device is visible; use 'auto'/'cpu'")
    return "cuda" if device == "cuda" or (device == "auto" and torch.cuda.is_available()) \
        else "cpu"


@contextlib.contextmanager
def process_group(device: str) -> Iterator[Process]:
    """Join the run torchrun launched (it sets WORLD_SIZE/RANK/LOCAL_RANK; NCCL on CUDA, gloo on
    CPU), or run alone. `device` is "auto", "cpu" or "cuda". On a normal exit every rank waits
    for the others before the group (and its store) is torn down: a rank finishing first would
    abort the rest."""
    want_cuda = torch_device(device) == "cuda"
    owns = False
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if want_cuda else "gloo")
        owns = True
    try:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        dev = torch.device(f"cuda:{local}") if want_cuda else torch.device("cpu")
        if want_cuda:
            torch.cuda.set_device(dev)
        yield Process(rank(), world_size(), dev, owns)
        if owns:
            dist.barrier()
    finally:
        if owns:
            dist.destroy_process_group()


def ddp_wrap(module: nn.Module, process: Process) -> nn.Module:
    """`module` in DistributedDataParallel when the run has several processes, else itself."""
    if process.world == 1:
        return module
    return nn.parallel.DistributedDataParallel(
        module, device_ids=[process.device] if process.device.type == "cuda" else None)


def is_distributed() -> bool:
    """True when a default process group is initialised now."""
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """Number of processes in the default group now (1 when not distributed)."""
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    """This process's rank in the default group now (0 when not distributed)."""
    return dist.get_rank() if is_distributed() else 0


def all_reduce_mean(x: Tensor) -> Tensor:
    """Average `x` over ranks, keeping autograd (identity with one process).

    Uses `torch.distributed.nn.functional.all_reduce` with SUM (gloo has no AVG) and divides
    by the world size; the reduced tensor is returned and must be used (stable-pretraining's
    `EppsPulley` discards it, so no reduction happens there). Its backward all-reduces the
    incoming gradients, so each rank receives the gradient of the sum of every rank's loss: with
    DDP's averaging of parameter gradients this equals the gradient of the loss on the global
    batch (lightly-ai/lightly issue #1920 is the bug the non-autograd version causes: gradients
    1/world_size too small).
    """
    n = world_size()
    if n == 1:
        return x
    from torch.distributed.nn.functional import all_reduce

    return all_reduce(x, op=dist.ReduceOp.SUM) / n


def max_over_ranks(x: Tensor) -> Tensor:
    """Element-wise maximum of `x` over ranks, without autograd (a copy; `x` is untouched)."""
    out = x.detach().clone()
    if world_size() > 1:
        with torch.no_grad():
            dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return out
