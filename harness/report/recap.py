"""The web-text report's context (harness.stages.recap_report): the subset's counts, and per
arm the run's config and its account at every scored checkpoint, with what each number says
and does not say. Formatting only; the numbers are the stages' own (prh.stream.ACCOUNT)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prh.recap import SUBSET_SIZES
from prh.stream import ACCOUNT

APPENDIX_C_SAMPLES = 21_600_000  # the 33M encoder's runs at fixed samples (the audit article)
# the paper's three units of "fewer" (the audit article, "The Unit Behind '42 Times'"):
# samples 900M / 21.6M, text tokens (a good-view sample reads three texts), unique images
# 940M / 2.16M
PAPER_UNITS = (("samples", 41.7), ("text tokens", 13.9), ("unique images", 435.2))
NOT_SCORED = ("Not scored: the stage that scores each snapshot on WIT-1024 (best-layer mutual "
              "10-NN against DINOv2 ViT-B) and Flickr30k R@1 is not built yet; the snapshots "
              "are kept in runs/recap/ARM/snapshots for it")


def scale(images: int, samples: int) -> str:
    """What runs at this size can show, in one sentence."""
    if images < SUBSET_SIZES[0]:
        return (f"This subset holds {images:,} images, fewer than the paper's smallest "
                f"({SUBSET_SIZES[0]:,}): these runs check the pipeline and their accounting; "
                "they reproduce none of the paper's numbers.")
    named = "one of Appendix C's sizes" if images in SUBSET_SIZES else "not one of Appendix " \
        "C's sizes (2.24M, 50M, 100M, 940M)"
    drawn = ("Appendix C's 21.6M samples" if samples == APPENDIX_C_SAMPLES
             else f"{samples:,} samples (Appendix C's runs draw 21.6M)")
    return f"This subset holds {images:,} images, {named}; each run draws {drawn}."


def arm_block(run: Mapping[str, Any]) -> dict[str, Any]:
    """One arm: its config line and its account rows, with texts and tokens per sample."""
    cfg = run["config"]
    rows = [dict(r) for r in run["account"]]
    for r in rows:
        r["texts_per_sample"] = r["texts"] / r["samples"]
        r["tokens_per_sample"] = r["tokens"] / r["samples"]
    model = cfg["train"]["model"]
    return {"arm": run["arm"], "seed": run["seed"], "rows": rows, "columns": list(ACCOUNT),
            "mlflow_run_id": run.get("mlflow_run_id"),
            "config": {"sources": ", ".join(cfg["stream"]["sources"]),
                       "samples": cfg["stream"]["samples"],
                       "global_batch": cfg["global_batch"], "steps": cfg["steps"],
                       "world_size": cfg["world_size"], "device": cfg["device"],
                       "n_parameters": cfg["n_parameters"],
                       "encoder": f"{model['layers']} layers x {model['hidden']}",
                       "samples_available": cfg["samples_available"],
                       "lr": cfg["train"]["lr"], "max_len": cfg["train"]["max_len"]}}


def recap_context(summary: Mapping[str, Any], runs: list[Mapping[str, Any]],
                  created: str | None) -> dict[str, Any]:
    """The template's context: the subset, each arm, and the notes that bound their reading."""
    arms = [arm_block(r) for r in runs]
    samples = max((a["config"]["samples"] for a in arms), default=0)
    last = {a["arm"]: a["rows"][-1] for a in arms if a["rows"]}
    texts_ratio = (last["good"]["texts_per_sample"] / last["ntp"]["texts_per_sample"]
                   if {"good", "ntp"} <= set(last) else None)
    return {"title": "Web texts: training on Recap-DataComp", "created": created,
            "scale": scale(int(summary["images"]), samples),
            "subset": {"images": summary["images"], "unique_images": summary["unique_images"],
                       "sources": [{"name": n, **s} for n, s in summary["sources"].items()],
                       "tokenizer": summary["tokenizer"],
                       "shards": len(summary["shards_read"])},
            "arms": arms, "not_scored": NOT_SCORED, "paper_units": PAPER_UNITS,
            "texts_ratio": texts_ratio}
