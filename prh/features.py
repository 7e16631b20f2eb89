"""Every-layer features of public encoders from the user's local copies, by the platonic-rep
protocol (minyoungg/platonic-rep@dcd76ba `extract_features.py`), never downloaded at run time.

- Language (`language_features`): a transformers folder (`hf download NAME
  --local-dir DIR` or `save_pretrained`), loaded with `local_files_only`. Features: the
  mask-weighted mean over tokens of every entry of `hidden_states`, embedding output included,
  [n, L + 1, d]. Two protocols (`PROTOCOLS`):
  - "platonic-rep" (the paper's, `extract_llm_features`): the tokenizer pads on the left to the
    longest text of the whole set at once (`padding="longest"`), batches are cut in input
    order, no position ids are passed (so a left-padded text's positions start after the
    padding, and its features depend on the set's longest text), and the pooling runs in the
    model's compute precision before the cast to float32;
  - "padding-invariant": right padding per batch, batches by length, position ids from the
    attention mask (cumsum - 1), pooling in float32, so a text's features do not depend on
    what it is batched with (unpaired-rosetta's mean-pooling encoder builds them for this
    reason). STS-B and retrieval (`last_only`) always use it.
  Texts are cut at the model's longest input (platonic-rep cuts none; WIT captions fit).
- Text-side checks (`load_text_side`, before any weight loads): the tokenizer's size against
  the model's embedding table (a folder without tokenizer files gets a 5-token fallback from
  transformers, and every word becomes unknown), and the share of unknown tokens on the
  benchmark's texts (`unk_share`, refused above `MAX_UNK_SHARE`).
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

from prh.io import file_sha256

PRECISIONS = ("float32", "bfloat16", "float16", "int8")
PROTOCOLS = ("platonic-rep", "padding-invariant")  # module docstring; the first is the paper's
# assumed: the most unknown tokens a scored text set may hold. The listed WordPiece encoders
# (BERT, MPNet, MiniLM) leave well under 1% of English tokens unknown, byte-level BPE (Qwen,
# Llama, CLIP) none; a tokenizer that is not the model's makes most of them unknown
MAX_UNK_SHARE = 0.05
# assumed: the most rows a scored text set may hold that are nothing but the unknown token
# (each is "[CLS] [UNK] [SEP]" to the model: their features are identical, a block of ties in
# every neighbour list); 1% is 10 of WIT-1024's rows. A share of tokens misses them: 21 Thai
# captions were 2.4% of the tokens and 14 such rows
MAX_UNK_ROWS = 0.01
# a tokenizer smaller than this share of the model's embedding table is not its tokenizer: a
# table padded to a multiple of 64 or 128 (Qwen2.5: 151,665 tokens, 151,936 rows) is far above
MIN_VOCAB_SHARE = 0.5
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


@dataclass
class TextSide:
    """A text model's config and tokenizer, checked, and what they say of the model (no
    weights loaded): model_type, hidden, layers, vocab_size, tokenizer_size, tied, causal."""

    config: Any
    tokenizer: Any
    max_length: int
    facts: dict[str, Any]


def _text_config(config: Any) -> Any:
    return getattr(config, "text_config", None) or config


def load_text_side(path: str | Path) -> TextSide:
    """The folder's config and tokenizer, the tokenizer's size checked against the embedding
    table (module docstring). Raises FeatureError naming the folder and the fix."""
    from transformers import AutoConfig, AutoTokenizer

    path = Path(path)
    if not (path / "config.json").is_file():
        raise FeatureError(f"{path}: no config.json, not a model folder; {DOWNLOAD_FIX}")
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise FeatureError(f"{path}: cannot load the config or the tokenizer ({e}); "
                           f"{DOWNLOAD_FIX}") from e
    cfg = _text_config(config)
    table, size = int(cfg.vocab_size), len(tokenizer)
    if size > table or size < MIN_VOCAB_SHARE * table:
        raise FeatureError(
            f"{path}: the tokenizer holds {size:,} tokens and the model's embedding table "
            f"{table:,} rows: not this model's tokenizer (a folder without tokenizer.json, "
            "vocab.txt or tokenizer_config.json gets a fallback that makes every word unknown); "
            f"copy the tokenizer files beside config.json ({DOWNLOAD_FIX})")
    if tokenizer.pad_token is None:  # causal LMs: platonic-rep pads with eos
        tokenizer.pad_token = tokenizer.eos_token
    limits = [v for v in (tokenizer.model_max_length, getattr(cfg, "max_position_embeddings",
                                                             None)) if v and v < 1e9]
    archs = getattr(config, "architectures", None) or []
    facts = {"model_type": config.model_type, "hidden": int(cfg.hidden_size),
             "layers": int(cfg.num_hidden_layers), "vocab_size": table,
             "tokenizer_size": size,
             "tied": bool(getattr(config, "tie_word_embeddings", True)),
             "causal": any(a.endswith("ForCausalLM") for a in archs)}
    return TextSide(config, tokenizer, min(limits) if limits else FALLBACK_MAX_LENGTH, facts)


def unknown(tokenizer: Any, texts: Sequence[str]) -> tuple[float, list[int]]:
    """(the share of the texts' tokens, special tokens left out, that are the tokenizer's
    unknown token; the rows whose every token is it); (0, []) for a tokenizer without one
    (byte-level BPE)."""
    unk = tokenizer.unk_token_id
    if unk is None:
        return 0.0, []
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    total = sum(map(len, ids))
    rows = [i for i, row in enumerate(ids) if row and row.count(unk) == len(row)]
    return (sum(row.count(unk) for row in ids) / total if total else 0.0), rows


def unk_share(tokenizer: Any, texts: Sequence[str]) -> float:
    """The share of the texts' tokens (special tokens left out) that are the unknown token."""
    return unknown(tokenizer, texts)[0]


def check_unknown(side: TextSide, texts: Sequence[str], where: str) -> None:
    """FeatureError naming `where` when above MAX_UNK_SHARE of the tokens of `texts`, or above
    MAX_UNK_ROWS of its rows, are the unknown token."""
    share, rows = unknown(side.tokenizer, texts)
    unk = side.tokenizer.unk_token
    if share > MAX_UNK_SHARE:
        raise FeatureError(f"{where}: {share:.1%} of the tokens of the scored texts are the "
                           f"unknown token {unk!r} (at most {MAX_UNK_SHARE:.0%}): the tokenizer "
                           "does not cover these texts, and its features would be those of one "
                           "word repeated; check the tokenizer files are the model's")
    if len(rows) > MAX_UNK_ROWS * len(texts):
        shown = ", ".join(f"{i} ({texts[i][:30]!r})" for i in rows[:3])
        raise FeatureError(f"{where}: {len(rows)} of the {len(texts)} scored texts are nothing "
                           f"but the unknown token {unk!r} (at most {MAX_UNK_ROWS:.0%} of the "
                           f"rows), e.g. rows {shown}: their features are identical, ties in "
                           "every neighbour list; the tokenizer does not cover their script: "
                           "score a model whose tokenizer does, or leave those rows out")


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
    tower), its tokenizer checked first (`load_text_side`). Raises FeatureError naming the
    folder and the fix. `info["parameters_card"]` counts what a model card counts: the loaded
    encoder plus an untied language-model head (vocab x hidden) for a causal LM."""
    from transformers import AutoModel, CLIPTextModel

    path = Path(path)
    side = load_text_side(path)
    kwargs = _precision_kwargs(precision)
    try:
        cls = CLIPTextModel if side.config.model_type == "clip" else AutoModel
        model = cls.from_pretrained(path, local_files_only=True, **kwargs)
    except (OSError, ValueError) as e:
        raise FeatureError(f"{path}: cannot load the model ({e}); {DOWNLOAD_FIX}") from e
    if "device_map" not in kwargs:
        model = model.to(device)
    f = side.facts
    n_params = int(sum(p.numel() for p in model.parameters()))
    head = f["vocab_size"] * f["hidden"] if f["causal"] and not f["tied"] else 0
    info = {"path": str(path), "identity": identity(path), **f, "class": type(model).__name__,
            "precision": precision, "parameters": n_params, "parameters_card": n_params + head,
            "max_length": side.max_length}
    return LanguageModel(model.eval(), side.tokenizer, side.max_length, info)


def _pool(hidden: Sequence[torch.Tensor], mask: torch.Tensor, dtype: torch.dtype
          ) -> np.ndarray:
    """[b, L', d] float32: the mask-weighted mean over tokens of each hidden state, computed in
    `dtype`."""
    h = torch.stack(list(hidden), dim=1).to(dtype)  # [b, L', t, d]
    m = mask[:, None, :, None].to(dtype)
    return ((h * m).sum(2) / m.sum(2)).float().cpu().numpy()


def language_features(lm: LanguageModel, texts: Sequence[str], *, batch_size: int = 32,
                      device: str = "cpu", last_only: bool = False,
                      protocol: str = "platonic-rep") -> tuple[np.ndarray, dict[str, Any]]:
    """float32 [n, L + 1, d] by `protocol` (module docstring), or [n, 1, d] of the last hidden
    state with `last_only` (mean pooling for STS-B and retrieval, padding-invariant: 30,000
    captions of every layer of a 72B model would not fit), and how it was made: tokens per
    text, texts cut at max_length."""
    if protocol not in PROTOCOLS:
        raise FeatureError(f"protocol {protocol!r}: choose one of {list(PROTOCOLS)}")
    tok = lm.tokenizer
    full = tok(list(texts), truncation=False)["input_ids"]
    lengths = np.minimum([len(ids) for ids in full], lm.max_length)
    info = {"tokens_mean": float(lengths.mean()), "tokens_max": int(lengths.max()),
            "n_truncated": int(sum(len(ids) > lm.max_length for ids in full)),
            "protocol": "padding-invariant" if last_only else protocol}
    with torch.no_grad():
        if protocol == "platonic-rep" and not last_only:
            feats = _platonic_rep(lm, texts, batch_size, device)
        else:
            feats = _padding_invariant(lm, texts, batch_size, device, last_only)
    info["hidden_states"] = int(feats.shape[1]) if len(feats) else 0  # layers + 1
    return feats, info


def _platonic_rep(lm: LanguageModel, texts: Sequence[str], batch_size: int, device: str
                  ) -> np.ndarray:
    """platonic-rep `extract_llm_features`, pool "avg": one left-padded tokenisation of the
    whole set, batches in input order, input ids and mask only, pooling in the compute dtype."""
    tok = lm.tokenizer
    side, tok.padding_side = tok.padding_side, "left"
    try:
        enc = tok(list(texts), padding="longest", truncation=True, max_length=lm.max_length,
                  return_tensors="pt")
    finally:
        tok.padding_side = side
    rows = []
    for lo in range(0, len(texts), batch_size):
        ids = enc["input_ids"][lo:lo + batch_size].to(device).long()
        mask = enc["attention_mask"][lo:lo + batch_size].to(device).long()
        hidden = lm.model(input_ids=ids, attention_mask=mask, output_hidden_states=True
                          ).hidden_states
        rows.append(_pool(hidden, mask, hidden[0].dtype))
    return np.concatenate(rows).astype(np.float32)


def _padding_invariant(lm: LanguageModel, texts: Sequence[str], batch_size: int, device: str,
                       last_only: bool) -> np.ndarray:
    """Right padding per batch of similar lengths, position ids from the mask, float32
    pooling; the output in input order."""
    tok, model = lm.tokenizer, lm.model
    side, tok.padding_side = tok.padding_side, "right"
    enc = tok(list(texts), truncation=True, max_length=lm.max_length)
    takes_positions = "position_ids" in inspect.signature(model.forward).parameters
    order = np.argsort(-np.array([len(ids) for ids in enc["input_ids"]]), kind="stable")
    out: list[np.ndarray | None] = [None] * len(texts)
    try:
        for lo in range(0, len(order), batch_size):
            idx = order[lo:lo + batch_size]
            batch = tok.pad({"input_ids": [enc["input_ids"][i] for i in idx]},
                            return_tensors="pt")
            ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
            kw: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
            if takes_positions:
                kw["position_ids"] = (mask.long().cumsum(1) - 1).clamp(min=0)
            hidden = model(**kw, output_hidden_states=True).hidden_states
            feats = _pool(hidden[-1:] if last_only else hidden, mask, torch.float32)
            for row, i in enumerate(idx):
                out[i] = feats[row]
    finally:
        tok.padding_side = side
    return np.stack(out).astype(np.float32)


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
            "sha256": file_sha256(file),  # the whole file: 0.3-2.5 GB, a few seconds
            "image_size": int(size), "width": int(model.embed_dim),
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
