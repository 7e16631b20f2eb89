"""Every-layer features of public encoders from the user's local copies, by the platonic-rep
protocol (minyoungg/platonic-rep@dcd76ba `extract_features.py`), never downloaded at run time.

- Language (`language_features`): a transformers folder (`hf download NAME
  --local-dir DIR` or `save_pretrained`), loaded with `local_files_only`. Features: the
  mask-weighted mean over tokens of every entry of `hidden_states`, embedding output included,
  [n, L + 1, d]. Position ids are built from the attention mask (cumsum - 1), so a text's
  features do not depend on the padding of its batch (platonic-rep passes none with left
  padding; the pair-free benchmark's encoder builds them for that reason). Texts are cut at the
  model's longest input and batched by length; the output keeps the input order.
- Vision (`vision_features`): a timm model built with `pretrained=True` from the user's weights
  file (`pretrained_cfg_overlay={"file": ...}`, so timm's own checkpoint filter runs and nothing
  is fetched), at the model's own input size (DINOv2: 518 px, crop_pct 1.0) unless asked
  otherwise, through timm's eval transform. Features: the CLS token after every block, before
  the final norm (`blocks.{i}.add_1`), [n, L, d].
- Precision: float32, bfloat16 or float16 weights and activations; int8 through bitsandbytes
  (transformers' `BitsAndBytesConfig(load_in_8bit=True)`, for models that do not fit one GPU in
  bf16). Features are returned as float32 whatever the compute precision.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

PRECISIONS = ("float32", "bfloat16", "float16", "int8")
# assumed: the cut for a model whose tokenizer and config state no longest input (relative
# positions); recorded as max_length with every score
FALLBACK_MAX_LENGTH = 2048
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DOWNLOAD_FIX = ("download it once with `hf download NAME --local-dir DIR` (or "
                "`save_pretrained(DIR)`) and name DIR in params.yaml")


class FeatureError(ValueError):
    """A model folder or weights file that cannot be loaded, named with the fix."""


@dataclass
class LanguageModel:
    """A loaded text model: the module, its tokenizer, the longest input it takes, and what
    was loaded (recorded in every result)."""

    model: nn.Module
    tokenizer: Any
    max_length: int
    info: dict[str, Any]


def identity(path: str | Path) -> str:
    """A cheap fingerprint of a model folder or weights file, recorded with every score: sha256
    (first 16 hex) of each file's relative name and size, and config.json's bytes (hashing
    140 GB of 72B weights per run would cost minutes; a swapped checkpoint changes sizes or
    config)."""
    import hashlib

    path = Path(path)
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        h.update(f"{f.relative_to(path) if path.is_dir() else f.name}:{f.stat().st_size}\n"
                 .encode())
        if f.name == "config.json":
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _precision_kwargs(precision: str) -> dict[str, Any]:
    if precision not in PRECISIONS:
        raise FeatureError(f"precision {precision!r}: choose one of {list(PRECISIONS)}")
    if precision != "int8":
        return {"dtype": DTYPES[precision]}
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as e:
        raise FeatureError("precision int8 needs bitsandbytes and a CUDA GPU: `pip install "
                           "bitsandbytes`, or load the model in bfloat16") from e
    from transformers import BitsAndBytesConfig
    return {"quantization_config": BitsAndBytesConfig(load_in_8bit=True), "device_map": "auto"}


def load_language_model(path: str | Path, precision: str = "float32",
                        device: str = "cpu") -> LanguageModel:
    """A transformers folder as an encoder with every hidden state (a CLIP folder: its text
    tower). Raises FeatureError naming the folder and the fix."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer, CLIPTextModel

    path = Path(path)
    if not (path / "config.json").is_file():
        raise FeatureError(f"{path}: no config.json, not a model folder; {DOWNLOAD_FIX}")
    kwargs = _precision_kwargs(precision)
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        cls = CLIPTextModel if config.model_type == "clip" else AutoModel
        model = cls.from_pretrained(path, local_files_only=True, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise FeatureError(f"{path}: cannot load the model or its tokenizer ({e}); "
                           f"{DOWNLOAD_FIX}") from e
    if "device_map" not in kwargs:
        model = model.to(device)
    if tokenizer.pad_token is None:  # causal LMs: platonic-rep pads with eos
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    cfg = getattr(config, "text_config", config)
    limits = [v for v in (tokenizer.model_max_length, getattr(cfg, "max_position_embeddings",
                                                             None)) if v and v < 1e9]
    max_length = min(limits) if limits else FALLBACK_MAX_LENGTH
    n_params = sum(p.numel() for p in model.parameters())
    info = {"path": str(path), "identity": identity(path), "model_type": config.model_type,
            "class": type(model).__name__, "precision": precision,
            "parameters": int(n_params), "max_length": max_length}
    return LanguageModel(model.eval(), tokenizer, max_length, info)


def language_features(lm: LanguageModel, texts: Sequence[str], *, batch_size: int = 32,
                      device: str = "cpu", last_only: bool = False
                      ) -> tuple[np.ndarray, dict[str, Any]]:
    """float32 [n, L + 1, d] (module docstring), or [n, 1, d] of the last hidden state with
    `last_only` (mean pooling for STS-B and retrieval: 30,000 captions of every layer of a 72B
    model would not fit), and how it was made: tokens per text, texts cut at max_length."""
    tok, model = lm.tokenizer, lm.model
    enc = tok(list(texts), truncation=True, max_length=lm.max_length)
    lengths = np.array([len(ids) for ids in enc["input_ids"]])
    full = tok(list(texts), truncation=False)["input_ids"]
    n_cut = int(sum(len(ids) > lm.max_length for ids in full))
    takes_positions = "position_ids" in inspect.signature(model.forward).parameters
    order = np.argsort(-lengths, kind="stable")
    out: list[np.ndarray | None] = [None] * len(texts)
    with torch.no_grad():
        for lo in range(0, len(order), batch_size):
            idx = order[lo:lo + batch_size]
            batch = tok.pad({"input_ids": [enc["input_ids"][i] for i in idx]},
                            return_tensors="pt")
            ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
            kw: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
            if takes_positions:
                kw["position_ids"] = (mask.long().cumsum(1) - 1).clamp(min=0)
            hidden = model(**kw, output_hidden_states=True).hidden_states
            h = torch.stack(hidden[-1:] if last_only else hidden, dim=1).float()  # [b, L', t, d]
            m = mask[:, None, :, None].float()
            feats = ((h * m).sum(2) / m.sum(2)).cpu().numpy()
            for row, i in enumerate(idx):
                out[i] = feats[row]
    info = {"tokens_mean": float(lengths.mean()), "tokens_max": int(lengths.max()),
            "n_truncated": n_cut, "layers": int(out[0].shape[0]) if out else 0}
    return np.stack(out).astype(np.float32), info


def _weights_file(path: Path) -> Path:
    """A weights file, or the one inside a timm hub folder (model.safetensors,
    pytorch_model.bin)."""
    if path.is_dir():
        for name in ("model.safetensors", "pytorch_model.bin", "open_clip_model.safetensors"):
            if (path / name).is_file():
                return path / name
        raise FeatureError(f"{path}: no model.safetensors or pytorch_model.bin in the folder; "
                           "download the timm weights with `hf download "
                           "timm/NAME --local-dir DIR`")
    if not path.is_file():
        raise FeatureError(f"{path}: weights not found; download the timm weights with "
                           "`hf download timm/NAME --local-dir DIR`")
    return path


def load_vision_model(timm_name: str, weights: str | Path, image_size: int | None = None,
                      precision: str = "float32", device: str = "cpu") -> tuple[nn.Module,
                                                                              dict[str, Any]]:
    """A timm ViT with the user's weights (module docstring) and what was loaded."""
    import timm

    if precision not in DTYPES:
        raise FeatureError(f"vision precision {precision!r}: choose one of {list(DTYPES)}")
    file = _weights_file(Path(weights))
    extra = {"img_size": image_size} if image_size else {}
    try:
        model = timm.create_model(timm_name, pretrained=True, num_classes=0,
                                  pretrained_cfg_overlay={"file": str(file)}, **extra)
    except RuntimeError as e:  # state dict of another architecture
        raise FeatureError(f"{file}: not weights of timm's {timm_name} ({str(e)[:300]}); "
                           "name the timm architecture the weights belong to") from e
    if not hasattr(model, "blocks"):
        raise FeatureError(f"{timm_name}: not a ViT with .blocks; the protocol reads the CLS "
                           "token after every transformer block")
    if getattr(model, "cls_token", None) is None:  # token 0 would be a register or a patch
        raise FeatureError(f"{timm_name}: has no CLS token (pooled by {model.global_pool!r}); "
                           "the protocol reads the CLS token after every block, so this model "
                           "(I-JEPA, SigLIP, the gap ViTs) is not scored by it")
    size = image_size or model.pretrained_cfg["input_size"][-1]
    info = {"timm": timm_name, "weights": str(file), "identity": identity(file),
            "image_size": int(size),
            "precision": precision, "layers": len(model.blocks),
            "parameters": int(sum(p.numel() for p in model.parameters()))}
    return model.to(device=device, dtype=DTYPES[precision]).eval(), info


def vision_features(model: nn.Module, images: Sequence[Any], *, image_size: int,
                    batch_size: int = 32, device: str = "cpu") -> np.ndarray:
    """float32 [n, L, d]: the CLS token after every block of `model` for PIL images, through
    timm's eval transform at `image_size`."""
    from timm.data import create_transform, resolve_data_config

    from prh.image import cls_per_block

    cfg = resolve_data_config({"input_size": (3, image_size, image_size)}, model=model)
    transform = create_transform(**cfg)
    dtype = next(model.parameters()).dtype
    rows = []
    with torch.no_grad():
        for lo in range(0, len(images), batch_size):
            x = torch.stack([transform(im.convert("RGB")) for im in images[lo:lo + batch_size]])
            rows.append(cls_per_block(model, x.to(device=device, dtype=dtype)).float().cpu())
    return torch.cat(rows).numpy().astype(np.float32)
