"""Stage `recap_score` (pipelines/recap/dvc.yaml): every snapshot of every web-text run scored
on the benchmarks `recap.score` names, with the evaluation-only pipeline's protocols
(harness.stages.reference) and its `wit1024` section's data and settings:

- wit1024: the best-layer mutual k-NN (k = wit1024.k) of the snapshot's every layer against
  every layer of the section's first vision encoder (DINOv2 ViT-B: Table 7's and Appendix C's
  reference), each clipped as platonic-rep clips, with its interval over the WIT items at the
  best pair;
- flickr30k: R@1 of the Procrustes map fitted on the train and val pairs of `wit1024.flickr`
  (the flickr30k profile's Karpathy file and image stage), test pairs, ties against.

The WIT folder, the vision weights and the flickr30k files are not DVC deps (the wit1024
pipeline's rule): the scores record the WIT items' digest and the vision encoder's identity,
so after replacing either run `dvc repro -f pipelines/recap/dvc.yaml:recap_score`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config.recap import read_score
from harness.stages.common import fail, stage_parser
from prh.io import ContractError, write_json


def score_snapshot(snapshot: Path, cfg: Any, wit: Any, vision: Any, flickr: Any,
                   subsamples: Any = None) -> dict[str, Any]:
    """One snapshot's scores: its account's counts and each benchmark's score; on WIT-1024 also
    each item's score and the score on each of `subsamples` (Appendix C's protocol, at the best
    layer pair of all items), for the audit's paired intervals."""
    import torch

    from harness.data.benchmarks import flickr_recall, item_interval
    from harness.records.reference import metric_key
    from prh.encode_text import load_snapshot, make_encode, make_layer_encode
    from prh.layers import LayerAlignment, clip_outliers
    from prh.metrics import mutual_knn_subsamples

    encoder, tokenizer, max_len, account = load_snapshot(snapshot, cfg.device)
    device = torch.device(cfg.device)
    out: dict[str, Any] = {"snapshot": snapshot.name, "samples": account["samples"]}
    if wit is not None:
        layers = make_layer_encode(encoder, tokenizer, max_len, device, cfg.batch_size)
        x = clip_outliers(layers(wit.texts), cfg.q_outlier, cfg.clip_mode)
        obs = LayerAlignment(x, vision, "mutual_knn", cfg.k, cfg.score_precision).observed()
        t, v = obs.pair
        out["wit1024"] = {"metric": metric_key("mutual_knn", cfg.k), "best": obs.best,
                          "pair": list(obs.pair), **item_interval(cfg, obs.per_item),
                          "per_item": obs.per_item.tolist(),
                          "subsamples": mutual_knn_subsamples(x[:, t], vision[:, v], subsamples,
                                                              cfg.k).tolist()}
    if flickr is not None:
        out["flickr30k"] = flickr_recall(cfg, make_encode(encoder, tokenizer, max_len, device,
                                                          cfg.batch_size), flickr)
    return out


def run_setup(run_dir: Path, subset: Path) -> dict[str, Any]:
    """What a run was trained on, as the audit matches it to a claim's setup: the subset's
    images, the run's sources, seed and scored sample counts (its run.json)."""
    from harness.records.schemas import RECAP_RUN
    from prh.io import read_json

    run = RECAP_RUN.check(read_json(run_dir / "run.json"), str(run_dir / "run.json"))
    summary = read_json(subset / "summary.json")
    return {"arm": run["arm"], "images": int(summary["images"]),
            "sources": list(run["config"]["stream"]["sources"]),
            "seed": int(run["seed"]), "samples": [int(r["samples"]) for r in run["account"]],
            "world_size": int(run["config"].get("world_size", 1))}


def main(argv: list[str]) -> int:
    """Score the snapshots of each run (arm and seed of recap.train) in --runs-dir on
    recap.score's benchmarks; write the scores to --out."""
    parser = stage_parser("recap_score", main.__doc__)
    parser.add_argument("--subset", type=Path, required=True,
                        help="the recap stage's folder (its images, for the runs' setup)")
    parser.add_argument("--runs-dir", type=Path, required=True,
                        help="the recap_train stages' folders' parent (runs/recap)")
    parser.add_argument("--out", type=Path, required=True, help="the scores JSON")
    args = parser.parse_args(argv)
    from harness.config.recap import read_section, runs_of
    from harness.data.benchmarks import read_flickr
    from harness.records.runfile import run_name
    from prh.wit import WitError, read_wit

    try:
        names = read_score(args.params)
        runs = [run_name(arm, seed) for arm, seed in runs_of(read_section(args.params))]
        from harness.config.reference import recap_score_inputs  # its readers import torch

        cfg = recap_score_inputs(args.params, names)
        snapshots = {run: sorted((args.runs_dir / run / "snapshots").glob("samples-*.pt"))
                     for run in runs}
        wit = read_wit(cfg.data, caption_idx=cfg.caption_idx, n_rows=cfg.n_rows) \
            if "wit1024" in names else None
        flickr = read_flickr(cfg) if "flickr30k" in names else None
        setups = {run: run_setup(args.runs_dir / run, args.subset) for run in runs}
    except (ContractError, WitError) as e:
        return fail(e)
    doc = score_runs(cfg, names, setups, snapshots, wit, flickr)
    write_json(args.out, doc)
    print(f"recap_score: {args.out} ({', '.join(names) or 'no benchmark named: nothing scored'})")
    return 0

def score_runs(cfg: Any, names: tuple[str, ...], setups: dict[str, Any],
               snapshots: dict[str, list[Path]], wit: Any, flickr: Any) -> dict[str, Any]:
    """The scores file: the reference vision features and subsample draws once, then every
    run's snapshots on each benchmark named (`score_snapshot`)."""
    from harness.data.benchmarks import vision_layers, wit_digest
    from harness.records.schemas import RECAP_SCORES
    from harness.report.recap import score
    from prh.metrics import SUBSAMPLE_DRAWS, subsample_indices

    doc: dict[str, Any] = {"schema": str(RECAP_SCORES), "benchmarks": list(names),
                           "setups": setups, "runs": {}}
    vision = subsamples = None
    if wit is not None:
        subsamples = subsample_indices(len(wit.texts), SUBSAMPLE_DRAWS, cfg.seed)
        feats, info = vision_layers(cfg, wit)
        vision = feats[cfg.vision[0].name]
        doc["wit1024"] = {"data": str(cfg.data), "n": len(wit.texts), "sha256": wit_digest(wit),
                          "vision": {"name": cfg.vision[0].name, **info[cfg.vision[0].name]},
                          "k": cfg.k, "clip": {"q": cfg.q_outlier, "mode": cfg.clip_mode},
                          "score_precision": cfg.score_precision,
                          "subsamples": {"size": int(subsamples.shape[1]),
                                         "draws": int(subsamples.shape[0]), "seed": cfg.seed,
                                         "layers": "the best layer pair on all items"}}
    if flickr is not None:
        doc["flickr30k"] = {"dataset": str(cfg.flickr.dataset), "image": str(cfg.flickr.image)}
    for run, paths in snapshots.items():
        doc["runs"][run] = [score_snapshot(p, cfg, wit, vision, flickr, subsamples)
                            for p in paths] \
            if names else []
        for row in doc["runs"][run]:
            print(f"recap_score: {run} at {row['samples']:,} samples: "
                  + ", ".join(f"{b} {score(row, b)}" for b in names))  # None: skipped
    return doc
