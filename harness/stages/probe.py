"""Stage `probe`: what shakes a headline number, and whether a seed reproduces itself.

Two probes on short trainings (`probe.epochs`, scaled down from the main runs' `train.epochs`
so the main job keeps its budget; the report says so beside every panel):
- the SIGReg weight: each JEPA arm of `probe.arms` trained at every `probe.lambdas` value
  (the next-token arm has no SIGReg term and is skipped), scored like the align stage;
- determinism: the first arm at the configured `train.lamb` trained twice with the same seed
  in two fresh folders; the largest absolute difference of every per-epoch metric, every
  final score, the embeddings and the weights. On CPU bit-identical (0.0) is expected; a GPU
  run records its own figure (cuDNN and atomics may differ run to run);
- text sources (Table 7's design: who wrote the texts the views are cut from): good and bad
  views trained at `train.lamb` for `probe.source_epochs` on the texts of each
  `probe.text_sources` source, all scored
  on the people captions of the fit and test pairs, so only the training texts differ; the
  good-view gap (good - bad) of each source and the difference of two sources' gaps, with
  paired bootstrap intervals over the test pairs (one seed: they do not resample training).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.params import ProbeConfig
from harness.records import names
from harness.records.schemas import PROBE
from harness.stages.common import fail, preflight, stage_parser
from prh.io import ContractError, read_json, write_json

# the eval keys the probe reads (its k, and its paired intervals' level, resamples and seed):
# dvc.yaml's probe stage lists these as its params, and its params hash covers only them
PROBE_EVAL_KEYS = ("k", "ci_level", "n_resamples", "bootstrap_seed")


def probe_hash(params: Any) -> str:
    """What the probe's numbers depend on: the profile, its data, image, train and probe
    sections and PROBE_EVAL_KEYS of eval (their values as read, defaults filled)."""
    ev = params.eval_config()
    return params.section_hash("data", "image", "train", "probe", "eval",
                               probe=params.sections.get("probe", {}),
                               eval={k: getattr(ev, k) for k in PROBE_EVAL_KEYS})


def short_config(train_cfg: Any, probe: ProbeConfig, lamb: float | None) -> Any:
    """The main run's TrainConfig with the probe's epochs (warm-up capped to them) and lambda."""
    out = dataclasses.replace(train_cfg, epochs=probe.epochs,
                              warmup_epochs=min(train_cfg.warmup_epochs, probe.epochs),
                              eval_every=probe.epochs)
    return out if lamb is None else dataclasses.replace(out, lamb=lamb)


def max_abs_diff(a: Any, b: Any) -> float:
    """Largest |a - b| over two equal-shaped arrays (inf when the shapes differ)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b), initial=0.0)) if a.shape == b.shape else float("inf")


def run_differences(first: dict[str, Any], second: dict[str, Any]) -> dict[str, float]:
    """Largest absolute difference per metric between two runs of one seed: every per-epoch
    curve metric (over epochs), every final score, the embeddings and the weights."""
    out: dict[str, float] = {}
    curve_a, curve_b = first["curve"], second["curve"]
    for key in sorted({k for row in curve_a for k in row} - {"epoch"}):
        out[f"curve.{key}"] = max_abs_diff([r.get(key, np.nan) for r in curve_a],
                                           [r.get(key, np.nan) for r in curve_b])
    for key in sorted(first["scores"]):
        out[f"final.{key}"] = max_abs_diff(first["scores"][key], second["scores"][key])
    out["embeddings"] = max(max_abs_diff(first["emb"][s], second["emb"][s])
                            for s in first["emb"])
    out["weights"] = max(max_abs_diff(first["weights"][k], second["weights"][k])
                         for k in first["weights"])
    return out


def train_and_score(cfg: Any, photos: dict[str, list], tokenizer: Any, image: dict,
                    work: Path, k: int) -> dict[str, Any]:
    """Train one short run in `work`, embed the fit and test captions, score the alignment."""
    from prh.align import score_alignment
    from prh.checkpoint import read_checkpoint
    from prh.data import eval_captions
    from prh.encode_text import load_text_encoder
    from prh.train import train_text_encoder

    train_text_encoder(cfg, photos["train"], tokenizer, work, progress=False)
    encode = load_text_encoder(work)
    emb = {split: encode(eval_captions(photos[split])) for split in ("val", "test")}
    scores = score_alignment(image["val"], emb["val"], image["test"], emb["test"], k=k,
                             seed=cfg.seed)
    net = read_checkpoint(work / "checkpoint.pt")["net"]
    return {"scores": scores.metrics, "per_query": scores.per_query,
            "curve": read_json(work / "curve.json"), "emb": emb,
            "weights": {name: t.float().numpy() for name, t in net.items()}}


def source_gaps(runs: dict[tuple[str, str], dict[str, Any]], sources: tuple[str, ...],
                metrics: dict[str, str], ev: Any) -> list[dict[str, Any]]:
    """Per metric (name: its per-query key in prh.align.AlignmentScores): each source's
    good-view gap (good - bad on the same test pairs) and, for the first source against each
    other one, the difference of the two gaps, with paired bootstrap intervals over the test
    pairs (harness.stats.estimators.paired_bootstrap_diff)."""
    from harness.stats.estimators import paired_bootstrap_diff

    def paired(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
        mean, ci = paired_bootstrap_diff(a, b, level=ev.ci_level, n_resamples=ev.n_resamples,
                                         seed=ev.bootstrap_seed)
        return {"value": mean, **ci.to_dict()}

    out = []
    for metric, key in metrics.items():
        per = {s: (runs[s, "good"]["per_query"][key], runs[s, "bad"]["per_query"][key])
               for s in sources}
        gaps = [{"metric": metric, "source": s, **paired(*per[s])} for s in sources]
        base = sources[0]
        gaps += [{"metric": metric, "source": f"{base} - {s}",
                  **paired(per[base][0] - per[base][1], per[s][0] - per[s][1])}
                 for s in sources[1:]]
        out.extend(gaps)
    return out


@dataclasses.dataclass(frozen=True)
class ProbeInputs:
    """What the probes read, checked before any training."""

    params: Any
    probe: ProbeConfig
    k: int
    tokenizer: Any
    photos: dict[str, list]  # the train, val and test photos
    image: dict[str, np.ndarray]  # the image stage's val and test embeddings
    configs: dict[str, Any]  # each arm's TrainConfig at the probe's seed
    texts: dict[str, list]  # each text source's training photos


def load_inputs(args: Any) -> ProbeInputs:
    """params.yaml's probe section, the photos, tokenizer and image embeddings (their ids
    checked against the split), every arm's config and every text source; ContractError names
    what is wrong."""
    from prh.data import load_karpathy
    from prh.io import check_same_ids, load_embeddings
    from prh.tokenizer import Tokenizer
    from prh.train_config import TrainConfig

    params = preflight(args.params, args.dataset.parent)
    probe = params.config(ProbeConfig, "probe")
    corpus = load_karpathy(args.dataset, min_captions=1)
    photos = {s: corpus.split(s) for s in ("train", "val", "test")}
    image = {}
    for split in ("val", "test"):
        ids, image[split], _ = load_embeddings(args.image / f"{split}.npz")
        check_same_ids(ids, np.array([p.id for p in photos[split]]),
                       str(args.image / f"{split}.npz"), f"{args.dataset} {split} split")
    return ProbeInputs(
        params, probe, params.eval_config().k, Tokenizer.load(args.prepared / "tokenizer"),
        photos, image,
        {arm: params.config(TrainConfig, "train", arm=arm, seed=probe.seed)
         for arm in probe.arms},
        {s: load_karpathy(args.dataset, min_captions=1, source=s).split("train")
         for s in probe.text_sources})  # a source missing from the file stops here


def lambda_sweep(inp: ProbeInputs, scratch: Path) -> dict[tuple[str, float | None], dict]:
    """Every JEPA arm at every probe lambda, next-token once: (arm, lambda) -> its run."""
    runs = {}
    for arm in inp.probe.arms:
        for lamb in ((None,) if arm == "ntp" else inp.probe.lambdas):
            runs[arm, lamb] = run = train_and_score(
                short_config(inp.configs[arm], inp.probe, lamb), inp.photos, inp.tokenizer,
                inp.image, scratch / f"{arm}-{lamb}", inp.k)
            print(f"probe: {arm} lambda {lamb} R@1 {run['scores']['r_at_1']:.3f}", flush=True)
    return runs


def source_runs(inp: ProbeInputs, runs: dict, scratch: Path) -> dict[tuple[str, str], dict]:
    """Good and bad views on each text source's texts: (source, views) -> its run; people's
    pair is the sweep's when the epochs agree."""
    from prh.data import PEOPLE

    out = {}
    for source, train_photos in inp.texts.items():
        for views in ("good", "bad"):
            at = inp.configs[views].lamb
            reuse = runs.get((views, at)) if source == PEOPLE \
                and inp.probe.source_epochs == inp.probe.epochs else None
            out[source, views] = run = reuse or train_and_score(
                short_config(inp.configs[views], dataclasses.replace(
                    inp.probe, epochs=inp.probe.source_epochs), at),
                {**inp.photos, "train": train_photos},
                inp.tokenizer, inp.image, scratch / f"{source}-{views}", inp.k)
            print(f"probe: {views} views on {source} texts R@1 {run['scores']['r_at_1']:.3f}",
                  flush=True)
    return out


def run_probes(inp: ProbeInputs) -> dict[str, Any]:
    """The three probes in a scratch folder: the probe file's body (PROBE schema)."""
    import torch

    from prh.distributed import torch_device

    probe, k = inp.probe, inp.k
    shown = ("r_at_1", "r_at_5", names.mknn(k), "chance_r_at_1")
    with tempfile.TemporaryDirectory(prefix="prh-probe-") as tmp:
        scratch = Path(tmp)
        runs = lambda_sweep(inp, scratch)
        arm = probe.arms[0]
        lamb = None if arm == "ntp" else inp.configs[arm].lamb
        cfg = short_config(inp.configs[arm], probe, lamb)
        first = runs.get((arm, lamb)) or train_and_score(
            cfg, inp.photos, inp.tokenizer, inp.image, scratch / "first", k)
        second = train_and_score(cfg, inp.photos, inp.tokenizer, inp.image, scratch / "repeat",
                                 k)
        by_source = source_runs(inp, runs, scratch)
    diffs = run_differences(first, second)
    return {
        "probe": dataclasses.asdict(probe), "main_epochs": inp.configs[arm].epochs,
        "lambda_sweep": [{"arm": a, "lamb": la, **{m: run["scores"][m] for m in shown}}
                         for (a, la), run in runs.items()],
        "determinism": {"arm": arm, "seed": probe.seed, "lamb": lamb, "epochs": probe.epochs,
                        "device": torch_device(cfg.device),
                        "torch": torch.__version__, "max_abs_diff": diffs,
                        "bit_identical": max(diffs.values()) == 0.0},
        "text_sources": None if not inp.texts else {
            "sources": list(inp.texts), "k": k, "seed": probe.seed,
            "epochs": probe.source_epochs,
            "lamb": {a: inp.configs[a].lamb for a in ("good", "bad")},
            "rows": [{"source": s, "arm": a, **{m: by_source[s, a]["scores"][m] for m in shown}}
                     for s in inp.texts for a in ("good", "bad")],
            "gaps": source_gaps(by_source, tuple(inp.texts), {
                "r_at_1": "r_at_1_hit", names.mknn(k): names.mknn(k)}, inp.params.eval_config())}}


def main(argv: list[str]) -> int:
    """Train the probes of params.yaml's `probe` section on --dataset (tokenizer from
    --prepared, scored against --image) in a scratch folder; write the lambda sweep and the
    determinism check to --out (JSON)."""
    parser = stage_parser("probe", main.__doc__)
    parser.add_argument("--dataset", type=Path, required=True, help="Karpathy-split JSON")
    parser.add_argument("--prepared", type=Path, required=True, help="prepare stage's folder")
    parser.add_argument("--image", type=Path, required=True, help="image stage's folder")
    parser.add_argument("--out", type=Path, required=True, help="probe results, JSON")
    args = parser.parse_args(argv)
    try:
        inp = load_inputs(args)
    except ContractError as e:
        return fail(e)
    head = {"schema": str(PROBE), "profile": inp.params.profile,
            "params_hash": probe_hash(inp.params)}
    if not inp.probe.arms:
        write_json(args.out, {**head, "skipped": "probe.arms is empty"})
        print("probe: off (probe.arms is empty in params.yaml)")
        return 0
    doc = run_probes(inp)
    write_json(args.out, {**head, **doc})
    worst = max(doc["determinism"]["max_abs_diff"].values())
    print(f"probe: same seed twice, largest absolute difference {worst:.3g} "
          f"({'bit-identical' if worst == 0.0 else 'not bit-identical'})")
    return 0
