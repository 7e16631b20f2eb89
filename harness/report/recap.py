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
NOT_SCORED = ("Not scored: recap.score is empty. With WIT-1024 and DINOv2 in place (the wit1024 "
              "section) set it to [wit1024], or [wit1024, flickr30k] with wit1024.flickr, and "
              "run again: the snapshots in runs/recap/ARM/snapshots are scored, not retrained")
NOT_JUDGED = ("The audit does not judge Table 7 or Appendix C from these runs yet: each arm is "
              "one seed, and a comparison of two arms here is a point comparison with no "
              "interval across seeds")
LABELS = {"wit1024": "WIT-1024 {metric}", "flickr30k": "Flickr30k R@1"}


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


def score(entry: Mapping[str, Any], benchmark: str) -> float | None:
    """A snapshot's number on `benchmark` (harness.stages.recap_score), None when skipped."""
    got = entry.get(benchmark) or {}
    return got.get("best") if benchmark == "wit1024" else got.get("r_at_1")


def arm_block(run: Mapping[str, Any], scored: list[Mapping[str, Any]],
              benchmarks: list[str]) -> dict[str, Any]:
    """One arm: its config line and its account rows, with texts and tokens per sample and
    each benchmark's score of the row's snapshot."""
    cfg = run["config"]
    rows = [dict(r) for r in run["account"]]
    by_samples = {e["samples"]: e for e in scored}
    for r in rows:
        r["texts_per_sample"] = r["texts"] / r["samples"]
        r["tokens_per_sample"] = r["tokens"] / r["samples"]
        r["scores"] = [score(by_samples.get(r["samples"], {}), b) for b in benchmarks]
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


def reach(target: Mapping[str, Any], other: Mapping[str, Any], i: int,
          benchmarks: list[str]) -> dict[str, Any] | None:
    """Where `other` (next-token) first reaches `target`'s (good views') score at its last
    checkpoint on benchmark i: the checkpoint, and its samples, tokens and unique images over
    the target's (the paper's 42x, 14x and 435x units); or how far it got."""
    goal = target["rows"][-1]["scores"][i] if target["rows"] else None
    seen = [r for r in other["rows"] if r["scores"][i] is not None]
    if goal is None or not seen:
        return None
    base = target["rows"][-1]
    out = {"benchmark": benchmarks[i], "goal": goal, "target": target["arm"],
           "arm": other["arm"], "goal_samples": base["samples"]}
    hit = next((r for r in seen if r["scores"][i] >= goal), None)
    if hit is None:
        best = max(seen, key=lambda r: r["scores"][i])
        return {**out, "reached": False, "best": best["scores"][i], "best_samples":
                best["samples"], "last_samples": seen[-1]["samples"],
                "at_least": seen[-1]["samples"] / base["samples"]}
    return {**out, "reached": True, "samples": hit["samples"],
            "ratios": [(key, hit[key] / base[key]) for key in
                       ("samples", "tokens", "unique_images")]}


def recap_context(summary: Mapping[str, Any], paraphrase: Mapping[str, Any] | None,
                  runs: list[Mapping[str, Any]], scores: Mapping[str, Any],
                  created: str | None) -> dict[str, Any]:
    """The template's context: the subset, each arm with its scores, where next-token reaches
    good views' score, and the notes that bound their reading."""
    benchmarks = list(scores["benchmarks"])
    arms = [arm_block(r, scores["arms"].get(r["arm"], []), benchmarks) for r in runs]
    k = (scores.get("wit1024") or {}).get("k", 10)
    by_arm = {a["arm"]: a for a in arms}
    reaches = [got for i in range(len(benchmarks)) if {"good", "ntp"} <= set(by_arm)
               for got in [reach(by_arm["good"], by_arm["ntp"], i, benchmarks)] if got]
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
            "paraphrase": paraphrase, "arms": arms, "paper_units": PAPER_UNITS,
            "texts_ratio": texts_ratio,
            "benchmarks": [LABELS[b].format(metric=f"mutual {k}-NN") for b in benchmarks],
            "reaches": reaches, "scored": scores.get("wit1024"),
            "not_scored": None if benchmarks else NOT_SCORED, "not_judged": NOT_JUDGED}
