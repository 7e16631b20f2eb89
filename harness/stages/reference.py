"""Stage `reference` (evaluation only, the `wit1024` section): every listed public text encoder
against every listed vision encoder on WIT-1024 by the platonic-rep protocol (prh.features,
prh.layers), best layer pair and its max-over-pairs calibration, the item interval, and STS-B
for every text encoder (and for the trained arms under `arms`), and Flickr30k R@1 with the
30k-pair map when `flickr` is set.
Everything is checked (section, paths, data, every text model's tokenizer on the texts it will
score) before a model loads; `--check` stops there. The text models run before the WIT and
COCO vision models, so a text-side fault does not wait for the slowest step. Every model's
collapsed layers (prh.layers.degenerate_layers) are recorded beside its scores."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.data.benchmarks import (
    collapsed_note,
    flickr_recall,
    free_memory,
    item_interval,
    read_flickr,
    vision_layers,
    wit_digest,
)
from harness.data.table4 import (
    PairFreeInputs,
    pairfree_all,
    pairfree_rows,
    read_pairfree,
    table4_images,
)
from harness.records.reference import metric_key, pair_key, write_reference
from harness.stages.common import fail, stage_parser
from prh.io import ContractError

if TYPE_CHECKING:  # the stage imports torch and scipy only once it runs (`--help` stays fast)
    from harness.config.reference import ReferenceConfig
    from prh.coco import Coco
    from prh.sts import Sts

LANGUAGE = {
    "platonic-rep": "mask-weighted mean over tokens of every hidden state, embedding output "
                    "included; left padding to the set's longest text, no position ids, pooled "
                    "in the compute precision (platonic-rep extract_llm_features)",
    "padding-invariant": "mask-weighted mean over tokens of every hidden state, embedding "
                         "output included; right padding per batch, position ids from the "
                         "attention mask"}
PROTOCOL = {
    "vision": "CLS token after every block, before the final norm, at the model's input size",
    "score": "each layer L2-normalised; max over all (text layer, vision layer) pairs",
    "null": "one row permutation per draw applied to every vision layer, the same max "
            "(calibrated-similarity calibrate_layers, agg max)",
    "sts": "cosine of the mean-pooled last hidden state, Spearman against the gold scores",
    "flickr": "the mean-pooled last hidden state of each photo's first caption; Procrustes "
              "fitted on every train and val pair, image -> text R@1 on the test pairs",
    "pair_free": "the flickr30k profile's pair-free pools (images of the first half of the "
                 "train photos, the captions of the last half) and aligner (prh.pairfree), "
                 "the rows by wit1024.flickr.inputs (pair_free's `inputs`), one map per seed, "
                 "scored image -> text on the test pairs (R@1 ties against, FOSCTTM "
                 "midranks) and zero-shot on the class sets (prh.zeroshot)"}


def text_sides(cfg: ReferenceConfig, sets: Mapping[str, list[str]]) -> dict[str, dict[str, Any]]:
    """Every text model's config and tokenizer (no weights), its tokenizer exercised on each
    set of texts it will score (`sets`: benchmark -> texts): the size against the embedding
    table, the share of unknown tokens and the rows made of nothing else, refused per set and
    recorded over all (prh.features.load_text_side, check_unknown, unknown). FeatureError names
    the folder and the set."""
    from prh.features import check_unknown, load_text_side, unknown

    out = {}
    texts = [t for v in sets.values() for t in v]
    for t in cfg.text:
        side = load_text_side(t.path)
        for name, some in sets.items():
            check_unknown(side, some, f"{t.path} ({t.name}) on the {name} texts")
        share, rows = unknown(side.tokenizer, texts)
        out[t.name] = {**side.facts, "unk_share": share, "unk_rows": len(rows)}
        print(f"reference: {t.name}: {side.facts['model_type']}, {side.facts['layers']} layers "
              f"x {side.facts['hidden']}, tokenizer of {side.facts['tokenizer_size']:,} tokens, "
              f"{share:.2%} of the scored tokens unknown, {len(rows)} rows nothing but unknown")
    return out


def _text(cfg: ReferenceConfig, benches: dict[str, Any], sts: Sts | None,
          flickr: dict[str, Any] | None, pf: PairFreeInputs | None = None,
          images: dict[str, Any] | None = None
          ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, dict[str, np.ndarray]],
                     dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Per text encoder: its features on each benchmark's texts (`benches`: wit1024, coco ->
    its data) by `wit1024.protocol` and by the other protocol (what the choice moves, shown
    beside every verdict), each {benchmark: {model: features}}; what was loaded (WIT's
    extraction); its STS-B and Flickr30k scores; and its rows of Table 4's setting
    (`pairfree_rows`), fitted once every encoder's are made."""
    from prh.features import PROTOCOLS, language_features, load_language_model
    from prh.layers import clip_outliers, degenerate_layers
    from prh.sts import spearman

    other = next(p for p in PROTOCOLS if p != cfg.protocol)
    feats: dict[str, dict[str, np.ndarray]] = {b: {} for b in benches}
    alt: dict[str, dict[str, np.ndarray]] = {b: {} for b in benches}
    infos, sts_out, flickr_out, pf_rows = {}, {}, {}, {}
    for t in cfg.text:
        start = time.perf_counter()
        lm = load_language_model(t.path, t.precision, cfg.device)
        for bench, data in benches.items():
            x, got = language_features(lm, data.texts, batch_size=cfg.batch_size,
                                       device=cfg.device, protocol=cfg.protocol)
            if bench == "wit1024":  # the first: what the printed line and `text` report
                how = got
            feats[bench][t.name] = clip_outliers(x, cfg.q_outlier, cfg.clip_mode)
            alt[bench][t.name] = clip_outliers(language_features(
                lm, data.texts, batch_size=cfg.batch_size, device=cfg.device,
                protocol=other)[0], cfg.q_outlier, cfg.clip_mode)
            if bench == "wit1024":
                infos[t.name] = {**lm.info, **how,
                                 "degenerate_layers": degenerate_layers(feats[bench][t.name])}
        infos[t.name]["seconds"] = round(time.perf_counter() - start, 2)
        print(f"reference: {t.name}: {x.shape[1]} layers x {x.shape[2]} of "
              + " and ".join(f"{len(d.texts)} {b} texts" for b, d in benches.items())
              + f" in {infos[t.name]['seconds']:.1f} s ({how['n_truncated']} cut at "
              f"{lm.max_length} tokens)" + collapsed_note(infos[t.name]))
        def last_layer(texts: list[str], lm: Any = lm) -> np.ndarray:
            return language_features(lm, texts, batch_size=cfg.batch_size, device=cfg.device,
                                     last_only=True)[0][:, 0]
        if sts is not None:
            rho = spearman(sts, last_layer)
            sts_out[t.name] = {"spearman": rho, "n": int(len(sts.scores)), "path": str(cfg.stsb)}
            print(f"reference: {t.name}: STS-B Spearman {rho:.4f} over {len(sts.scores)} pairs")
        if flickr is not None:
            flickr_out[t.name] = got = flickr_recall(cfg, last_layer, flickr)
            print(f"reference: {t.name}: Flickr30k " + (got.get("skipped") or (
                f"R@1 {got['r_at_1']:.4f} with the {got['n_pairs']}-pair map")))
        if pf is not None and images is not None:
            pf_rows[t.name] = pairfree_rows(last_layer, pf, images)
        del lm
        free_memory()
    return feats, alt, infos, sts_out, flickr_out, pf_rows


def arm_runs(cfg: ReferenceConfig) -> dict[Path, dict[str, Any]]:
    """The trained runs under `wit1024.arms` (the train stage's ARM-sSEED folders with their
    run.json), checked before any model loads: at least one, one profile per arm."""
    from prh.io import read_json

    if cfg.arms is None:
        return {}
    runs = {p: read_json(p / "run.json") for p in sorted(cfg.arms.iterdir())
            if (p / "run.json").is_file()}
    if not runs:
        raise ContractError(f"{cfg.arms}: no trained runs (ARM-sSEED folders with run.json); "
                            "run `harness run` first or unset wit1024.arms")
    profiles: dict[str, str] = {}
    for folder, run in runs.items():
        if profiles.setdefault(run["arm"], run["profile"]) != run["profile"]:
            raise ContractError(f"{folder / 'run.json'}: trained on the {run['profile']} "
                                f"profile, the other {run['arm']} runs on "
                                f"{profiles[run['arm']]}; score one profile's runs at a time")
    return runs


def _sts_arms(cfg: ReferenceConfig, sts: Sts, runs: dict[Path, dict[str, Any]]
              ) -> dict[str, Any]:
    """STS-B of every trained run, grouped by arm: {arm: {profile, values: {seed: rho}, n}};
    the embedding is each arm's own (prh.encode_text)."""
    from prh.encode_text import load_text_encoder
    from prh.sts import spearman

    out: dict[str, Any] = {}
    for folder, run in runs.items():
        rho = spearman(sts, load_text_encoder(folder, cfg.device))
        block = out.setdefault(run["arm"], {"profile": run["profile"], "values": {},
                                            "n": int(len(sts.scores))})
        block["values"][str(run["seed"])] = rho
        print(f"reference: {folder.name}: STS-B Spearman {rho:.4f} ({run['profile']} profile)")
    return out


def _other(cfg: ReferenceConfig, name: str, x: np.ndarray, y: np.ndarray, metric: str
           ) -> dict[str, Any]:
    from prh.layers import LayerAlignment

    obs = LayerAlignment(x, y, metric, cfg.k, cfg.score_precision).observed()
    return {"name": name, "best": obs.best, "pair": list(obs.pair)}


def _align(cfg: ReferenceConfig, text: dict[str, np.ndarray], vision: dict[str, np.ndarray],
           collapsed: dict[str, list[int]], alt: dict[str, np.ndarray],
           metrics: tuple[str, ...] = ("mutual_knn", "cka")) -> dict[str, Any]:
    """Every (text, vision, metric) entry; `degenerate` names the collapsed layers of either
    model (`collapsed`: model -> layers), whose neighbour sets are rounding noise;
    `other_protocol` the best pair of the text features by the other protocol (`alt`)."""
    from prh.features import PROTOCOLS

    other = next(p for p in PROTOCOLS if p != cfg.protocol)
    from prh import calibrate
    from prh.layers import LayerAlignment

    out = {}
    for tname, x in text.items():
        for vname, y in vision.items():
            for metric in metrics:
                k = cfg.k if metric == "mutual_knn" else None
                la = LayerAlignment(x, y, metric, cfg.k, cfg.score_precision)
                obs = la.observed()
                cal = None
                if cfg.n_permutations:
                    null = la.null(calibrate.permutations(la.n, cfg.n_permutations, cfg.seed))
                    cal = calibrate.calibrate(obs.best, null, alpha=cfg.alpha)
                interval = {} if obs.per_item is None else item_interval(cfg, obs.per_item)
                out[pair_key(tname, vname, metric, k)] = {
                    "text": tname, "vision": vname, "metric": metric_key(metric, k), "k": k,
                    "best": obs.best, "pair": list(obs.pair), "scores": obs.scores.tolist(),
                    "calibrated": cal, **interval,
                    "per_item": None if obs.per_item is None else obs.per_item.tolist(),
                    "degenerate": {m: collapsed[m] for m in (tname, vname) if collapsed[m]},
                    "other_protocol": _other(cfg, other, alt[tname], y, metric)}
                shown = f", calibrated {cal['calibrated']:.4f} (p {cal['p_value']:.4f})" \
                    if cal else ""
                print(f"reference: {tname} x {vname}: {metric_key(metric, k)} {obs.best:.4f} at "
                      f"layers {obs.pair}{shown}")
    return out


def _coco_block(cfg: ReferenceConfig, coco: Coco, text: dict[str, np.ndarray],
                alt: dict[str, np.ndarray], vision: dict[str, np.ndarray],
                vision_info: dict[str, Any]) -> dict[str, Any]:
    """Table 3's COCO column: the same mutual k-NN entries as WIT's on the COCO pairs (the
    column prints no CKA), with what was read and every model's collapsed layers there (the
    models are `text`'s and `vision`'s of the document)."""
    from prh.layers import degenerate_layers

    collapsed = {**{n: degenerate_layers(x) for n, x in text.items()},
                 **{n: info["degenerate_layers"] for n, info in vision_info.items()}}
    return {"data": {"dataset": str(cfg.coco.dataset), "images": str(cfg.coco.images),
                     "split": cfg.coco.split, "n": len(coco.texts),
                     "caption_idx": cfg.coco.caption_idx, "sha256": coco.digest()},
            "degenerate_layers": collapsed,
            "alignment": _align(cfg, text, vision, collapsed, alt, ("mutual_knn",))}


@dataclass(frozen=True)
class ReferenceInputs:
    """Everything the stage scores, read and checked before a model's weights load."""

    cfg: ReferenceConfig
    benches: dict[str, Any]  # wit1024 (and coco): the items scored layer by layer
    sts: Sts | None
    flickr: dict[str, Any] | None
    pf: PairFreeInputs | None
    runs: dict[Path, dict[str, Any]]  # the trained arms' runs (`arms`)
    sides: dict[str, dict[str, Any]]  # every text model's config and tokenizer facts


def load_inputs(params: Path) -> ReferenceInputs:
    """The section, every path, the data sets and every text model's tokenizer on its texts;
    raises naming what is missing or wrong."""
    from harness.config.reference import load_reference, missing_paths
    from prh.coco import read_coco
    from prh.sts import read_sts
    from prh.wit import read_wit

    cfg = load_reference(params)
    missing = missing_paths(cfg)
    if missing:
        raise ContractError("missing input(s) named in the wit1024 section:\n  "
                            + "\n  ".join(missing) + "\nDownload the data and models "
                            "once (README, \"Public encoders on WIT-1024\"), make what a "
                            "stage makes, and run again")
    if cfg.device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            raise ContractError(f"{params}: wit1024.device is {cfg.device!r} and no "
                                "CUDA device is visible; set it to cpu for a CPU run")
    benches: dict[str, Any] = {"wit1024": read_wit(cfg.data, caption_idx=cfg.caption_idx,
                                                   n_rows=cfg.n_rows)}
    sts = read_sts(cfg.stsb) if cfg.stsb else None
    flickr, pf, runs = read_flickr(cfg), read_pairfree(cfg, params), arm_runs(cfg)
    if cfg.coco:
        benches["coco"] = read_coco(cfg.coco.dataset, cfg.coco.images, split=cfg.coco.split,
                                    n_rows=cfg.coco.n_rows, caption_idx=cfg.coco.caption_idx)
    sides = text_sides(cfg, {**{k: d.texts for k, d in benches.items()},
                             **({"STS-B": sts.first + sts.second} if sts else {})})
    return ReferenceInputs(cfg, benches, sts, flickr, pf, runs, sides)


def inputs_line(inp: ReferenceInputs) -> str:
    """What the stage read, in one line."""
    cfg, pf = inp.cfg, inp.pf
    return (f"reference: {len(inp.benches['wit1024'].texts)} WIT items from {cfg.data}"
            + (f", {len(inp.benches['coco'].texts)} COCO {cfg.coco.split} pairs"
               if cfg.coco else "")
            + (f", {len(inp.sts.scores)} STS-B pairs" if inp.sts else "")
            + (f", {sum(len(f[0]) for f in inp.flickr.values())} Flickr30k photos"
               if inp.flickr else "")
            + (f", pair-free pools of {len(pf.pool_captions)}, seeds "
               f"{list(cfg.flickr.pairfree_seeds)}"
               + "".join(f", {n} ({len(c.labels)} images)" for n, c in pf.classes.items())
               if pf else ""))


def score_all(inp: ReferenceInputs) -> dict[str, Any]:
    """Every text model, then every vision model, then the alignments: the scores file."""
    cfg, benches, sts, flickr, pf, runs = (inp.cfg, inp.benches, inp.sts, inp.flickr, inp.pf,
                                           inp.runs)
    images = table4_images(pf, flickr["test"][1], cfg.device) if pf and flickr else None
    text, alt, text_info, sts_out, flickr_out, pf_rows = _text(cfg, benches, sts, flickr, pf,
                                                               images)
    vision = {b: vision_layers(cfg, data) for b, data in benches.items()}
    sts_arms = _sts_arms(cfg, sts, runs) if runs and sts else {}
    pf_out, pf_arms = pairfree_all(cfg, pf, images, pf_rows, runs) if pf and images else ({},
                                                                                          {})
    vision_info = vision["wit1024"][1]
    collapsed = {name: info["degenerate_layers"]
                 for name, info in (*text_info.items(), *vision_info.items())}
    wit = benches["wit1024"]
    doc = {"data": {"path": str(cfg.data), "n": len(wit.texts), "caption_idx": cfg.caption_idx,
                    "sha256": wit_digest(wit)},
           "protocol": {**PROTOCOL, "language": LANGUAGE[cfg.protocol], "name": cfg.protocol,
                        "score_precision": cfg.score_precision,
                        "clip": {"q": cfg.q_outlier, "mode": cfg.clip_mode},
                        "k": cfg.k, "n_permutations": cfg.n_permutations, "alpha": cfg.alpha,
                        "seed": cfg.seed},
           "text": {n: {**inp.sides[n], **info} for n, info in text_info.items()},
           "vision": vision_info,
           "alignment": _align(cfg, text["wit1024"], vision["wit1024"][0], collapsed,
                               alt["wit1024"]),
           "sts": sts_out, "flickr": flickr_out,
           "pair_free": pf_out, "pair_free_arms": pf_arms,
           "pair_free_images": images["facts"] if images else {},
           "classes": {n: {"n": len(c.labels), "n_classes": len(c.names)}
                       for n, c in (pf.classes.items() if pf else ())},
           "sts_arms": sts_arms}
    if cfg.coco:
        doc["coco"] = _coco_block(cfg, benches["coco"], text["coco"], alt["coco"],
                                  *vision["coco"])
    return doc


def main(argv: list[str]) -> int:
    """Score every text encoder of params.yaml's `wit1024` section against every vision encoder
    on WIT-1024 (and COCO, STS-B, Flickr30k when set); write the scores to --out. --check:
    check the section, the data and every tokenizer, and stop."""
    parser = stage_parser("reference", main.__doc__)
    parser.add_argument("--out", type=Path,
                        help="the scores JSON (runs/reference/wit1024.json); --check needs none")
    parser.add_argument("--check", action="store_true",
                        help="check the section, the paths, the data and every text model's "
                             "tokenizer on its texts; load no weights")
    args = parser.parse_args(argv)
    if args.out is None and not args.check:
        parser.error("--out is required (or --check)")
    from prh.coco import CocoError
    from prh.features import FeatureError
    from prh.sts import StsError
    from prh.wit import WitError

    try:
        inp = load_inputs(args.params)
    except (ContractError, WitError, CocoError, StsError, FeatureError, ValueError) as e:
        return fail(e)
    print(inputs_line(inp))
    if args.check:
        return 0
    try:
        doc = score_all(inp)
    except (FeatureError, ContractError) as e:
        return fail(e)
    write_reference(args.out, doc)
    return 0
