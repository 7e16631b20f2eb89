"""prh.image: world encoder training, strict loading, the DINOv2 build."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from prh import image
from prh.image import ImageConfig, ImageError

TINY = {"image_size": 16, "embed_dim": 16, "width": 8, "depth": 2, "proj_hidden": 32,
        "proj_dim": 16, "epochs": 5, "batch_size": 12, "n_slices": 64, "n_local": 2,
        "lr": 3e-3}


def make_images(folder: Path, n: int, size: int = 16, seed: int = 0) -> list[Path]:
    """Coloured squares on a tinted background, like a miniature world image."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        arr = np.full((size, size, 3), rng.integers(60, 190, 3), dtype=np.uint8)
        x, y = rng.integers(0, size // 2, 2)
        arr[y:y + size // 3, x:x + size // 3] = rng.integers(0, 256, 3)
        paths.append(folder / f"{i:03d}.png")
        Image.fromarray(arr).save(paths[-1])
    return paths


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    paths = make_images(root / "images", 24)
    cfg = ImageConfig.from_dict(TINY)
    model = image.train_world_image_encoder(paths, cfg, 0, root / "encoder.pt")
    return root, paths, cfg, model


def embed_all(model, paths, cfg):
    return image.embed_images(model, paths, image_size=cfg.image_size, mean=cfg.mean,
                              std=cfg.std, batch_size=7, progress=False)


# ---------------------------------------------------------------------------- config

def test_config_from_dict_converts_lists_and_rejects_unknown_keys_and_types():
    cfg = ImageConfig.from_dict({"mean": [0.5, 0.5, 0.5], "lr": 1, "epochs": 3})
    assert cfg.mean == (0.5, 0.5, 0.5) and cfg.lr == 1.0 and isinstance(cfg.lr, float)
    assert ImageConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ImageError, match="unknown key.*'epoch'"):
        ImageConfig.from_dict({"epoch": 3})
    with pytest.raises(ImageError, match=r"epochs=3.0 has type float; expected int"):
        ImageConfig.from_dict({"epochs": 3.0})
    with pytest.raises(ImageError, match=r"flip=1 has type int; expected bool"):
        ImageConfig.from_dict({"flip": 1})
    with pytest.raises(ImageError, match=r"mean=.0\.5.: expected a list"):
        ImageConfig.from_dict({"mean": "0.5"})


@pytest.mark.parametrize("bad, key", [({"encoder": "resnet"}, "encoder"),
                                      ({"encoder": "dinov2_vitb14", "image_size": 32},
                                       "image_size"),
                                      ({"local_scale": [0.5, 0.2]}, "local_scale"),
                                      ({"depth": 6}, "depth"),
                                      ({"std": [1.0, 0.0, 1.0]}, "std"),
                                      ({"batch_size": 1}, "batch_size")])
def test_config_validate_names_the_key(bad, key):
    with pytest.raises(ImageError, match=f"`{key}`"):
        ImageConfig.from_dict(bad, where="params.yaml: image")


# ---------------------------------------------------------------------------- views, schedule

def test_colour_jitter_factors_act_as_defined():
    x = torch.rand(2, 3, 4, 4)
    assert torch.allclose(image._colour_jitter(x, torch.ones(3, 2)), x, atol=1e-6)
    halved = image._colour_jitter(x, torch.tensor([[0.5, 0.5], [1.0, 1.0], [1.0, 1.0]]))
    assert torch.allclose(halved, x / 2, atol=1e-6)
    gray = image._colour_jitter(x, torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]))
    luma = 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]
    assert torch.allclose(gray, luma.unsqueeze(1).expand_as(x), atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(lo=st.floats(0.05, 1.0), width=st.floats(0.0, 1.0), n=st.integers(1, 3),
       seed=st.integers(0, 2**31), flip=st.booleans())
def test_random_views_keep_a_constant_image_constant(lo, width, n, seed, flip):
    """Any crop of a constant image, resampled bilinearly, is that constant (no jitter)."""
    colour = torch.tensor([0.2, 0.5, 0.9]).view(1, 3, 1, 1)
    x = colour.expand(3, 3, 8, 8).clone()
    scale = (lo, min(1.0, lo + width))
    v = image.random_views(x, n, scale, flip=flip, jitter=0.0,
                           gen=torch.Generator().manual_seed(seed))
    assert v.shape == (n, 3, 3, 8, 8)
    assert torch.allclose(v, colour.unsqueeze(0).expand_as(v), atol=1e-6)
    again = image.random_views(x + torch.rand_like(x) * 0.1, n, scale, flip=flip, jitter=0.4,
                               gen=torch.Generator().manual_seed(seed))
    assert float(again.min()) >= 0.0 and float(again.max()) <= 1.0


def test_full_area_view_without_flip_reproduces_the_image_along_the_long_axis():
    """Area 1: one side spans the whole image; a ramp along that axis is reproduced."""
    ramp = torch.linspace(0, 1, 16).view(1, 1, 1, 16).expand(1, 3, 16, 16).contiguous()
    gen = torch.Generator().manual_seed(3)
    views = image.random_views(ramp.expand(64, 3, 16, 16), 1, (1.0, 1.0), flip=False,
                               jitter=0.0, gen=gen)[0]
    full_width = [v for v in views if torch.allclose(v[0, 0], ramp[0, 0, 0], atol=1e-5)]
    assert len(full_width) > 10  # the aspect draws with crop width 1 (about half of 64)


def test_lr_schedule_warmup_peak_and_floor():
    base, total = 1e-3, 100
    assert image.image_lr(0, total, base) == pytest.approx(base / 10)
    assert image.image_lr(9, total, base) == pytest.approx(base)
    assert image.image_lr(10, total, base) == pytest.approx(base)
    mid = 10 + 45
    assert image.image_lr(mid, total, base) == pytest.approx(base / 1000 + (base - base / 1000) / 2)
    assert image.image_lr(total, total, base) == pytest.approx(base / 1000)
    decay = [image.image_lr(i, total, base) for i in range(10, total + 1)]
    assert all(a > b for a, b in zip(decay, decay[1:], strict=False))


def test_load_image_resizes_the_shorter_side_and_centre_crops(tmp_path):
    arr = np.zeros((20, 40, 3), dtype=np.uint8)
    arr[:, 10:30] = 255                                     # white centre band, 20 px wide
    Image.fromarray(arr).save(tmp_path / "wide.png")
    x = image.load_image(tmp_path / "wide.png", 10)
    assert x.shape == (3, 10, 10)
    assert float(x[:, :, 1:9].min()) == 1.0                 # centre crop falls inside the band
    square = np.arange(16 * 16 * 3, dtype=np.uint8).reshape(16, 16, 3)
    Image.fromarray(square).save(tmp_path / "sq.png")
    same = image.load_image(tmp_path / "sq.png", 16)
    assert torch.equal(same, torch.from_numpy(square).permute(2, 0, 1).float() / 255)
    (tmp_path / "bad.png").write_bytes(b"not a png")
    with pytest.raises(ImageError, match="bad.png: cannot read"):
        image.load_image(tmp_path / "bad.png", 16)


@pytest.mark.parametrize("height,width", [(375, 500), (500, 333), (40, 30), (100, 500)])
def test_squash_is_the_benchmarks_resize_within_one_grey_level(height, width):
    """unpaired-rosetta's DINOv2 transform resizes the whole image to 224 x 224 with
    torchvision's antialiased bilinear Resize on uint8 pixels; `resize="squash"` does it with
    PIL's bilinear filter, which widens with the reduction in the same way. Both round to
    uint8, so a pixel may differ by one grey level where the two sums fall either side of a
    half; never by more. The aspect ratio is not kept: nothing is cropped."""
    from torchvision.transforms import v2

    rng = np.random.default_rng(height * width)
    coarse = rng.integers(0, 256, (height // 8 + 2, width // 8 + 2, 3)).astype(np.uint8)
    arr = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC))
    arr = np.clip(arr + rng.integers(-20, 21, arr.shape), 0, 255).astype(np.uint8)
    ours = image.load_image(arr, 224, "bilinear", "squash")
    theirs = v2.Compose([v2.ToImage(), v2.RGB(), v2.ToDtype(torch.uint8, scale=True),
                         v2.Resize(size=(224, 224), antialias=True),
                         v2.ToDtype(torch.float32, scale=True)])(Image.fromarray(arr))
    assert ours.shape == theirs.shape == (3, 224, 224)
    assert float((ours - theirs).abs().max()) * 255 <= 1 + 1e-4
    band = np.zeros((20, 40, 3), np.uint8)
    band[:, :10] = 255  # the left quarter: cropped away by "crop", kept by "squash"
    assert float(image.load_image(band, 10, resize="squash")[:, :, 0].min()) == 1.0
    assert float(image.load_image(band, 10, resize="crop").max()) < 1.0
    with pytest.raises(ImageError, match="resize 'pad'"):
        image.load_image(band, 10, resize="pad")


# ---------------------------------------------------------------------------- world encoder

def test_world_encoder_loss_decreases_and_checkpoint_round_trips(trained):
    root, paths, cfg, model = trained
    ckpt = image.load_checkpoint(root / "encoder.pt")
    losses = [rec["loss"] for rec in ckpt["history"]]
    assert len(losses) == cfg.epochs and losses[-1] < 0.8 * losses[0]
    assert ckpt["config"] == cfg and ckpt["seed"] == 0
    assert ckpt["preprocessing"]["image_size"] == 16
    loaded = image.load_world_image_encoder(root / "encoder.pt")
    e = embed_all(model, paths, cfg)
    assert e.shape == (24, 16) and e.dtype == np.float32 and np.isfinite(e).all()
    np.testing.assert_array_equal(embed_all(loaded, paths, cfg), e)
    # batching does not change rows (eval mode: batch norm uses running statistics)
    one = image.embed_images(loaded, paths[:5], image_size=16, mean=cfg.mean, std=cfg.std,
                             batch_size=1, progress=False)
    np.testing.assert_allclose(one, e[:5], rtol=1e-5, atol=1e-6)


def test_world_encoder_is_deterministic_for_a_seed(trained, tmp_path):
    root, paths, cfg, model = trained
    short = ImageConfig.from_dict({**TINY, "epochs": 1})
    a = image.train_world_image_encoder(paths, short, 7, tmp_path / "a.pt")
    torch.rand(5)  # move the global RNG: training must not depend on it
    b = image.train_world_image_encoder(paths, short, 7, tmp_path / "b.pt")
    c = image.train_world_image_encoder(paths, short, 8, tmp_path / "c.pt")
    np.testing.assert_array_equal(embed_all(a, paths, short), embed_all(b, paths, short))
    assert not np.allclose(embed_all(a, paths, short), embed_all(c, paths, short))


def test_world_checkpoint_is_loaded_strictly(trained, tmp_path):
    root, *_ = trained
    ckpt = torch.load(root / "encoder.pt", weights_only=True)
    ckpt["state_dict"]["extra.weight"] = torch.zeros(1)
    torch.save(ckpt, tmp_path / "extra.pt")
    with pytest.raises(ImageError, match="extra.pt: state dict does not match.*unexpected"
                                         " keys.*extra.weight"):
        image.load_world_image_encoder(tmp_path / "extra.pt")
    del ckpt["state_dict"]["extra.weight"], ckpt["state_dict"]["head.bias"]
    torch.save(ckpt, tmp_path / "missing.pt")
    with pytest.raises(ImageError, match="head.bias"):
        image.load_world_image_encoder(tmp_path / "missing.pt")
    torch.save({"format": "other"}, tmp_path / "other.pt")
    with pytest.raises(ImageError, match="other.pt: format 'other'"):
        image.load_world_image_encoder(tmp_path / "other.pt")
    with pytest.raises(ImageError, match="not found.*harness image"):
        image.load_world_image_encoder(tmp_path / "absent.pt")


def test_training_refuses_missing_images(tmp_path):
    with pytest.raises(ImageError, match=r"2 image file\(s\) missing.*a.png.*b.png"):
        image.train_world_image_encoder([tmp_path / "a.png", tmp_path / "b.png"],
                                        ImageConfig.from_dict(TINY), 0, tmp_path / "e.pt")
    assert not (tmp_path / "e.pt").exists()


# ---------------------------------------------------------------------------- DINOv2

@pytest.fixture(scope="module")
def dinov2_state(tmp_path_factory):
    """A randomly initialised timm DINOv2 ViT-B/14 at 224 px, saved as a local state dict."""
    import timm
    torch.manual_seed(0)
    ref = timm.create_model(image.DINOV2_TIMM_NAME, pretrained=False, num_classes=0,
                            img_size=224).eval()
    path = tmp_path_factory.mktemp("dinov2") / "dinov2_vitb14.pt"
    torch.save(ref.state_dict(), path)
    return ref, path


def test_build_dinov2_loads_a_local_state_dict_and_embeds_cls(dinov2_state, tmp_path):
    ref, path = dinov2_state
    model = image.build_dinov2(path, img_size=224)
    paths = make_images(tmp_path / "img", 2, size=40)
    prep = image.dinov2_preprocessing(model, 224)
    assert prep["mean"] == list(image.IMAGENET_MEAN) and prep["interpolation"] == "bicubic"
    kw = {"image_size": 224, "mean": prep["mean"], "std": prep["std"], "batch_size": 2,
          "progress": False, "interpolation": "bicubic"}
    e = image.embed_images(model, paths, **kw)
    assert e.shape == (2, 768) and e.dtype == np.float32
    x = image.load_image(paths[0], 224, "bicubic").unsqueeze(0)
    with torch.no_grad():
        expected = ref(image.normalize(x, prep["mean"], prep["std"])).numpy()
    np.testing.assert_allclose(e[:1], expected, rtol=1e-4, atol=1e-4)
    blocks = image.embed_images(model, paths[:1], per_block=True, **kw)
    assert blocks.shape == (1, 12, 768)
    with torch.no_grad():  # the final CLS is the last block's CLS through the final norm
        normed = model.norm(torch.from_numpy(blocks[:, -1])).numpy()
    np.testing.assert_allclose(normed, e[:1], rtol=1e-4, atol=1e-4)


def test_token_mean_is_the_mean_of_the_final_norm_tokens(dinov2_state, tmp_path):
    """The benchmark's image row (`TokenMean`): the final norm of the last block's every
    token (class and patch tokens; DINOv2 ViT-B/14 has no register tokens), averaged."""
    ref, path = dinov2_state
    model = image.build_dinov2(path, img_size=224)
    x = image.normalize(torch.stack([image.load_image(p, 224, resize="squash") for p in
                                     make_images(tmp_path / "img", 2, size=40)]),
                        image.IMAGENET_MEAN, image.IMAGENET_STD)
    last: list[torch.Tensor] = []
    hook = model.blocks[-1].register_forward_hook(lambda _m, _i, out: last.append(out))
    with torch.no_grad():
        got = image.TokenMean(model)(x)
    hook.remove()
    tokens = 1 + (224 // 14) ** 2
    assert last[0].shape == (2, tokens, 768) and got.shape == (2, 768)
    with torch.no_grad():
        expected = model.norm(last[0]).sum(dim=1) / tokens
    # float32: both sides reduce the same 257 LayerNorm outputs (|x| of order 1), only in
    # another order. torch's reductions are pairwise: error <= log2(257) * 2^-24 * mean|x|,
    # about 5e-7 for order-1 tokens (a naive sum's worst case, 257 * 2^-24 = 1.5e-5, still
    # meets rtol + atol at mean|x| <= 1); no matmul, so no BLAS dependence
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_build_dinov2_is_strict_and_says_where_weights_go(dinov2_state, tmp_path):
    _, path = dinov2_state
    state = torch.load(path, weights_only=True)
    with pytest.raises(ImageError, match="absent.pt: DINOv2 weights not found.*dvc add"):
        image.build_dinov2(tmp_path / "absent.pt")
    del state["blocks.3.attn.qkv.weight"]
    state["surplus"] = torch.zeros(1)
    torch.save(state, tmp_path / "bad.pt")
    with pytest.raises(ImageError, match=r"bad.pt: not a DINOv2.*missing keys \['blocks.3.attn"
                                         r".qkv.weight'\].*unexpected keys \['surplus'\]"):
        image.build_dinov2(tmp_path / "bad.pt")


def test_the_embedding_device_follows_the_profiles_device(monkeypatch):
    """`train.device` names where DINOv2 embeds (harness image stage): "auto" is a GPU only
    when one is visible, "cuda" with none is refused, "cpu" stays."""
    from prh.distributed import torch_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert torch_device("auto") == torch_device("cpu") == "cpu"
    with pytest.raises(RuntimeError, match="no CUDA device is visible"):
        torch_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert torch_device("auto") == torch_device("cuda") == "cuda"
    assert torch_device("cpu") == "cpu"
