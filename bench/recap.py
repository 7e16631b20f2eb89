"""Throughput of a web-text run's step (prh.train_stream's loop body: samples read from the
memory-mapped subset, their texts, the packed step) and the GPU-hours a run of each subset
size projects to.

The step is timed where it runs (this machine's CPU unless --device cuda); the projection
divides the tokens a run computes (samples x the view tokens per sample measured here) by a
tokens/s figure: a GPU's from `bench/gpu_train.py --pack --out FILE` (--gpu-figures FILE, its
`tokens_per_s`, measured on Flickr-length captions), or, without one, this run's own, labelled
as this device's. Hours exclude checkpoints and scoring.

The texts are a synthetic subset (assumed lengths: an alt-text of median 8 words, a recaption
of median 45; Recap-DataComp's recaptions are paragraph-long) written by the recap stage itself,
or your own subset with --subset data/recap/subset (its tokens and tokenizer).

    python bench/recap.py                              # BERT-S, good views, batch 256, CPU
    python bench/recap.py --subset data/recap/subset --gpu-figures gpu_packed.json
    python bench/recap.py --preset tiny --batch 8 --steps 2 --arm ntp   # smoke check
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from prh.recap import SUBSET_SIZES  # noqa: E402

RUN_SAMPLES = 21_600_000  # Appendix C's runs at a fixed sample count
PRESETS = {"bert-s": {"hidden": 384, "layers": 12, "heads": 12, "intermediate": 1536},
           "tiny": {"hidden": 32, "layers": 2, "heads": 2, "intermediate": 64}}


def synthetic_subset(folder: Path, images: int, seed: int = 0) -> Path:
    """A Recap-style parquet shard of `images` rows written through the recap stage: an
    alt-text and a recaption per image, words from a Zipf-like lexicon."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from prh.recap import RecapConfig
    from prh.recap_subset import build_subset

    rng = np.random.default_rng(seed)
    lexicon = [f"w{i}" for i in range(5000)]
    p = 1 / np.arange(1, len(lexicon) + 1)
    p /= p.sum()

    def text(median: float) -> str:
        n = max(1, int(rng.lognormal(math.log(median), 0.4)))
        return " ".join(lexicon[i] for i in rng.choice(len(lexicon), n, p=p))

    raw = folder / "raw"
    raw.mkdir(parents=True)
    pq.write_table(pa.table({"key": [f"k{i}" for i in range(images)],
                             "org_caption": [text(8) for _ in range(images)],
                             "re_caption": [text(45) for _ in range(images)]}),
                   raw / "shard-00000.parquet")
    cfg = RecapConfig.from_dict({"data": str(raw), "images": images, "vocab_size": 30522,
                                 "tokenizer_sample": images * 2,
                                 "sources": {"alt": ["org_caption"], "recap": ["re_caption"]}})
    out = folder / "subset"
    out.mkdir()
    build_subset(cfg, out, 62, folder / "work")  # the flickr30k profile's max_len 64 less 2
    return out


def measure(subset: Path, a: argparse.Namespace, orders: Path) -> dict:
    """Time `a.steps` steps of the loop body after `a.warmup` untimed ones (the epoch order
    written to `orders` first, as rank 0 does)."""
    from prh.batches import CaptionBank, step_groups
    from prh.distributed import Process
    from prh.stream import EpochOrder, StreamData, read_texts
    from prh.tokenizer import Tokenizer
    from prh.train import build_state, train_step
    from prh.train_config import TrainConfig, encoder_config, view_config

    data = StreamData.open(subset, a.sources.split(","))
    order = EpochOrder.write(orders, 0, data, (a.warmup + a.steps) * a.batch)
    tokenizer = Tokenizer.load(subset / "tokenizer")
    dev = torch.device("cuda" if a.device == "cuda" else "cpu")
    cfg = TrainConfig.from_dict({"arm": a.arm, "batch_size": a.batch, "max_len": a.max_len,
                                 "device": a.device, "model": PRESETS[a.preset],
                                 "speed": {"pack": True}})
    state = build_state(cfg, encoder_config(cfg, tokenizer), Process(0, 1, dev, False))
    views = view_config(cfg, tokenizer)
    rng = np.random.default_rng(0)
    host_s, counts = 0.0, np.zeros(3)

    def step(k: int) -> None:
        nonlocal host_s
        t = time.perf_counter()
        rows = order.rows(k * a.batch, a.batch)
        texts = [read_texts(x, a.arm == "good", rng) for x in data.sample_texts(rows)]
        bank = CaptionBank.from_token_lists(texts, views, tokenizer.pad_id)
        groups = step_groups(bank, np.arange(a.batch), cfg, views, tokenizer, rng, dev)
        host_s += time.perf_counter() - t
        counts[:] += (bank.count.sum(), bank.lengths.sum(), sum(int(g[1].sum()) for g in groups))
        train_step(state, groups, cfg.lr)

    for k in range(a.warmup):
        step(k)
    host_s, counts[:] = 0.0, 0
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t, cpu = time.perf_counter(), time.process_time()
    for k in range(a.warmup, a.warmup + a.steps):
        step(k)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    wall = time.perf_counter() - t
    step_s, cpu_s = wall / a.steps, time.process_time() - cpu
    samples = a.steps * a.batch
    return {"device": str(dev), "arm": a.arm, "preset": a.preset, "batch": a.batch,
            "sources": a.sources, "step_s": step_s, "host_s": host_s / a.steps,
            "texts_per_sample": counts[0] / samples, "tokens_per_sample": counts[1] / samples,
            "view_tokens_per_sample": counts[2] / samples,
            "tokens_per_s": counts[2] / a.steps / step_s,
            # the cores this process kept busy over the timed steps (CPU seconds / wall
            # seconds; at most torch's threads): a loaded machine gives fewer, and the
            # projection then measures the load as much as the step
            "cpu_share": cpu_s / wall, "threads": torch.get_num_threads()}


def projection(r: dict, tokens_per_s: float) -> list[dict]:
    """Hours of a run of 21.6M samples (Appendix C's, whatever the subset's size) and of one
    pass over each subset size."""
    return [{"run": what, "samples": s, "hours": s * r["view_tokens_per_sample"]
             / tokens_per_s / 3600}
            for s, what in ((RUN_SAMPLES, "21.6M samples"),
                            *((n, f"one pass over {n:,} images") for n in SUBSET_SIZES))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--subset", type=Path, help="a recap stage's folder (default: synthetic)")
    ap.add_argument("--images", type=int, default=4096, help="synthetic subset size")
    ap.add_argument("--sources", default="alt,recap")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="bert-s")
    ap.add_argument("--arm", choices=("good", "bad", "ntp"), default="good")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--gpu-figures", type=Path,
                    help="bench/gpu_train.py --pack --out JSON: its tokens_per_s projects")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    a = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        subset = a.subset or synthetic_subset(Path(tmp), a.images)
        r = measure(subset, a, Path(tmp) / "order")
    print(f"{a.preset} {a.arm} batch {a.batch} on {r['device']}: step {r['step_s'] * 1e3:.1f} "
          f"ms ({r['host_s'] * 1e3:.1f} ms reading and building the batch); "
          f"{r['texts_per_sample']:.2f} texts, {r['tokens_per_sample']:.1f} tokens and "
          f"{r['view_tokens_per_sample']:.1f} view tokens per sample; "
          f"{r['tokens_per_s']:,.0f} view tokens/s; the process kept {r['cpu_share']:.2f} of "
          f"its {r['threads']} threads' cores busy")
    if a.gpu_figures:
        gpu = json.loads(a.gpu_figures.read_text())
        rate, source = float(gpu["tokens_per_s"]), f"{gpu.get('device', 'GPU')} ({a.gpu_figures})"
    else:
        rate, source = r["tokens_per_s"], f"this run's {r['device']}: no --gpu-figures given"
    r["projection"] = {"tokens_per_s": rate, "source": source, "rows": projection(r, rate)}
    print(f"\nprojected hours at {rate:,.0f} tokens/s, {source}; checkpoints and scoring "
          "excluded:")
    print(f"{'run':<32} {'samples':>13} {'hours':>10}")
    for row in r["projection"]["rows"]:
        print(f"{row['run']:<32} {row['samples']:>13,} {row['hours']:>10,.1f}")
    if a.out:
        a.out.write_text(json.dumps(r, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
