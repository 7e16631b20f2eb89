"""Padded against packed (padding-free) steps at Flickr30k caption lengths, in one run.

    OMP_NUM_THREADS=2 python bench/packing.py               # tokens per step, CPU step times
    OMP_NUM_THREADS=2 python bench/packing.py --time-batch 0  # tokens only

Captions are synthetic with Flickr30k-like lengths (word counts drawn from a log-normal with a
median of 11 words, cut to 4..60; assumed, as the data set is not shipped): what matters here
is how long the views are, not what they say. For each arm, with params.yaml's flickr30k
`train` section (batch 256 photos, 8 views, max_len 64), it builds the batches the loop builds
(prh.batches.step_groups) and prints per step the real tokens and the tokens the encoder
computes: padded in one pass (CUDA's default), padded in two passes (CPU's default) and packed
(`train.speed.pack`). Then it times full training steps (BERT-S, fp32, CPU) of both paths on
one smaller batch, the same views for both. `--attention` also times attention alone on one
step's views under the three variable-length options (packed rows with a block-diagonal mask,
SDPA on nested jagged tensors, FlexAttention with a document mask, eager as the CPU runs it)
against padded SDPA: the measurement behind choosing packing.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from prh.batches import CaptionBank, step_groups, tokenize_captions
from prh.data import Photo
from prh.distributed import Process
from prh.tokenizer import train_tokenizer
from prh.train import build_state, train_step
from prh.train_config import TrainConfig, encoder_config, view_config

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


def flickr_like_photos(n: int, seed: int = 0) -> list[Photo]:
    """n photos x 5 captions whose word counts look like Flickr30k's (see the module doc)."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(3000)]
    photos = []
    for i in range(n):
        counts = np.clip(np.round(rng.lognormal(np.log(11), 0.35, 5)), 4, 60).astype(int)
        caps = tuple(" ".join(rng.choice(words, c)) for c in counts)
        photos.append(Photo(str(i), f"{i}.jpg", "train", caps))
    return photos


def config(train: dict, arm: str, **speed) -> TrainConfig:
    return TrainConfig.from_dict({**train, "arm": arm, "device": "cpu", "amp": False,
                                  "speed": {**train.get("speed", {}), **speed}})


def count(groups: list) -> tuple[int, int]:
    """(real tokens, computed tokens) of one step's groups."""
    real = sum(int(g[1].sum()) for g in groups)
    computed = sum(g[2].numel() if len(g) > 2 else g[0].numel() for g in groups)
    return real, computed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--steps", type=int, default=20, help="steps counted per arm")
    ap.add_argument("--time-batch", type=int, default=16, help="photos per timed step (0: skip)")
    ap.add_argument("--time-steps", type=int, default=3, help="timed steps per path and arm")
    ap.add_argument("--attention", action="store_true",
                    help="also time attention alone per variable-length option")
    a = ap.parse_args()
    train = yaml.safe_load(a.params.read_text())["flickr30k"]["train"]
    photos = flickr_like_photos(4 * train["batch_size"])
    tok = train_tokenizer([c for p in photos for c in p.captions], 30522)
    print(f"flickr30k train config, batch {train['batch_size']}, max_len {train['max_len']}, "
          f"{len(photos)} synthetic photos, torch threads {torch.get_num_threads()}")
    print(f"{'arm':4s} {'real':>7s} {'padded-1':>9s} {'padded-2':>9s} {'packed':>8s} "
          f"{'packed/real':>11s} {'padded-1/real':>13s}")
    for arm in ("good", "bad", "ntp"):
        sums = np.zeros(4)
        for path, kw in enumerate(({"passes": "one", "pack": False},
                                   {"passes": "split", "pack": False}, {"pack": True})):
            cfg = config(train, arm, **kw)
            views = view_config(cfg, tok)
            bank = CaptionBank.build(photos, tokenize_captions(photos, tok), views, tok.pad_id)
            rng = np.random.default_rng(0)
            for s in range(a.steps):
                rows = np.arange(s * cfg.batch_size, (s + 1) * cfg.batch_size) % len(photos)
                real, computed = count(step_groups(bank, rows, cfg, views, tok, rng, CPU))
                sums[0] += real if path == 0 else 0
                sums[path + 1] += computed
        r = sums / a.steps
        print(f"{arm:4s} {r[0]:7.0f} {r[1]:9.0f} {r[2]:9.0f} {r[3]:8.0f} {r[3] / r[0]:11.3f} "
              f"{r[1] / r[0]:13.3f}")
    if a.attention:
        time_attention(train, photos, tok)
    if a.time_batch:
        time_steps(train, photos, tok, a.time_batch, a.time_steps)


def _ms(f, n: int) -> float:
    f()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t0) / n * 1e3


def time_attention(train: dict, photos: list[Photo], tok) -> None:
    """ms of one attention call (BERT-S heads) over one step's views, per option."""
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    cfg = config(train, "good", pack=True)
    views = view_config(cfg, tok)
    bank = CaptionBank.build(photos, tokenize_captions(photos, tok), views, tok.pad_id)
    tokens, mask, rows, _, segments, _ = step_groups(
        bank, np.arange(cfg.batch_size), cfg, views, tok, np.random.default_rng(0), CPU)[0]
    heads, width = train["model"]["heads"], train["max_len"]
    dim = train["model"]["hidden"] // heads
    lengths = mask.sum(-1)
    padded = torch.randn(len(lengths), heads, mask.shape[1], dim)
    packed = torch.randn(rows.shape[0], heads, width, dim)
    block = segments[:, None, :, None] == segments[:, None, None, :]
    jagged = torch.nested.nested_tensor([torch.randn(int(n), heads, dim) for n in lengths],
                                        layout=torch.jagged).transpose(1, 2)
    flat = segments.reshape(-1)

    def same_sequence(b, h, q, k):  # FlexAttention's mask_mod: a document mask
        return flat[b * width + q] == flat[b * width + k]

    doc = create_block_mask(same_sequence, rows.shape[0], None, width, width, device="cpu")
    print(f"attention alone, {len(lengths)} views of one good-view step ({int(lengths.sum())} "
          f"real tokens), {heads} heads of {dim}:")
    for name, f, n in (
            ("padded SDPA", lambda: F.scaled_dot_product_attention(
                padded, padded, padded, attn_mask=mask.bool()[:, None, None, :]), 3),
            ("packed block-diagonal SDPA", lambda: F.scaled_dot_product_attention(
                packed, packed, packed, attn_mask=block), 3),
            ("nested jagged SDPA", lambda: F.scaled_dot_product_attention(jagged, jagged,
                                                                          jagged), 1),
            ("FlexAttention, document mask", lambda: flex_attention(packed, packed, packed,
                                                                    block_mask=doc), 1)):
        print(f"  {name:30s} {_ms(f, n):8.0f} ms")


def time_steps(train: dict, photos: list[Photo], tok, batch: int, steps: int) -> None:
    """ms per full training step (forward, backward, AdamW) of BERT-S, padded (CPU's default:
    global and local views in two passes, each cut to its longest view) vs packed."""
    print(f"CPU step time, BERT-S ({train['model']['layers']} layers, width "
          f"{train['model']['hidden']}), fp32, {batch} photos per step, mean of {steps} after "
          "one untimed")
    for arm in ("good", "bad", "ntp"):
        line = []
        for name, kw in (("padded", {"pack": False}), ("packed", {"pack": True})):
            cfg = config({**train, "batch_size": batch}, arm, **kw)
            views = view_config(cfg, tok)
            bank = CaptionBank.build(photos, tokenize_captions(photos, tok), views, tok.pad_id)
            state = build_state(cfg, encoder_config(cfg, tok), Process(0, 1, CPU, False))
            rng = np.random.default_rng(1)
            batches = [step_groups(bank, np.arange(s * batch, (s + 1) * batch), cfg, views, tok,
                                   rng, CPU) for s in range(steps + 1)]
            train_step(state, batches[0], cfg.lr)
            t0 = time.perf_counter()
            for b in batches[1:]:
                train_step(state, b, cfg.lr)
            line.append(f"{name} {(time.perf_counter() - t0) / steps * 1e3:7.0f} ms")
        print(f"  {arm:4s}: " + ", ".join(line))


if __name__ == "__main__":
    main()
