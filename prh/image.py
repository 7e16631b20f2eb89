"""Image encoders: frozen DINOv2 ViT-B/14 (the paper's reference) and the `world` stand-in.

The paper embeds photos with a frozen DINOv2 ViT-B/14, CLS token, 768-d (rerun article, "We
kept the pretrained image encoder DINOv2 fixed"). The `world` profile replaces it with a small
CNN trained here with LeJEPA on crops of one image. That makes it a bad-view encoder exactly as
DINOv2 is one by the paper's own definition: its positives are crops of one photograph (audit
article, 5.3 "By the Paper's Own Definition the Image Side Is a Bad View"; rerun article, "Where
this stops").

The crop recipe follows LeJEPA's (stable-pretraining's LeJEPA benchmark and the rerun
article, "The loss brings view vectors together"): 2 global views and 6 local views, the
invariance target is the mean of the global views, loss = invariance + lamb * SIGReg with
lamb = 0.02. Crop areas mirror the text views of the rerun article ("two global views keeping
50-100% ... six local views keeping 15-50%"); every view is resized to the image size.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from prh import io
from prh.config import dataclass_from_dict

CHECKPOINT_FORMAT = "prh.image/1"
DINOV2_TIMM_NAME = "vit_base_patch14_dinov2.lvd142m"
ENCODERS = ("world_cnn", "dinov2_vitb14")
INTERPOLATIONS = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}
# ImageNet statistics: timm's cfg for vit_base_patch14_dinov2.lvd142m (IMAGENET_DEFAULT_*).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ImageError(io.ContractError):
    """An image, a checkpoint or an image config does not honour its contract."""


@dataclass
class ImageConfig:
    """Every knob of the image stage (params.yaml `image` section); defaults are the world's."""

    encoder: str = "world_cnn"            # "world_cnn" (world profile) | "dinov2_vitb14" (paper)
    image_size: int = 32                  # world PNGs: 32 (prh.world); DINOv2: 224 (multiple of 14)
    interpolation: str = "bilinear"       # timm's DINOv2 cfg uses bicubic
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    embed_batch_size: int = 64            # batch for embedding (no gradients)
    weights: str = ""                     # DINOv2 state dict (local file), unused for world_cnn
    # world CNN: `depth` stride-2 conv blocks, widths width * 2**i, then a linear head
    embed_dim: int = 64
    width: int = 16
    depth: int = 3
    proj_hidden: int = 256                # projector Linear(embed->256), MLP 256 BN/ReLU, 128 out
    proj_dim: int = 128
    # LeJEPA training (lamb, n_global, n_local: stable-pretraining defaults, rerun article)
    epochs: int = 8                       # ~25-35 s for 1,500 32x32 images on 2 CPU cores
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 0.05
    lamb: float = 0.02
    n_slices: int = 256                   # SIGReg slices; the paper's 1024 is slower on 2 CPUs
    n_global: int = 2
    n_local: int = 6
    global_scale: tuple[float, float] = (0.5, 1.0)
    local_scale: tuple[float, float] = (0.15, 0.5)
    flip: bool = True
    jitter: float = 0.4                   # brightness/contrast/saturation factors in 1 +- jitter

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "image config") -> ImageConfig:
        """Build from a mapping (e.g. YAML); unknown keys and wrong types raise, naming the key."""
        try:
            cfg = dataclass_from_dict(cls, d, where)
        except (ValueError, TypeError) as e:
            raise ImageError(str(e)) from e
        cfg.validate(where)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    def validate(self, where: str = "image config") -> None:
        """Raise ImageError naming the key whose value is out of range."""
        def need(ok: bool, key: str, rule: str) -> None:
            if not ok:
                raise ImageError(f"{where}: `{key}` = {getattr(self, key)!r} {rule}")

        need(self.encoder in ENCODERS, "encoder", f"must be one of {ENCODERS}")
        need(self.interpolation in INTERPOLATIONS, "interpolation",
             f"must be one of {sorted(INTERPOLATIONS)}")
        need(self.image_size >= 8, "image_size", "must be >= 8")
        if self.encoder == "dinov2_vitb14":
            need(self.image_size % 14 == 0, "image_size", "must be a multiple of 14 (patch size)")
        need(len(self.mean) == 3 and all(0 <= m <= 1 for m in self.mean), "mean",
             "needs 3 values (RGB) in [0, 1], the range of the pixels it centres")
        need(len(self.std) == 3 and min(self.std) > 0, "std", "needs 3 positive values (RGB)")
        for key in ("embed_batch_size", "embed_dim", "width", "depth", "proj_hidden", "proj_dim",
                    "epochs", "n_slices", "n_global"):
            need(getattr(self, key) >= 1, key, "must be >= 1")
        need(self.batch_size >= 2, "batch_size", "must be >= 2 (batch norm)")
        need(self.n_local >= 0, "n_local", "must be >= 0")
        need(self.image_size >> self.depth >= 1, "depth",  # 2**depth <= image_size, without 2**1e12
             "halves the image too often for its size")
        need(self.lr > 0, "lr", "must be > 0")
        need(self.weight_decay >= 0 and self.lamb >= 0, "lamb", "and weight_decay must be >= 0")
        need(0 <= self.jitter < 1, "jitter", "must be in [0, 1)")
        for key in ("global_scale", "local_scale"):
            lo, hi = getattr(self, key)
            need(len(getattr(self, key)) == 2 and 0 < lo <= hi <= 1, key,
                 "must be (lo, hi) with 0 < lo <= hi <= 1 (fractions of the image area)")


# ---------------------------------------------------------------------------- preprocessing

def preprocessing(image_size: int, mean: Sequence[float], std: Sequence[float],
                  interpolation: str = "bilinear") -> dict[str, Any]:
    """The eval transform as data, stored beside embeddings (timm cfg style, crop_pct 1.0)."""
    return {"resize": "shorter side to image_size", "crop": "center", "crop_pct": 1.0,
            "image_size": int(image_size), "interpolation": interpolation,
            "mean": [float(x) for x in mean], "std": [float(x) for x in std]}


# how an image reaches S x S: "crop" (the shorter side to S, the centre S x S: timm's eval
# transform at crop_pct 1.0, platonic-rep's), "squash" (the whole image to S x S, the aspect
# ratio not kept: unpaired-rosetta's `dinov2_transform`, a 224 x 224 Resize)
RESIZES = ("crop", "squash")


def load_image(path: Path | np.ndarray, image_size: int, interpolation: str = "bilinear",
               resize: str = "crop") -> torch.Tensor:
    """RGB image (a file, or uint8 [H, W, 3] pixels such as CIFAR's) -> float tensor
    [3, S, S] in [0, 1], by `resize` (RESIZES). PIL's filters widen with the scale factor
    when they shrink, so a reduction is antialiased (as torchvision's antialias=True)."""
    if resize not in RESIZES:
        raise ImageError(f"resize {resize!r}: expected one of {RESIZES}")
    try:
        with (nullcontext(Image.fromarray(path)) if isinstance(path, np.ndarray)
              else Image.open(path)) as im:
            im = im.convert("RGB")
            w, h = im.size
            scale = image_size / min(w, h)
            size = ((image_size, image_size) if resize == "squash" else
                    (max(image_size, round(w * scale)), max(image_size, round(h * scale))))
            if size != (w, h):
                im = im.resize(size, INTERPOLATIONS[interpolation])
            left, top = (size[0] - image_size) // 2, (size[1] - image_size) // 2
            im = im.crop((left, top, left + image_size, top + image_size))
            arr = np.asarray(im, dtype=np.uint8)
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise ImageError(f"{path}: cannot read the image ({e}); regenerate or re-download "
                         "it") from e
    return torch.from_numpy(arr.copy()).permute(2, 0, 1).float().div_(255.0)


def normalize(x: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    m = torch.tensor(mean, dtype=x.dtype).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=x.dtype).view(1, 3, 1, 1)
    return (x - m) / s


def check_images_exist(paths: Iterable[Path], fix: str) -> None:
    """One error listing the missing files (first 10 and the count), with `fix`."""
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise ImageError(f"{len(missing)} image file(s) missing: {missing[:10]}{more}; {fix}")


# ---------------------------------------------------------------------------- world encoder

class WorldCNN(nn.Module):
    """Small conv net: `depth` stride-2 3x3 conv blocks (BN, ReLU), mean pool onto a 2x2 grid
    (so the coarse layout, which carries the world's spatial relation, survives), Linear."""

    def __init__(self, cfg: ImageConfig):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for i in range(cfg.depth):
            c_out = cfg.width * 2 ** i
            layers += [nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False),
                       nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(4 * c_in, cfg.embed_dim)
        self.embed_dim = cfg.embed_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)                      # (B, C, S / 2**depth, S / 2**depth)
        h = nn.functional.adaptive_avg_pool2d(h, 2)  # (B, C, 2, 2)
        return self.head(h.flatten(1))            # (B, embed_dim)


def projector(cfg: ImageConfig) -> nn.Sequential:
    """stable-pretraining's default LeJEPA projector, scaled down: a linear bottleneck, one
    hidden Linear-BN-ReLU block (upstream has two, of width 2048), a last Linear with no norm
    or activation."""
    h = cfg.proj_hidden
    return nn.Sequential(nn.Linear(cfg.embed_dim, h),
                         nn.Linear(h, h), nn.BatchNorm1d(h), nn.ReLU(inplace=True),
                         nn.Linear(h, cfg.proj_dim))


def random_views(x: torch.Tensor, n: int, scale: tuple[float, float], *, flip: bool,
                 jitter: float, gen: torch.Generator) -> torch.Tensor:
    """n random resized crops of each image in x [B, 3, S, S] -> [n, B, 3, S, S], in [0, 1].

    Crop area ~ U(scale) of the image, aspect ratio log-uniform in [3/4, 4/3] (torchvision's
    RandomResizedCrop), horizontal flip with p = 0.5, brightness/contrast/saturation factors
    ~ U(1 - jitter, 1 + jitter). One batched affine resample, so it costs little on a CPU.
    """
    b, _, s, _ = x.shape
    m = n * b
    area = torch.empty(m).uniform_(scale[0], scale[1], generator=gen)
    log_r = torch.empty(m).uniform_(math.log(3 / 4), math.log(4 / 3), generator=gen)
    w = (area * log_r.exp()).sqrt().clamp(max=1.0)            # crop side / image side
    h = (area / log_r.exp()).sqrt().clamp(max=1.0)
    cx = (torch.rand(m, generator=gen) * 2 - 1) * (1 - w)     # centre, normalised coordinates
    cy = (torch.rand(m, generator=gen) * 2 - 1) * (1 - h)
    sign = torch.where(torch.rand(m, generator=gen) < 0.5, -1.0, 1.0) if flip else torch.ones(m)
    theta = torch.zeros(m, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2] = w * sign, cx
    theta[:, 1, 1], theta[:, 1, 2] = h, cy
    src = x.repeat(n, 1, 1, 1)                                # (n*B, 3, S, S), view-major
    grid = F.affine_grid(theta, [m, 3, s, s], align_corners=False)
    out = F.grid_sample(src, grid, mode="bilinear", padding_mode="border", align_corners=False)
    if jitter > 0:
        out = _colour_jitter(out, torch.empty(3, m).uniform_(1 - jitter, 1 + jitter, generator=gen))
    return out.clamp_(0, 1).view(n, b, 3, s, s)


def _colour_jitter(x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """Scale brightness, contrast and saturation of x [M, 3, S, S] by the factors f [3, M]."""
    def gray(y: torch.Tensor) -> torch.Tensor:                # ITU-R 601 luma, (M, 1, S, S)
        return (0.299 * y[:, 0] + 0.587 * y[:, 1] + 0.114 * y[:, 2]).unsqueeze(1)

    b, c, s = (v.view(-1, 1, 1, 1) for v in f)
    x = x * b
    mean = gray(x).mean(dim=(2, 3), keepdim=True)
    x = (x - mean) * c + mean
    g = gray(x)
    return g + (x - g) * s


def image_lr(step: int, total: int, base: float) -> float:
    """The world image encoder's schedule: linear warmup from 0 over the first 10% of steps,
    then cosine to base/1000 (the lejepa README recipe: linear warmup, then cosine to lr/1000);
    the text encoders' schedule, with its own warmup and floor, is prh.train.lr_at."""
    warm = max(1, total // 10)
    if step < warm:
        return base * (step + 1) / warm
    t = (step - warm) / max(1, total - warm)
    return base / 1000 + (base - base / 1000) * 0.5 * (1 + math.cos(math.pi * t))


def _load_batch(paths: Sequence[Path], cfg: ImageConfig) -> torch.Tensor:
    return torch.stack([load_image(p, cfg.image_size, cfg.interpolation) for p in paths])


def train_world_image_encoder(paths: list[Path], cfg: ImageConfig, seed: int, out_path: Path, *,
                              on_epoch: Callable[[int, dict[str, float]], None] | None = None,
                              ) -> nn.Module:
    """Train WorldCNN + projector with LeJEPA on crops of single images; save a checkpoint.

    Seeded: model init, shuffling, crops and SIGReg directions all derive from `seed` (the
    caller's global RNG state is restored afterwards). The checkpoint (written atomically)
    holds the format tag, the config, the seed, the backbone's state dict, the preprocessing
    and one record per epoch (loss, invariance, sigreg). Returns the backbone in eval mode.
    """
    from prh.losses import SIGReg, lejepa_loss

    if cfg.encoder != "world_cnn":
        raise ImageError(f"train_world_image_encoder: encoder is {cfg.encoder!r}; only "
                         "'world_cnn' is trained here (DINOv2 is frozen: use build_dinov2)")
    cfg.validate()
    check_images_exist(paths, "generate the world data set first (`dvc repro world`)")
    images = _load_batch(paths, cfg)                                  # (N, 3, S, S) in [0, 1]
    n = images.shape[0]
    bs = min(cfg.batch_size, n)
    steps_per_epoch = max(1, n // bs)
    total = cfg.epochs * steps_per_epoch
    history: list[dict[str, float]] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        backbone, proj = WorldCNN(cfg), projector(cfg)
        sigreg = SIGReg(n_slices=cfg.n_slices)
        params = list(backbone.parameters()) + list(proj.parameters())
        opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        backbone.train(), proj.train()
        step = 0
        for epoch in range(1, cfg.epochs + 1):
            order = torch.randperm(n, generator=gen)
            sums = np.zeros(3)
            for i in range(steps_per_epoch):
                x = images[order[i * bs:(i + 1) * bs]]
                terms = _train_step(x, cfg, backbone, proj, sigreg, lejepa_loss, opt, gen,
                                    image_lr(step, total, cfg.lr))
                sums += terms
                step += 1
            rec = dict(zip(("loss", "invariance", "sigreg"), sums / steps_per_epoch, strict=True))
            history.append({"epoch": epoch, **{k: float(v) for k, v in rec.items()}})
            if on_epoch is not None:
                on_epoch(epoch, rec)
    backbone.eval()
    ckpt = {"format": CHECKPOINT_FORMAT, "config": cfg.to_dict(), "seed": seed,
            "state_dict": backbone.state_dict(), "history": history,
            "preprocessing": preprocessing(cfg.image_size, cfg.mean, cfg.std, cfg.interpolation)}
    with io.atomic_path(out_path, suffix=".pt") as tmp, open(tmp, "wb") as handle:
        torch.save(ckpt, handle)  # a file object: the archive's inner name is then "archive",
        # not the temp file's random name, so a rerun writes the same bytes (and DVC the same md5)
    return backbone


def _train_step(x: torch.Tensor, cfg: ImageConfig, backbone: nn.Module, proj: nn.Module,
                sigreg: nn.Module, loss_fn: Callable, opt: torch.optim.Optimizer,
                gen: torch.Generator, lr: float) -> np.ndarray:
    """One LeJEPA step on a batch of images; returns (loss, invariance, sigreg)."""
    glob = random_views(x, cfg.n_global, cfg.global_scale, flip=cfg.flip, jitter=cfg.jitter,
                        gen=gen)
    views = glob
    if cfg.n_local:
        loc = random_views(x, cfg.n_local, cfg.local_scale, flip=cfg.flip, jitter=cfg.jitter,
                           gen=gen)
        views = torch.cat([glob, loc])                        # (V, B, 3, S, S), globals first
    v, b = views.shape[:2]
    z = proj(backbone(normalize(views.flatten(0, 1), cfg.mean, cfg.std)))   # (V*B, K)
    loss, inv, sig = loss_fn(z.view(v, b, -1), cfg.n_global, sigreg, cfg.lamb)
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return np.array([loss.item(), inv.item(), sig.item()])


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a world image checkpoint and check its format tag and config."""
    path = Path(path)
    if not path.is_file():
        raise ImageError(f"{path}: image encoder checkpoint not found; train it with "
                         "`harness image` (world profile)")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for a corrupt or foreign file
        raise ImageError(f"{path}: not a readable torch checkpoint ({e}); retrain it") from e
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        found = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ImageError(f"{path}: format {found!r}, expected {CHECKPOINT_FORMAT!r}; retrain "
                         "it with `harness image`")
    ckpt["config"] = ImageConfig.from_dict(ckpt["config"], where=f"{path}: config")
    return ckpt


def load_world_image_encoder(path: Path) -> nn.Module:
    """The trained WorldCNN in eval mode, loaded strictly (a missing or extra key raises)."""
    ckpt = load_checkpoint(path)
    model = WorldCNN(ckpt["config"])
    load_strict(model, ckpt["state_dict"], f"{path}: state dict does not match its config",
                "retrain it with `harness image`")
    return model.eval()


def load_strict(model: nn.Module, state: Mapping[str, torch.Tensor], where: str, fix: str) -> None:
    """load_state_dict with strict semantics and a one-line error listing the keys at fault."""
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # shape mismatches raise even when strict=False
        msg = " ".join(str(e).split())
        raise ImageError(f"{where}: {msg}; {fix}") from e
    if result.missing_keys or result.unexpected_keys:
        raise ImageError(f"{where}: missing keys {result.missing_keys[:10]} "
                         f"({len(result.missing_keys)}), unexpected keys "
                         f"{result.unexpected_keys[:10]} ({len(result.unexpected_keys)}); {fix}")


# ---------------------------------------------------------------------------- DINOv2

DINOV2_FIX = (
    "download the DINOv2 ViT-B/14 weights on a machine with internet, e.g. "
    "`timm.create_model('vit_base_patch14_dinov2.lvd142m', pretrained=True)` and save its "
    "state_dict, or the Hugging Face file timm/vit_base_patch14_dinov2.lvd142m "
    "(model.safetensors), or Meta's release "
    "https://dl.fbaipublicfiles.com/dinov2/dinov2_vitb14/dinov2_vitb14_pretrain.pth; "
    "copy it to this path and track it with `dvc add`")


def build_dinov2(weights: Path, img_size: int = 224) -> nn.Module:
    """timm's DINOv2 ViT-B/14 (pretrained=False, no network) with a local state dict, strictly.

    Accepts timm-format state dicts (.safetensors or torch files) and Meta's release format
    (converted by timm's checkpoint filter, which also resamples the position embedding from
    518 px to `img_size`). Output: the final-norm CLS token, 768-d. Eval mode.
    """
    import timm
    from timm.models.vision_transformer import checkpoint_filter_fn

    weights = Path(weights)
    if not weights.is_file():
        raise ImageError(f"{weights}: DINOv2 weights not found; {DINOV2_FIX}")
    if img_size % 14:
        raise ImageError(f"build_dinov2: img_size {img_size} is not a multiple of 14")
    model = timm.create_model(DINOV2_TIMM_NAME, pretrained=False, num_classes=0,
                              img_size=img_size)
    state = _read_state_dict(weights)
    _check_width(state, weights, model.embed_dim)
    load_strict(model, checkpoint_filter_fn(state, model),
                f"{weights}: not a DINOv2 ViT-B/14 state dict", DINOV2_FIX)
    return model.eval()


# DINOv2 ViT/14 widths (Oquab et al. 2023, table 17): the size a state dict of another width is
DINOV2_WIDTHS = {384: "ViT-S/14", 768: "ViT-B/14", 1024: "ViT-L/14", 1536: "ViT-g/14"}


def _check_width(state: Mapping[str, Any], path: Path, width: int) -> None:
    """Name the model a state dict of another width holds (its cls_token: timm and Meta
    layouts share the key) instead of a list of size mismatches."""
    cls = state.get("cls_token")
    if isinstance(cls, torch.Tensor) and cls.shape[-1] != width:
        found = DINOV2_WIDTHS.get(cls.shape[-1], f"a width-{cls.shape[-1]} model")
        raise ImageError(f"{path}: holds {found} weights (cls_token width {cls.shape[-1]}), "
                         f"the image encoder is DINOv2 ViT-B/14 (width {width}); {DINOV2_FIX}")


def _read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file
            return load_file(str(path))
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # safetensors and torch raise several types for a bad file
        raise ImageError(f"{path}: cannot read the weights ({e}); {DINOV2_FIX}") from e
    if not isinstance(state, dict):
        raise ImageError(f"{path}: holds a {type(state).__name__}, not a state dict; {DINOV2_FIX}")
    return state


def dinov2_preprocessing(model: nn.Module, img_size: int) -> dict[str, Any]:
    """The eval transform of timm's cfg for this model (mean, std, interpolation) at img_size."""
    cfg = model.pretrained_cfg
    return preprocessing(img_size, cfg["mean"], cfg["std"], cfg.get("interpolation", "bicubic"))


# ---------------------------------------------------------------------------- embedding

def embed_images(model: nn.Module, paths: Sequence[Path] | np.ndarray, *, image_size: int,
                 mean: Sequence[float], std: Sequence[float], batch_size: int,
                 progress: bool | None = None, interpolation: str = "bilinear",
                 per_block: bool = False, resize: str = "crop", device: str = "cpu"
                 ) -> np.ndarray:
    """Embed images (files, or uint8 [n, H, W, 3] pixels) in order -> float32 [n, d] (or
    [n, n_blocks, d] with `per_block`).

    Batched, under no_grad, with the model in eval mode. `per_block` returns the CLS token of
    every transformer block's output, before the final norm (platonic-rep's layer-wise
    protocol: the CLS token at `blocks.{i}.add_1`); it needs a model with `.blocks` (ViT).
    A progress bar is shown only when `progress` is true, or when it is None and stderr is a TTY.
    `resize`: how an image reaches image_size (RESIZES); `device`: where the model runs (it is
    moved there), the pixels decoded on the CPU.
    """
    if not isinstance(paths, np.ndarray):
        check_images_exist(paths, "generate or download the images the data set names")
    if per_block and not hasattr(model, "blocks"):
        raise ImageError(f"per_block needs a ViT with .blocks; {type(model).__name__} has none")
    model.to(device).eval()
    show = sys.stderr.isatty() if progress is None else progress
    starts = range(0, len(paths), batch_size)
    if show:
        from tqdm import tqdm
        starts = tqdm(starts, desc="embed images", unit="batch", file=sys.stderr)
    rows = []
    with torch.no_grad():
        for start in starts:
            x = normalize(torch.stack([load_image(p, image_size, interpolation, resize)
                                       for p in paths[start:start + batch_size]]), mean, std)
            x = x.to(device)
            out = cls_per_block(model, x) if per_block else model(x)   # (b, [n_blocks,] d)
            rows.append(out.float().cpu().numpy())
    if not rows:
        raise ImageError("embed_images: no image paths given; check the split name")
    return np.concatenate(rows).astype(np.float32, copy=False)


class TokenMean(nn.Module):
    """The mean over a ViT's final-norm tokens (class, register and patch tokens):
    unpaired-rosetta's `TokenMean`, the row its DINOv2 encoders store
    (`modalities/image_captions/encoders.py`). timm's `forward_features` returns them."""

    def __init__(self, vit: nn.Module):
        super().__init__()
        self.vit = vit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.vit.forward_features(x).mean(dim=1)


def cls_per_block(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(b, n_blocks, d): the CLS token of every block's output of a ViT, before the final norm
    (platonic-rep's `blocks.{i}.add_1`), from one forward pass of `x`."""
    captured: list[torch.Tensor] = []
    hooks = [blk.register_forward_hook(lambda _m, _i, out: captured.append(out[:, 0]))
             for blk in model.blocks]
    try:
        model(x)
    finally:
        for hk in hooks:
            hk.remove()
    return torch.stack(captured, dim=1)
