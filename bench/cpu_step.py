"""CPU step time of the real training loop on the `world` profile (params.yaml), and BERT-S.

    OMP_NUM_THREADS=2 python bench/cpu_step.py                 # world profile, all three arms
    OMP_NUM_THREADS=2 python bench/cpu_step.py --arm good --profile
    OMP_NUM_THREADS=2 python bench/cpu_step.py --bert          # also BERT-S at a small batch

The world profile trains its text arms on two CPU cores, in minutes. This builds
the world's training captions from params.yaml's `world.data` section (the generator of
prh.world, without rendering images), trains the WordPiece tokenizer as `harness prepare` does,
and runs one epoch of params.yaml's `world.train` config through the loop's own pieces:
the per-run caption bank, the per-step batch building (`prh.batches`) and `train_step`.
It prints ms per step split into batch building (host) and model compute, and the projected
time of one arm (epochs x steps, evaluation and checkpoints left out). BERT-S is the paper's
33M encoder, timed at a small batch to show why the Flickr30k profile needs a GPU.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from prh.batches import CaptionBank, step_groups, tokenize_captions
from prh.checkpoint import seed_epoch
from prh.data import Photo
from prh.distributed import Process
from prh.tokenizer import train_tokenizer
from prh.train import build_state, train_step
from prh.train_config import TrainConfig, encoder_config, view_config
from prh.world import WorldConfig, render_caption, sample_scene, sample_style

ROOT = Path(__file__).resolve().parents[1]


def world_corpus(params: Path) -> tuple[list[Photo], object, dict]:
    """The world's training photos (captions only), its tokenizer and the `world.train` dict."""
    world = yaml.safe_load(params.read_text(encoding="utf-8"))["world"]
    wcfg = WorldConfig.from_dict(world["data"]["world"])
    # The world's caption generator; write_world also renders images from this generator,
    # so these are captions of the same distribution, not the very same captions.
    rng = np.random.default_rng(wcfg.seed)
    photos = []
    for i in range(wcfg.n_train):
        scene = sample_scene(wcfg, rng)
        styles = [sample_style(wcfg, rng) for _ in range(wcfg.captions_per_photo)]
        captions = tuple(render_caption(scene, s, wcfg, rng) for s in styles)
        photos.append(Photo(id=str(i), filename=f"{i}.png", split="train", captions=captions))
    tokenizer = train_tokenizer([c for p in photos for c in p.captions],
                                world["data"]["vocab_size"])
    return photos, tokenizer, world["train"]


def measure_world(photos: list[Photo], tokenizer, train: dict, arm: str, steps: int,
                  warmup: int, profile: bool = False) -> dict[str, float]:
    """Time `steps` steps of epoch 1 (after `warmup` untimed ones) as the loop runs them."""
    cfg = TrainConfig.from_dict({**train, "arm": arm, "device": "cpu"})
    dev = torch.device("cpu")
    state = build_state(cfg, encoder_config(cfg, tokenizer), Process(0, 1, dev, False))
    views = view_config(cfg, tokenizer)
    bank = CaptionBank.build(photos, tokenize_captions(photos, tokenizer), views,
                             tokenizer.pad_id)
    rng = seed_epoch(cfg.seed, 1, 0)
    order = np.random.default_rng([cfg.seed, 1]).permutation(len(photos))
    steps_per_epoch = math.ceil(len(photos) / cfg.batch_size)

    def host(k: int) -> list:
        rows = order[(k % steps_per_epoch) * cfg.batch_size:][:cfg.batch_size]
        return step_groups(bank, rows, cfg, views, tokenizer, rng, torch.device("cpu"))

    host_s = compute_s = 0.0
    tokens = padded = 0
    prof = cProfile.Profile() if profile else None
    for k in range(warmup + steps):
        if k == warmup and prof is not None:
            prof.enable()
        t0 = time.perf_counter()
        groups = host(k)
        t1 = time.perf_counter()
        train_step(state, groups, cfg.lr)
        t2 = time.perf_counter()
        if k >= warmup:
            host_s += t1 - t0
            compute_s += t2 - t1
            tokens += sum(int(m.sum()) for _, m in groups)
            padded += sum(m.numel() for _, m in groups)
    if prof is not None:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    step_ms = (host_s + compute_s) / steps * 1e3
    return {"step_ms": step_ms, "host_ms": host_s / steps * 1e3,
            "compute_ms": compute_s / steps * 1e3, "tokens": tokens / steps,
            "padded": padded / steps, "steps_per_epoch": steps_per_epoch,
            "arm_s": step_ms / 1e3 * steps_per_epoch * cfg.epochs, "epochs": cfg.epochs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--arm", choices=("good", "bad", "ntp", "all"), default="all")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per arm")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--profile", action="store_true", help="cProfile the timed steps")
    ap.add_argument("--bert", action="store_true", help="also time BERT-S (slow on a CPU)")
    ap.add_argument("--bert-batch", type=int, default=8)
    a = ap.parse_args()
    photos, tokenizer, train = world_corpus(a.params)
    print(f"world profile: {len(photos)} photos, vocabulary {tokenizer.vocab_size}, "
          f"torch threads {torch.get_num_threads()}")
    for arm in (("good", "bad", "ntp") if a.arm == "all" else (a.arm,)):
        r = measure_world(photos, tokenizer, train, arm, a.steps, a.warmup, a.profile)
        print(f"  {arm:4s}: {r['step_ms']:6.1f} ms/step = batch building {r['host_ms']:5.1f} + "
              f"model {r['compute_ms']:6.1f}; {r['tokens']:.0f} tokens/step "
              f"({r['padded']:.0f} padded); {r['epochs']} epochs x {r['steps_per_epoch']} steps "
              f"= {r['arm_s']:.0f} s per arm")
    if a.bert:
        from gpu_train import measure, model_config, report

        from prh.models import BERT_S

        r = measure(model_config(BERT_S), arm="good", batch=a.bert_batch, steps=3, warmup=1,
                    device="cpu", amp=False)
        report(f"bert-s good batch {a.bert_batch}", r)


if __name__ == "__main__":
    main()
