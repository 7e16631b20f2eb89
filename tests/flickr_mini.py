"""A miniature Flickr30k, built in a temporary folder by the tests (nothing large is committed).

`build` writes what a user copies into data/flickr30k/raw: `dataset.json` in the schema of
Karpathy's dataset_flickr30k.json (dataset; images with imgid, sentids, sentences with tokens,
raw, imgid and sentid, split, filename) and `images/` with real JPEGs of Flickr-like sizes in
the modes users meet: RGB, grayscale, CMYK, one with an EXIF rotation tag and one PNG under a
.jpg name. `dinov2_state` gives random-weight DINOv2 state dicts in timm's layout (224 px) or
Meta's release layout (518 px position table, a mask token).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image

WORDS = {
    "who": ["a man", "a woman", "two children", "a dog", "an old man", "a girl", "three people",
            "a young boy", "a cyclist", "a group of friends"],
    "does": ["is walking", "runs", "is sitting", "plays", "is standing", "jumps", "is reading",
             "rides a bike", "is eating lunch", "waits"],
    "where": ["on the beach", "in a park", "near a red truck", "on a busy street", "in the snow",
              "by the river", "inside a cafe", "under a bridge", "on a wooden dock",
              "at the market"],
    "extra": ["", "while it rains", "with a blue umbrella", "in the afternoon sun",
              "next to a parked car and a small white fence", "as people watch", ""],
}
# (width, height): Flickr30k photos are at most 500 px on the long side
SIZES = [(500, 375), (375, 500), (500, 333), (333, 500), (500, 500), (481, 500), (500, 281)]
SPECIAL = {1: "L", 4: "CMYK", 6: "exif", 9: "png", 13: "L"}  # photo index -> how it is stored
EXIF_ORIENTATION = 0x0112


def caption(rng: np.random.Generator) -> str:
    parts = [str(rng.choice(WORDS[k])) for k in ("who", "does", "where", "extra")]
    return " ".join(p for p in parts if p).capitalize() + " ."


def write_image(path: Path, size: tuple[int, int], kind: str, rng: np.random.Generator) -> None:
    """A smooth random photo (low-res noise upsampled, so pHashes differ) stored as `kind`."""
    small = rng.integers(0, 256, size=(6, 6, 3), dtype=np.uint8)
    im = Image.fromarray(small, "RGB").resize(size, Image.Resampling.BICUBIC)
    if kind == "png":
        im.save(path, format="PNG")
        return
    if kind == "exif":
        exif = Image.Exif()
        exif[EXIF_ORIENTATION] = 6  # rotate 90 degrees clockwise to display
        im.save(path, format="JPEG", quality=90, exif=exif.tobytes())
        return
    im = im.convert(kind) if kind in ("L", "CMYK") else im
    im.save(path, format="JPEG", quality=90)


def build(root: Path, *, n_train: int = 24, n_val: int = 8, n_test: int = 8,
          seed: int = 0) -> Path:
    """Write root/dataset.json and root/images/*.jpg; returns root."""
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    splits = ["train"] * n_train + ["val"] * n_val + ["test"] * n_test
    order = rng.permutation(len(splits))  # Karpathy's file interleaves the splits
    images, sentid = [], 0
    for imgid, i in enumerate(order):
        filename = f"{1000007 + 7919 * imgid}.jpg"  # Flickr ids: long numbers
        write_image(root / "images" / filename, SIZES[imgid % len(SIZES)],
                    SPECIAL.get(imgid, "RGB"), rng)
        sentences = []
        for _ in range(5):
            raw = caption(rng)
            sentences.append({"tokens": raw.lower().rstrip(" .").split(), "raw": raw,
                              "imgid": imgid, "sentid": sentid})
            sentid += 1
        images.append({"sentids": [s["sentid"] for s in sentences], "imgid": imgid,
                       "sentences": sentences, "split": splits[i], "filename": filename})
    (root / "dataset.json").write_text(json.dumps({"images": images, "dataset": "flickr30k"}),
                                       encoding="utf-8")
    return root


def dinov2_state(layout: str = "timm", name: str = "vit_base_patch14_dinov2.lvd142m",
                 seed: int = 0) -> dict[str, torch.Tensor]:
    """A random DINOv2 state dict: timm's layout at 224 px, or Meta's release layout (the
    position table for 518 px and the iBOT mask token, which timm's filter drops). The layer
    scales are drawn near 1, not timm's initial 1e-5, so that, as trained weights do, the
    blocks move the CLS token and photos get distinct embeddings."""
    import timm

    torch.manual_seed(seed)
    img_size = 224 if layout == "timm" else 518
    model = timm.create_model(name, pretrained=False, num_classes=0, img_size=img_size)
    state = model.state_dict()
    for key in [k for k in state if k.endswith(".gamma")]:
        state[key] = 1 + 0.1 * torch.randn_like(state[key])
    if layout == "meta":
        state["mask_token"] = torch.zeros(1, model.embed_dim)
    return state
