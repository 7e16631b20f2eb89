"""LeJEPA (invariance + SIGReg) and next-token losses, as the rerun article quotes them.

Sources:
- the rerun article, "The loss brings view vectors together": the four lines of
  stable-pretraining's `LeJEPA._compute_loss` and the `* N * world_size` factor; "Next-token
  prediction in two lines": logits against the input word embeddings.
- stable-pretraining@d15ec96 `stable_pretraining/methods/lejepa.py` (`SlicedEppsPulley`,
  `EppsPulley`) and lejepa@eddffdd `lejepa/multivariate/slicing.py`
  (`SlicingUnivariateTest`): grid, weights, seeding, and two stable-pretraining bugs that are
  NOT reproduced here: it discards the result of its all_reduce and captures the world size at
  construction (docs/sources.md, "Losses and SIGReg").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from prh import distributed


def epps_pulley_grid(t_max: float = 3.0, n_points: int = 17) -> tuple[Tensor, Tensor, Tensor]:
    """Return (t, phi, weights) of the Epps-Pulley quadrature (stable-pretraining's and lejepa's).

    t = linspace(0, t_max, n_points); phi = exp(-t^2/2) is the N(0,1) characteristic function;
    weights = trapezoid weights of [-t_max, t_max] folded onto t >= 0 (dt at both ends, 2 dt
    inside) times the window phi. `n_points` must be odd (stable-pretraining asserts it).
    """
    if n_points < 3 or n_points % 2 == 0:
        raise ValueError(f"n_points must be odd and >= 3, got {n_points}")
    if not t_max > 0:
        raise ValueError(f"t_max must be positive, got {t_max}")
    t = torch.linspace(0.0, t_max, n_points, dtype=torch.float32)
    dt = t_max / (n_points - 1)
    phi = torch.exp(-0.5 * t.square())
    trapezoid = torch.full((n_points,), 2 * dt, dtype=torch.float32)
    trapezoid[[0, -1]] = dt
    return t, phi, trapezoid * phi


class _CosSin(torch.autograd.Function):
    """(cos x, sin x) with a backward that reuses them: autograd's own CosBackward and
    SinBackward recompute sin and cos; this gives the same numbers (g_s cos x - g_c sin x)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        cos, sin = x.cos(), x.sin()
        ctx.save_for_backward(cos, sin)
        return cos, sin

    @staticmethod
    def backward(ctx, grad_cos: Tensor, grad_sin: Tensor) -> Tensor:  # type: ignore[override]
        cos, sin = ctx.saved_tensors
        return grad_sin * cos - grad_cos * sin


def epps_pulley(projected: Tensor, t: Tensor, phi: Tensor, weights: Tensor) -> Tensor:
    """Per-slice Epps-Pulley statistic of `projected` [N, S] -> [S], in fp32.

    err = (mean cos(t x) - phi)^2 + (mean sin(t x))^2; T = (err @ weights) * N * world_size.
    Under DDP the empirical characteristic function is averaged over ranks with an
    autograd-aware all_reduce and that reduced value is the one used; N is the per-rank
    sample count, so N * world_size is the global count (equal per-rank batches assumed, as
    in stable-pretraining and lejepa). The world size is read at call time.
    Under H0 (x ~ N(0,1)) E[T] = sum_k w_k (1 - exp(-t_k^2)) = 1.0525 on the default grid,
    for a collapsed x == 0, T = 0.4020 N (both computed from these weights).
    """
    with torch.autocast(device_type=projected.device.type, enabled=False):
        x_t = projected.float().unsqueeze(-1) * t.float()  # [N, S, P]
        cos, sin = _CosSin.apply(x_t)
        cos_mean = distributed.all_reduce_mean(cos.mean(0))  # [S, P]
        sin_mean = distributed.all_reduce_mean(sin.mean(0))  # [S, P]
        err = (cos_mean - phi.float()).square() + sin_mean.square()
        return (err @ weights.float()) * projected.size(0) * distributed.world_size()


class SIGReg(nn.Module):
    """Sliced Epps-Pulley regulariser (stable-pretraining `SlicedEppsPulley` semantics).

    Each call draws `n_slices` Gaussian directions (fp32 columns normalised to unit length)
    from a torch.Generator on the input's device seeded with the `step` buffer, then returns
    the mean over slices of the Epps-Pulley statistic of x @ A. `step` is in the state_dict
    (a resumed run continues the same direction sequence), is made identical on every rank
    by a max-reduce before use, and is incremented on every call. The rerun article ("The
    loss brings view vectors together"): 1,024 random unit directions redrawn every step,
    17 points of the characteristic function. CPU and CUDA generators draw different
    directions for the same seed. The counter stays on the CPU when
    the module moves to a GPU, so reading it is no device sync (one process; under DDP the
    max-reduce runs on the device).
    """

    def __init__(self, n_slices: int = 1024, t_max: float = 3.0, n_points: int = 17) -> None:
        super().__init__()
        if n_slices < 1:
            raise ValueError(f"n_slices must be >= 1, got {n_slices}")
        self.n_slices = n_slices
        t, phi, weights = epps_pulley_grid(t_max, n_points)
        self.register_buffer("t", t)
        self.register_buffer("phi", phi)
        self.register_buffer("weights", weights)
        self.register_buffer("step", torch.zeros((), dtype=torch.long))

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        step = self.step
        super()._apply(fn, recurse)
        self.step = step  # the counter stays a host tensor (see the class docstring)
        return self

    def directions(self, dim: int, step: int, device: torch.device) -> Tensor:
        """The [dim, n_slices] unit-column fp32 directions drawn for `step`."""
        g = torch.Generator(device=device).manual_seed(step)
        a = torch.randn(dim, self.n_slices, generator=g, device=device, dtype=torch.float32)
        return a / a.norm(p=2, dim=0)

    def forward(self, x: Tensor) -> Tensor:
        """x: [N, K] embeddings (per rank) -> scalar mean statistic over slices (fp32)."""
        if x.ndim != 2:
            raise ValueError(f"SIGReg expects [N, K] embeddings, got shape {tuple(x.shape)}")
        with torch.no_grad():
            step = (int(distributed.max_over_ranks(self.step.to(x.device)).item())
                    if distributed.world_size() > 1 else int(self.step))
            a = self.directions(x.size(-1), step, x.device)
            self.step.fill_(step + 1)
        with torch.autocast(device_type=x.device.type, enabled=False):
            projected = x.float() @ a  # [N, S]
            return epps_pulley(projected, self.t, self.phi, self.weights).mean()


def lejepa_loss(all_projected: Tensor, n_global: int, sigreg: SIGReg,
                lamb: float) -> tuple[Tensor, Tensor, Tensor]:
    """LeJEPA loss on projections [V, N, K] with the `n_global` global views first.

    The rerun article, "The loss brings view vectors together" (stable-pretraining
    `LeJEPA._compute_loss`): centre = mean of the global views; invariance = mean squared
    distance of every view, global ones included, to the centre; SIGReg on all V*N view
    vectors flattened; loss = invariance + lamb * SIGReg. Returns (loss, invariance, sigreg).
    """
    if all_projected.ndim != 3:
        raise ValueError(f"all_projected must be [V, N, K], got shape {tuple(all_projected.shape)}")
    if not 1 <= n_global <= all_projected.size(0):
        raise ValueError(f"n_global must be in [1, {all_projected.size(0)}], got {n_global}")
    centers = all_projected[:n_global].mean(0)  # [N, K]
    invariance = (centers.unsqueeze(0) - all_projected).square().mean()
    sig = sigreg(all_projected.reshape(-1, all_projected.size(-1)))  # [V*N, K]
    return invariance + lamb * sig, invariance, sig


def ntp_loss(hidden: Tensor, tokens: Tensor, word_embeddings: Tensor, pad_id: int) -> Tensor:
    """Next-token cross-entropy with the input word embeddings as output head.

    The rerun article, "Next-token prediction in two lines": logits = h[:, :-1] @ E^T, scored
    in fp32 against tokens[:, 1:], ignoring padding. hidden [B, L, D], tokens [B, L],
    word_embeddings [V, D]. A batch whose targets are all padding gives NaN (no target).
    """
    if hidden.ndim != 3 or tokens.shape != hidden.shape[:2]:
        raise ValueError(f"hidden [B, L, D] and tokens [B, L] disagree: "
                         f"{tuple(hidden.shape)} vs {tuple(tokens.shape)}")
    logits = hidden[:, :-1] @ word_embeddings.T  # [B, L-1, V]
    return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten(),
                           ignore_index=pad_id)


def effective_sigreg_weight(lamb: float, batch_per_gpu: int, n_views: int,
                            world_size: int) -> float:
    """lamb * batch_per_gpu * n_views * world_size: lamb times the statistic's N * world_size.

    The SIGReg statistic is multiplied by its sample count (all views of the per-GPU batch)
    and by the world size, so lamb alone does not set its strength. The rerun article ("The
    loss brings view vectors together") reports that 128 per GPU at .02 matches lamb .01 at
    256 per GPU. For the NTP arm (no SIGReg) callers log 0.
    """
    for name, v in (("batch_per_gpu", batch_per_gpu), ("n_views", n_views),
                    ("world_size", world_size)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    return float(lamb) * batch_per_gpu * n_views * world_size


def lamb_for_effective_weight(target: float, batch_per_gpu: int, n_views: int,
                              world_size: int) -> float:
    """The lamb that gives effective SIGReg weight `target` for this batch/views/GPU count."""
    return target / effective_sigreg_weight(1.0, batch_per_gpu, n_views, world_size)
