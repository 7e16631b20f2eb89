"""Two gloo processes on CPU: LeJEPA gradients and values equal the one-process global batch.

Why divide the per-rank gradient by the world size W: each rank's loss is computed on its
half of the batch, the ECF inside SIGReg is averaged over ranks by an autograd-aware
all_reduce, and its backward all-reduces the incoming gradients, so rank r receives
d(sum_s L_s)/dx_r. Every rank's SIGReg value equals the global one and the invariance on
equal halves averages to the global invariance, so sum_s L_s = W * L_global and the rank-r
gradient is W * dL_global/dx_r. DDP averages parameter gradients over ranks (divides their
sum by W), which turns this back into the gradient of L_global. The test checks the input
gradient after that division against the one-process gradient on the concatenated batch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from prh import distributed
from prh.losses import SIGReg, lejepa_loss

WORLD = 2
V, N_PER_RANK, K, SLICES, LAMB = 4, 6, 8, 64, 0.02


def full_batch() -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    return 1.3 * torch.randn(V, WORLD * N_PER_RANK, K, generator=g) + 0.2


def worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    sigreg = SIGReg(n_slices=SLICES)          # built BEFORE the process group exists
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD)
    try:
        x = full_batch()[:, rank * N_PER_RANK:(rank + 1) * N_PER_RANK].clone().requires_grad_()
        loss, inv, sig = lejepa_loss(x, 2, sigreg, LAMB)
        loss.backward()
        # Step sync: rank 1 runs ahead; both ranks must draw the directions of step 5.
        if rank == 1:
            sigreg.step.fill_(5)
        synced = sigreg(x.detach().reshape(-1, K))
        torch.save({"grad": x.grad, "loss": loss.detach(), "sig": sig.detach(),
                    "inv": inv.detach(), "synced": synced, "step": sigreg.step.clone(),
                    "world": distributed.world_size(), "rank": distributed.rank()},
                   f"{out_dir}/rank{rank}.pt")
    finally:
        dist.barrier()  # no rank tears the file store down while the other still uses it
        dist.destroy_process_group()


def test_two_rank_gradient_equals_one_rank_global_batch(tmp_path):
    mp.spawn(worker, args=(str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]

    x = full_batch().requires_grad_()
    loss, inv, sig = lejepa_loss(x, 2, SIGReg(n_slices=SLICES), LAMB)
    loss.backward()
    reference_sync = SIGReg(n_slices=SLICES)
    reference_sync.step.fill_(5)
    synced = reference_sync(x.detach().reshape(-1, K))

    assert x.grad.abs().max() > 1e-3      # the 1e-6 tolerance is small against the gradient
    for r, out in enumerate(ranks):
        assert out["world"] == WORLD and out["rank"] == r
        # The world-size factor was read at call time: the rank value is the global statistic.
        assert out["sig"].item() == pytest.approx(sig.item(), rel=1e-6)
        assert out["loss"].item() == pytest.approx(out["inv"].item() + LAMB * sig.item(), rel=1e-6)
        assert out["synced"].item() == pytest.approx(synced.item(), rel=1e-6)
        assert out["step"].item() == 6
        rows = slice(r * N_PER_RANK, (r + 1) * N_PER_RANK)
        np.testing.assert_allclose((out["grad"] / WORLD).numpy(), x.grad[:, rows].numpy(),
                                   rtol=0, atol=1e-6)
    # Local invariances average to the global one (equal halves).
    assert abs(sum(o["inv"].item() for o in ranks) / WORLD - inv.item()) < 1e-6
