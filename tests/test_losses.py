"""prh.losses: SIGReg constants, parity with stable-pretraining, LeJEPA and NTP by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from prh.losses import (
    SIGReg,
    effective_sigreg_weight,
    epps_pulley,
    epps_pulley_grid,
    lamb_for_effective_weight,
    lejepa_loss,
    ntp_loss,
)

# stable-pretraining's and lejepa's EppsPulley weights for the defaults (t_max 3, 17 points),
# computed with numpy to 6 decimals (docs/sources.md, "Losses and SIGReg").
ANCHOR_WEIGHTS = [0.1875, 0.368466, 0.349538, 0.320129, 0.283065, 0.241646, 0.199161, 0.158475,
                  0.121745, 0.090296, 0.064658, 0.0447, 0.029835, 0.019225, 0.011961, 0.007184,
                  0.002083]
H0_MEAN = 1.0524641547991604        # sum_k w_k (1 - exp(-t_k^2)), float64
COLLAPSE_PER_SAMPLE = 0.40204757973166455   # sum_k w_k (1 - exp(-t_k^2/2))^2, float64


def numpy_epps_pulley(x: np.ndarray) -> np.ndarray:
    """Independent float64 re-derivation of the per-slice statistic for x [N, S]."""
    t = np.linspace(0.0, 3.0, 17)
    phi = np.exp(-t**2 / 2)
    w = np.full(17, 2 * 3.0 / 16)
    w[[0, -1]] = 3.0 / 16
    xt = x[..., None] * t
    err = (np.cos(xt).mean(0) - phi) ** 2 + np.sin(xt).mean(0) ** 2
    return (err @ (w * phi)) * x.shape[0]


def test_weights_equal_the_anchor_numbers():
    t, phi, w = epps_pulley_grid()
    np.testing.assert_allclose(w.numpy(), ANCHOR_WEIGHTS, atol=1e-6, rtol=0)
    assert t[1].item() == pytest.approx(3 / 16)
    assert w.sum().item() == pytest.approx(2.49967, abs=1e-5)
    # E[T] under H0 is exactly sum w (1 - exp(-t^2)) for every N (Var cos + Var sin = 1 - phi^2).
    assert (w * (1 - torch.exp(-t.square()))).sum().item() == pytest.approx(H0_MEAN, abs=1e-6)


@pytest.mark.parametrize("n", [8, 64, 512])
def test_statistic_under_h0_is_about_1_05_for_any_n(n):
    x = torch.randn(n, 1000, generator=torch.Generator().manual_seed(n))
    stat = epps_pulley(x, *epps_pulley_grid())
    # 1000 slices, per-slice sd ~0.9: standard error ~0.03.
    assert stat.mean().item() == pytest.approx(H0_MEAN, abs=0.1)


@pytest.mark.parametrize("n", [1, 10, 333])
def test_collapsed_embedding_scores_0_402_n(n):
    value = SIGReg(n_slices=16)(torch.zeros(n, 5)).item()
    assert value / n == pytest.approx(COLLAPSE_PER_SAMPLE, abs=1e-4)
    assert COLLAPSE_PER_SAMPLE == pytest.approx(0.4020, abs=1e-4)


def test_wrong_scale_grows_linearly_in_n():
    grid = epps_pulley_grid()
    g = torch.Generator().manual_seed(0)
    small = epps_pulley(2 * torch.randn(256, 1000, generator=g), *grid).mean().item()
    large = epps_pulley(2 * torch.randn(1024, 1000, generator=g), *grid).mean().item()
    # sigma = 2 gives T ~ 62 at N = 256 and 244 at N = 1024 (numpy, on the default grid).
    assert small == pytest.approx(62, rel=0.05)
    assert large == pytest.approx(244, rel=0.05)
    assert large / small == pytest.approx(4, rel=0.05)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.floats(0.1, 3.0), st.integers(0, 2**31 - 1))
def test_statistic_matches_float64_numpy(n, s, scale, seed):
    x = scale * torch.randn(n, s, generator=torch.Generator().manual_seed(seed)) + 0.3
    ours = epps_pulley(x, *epps_pulley_grid()).numpy()
    np.testing.assert_allclose(ours, numpy_epps_pulley(x.double().numpy()), rtol=1e-4, atol=1e-5)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    np.testing.assert_allclose(epps_pulley(x[perm], *epps_pulley_grid()).numpy(), ours, rtol=1e-5)


def parity_input() -> torch.Tensor:
    g = torch.Generator().manual_seed(1234)
    return torch.randn(8, 16, 32, generator=g) * 1.5 + 0.25   # [V, N, K]


def test_parity_with_stable_pretraining():
    """Golden values from stable-pretraining's released code, computed once outside the repo.

    Source: galilai-group/stable-pretraining at d15ec96d088a30e220f6fab1539dfb5d854729f0,
    `git show HEAD:stable_pretraining/methods/lejepa.py > /tmp/scratch_a1/lejepa_ref.py`; a
    scratch script parsed that file with `ast`, exec'd only the classes `EppsPulley`,
    `SlicedEppsPulley` and the function `LeJEPA._compute_loss` (torch 2.14.1+cu130, CPU,
    no process group), and ran on `parity_input()`:
    `sig = SlicedEppsPulley(num_slices=256)`; `sig(x.reshape(-1, 32))` three times (steps 0,
    1, 2); then with a fresh `SlicedEppsPulley(num_slices=256)`, `_compute_loss(x, 2, sig2,
    0.02)`. The printed float32 values are stored below.
    """
    x = parity_input()
    sig = SIGReg(n_slices=256)
    values = [sig(x.reshape(-1, 32)).item() for _ in range(3)]
    np.testing.assert_allclose(values, [14.951522827148438, 15.174649238586426,
                                        15.448143005371094], rtol=0, atol=1e-6)
    loss, inv, sr = lejepa_loss(x, 2, SIGReg(n_slices=256), 0.02)
    np.testing.assert_allclose([loss.item(), inv.item(), sr.item()],
                               [3.2596774101257324, 2.960646867752075, 14.951522827148438],
                               rtol=0, atol=1e-6)


def test_step_counter_seeds_directions_and_survives_state_dict():
    x = parity_input().reshape(-1, 32)
    a = SIGReg(n_slices=64)
    first, second = a(x).item(), a(x).item()
    assert first != second
    assert a.step.item() == 2 and "step" in a.state_dict()
    b = SIGReg(n_slices=64)
    b.load_state_dict({k: v.clone() for k, v in a.state_dict().items()})
    assert b(x).item() == a(x).item()
    c = SIGReg(n_slices=64)
    assert c(x).item() == first
    d = a.directions(32, 0, torch.device("cpu"))
    np.testing.assert_allclose(d.norm(dim=0).numpy(), 1.0, rtol=1e-6)


def test_sigreg_runs_in_fp32_under_autocast():
    x = parity_input().reshape(-1, 32)
    plain = SIGReg(n_slices=256)(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = SIGReg(n_slices=256)(x.bfloat16())
    assert mixed.dtype == torch.float32
    ref = SIGReg(n_slices=256)(x.bfloat16().float())
    assert mixed.item() == pytest.approx(ref.item(), abs=1e-6)
    assert plain.item() == pytest.approx(ref.item(), rel=0.05)


def test_lejepa_invariance_by_hand():
    # V=3 views of N=1 sample, K=1: globals 1 and 3 -> centre 2; squares 1, 1, 9 -> 11/3.
    x = torch.tensor([[[1.0]], [[3.0]], [[5.0]]])
    loss, inv, sig = lejepa_loss(x, 2, SIGReg(n_slices=8), 0.5)
    assert inv.item() == pytest.approx(11 / 3, rel=1e-6)
    assert sig.item() == pytest.approx(SIGReg(n_slices=8)(x.reshape(3, 1)).item(), rel=1e-6)
    assert loss.item() == pytest.approx(11 / 3 + 0.5 * sig.item(), rel=1e-6)


def test_lejepa_rejects_bad_shapes():
    with pytest.raises(ValueError, match="n_global"):
        lejepa_loss(torch.zeros(2, 3, 4), 3, SIGReg(4), 0.1)
    with pytest.raises(ValueError, match=r"\[V, N, K\]"):
        lejepa_loss(torch.zeros(3, 4), 1, SIGReg(4), 0.1)


def test_ntp_loss_by_hand_on_a_four_token_vocabulary():
    e = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])   # 4 tokens, D = 2
    pad = 3
    tokens = torch.tensor([[1, 2, 0, pad]])          # targets 2, 0, pad
    hidden = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [5.0, 5.0], [9.0, 9.0]]])
    # position 0: logits h0 E^T = [1, 0, 1, 0], target 2: -log(e / (2e + 2)) = log(2e + 2) - 1
    # position 1: logits h1 E^T = [0, 2, 2, 0], target 0: -log(1 / (2 + 2e^2)) = log(2 + 2e^2)
    # position 2: target is padding, ignored; mean over the 2 scored positions.
    expected = ((math.log(2 * math.e + 2) - 1) + math.log(2 + 2 * math.e**2)) / 2
    assert ntp_loss(hidden, tokens, e, pad).item() == pytest.approx(expected, rel=1e-6)


def test_ntp_loss_gradient_reaches_the_embeddings():
    e = torch.randn(6, 3, requires_grad=True)
    hidden = torch.randn(2, 4, 3)
    ntp_loss(hidden, torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]]), e, 0).backward()
    assert e.grad is not None and e.grad.abs().sum() > 0


def test_effective_weight_identity_from_the_rerun_article():
    # The rerun article, "The loss brings view vectors together": 128/GPU at .02 == .01 at 256/GPU.
    for views, gpus in [(8, 1), (8, 4), (2, 64)]:
        assert effective_sigreg_weight(0.02, 128, views, gpus) == pytest.approx(
            effective_sigreg_weight(0.01, 256, views, gpus), rel=1e-12)
    assert effective_sigreg_weight(0.02, 128, 8, 1) == pytest.approx(20.48)
    target = effective_sigreg_weight(0.02, 128, 8, 1)
    assert lamb_for_effective_weight(target, 256, 8, 1) == pytest.approx(0.01, rel=1e-12)
    with pytest.raises(ValueError, match="n_views"):
        effective_sigreg_weight(0.02, 128, 0, 1)


def test_effective_weight_is_the_gradient_scale_of_the_statistic():
    # At collapse, SIGReg = 0.402 * V * B: lamb * SIGReg grows with V * B exactly as the weight.
    for v, b in [(2, 4), (8, 4), (8, 16)]:
        sig = SIGReg(8)(torch.zeros(v * b, 3)).item()
        ratio = 0.02 * sig / effective_sigreg_weight(0.02, b, v, 1)
        assert ratio == pytest.approx(COLLAPSE_PER_SAMPLE, abs=1e-4)


def test_cos_sin_backward_matches_autograd_exactly():
    from prh.losses import _CosSin

    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 5, 3, generator=g, requires_grad=True)
    wc, ws = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    cos, sin = _CosSin.apply(x)
    ((cos.mean(0) * wc).sum() + (sin.mean(0) * ws).square().sum()).backward()
    fused = x.grad.clone()
    x.grad = None
    ((x.cos().mean(0) * wc).sum() + (x.sin().mean(0) * ws).square().sum()).backward()
    assert torch.equal(cos, x.cos()) and torch.equal(sin, x.sin())
    assert torch.equal(fused, x.grad)


def test_step_counter_stays_on_the_host():
    sig = SIGReg(n_slices=8).to(torch.float64)
    assert sig.step.device.type == "cpu" and sig.step.dtype == torch.long
    assert sig.t.dtype == torch.float64          # the other buffers do move
    if torch.cuda.is_available():
        sig = sig.cuda()
        sig(torch.randn(16, 4, device="cuda"))
        assert sig.step.device.type == "cpu" and sig.step.item() == 1
