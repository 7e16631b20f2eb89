"""Throughput of the real training step (prh.train.train_step) on synthetic Flickr-length data.

Default: BERT-S, good views (2 global + 6 local), 256 photos per step, bf16 autocast on CUDA,
as the paper's Flickr30k arm. Prints the step time, tokens/s, the share of the GPU's dense bf16
peak (FLOPs estimated as 6 x parameters x tokens) and the projected time of a 200-epoch
Flickr30k arm (29,000 training photos; the rerun article, 000_03f36f523aa97921.txt, "Can a Text
Model Match Photos..."). The host-side view building is timed on its own, since it runs on the
CPU between GPU steps.

    python bench/gpu_train.py                       # on a GPU
    python bench/gpu_train.py --steps 2 --batch 8   # CPU smoke check

Synthetic captions: a 30,517-word lexicon (one WordPiece token per word, so the vocabulary is
BERT's 30,522 with the 5 specials), Zipf-like word frequencies, and lengths drawn log-normal
with median 13 words (Flickr30k captions average 12-15 words; the long tail reaches ~40).
"""

from __future__ import annotations

import argparse
import math
import string
import time
from dataclasses import asdict, replace

import numpy as np
import tokenizers
import torch
from tokenizers import models, normalizers, pre_tokenizers

from prh.data import Photo
from prh.models import BERT_B, BERT_S, TextEncoderConfig, count_parameters
from prh.tokenizer import SPECIAL_TOKENS, Tokenizer
from prh.train import (
    ModelConfig,
    TrainConfig,
    build_modules,
    encoder_config,
    jepa_batch,
    ntp_batch,
    tokenize_captions,
    train_step,
    view_config,
)

H200_BF16_PEAK = 989e12  # dense bf16 FLOP/s of one H200 (NVIDIA's datasheet, without sparsity)
FLICKR_TRAIN_PHOTOS = 29_000
PAPER_EPOCHS = 200
VOCAB = 30_522


def synthetic_tokenizer(n_words: int) -> tuple[Tokenizer, list[str]]:
    """A WordPiece tokenizer whose vocabulary is the specials plus `n_words` pseudo-words."""
    letters = string.ascii_lowercase
    words = []
    for i in range(n_words):  # base-26 spelling of i + 26**2: distinct words of 3+ letters
        n, w = i + 26 * 26, ""
        while n:
            n, r = divmod(n, 26)
            w = letters[r] + w
        words.append(w)
    vocab = {t: i for i, t in enumerate([*SPECIAL_TOKENS, *words])}
    backend = tokenizers.Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return Tokenizer(backend), words


def synthetic_photos(words: list[str], n_photos: int, seed: int = 0) -> list[Photo]:
    """Photos with 5 captions each, Zipf-like words, log-normal lengths (median 13 words)."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / (np.arange(len(words)) + 10.0))
    cdf /= cdf[-1]
    photos = []
    for i in range(n_photos):
        lengths = np.clip(np.rint(rng.lognormal(math.log(13), 0.3, size=5)), 4, 60).astype(int)
        captions = tuple(" ".join(words[j] for j in np.searchsorted(cdf, rng.random(n)))
                         for n in lengths)
        photos.append(Photo(id=str(i), filename=f"{i}.jpg", split="train", captions=captions))
    return photos


def measure(model_cfg: ModelConfig, *, arm: str, batch: int, steps: int, warmup: int,
            device: str, amp: bool, n_photos: int | None = None, split: bool = True,
            compile_encoder: bool = False) -> dict[str, float]:
    """Time `steps` real optimiser steps after `warmup` untimed ones; return the figures."""
    tokenizer, words = synthetic_tokenizer(VOCAB - len(SPECIAL_TOKENS))
    photos = synthetic_photos(words, n_photos or max(4 * batch, 64))
    cfg = TrainConfig(arm=arm, batch_size=batch, epochs=1, warmup_epochs=0, amp=amp,
                      device=device, model=model_cfg)
    dev = torch.device("cuda" if device == "cuda" or (device == "auto" and
                       torch.cuda.is_available()) else "cpu")
    enc_cfg = encoder_config(cfg, tokenizer)
    net, sigreg, optimizer = build_modules(cfg, enc_cfg, dev)
    if compile_encoder:
        net.encoder.bert = torch.compile(net.encoder.bert, dynamic=True)
    ids = tokenize_captions(photos, tokenizer)
    views = view_config(cfg, tokenizer)
    rng = np.random.default_rng(0)
    batches = [photos[i: i + batch] for i in range(0, len(photos) - batch + 1, batch)]

    def host(k: int) -> list:  # the CPU side of step k: picks, views, padding
        b = batches[k % len(batches)]
        return (ntp_batch(b, cfg, tokenizer, ids, rng) if arm == "ntp" else
                jepa_batch(b, cfg, views, tokenizer, ids, rng, split=split))

    def run(n: int) -> float:
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k in range(n):
            train_step(net, net, sigreg, optimizer, host(k), cfg, tokenizer.pad_id, dev, cfg.lr)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / max(n, 1)

    run(warmup)
    step_s = run(steps)
    real = padded = 0
    t0 = time.perf_counter()
    for k in range(steps):  # the host side alone, and the token counts
        masks = [m for _, m in host(k)]
        real += sum(int(m.sum()) for m in masks)
        padded += sum(m.numel() for m in masks)
    host_s = (time.perf_counter() - t0) / max(steps, 1)
    n_params = count_parameters(net)
    flops = 6 * n_params * padded / max(steps, 1)
    steps_per_epoch = math.ceil(FLICKR_TRAIN_PHOTOS / batch)
    return {
        "device": str(dev), "params": n_params, "step_s": step_s, "host_prep_s": host_s,
        "tokens_per_step": real / max(steps, 1), "padded_tokens_per_step": padded / max(steps, 1),
        "tokens_per_s": real / max(steps, 1) / step_s,
        "peak_share": flops / step_s / H200_BF16_PEAK if dev.type == "cuda" else float("nan"),
        "flickr_arm_s": step_s * steps_per_epoch * PAPER_EPOCHS,
        "steps_per_epoch": steps_per_epoch,
    }


def report(name: str, r: dict[str, float]) -> None:
    print(f"{name} on {r['device']}: {r['params'] / 1e6:.2f}M parameters")
    print(f"  step {r['step_s'] * 1e3:.1f} ms (host view building alone "
          f"{r['host_prep_s'] * 1e3:.1f} ms); {r['tokens_per_step']:.0f} tokens per step "
          f"({r['padded_tokens_per_step']:.0f} with padding); {r['tokens_per_s']:,.0f} tokens/s")
    if not math.isnan(r["peak_share"]):
        print(f"  6 x params x padded tokens: {100 * r['peak_share']:.1f}% of H200 dense bf16 peak "
              f"({H200_BF16_PEAK / 1e12:.0f} TFLOP/s)")
    print(f"  projected {PAPER_EPOCHS}-epoch Flickr30k arm ({r['steps_per_epoch']} steps per "
          f"epoch): {r['flickr_arm_s'] / 60:.1f} min")


def model_config(enc: TextEncoderConfig) -> ModelConfig:
    keep = {k: v for k, v in asdict(enc).items() if k in asdict(ModelConfig())}
    return replace(ModelConfig(), **keep)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=("bert-s", "bert-b"), default="bert-s")
    ap.add_argument("--arm", choices=("good", "bad", "ntp"), default="good")
    ap.add_argument("--batch", type=int, default=256, help="photos per step (8 views each)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--no-amp", action="store_true", help="fp32 instead of bf16 autocast")
    ap.add_argument("--one-pass", action="store_true",
                    help="encode global and local views in one padded pass")
    ap.add_argument("--compile", action="store_true", help="torch.compile the encoder")
    a = ap.parse_args()
    enc = BERT_S if a.preset == "bert-s" else BERT_B
    r = measure(model_config(enc), arm=a.arm, batch=a.batch, steps=a.steps,
                warmup=min(a.warmup, a.steps), device=a.device, amp=not a.no_amp,
                split=not a.one_pass, compile_encoder=a.compile)
    report(f"{a.preset} {a.arm} batch {a.batch}", r)


if __name__ == "__main__":
    main()
