"""Benchmark: the evaluation-only profile's costs and the precision effect its margin rests on.

Run: `.venv/bin/python bench/reference.py [--device cpu|cuda] [--texts 256]`. Prints:
- language features/s (the platonic-rep protocol, every hidden state) for random-weight Qwen2
  models at the shapes of Qwen2.5-0.5B / 1.5B / 7B (width x layers from their configs; the
  tokenizer is MiniLM's, so token counts are MiniLM's) and for the real all-MiniLM-L6-v2, on
  the miniature WIT texts; on the CPU only the shapes that fit in minutes;
- vision features/s for a random DINOv2 ViT-S/14 at 224 and at the protocol's 518 px;
- the permutation null's cost per draw at WIT-1024's n = 1,024 for a 72B-like text side
  (81 layers) against a 13-layer vision side, both metrics, and K = 500 computed from it;
- the bf16 effect: the same real MiniLM and items at float32 and bfloat16, the best-layer
  mutual 10-NN and CKA against a random DINOv2 (the `evaluated` rule's margin argument).
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference_parts import dinov2_weights, minilm_dir, wit_rows  # noqa: E402

from prh import features, layers  # noqa: E402

# (hidden, layers, heads, kv heads, intermediate) from the Qwen2.5 configs on the hub
QWEN_SHAPES = {"Qwen2.5-0.5B": (896, 24, 14, 2, 4864), "Qwen2.5-1.5B": (1536, 28, 12, 2, 8960),
               "Qwen2.5-7B": (3584, 28, 28, 4, 18944)}


def timed(f, *args, **kw):
    t = time.perf_counter()
    out = f(*args, **kw)
    return out, time.perf_counter() - t


def qwen_folder(root: Path, shape: tuple[int, ...]) -> Path:
    from transformers import AutoTokenizer, Qwen2Config, Qwen2Model

    hidden, n_layers, heads, kv, inter = shape
    tok = AutoTokenizer.from_pretrained(minilm_dir(), local_files_only=True)
    cfg = Qwen2Config(vocab_size=tok.vocab_size, hidden_size=hidden, intermediate_size=inter,
                      num_hidden_layers=n_layers, num_attention_heads=heads,
                      num_key_value_heads=kv, max_position_embeddings=512)
    folder = root / f"qwen{hidden}x{n_layers}"
    Qwen2Model(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def language(root: Path, texts: list[str], device: str) -> None:
    precision = "bfloat16" if device.startswith("cuda") else "float32"
    shapes = QWEN_SHAPES if device.startswith("cuda") else {"Qwen2.5-0.5B": QWEN_SHAPES[
        "Qwen2.5-0.5B"]}
    rows = [("all-MiniLM-L6-v2 (real)", minilm_dir())]
    rows += [(f"{name} shape, random", qwen_folder(root, s)) for name, s in shapes.items()]
    for name, folder in rows:
        lm = features.load_language_model(folder, precision, device)
        features.language_features(lm, texts[:8], batch_size=8, device=device)  # warm-up
        (x, how), s = timed(features.language_features, lm, texts, batch_size=32, device=device)
        print(f"  {name:<28} {lm.info['parameters'] / 1e6:7.1f}M  {x.shape[1]:3d} layers  "
              f"{len(texts) / s:8.1f} texts/s  ({how['tokens_mean']:.1f} tokens, {precision})")
        del lm
        torch.cuda.empty_cache() if torch.cuda.is_available() else None


def vision(root: Path, images: list, device: str) -> None:
    weights = dinov2_weights(root / "dinov2.safetensors")
    for size in (224, 518):
        model, _ = features.load_vision_model("vit_small_patch14_dinov2", weights, size,
                                              device=device)
        n = len(images) if device.startswith("cuda") or size == 224 else 16
        y, s = timed(features.vision_features, model, images[:n], image_size=size,
                     batch_size=32, device=device)
        print(f"  random DINOv2 ViT-S/14 at {size} px: {n / s:7.1f} images/s ({y.shape[1]} "
              f"layers, {n} images)")


def null_cost() -> None:
    rng = np.random.default_rng(0)
    n, lx, ly = 1024, 81, 13
    x, y = rng.standard_normal((n, lx, 64)), rng.standard_normal((n, ly, 64))
    for metric in layers.METRICS:
        la, build = timed(layers.LayerAlignment, x, y, metric, 10)
        perms = [rng.permutation(n) for _ in range(3)]
        _, s = timed(la.null, perms)
        print(f"  {metric:<10} n {n}, {lx} x {ly} layers: build {build:5.1f} s, "
              f"{s / 3:6.2f} s per draw -> K = 500: {500 * s / 3 / 60:5.1f} min (computed)")


def precision_effect(root: Path, texts: list[str], images: list) -> None:
    weights = root / "dinov2.safetensors"
    model, _ = features.load_vision_model("vit_small_patch14_dinov2", weights, 112)
    y = layers.clip_outliers(features.vision_features(model, images, image_size=112))
    out = {}
    for precision in ("float32", "bfloat16"):
        lm = features.load_language_model(minilm_dir(), precision)
        x = layers.clip_outliers(features.language_features(lm, texts)[0])
        out[precision] = {m: layers.LayerAlignment(x, y, m, 10).observed()
                          for m in layers.METRICS}
    for m in layers.METRICS:
        a, b = out["float32"][m], out["bfloat16"][m]
        print(f"  {m:<10} float32 {a.best:.4f} at {a.pair}, bfloat16 {b.best:.4f} at {b.pair}: "
              f"|difference| {abs(a.best - b.best):.4f} over {len(texts)} items")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--texts", type=int, default=256)
    a = ap.parse_args()
    torch.manual_seed(0)
    images_b, texts_l = wit_rows(a.texts)
    texts = [t[0] for t in texts_l]
    images = [Image.open(io.BytesIO(b)).convert("RGB") for b in images_b]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(f"language features ({a.device}, {len(texts)} texts):")
        language(root, texts, a.device)
        print(f"vision features ({a.device}):")
        vision(root, images, a.device)
        print("permutation null (numpy, this machine's cores):")
        null_cost()
        print("precision effect (CPU, real MiniLM against a random DINOv2 at 112 px, k = 10):")
        precision_effect(root, texts, images)
    return 0


if __name__ == "__main__":
    sys.exit(main())
