"""Throughput of the real training step (prh.train.train_step) on synthetic Flickr-length data.

Default: BERT-S, good views (2 global + 6 local), 256 photos per step, bf16 autocast on CUDA,
as the paper's Flickr30k arm. Prints the step time, tokens/s, the share of the GPU's dense bf16
peak (FLOPs estimated as 6 x parameters x tokens) and the projected time of a 200-epoch
Flickr30k arm (29,000 training photos; the rerun article, "Can a Text Model Match Photos...").
Batches come from a caption bank built once, as in the training loop; the host-side batch
building is also timed on its own. On CUDA it counts the host syncs of one
step (torch.cuda sync debug mode) and, with --profile, the share of the step the GPU is busy and
its top kernels: a step far above its kernel time is host- or launch-bound.

    python bench/gpu_train.py                                   # on a GPU, the loop's defaults
    python bench/gpu_train.py --compile default --pad-multiple 8 --profile
    python bench/gpu_train.py --matrix --profile --out "$OUT/gpu_matrix.json"  # every setting
    python bench/gpu_train.py --preset tiny --steps 2 --batch 8         # CPU smoke check

`bench/gpu_session.sh` runs this matrix after the CUDA tests, as one device call.
`--matrix` runs the `train.speed` settings (prh.train_config.SpeedConfig) one after another in one
process, most informative first, writes the JSON after each, and starts no new variant once
`--budget-s` seconds have passed, so a GPU session with a fixed time still returns its figures.

Synthetic captions: a 30,517-word lexicon (one WordPiece token per word, so the vocabulary is
BERT's 30,522 with the 5 specials), Zipf-like word frequencies, and lengths drawn log-normal
with median 13 words (Flickr30k captions average 12-15 words; the long tail reaches ~40).
"""

from __future__ import annotations

import argparse
import json
import math
import string
import tempfile
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import tokenizers
import torch
from tokenizers import models, normalizers, pre_tokenizers

from prh.batches import CaptionBank, step_groups, tokenize_captions
from prh.checkpoint import rng_states, write_checkpoint
from prh.data import Photo
from prh.distributed import Process
from prh.models import BERT_B, BERT_S, TextEncoderConfig, count_parameters
from prh.tokenizer import SPECIAL_TOKENS, Tokenizer
from prh.train import TrainState, build_state, train_step
from prh.train_config import ModelConfig, SpeedConfig, TrainConfig, encoder_config, view_config

H200_BF16_PEAK = 989e12  # dense bf16 FLOP/s of one H200 (NVIDIA's datasheet, without sparsity)
FLICKR_TRAIN_PHOTOS = 29_000
PAPER_EPOCHS = 200
VOCAB = 30_522
TARGET_ARM_S = 600  # the speed target: <= 10 minutes per 200-epoch arm on one H200
TINY = TextEncoderConfig(hidden=64, layers=2, heads=4, intermediate=128)  # CPU smoke checks
# --matrix: (name, arm, speed), the loop's CUDA default (one pass, eager) first.
MATRIX: tuple[tuple[str, str, SpeedConfig], ...] = (
    ("eager packed", "good", SpeedConfig(pack=True)),
    ("compile packed rows8", "good", SpeedConfig(compile="default", pack=True, pad_multiple=8)),
    ("cudagraphs packed rows8", "good",
     SpeedConfig(compile="reduce-overhead", pack=True, pad_multiple=8)),
    ("eager packed ntp", "ntp", SpeedConfig(pack=True)),
    ("cudagraphs packed ntp rows8", "ntp",
     SpeedConfig(compile="reduce-overhead", pack=True, pad_multiple=8)),
    ("eager one-pass", "good", SpeedConfig(passes="one")),
    ("compile one-pass pad8", "good", SpeedConfig(compile="default", passes="one",
                                                  pad_multiple=8)),
    ("cudagraphs one-pass pad8", "good", SpeedConfig(compile="reduce-overhead", passes="one",
                                                     pad_multiple=8)),
    ("eager split", "good", SpeedConfig(passes="split")),
    ("cudagraphs split pad8", "good",
     SpeedConfig(compile="reduce-overhead", passes="split", pad_multiple=8)),
    ("compile split pad8", "good",
     SpeedConfig(compile="default", passes="split", pad_multiple=8)),
    ("eager ntp", "ntp", SpeedConfig()),
    ("cudagraphs ntp pad8", "ntp", SpeedConfig(compile="reduce-overhead", pad_multiple=8)),
)


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
            device: str, amp: bool, speed: SpeedConfig, profile: bool = False,
            n_photos: int | None = None) -> dict:
    """Time `steps` real optimiser steps after `warmup` untimed ones; return the figures."""
    tokenizer, words = synthetic_tokenizer(VOCAB - len(SPECIAL_TOKENS))
    photos = synthetic_photos(words, n_photos or max(4 * batch, 64))
    cfg = TrainConfig(arm=arm, batch_size=batch, epochs=1, warmup_epochs=0, amp=amp,
                      device=device, model=model_cfg, speed=speed)
    dev = torch.device("cuda" if device == "cuda" or (device == "auto" and
                       torch.cuda.is_available()) else "cpu")
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)  # this variant's peak, not the matrix's
    t0 = time.perf_counter()
    state = build_state(cfg, encoder_config(cfg, tokenizer), Process(0, 1, dev, False))
    views = view_config(cfg, tokenizer)
    bank = CaptionBank.build(photos, tokenize_captions(photos, tokenizer), views,
                             tokenizer.pad_id)
    rng = np.random.default_rng(0)

    def host(k: int) -> list:  # the CPU side of step k, as the loop builds it
        rows = (np.arange(batch) + k * batch) % len(photos)
        return step_groups(bank, rows, cfg, views, tokenizer, rng, dev)

    def step(k: int) -> None:
        train_step(state, host(k), cfg.lr)

    def run(first: int, n: int) -> float:
        _sync(dev)
        t = time.perf_counter()
        for k in range(first, first + n):
            step(k)
        _sync(dev)
        return (time.perf_counter() - t) / max(n, 1)

    run(0, warmup)  # compiles, autotunes and records graphs for the widths it meets
    warm_s = time.perf_counter() - t0
    step_s = run(warmup, steps)
    figures = {"device": str(dev), "arm": arm, "speed": asdict(speed), "batch": batch,
               "params": count_parameters(state.net), "step_s": step_s, "warmup_s": warm_s,
               **_host_figures(host, warmup + steps, steps)}
    if dev.type == "cuda":
        figures["syncs_per_step"] = _count_syncs(step, warmup + 2 * steps)
        figures["max_memory_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
        if profile:
            figures.update(_kernel_figures(step, warmup + 2 * steps + 1, min(steps, 5), dev))
    steps_per_epoch = math.ceil(FLICKR_TRAIN_PHOTOS / batch)
    flops = 6 * figures["params"] * figures["padded_tokens_per_step"]
    checkpoint_s = _checkpoint_seconds(state)
    n_checkpoints = math.ceil(PAPER_EPOCHS / speed.checkpoint_every)
    figures.update({
        "tokens_per_s": figures["tokens_per_step"] / step_s,
        "peak_share": flops / step_s / H200_BF16_PEAK if dev.type == "cuda" else None,
        "steps_per_epoch": steps_per_epoch,
        "checkpoint_s": checkpoint_s, "checkpoints_per_arm": n_checkpoints,
        "flickr_arm_s": step_s * steps_per_epoch * PAPER_EPOCHS + n_checkpoints * checkpoint_s,
    })
    return figures


def _checkpoint_seconds(state: TrainState) -> float:
    """Time of one checkpoint as the loop writes it (modules and AdamW state, atomically)."""
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        write_checkpoint(Path(d) / "checkpoint.pt", {
            "net": state.net.state_dict(), "sigreg": state.sigreg.state_dict(),
            "optimizer": state.optimizer.state_dict(), "rng": rng_states()})
        return time.perf_counter() - t


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _host_figures(host, first: int, steps: int) -> dict[str, float]:
    """The host side alone (picks, views, padding), and real vs padded token counts."""
    real = padded = 0
    t = time.perf_counter()
    for k in range(first, first + steps):
        groups = host(k)  # computed tokens: the packed rows when packed, else the padded
        real += sum(int(g[1].sum()) for g in groups)
        padded += sum(g[2 if len(g) > 2 else 0].numel() for g in groups)
    n = max(steps, 1)
    return {"host_prep_s": (time.perf_counter() - t) / n, "tokens_per_step": real / n,
            "padded_tokens_per_step": padded / n}


def _count_syncs(step, k: int) -> int:
    """Host-device synchronisations in one step (each one stalls the launch queue)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step(k)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def _kernel_figures(step, first: int, n: int, dev: torch.device) -> dict:
    """GPU busy share over `n` profiled steps, and the kernels that take the most time."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    _sync(dev)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = time.perf_counter()
        for k in range(first, first + n):
            step(k)
        _sync(dev)
        wall = time.perf_counter() - t
    # GPU-side events only (kernels, copies): CPU ops also carry their kernels' device time
    kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
    busy = sum(e.self_device_time_total for e in kernels) / 1e6  # microseconds -> s
    top = sorted(kernels, key=lambda e: e.self_device_time_total, reverse=True)[:12]
    return {"gpu_busy_share": busy / wall,
            "kernel_s_per_step": busy / n,
            "kernels_per_step": sum(e.count for e in kernels) / n,
            "top_kernels": [{"name": e.key[:90], "ms_per_step": e.self_device_time_total / 1e3 / n,
                             "calls_per_step": e.count / n} for e in top]}


def report(name: str, r: dict) -> None:
    print(f"{name} on {r['device']}: {r['params'] / 1e6:.2f}M parameters, speed {r['speed']}")
    print(f"  step {r['step_s'] * 1e3:.1f} ms (host batch building alone "
          f"{r['host_prep_s'] * 1e3:.1f} ms; first steps incl. compile {r['warmup_s']:.0f} s); "
          f"{r['tokens_per_step']:.0f} tokens per step ({r['padded_tokens_per_step']:.0f} with "
          f"padding); {r['tokens_per_s']:,.0f} tokens/s")
    if r["peak_share"] is not None:
        print(f"  6 x params x padded tokens: {100 * r['peak_share']:.1f}% of H200 dense bf16 peak "
              f"({H200_BF16_PEAK / 1e12:.0f} TFLOP/s); {r['syncs_per_step']} host syncs per step; "
              f"peak memory {r['max_memory_gib']:.1f} GiB")
    if "gpu_busy_share" in r:
        print(f"  GPU busy {100 * r['gpu_busy_share']:.0f}% of the step: "
              f"{r['kernel_s_per_step'] * 1e3:.1f} ms of kernels, "
              f"{r['kernels_per_step']:.0f} kernel launches per step")
        for k in r["top_kernels"][:6]:
            print(f"    {k['ms_per_step']:7.2f} ms  x{k['calls_per_step']:.0f}  {k['name']}")
    verdict = "meets" if r["flickr_arm_s"] <= TARGET_ARM_S else "misses"
    print(f"  projected {PAPER_EPOCHS}-epoch Flickr30k arm ({r['steps_per_epoch']} steps per "
          f"epoch, {r['checkpoints_per_arm']} checkpoints of {r['checkpoint_s']:.2f} s): "
          f"{r['flickr_arm_s'] / 60:.1f} min ({verdict} the {TARGET_ARM_S // 60}-minute target)")


def model_config(enc: TextEncoderConfig) -> ModelConfig:
    keep = {k: v for k, v in asdict(enc).items() if k in asdict(ModelConfig())}
    return replace(ModelConfig(), **keep)


def run_matrix(a: argparse.Namespace, model_cfg: ModelConfig) -> list[dict]:
    """Every MATRIX variant (or those named by --variants) while the budget lasts."""
    chosen = [v for v in MATRIX if not a.variants or v[0] in a.variants.split(",")]
    t0, results = time.perf_counter(), []
    for name, arm, speed in chosen:
        if time.perf_counter() - t0 > a.budget_s:
            results.append({"name": name, "skipped": f"budget of {a.budget_s} s spent"})
            continue
        torch._dynamo.reset()  # each variant compiles from scratch
        try:
            speed = replace(speed, checkpoint_every=a.checkpoint_every)
            r = {"name": name, **measure(model_cfg, arm=arm, batch=a.batch, steps=a.steps,
                                         warmup=a.warmup, device=a.device, amp=not a.no_amp,
                                         speed=speed, profile=a.profile)}
            report(name, r)
        except Exception as e:  # one failing setting must not cost the others' figures
            r = {"name": name, "error": f"{type(e).__name__}: {e}"[:2000]}
            print(f"{name}: FAILED {r['error']}")
        results.append(r)
        if a.out:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=("bert-s", "bert-b", "tiny"), default="bert-s")
    ap.add_argument("--arm", choices=("good", "bad", "ntp"), default="good")
    ap.add_argument("--batch", type=int, default=256, help="photos per step (8 views each)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10,
                    help="untimed steps first (compiled variants compile here)")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--no-amp", action="store_true", help="fp32 instead of bf16 autocast")
    ap.add_argument("--compile", choices=("none", "default", "reduce-overhead",
                                          "max-autotune-no-cudagraphs"), default="none")
    ap.add_argument("--passes", choices=("auto", "one", "split"), default="auto")
    ap.add_argument("--pad-multiple", type=int, default=1)
    ap.add_argument("--pack", action="store_true", help="padding-free steps (train.speed.pack)")
    ap.add_argument("--checkpoint-every", type=int, default=10,
                    help="epochs per checkpoint in the projection (params.yaml flickr30k: 10)")
    ap.add_argument("--profile", action="store_true", help="GPU busy share and top kernels")
    ap.add_argument("--matrix", action="store_true", help="run every speed setting")
    ap.add_argument("--variants", default="", help="--matrix: comma-separated names only")
    ap.add_argument("--budget-s", type=float, default=360.0,
                    help="--matrix: start no variant after this many seconds")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    a = ap.parse_args()
    enc = {"bert-s": BERT_S, "bert-b": BERT_B, "tiny": TINY}[a.preset]
    if a.matrix:
        run_matrix(a, model_config(enc))
        return
    speed = SpeedConfig(compile=a.compile, passes=a.passes, pad_multiple=a.pad_multiple,
                        checkpoint_every=a.checkpoint_every, pack=a.pack)
    r = measure(model_config(enc), arm=a.arm, batch=a.batch, steps=a.steps,
                warmup=min(a.warmup, a.steps), device=a.device, amp=not a.no_amp,
                speed=speed, profile=a.profile)
    report(f"{a.preset} {a.arm} batch {a.batch}", r)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(r, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
