"""CPU step time of the real training step: a `world`-profile-sized encoder and BERT-S.

    OMP_NUM_THREADS=2 python bench/cpu_step.py

The world profile trains a small encoder on two CPU cores (DESIGN.md, "Profiles"); BERT-S is
the paper's 33M encoder, timed at a small batch to show why the Flickr30k profile needs a GPU.
The world size (2 layers, width 128) is our assumption until params.yaml pins it.
"""

from __future__ import annotations

import argparse

from gpu_train import measure, model_config, report

from prh.models import BERT_S
from prh.train import ModelConfig

WORLD_MODEL = ModelConfig(hidden=128, layers=2, heads=2, intermediate=512)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3, help="timed steps per model")
    ap.add_argument("--world-batch", type=int, default=64)
    ap.add_argument("--bert-batch", type=int, default=8)
    ap.add_argument("--arm", choices=("good", "bad", "ntp"), default="good")
    a = ap.parse_args()
    for name, model, batch in (("world-size encoder", WORLD_MODEL, a.world_batch),
                               ("bert-s", model_config(BERT_S), a.bert_batch)):
        r = measure(model, arm=a.arm, batch=batch, steps=a.steps, warmup=1, device="cpu",
                    amp=False)
        report(f"{name} {a.arm} batch {batch}", r)


if __name__ == "__main__":
    main()
