"""The web-text report's context (harness.stages.recap_report): the subset's counts, and per
run (arm and seed) its config and its account at every scored checkpoint, with what each
number says and does not say. Formatting only; the numbers are the stages' own
(prh.stream.ACCOUNT)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.records import names
from harness.records.runfile import run_name
from prh.recap import SUBSET_SIZES
from prh.stream import ACCOUNT

APPENDIX_C_SAMPLES = 21_600_000  # the 33M encoder's runs at fixed samples (the audit article)
# the paper's three units of "fewer" (the audit article, "The Unit Behind '42 Times'"):
# samples 900M / 21.6M, text tokens (a good-view sample reads three texts), unique images
# 940M / 2.16M
PAPER_UNITS = (("samples", 41.7), ("text tokens", 13.9), ("unique images", 435.2))
NOT_SCORED = ("Not scored: recap.score is empty. With WIT-1024 and DINOv2 in place (the wit1024 "
              "section) set it to [wit1024], or [wit1024, flickr30k] with wit1024.flickr, and "
              "run again: the snapshots in runs/recap/ARM-sSEED/snapshots are scored, not "
              "retrained")
JUDGED = ("Each claim is judged on the runs trained as it says (arm, texts, images and, where "
          "it states one, samples; harness/audit/web_text.py); any other run is not comparable. "
          "Below three seeds the seed variance is borrowed from the paper's three 50M-image "
          "seeds and no verdict is a reproduction. The reach above is one seed's point "
          "comparison")
WEB_TEXT_RULE = "web_text"  # the registry's rule for these claims (harness.audit.web_text)


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
    """One run (an arm and a seed): its config line and its account rows, with texts and tokens
    per sample and each benchmark's score of the row's snapshot."""
    cfg = run["config"]
    rows = [dict(r) for r in run["account"]]
    by_samples = {e["samples"]: e for e in scored}
    for r in rows:
        r["texts_per_sample"] = r["texts"] / r["samples"]
        r["tokens_per_sample"] = r["tokens"] / r["samples"]
        r["scores"] = [score(by_samples.get(r["samples"], {}), b) for b in benchmarks]
    model = cfg["train"]["model"]
    return {"run": run_name(run["arm"], run["seed"]), "arm": run["arm"], "seed": run["seed"],
            "rows": rows, "columns": list(ACCOUNT),
            "mlflow_run_id": run.get("mlflow_run_id"),
            "config": {"sources": ", ".join(cfg["stream"]["sources"]),
                       "samples": cfg["stream"]["samples"],
                       "global_batch": cfg["global_batch"], "steps": cfg["steps"],
                       "world_size": cfg["world_size"], "device": cfg["device"],
                       "n_parameters": cfg["n_parameters"],
                       "parameters": parameter_line(cfg.get("parameters")),
                       "encoder": f"{model['layers']} layers x {model['hidden']}",
                       "samples_available": cfg["samples_available"],
                       "lr": cfg["train"]["lr"], "max_len": cfg["train"]["max_len"]}}


def parameter_line(parts: Mapping[str, int] | None) -> str:
    """What an arm's parameter count holds (prh.models.parameter_counts), in words; '' for a
    run written before the breakdown. No projector is next-token's (the JEPA arms' is at
    least 1 x 1: prh.train_config)."""
    if not parts:
        return ""
    if not parts["projector"]:
        return f"encoder {parts['encoder']:,}; its word embeddings are the tied output head"
    return (f"encoder {parts['encoder']:,} and projector {parts['projector']:,}, which only "
            "training uses (the scores read the encoder)")


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
    out = {"benchmark": benchmarks[i], "goal": goal, "target": target["run"],
           "arm": other["run"], "goal_samples": base["samples"]}
    hit = next((r for r in seen if r["scores"][i] >= goal), None)
    if hit is None:
        best = max(seen, key=lambda r: r["scores"][i])
        return {**out, "reached": False, "best": best["scores"][i], "best_samples":
                best["samples"], "last_samples": seen[-1]["samples"],
                "at_least": seen[-1]["samples"] / base["samples"]}
    return {**out, "reached": True, "samples": hit["samples"],
            "ratios": [(key, hit[key] / base[key]) for key in
                       ("samples", "tokens", "unique_images")]}


def verdict_rows(audit: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The audit's web-text claims, in registry order: the claim, the verdict, its reason."""
    return [{"id": c["id"], "statement": c["statement"], "printed": c["printed"],
             "verdict": c["verdict"], "reason": c["reason"], "where": c["where"]}
            for c in audit["claims"] if c["rule"] == WEB_TEXT_RULE]


def recap_context(summary: Mapping[str, Any], paraphrase: Mapping[str, Any] | None,
                  runs: list[Mapping[str, Any]], scores: Mapping[str, Any],
                  created: str | None, audit: Mapping[str, Any]) -> dict[str, Any]:
    """The template's context: the subset, each run with its scores, where next-token reaches
    good views' score (per seed that both arms ran), and the notes that bound their reading."""
    benchmarks = list(scores["benchmarks"])
    arms = [arm_block(r, scores["runs"].get(run_name(r["arm"], r["seed"]), []), benchmarks)
            for r in runs]
    k = (scores.get("wit1024") or {}).get("k", 10)
    by_run = {(a["arm"], a["seed"]): a for a in arms}
    seeds = sorted({s for a, s in by_run if a == "good"} & {s for a, s in by_run if a == "ntp"})
    reaches = [got for seed in seeds for i in range(len(benchmarks))
               for got in [reach(by_run["good", seed], by_run["ntp", seed], i, benchmarks)]
               if got]
    samples = max((a["config"]["samples"] for a in arms), default=0)
    last = {a["arm"]: a["rows"][-1] for a in arms if a["rows"]}  # texts per sample: any seed
    texts_ratio = (last["good"]["texts_per_sample"] / last["ntp"]["texts_per_sample"]
                   if {"good", "ntp"} <= set(last) else None)
    return {"title": "Web texts: training on Recap-DataComp", "created": created,
            "scale": scale(int(summary["images"]), samples),
            "subset": {"images": summary["images"], "unique_images": summary["unique_images"],
                       "seed": summary["seed"], "rows_read": summary["rows_read"],
                       "rows_without_key": summary["rows_without_key"],
                       "duplicate_key_rows": summary["duplicate_key_rows"],
                       "sources": [{"name": n, **s} for n, s in summary["sources"].items()],
                       "tokenizer": summary["tokenizer"], "cut_at": summary.get("cut_at"),
                       "shards": len(summary["shards_read"])},
            "paraphrase": paraphrase, "arms": arms, "paper_units": PAPER_UNITS,
            "texts_ratio": texts_ratio,
            "benchmarks": [f"{title} {names.label(at(k), k)}" for title, at in
                           (names.WEB_TEXT_BENCHMARKS[b] for b in benchmarks)],
            "flickr_scored": "flickr30k" in benchmarks,
            "reaches": reaches, "scored": scores.get("wit1024"),
            "not_scored": None if benchmarks else NOT_SCORED, "judged": JUDGED,
            "verdicts": verdict_rows(audit)}
