"""Small torch.distributed helpers, read at call time (never cached at construction).

stable-pretraining's `EppsPulley` captures the world size in `__init__`, so a loss built before
`init_process_group` silently keeps world size 1 (method-anchors.md 1.1). Every helper here
asks torch.distributed when it is called instead.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


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
    by the world size; the reduced tensor is returned and must be used (stable-pretraining
    discards it, method-anchors.md 1.1). Its backward all-reduces the incoming gradients, so
    each rank receives the gradient of the sum of every rank's loss: with DDP's averaging of
    parameter gradients this equals the gradient of the loss on the global batch (lightly
    issue #1920 is the bug the non-autograd version causes: gradients 1/world_size too small).
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
