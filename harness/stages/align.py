"""Stage `align@ARM-SEED`: fit Procrustes on the fit pairs, score the test pairs with bootstrap
intervals over test pairs, controls and the fit-size curve, and a second map fitted on the
train + val pairs; add the final scores to the run's MLflow record."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.params import load_params
from harness.records.armtrain import read_arm_train
from harness.records.runfile import run_name
from harness.records.schemas import RUN
from harness.stages.common import add_run_args, fail, stage_parser
from prh.config import CURVE_FIT, CURVE_TEST
from prh.io import ContractError, load_embeddings, read_json, write_json
from prh.pairfree import score_pairfree


def pair_free_scores(image_dir: Path, text_dir: Path, ev: Any, params_path: Path,
                     test: tuple[np.ndarray, np.ndarray, np.ndarray],
                     test_captions: tuple[np.ndarray, np.ndarray], seed: int) -> dict[str, Any]:
    """A map fitted on the first `ev.pairfree_pool` photos of the two unpaired pools
    (prh.pairfree, aligner `ev.pairfree`), scored on the test pairs (ids, image rows, first
    captions; and every test caption's row with its photo row), every side prepared by
    `ev.pairfree_inputs` (prh.align.item_rows); {} when the pool is 0. ContractError for
    pools too small, sharing a photo or holding a test photo."""
    from prh.align import check_disjoint, item_rows
    from prh.gallery import caption_photos

    pool = ev.pairfree_pool
    if pool == 0:
        return {}
    paths = (image_dir / "pool_images.npz", text_dir / "pool_texts.npz")
    (ids_img, pool_img, _), (cap_ids, pool_txt, _) = map(load_embeddings, paths)
    try:
        ids_txt, counts = caption_photos(cap_ids)
    except ValueError as e:
        raise ContractError(f"{paths[1]}: {e}; rerun `dvc repro` (the train stage writes every "
                            "caption of the pool photos)") from e
    for path, ids in zip(paths, (ids_img, ids_txt), strict=True):
        if len(ids) < pool:
            raise ContractError(f"{path}: {len(ids)} photos, eval.pairfree_pool asks for "
                                f"{pool}; lower it in {params_path} (at most half the train "
                                "photos)")
        check_disjoint(ids, test[0], str(path), str(image_dir / "test.npz"))
    shared = sorted(set(map(str, ids_img[:pool])) & set(map(str, ids_txt[:pool])))
    if shared:
        raise ContractError(f"{paths[0]} and {paths[1]} share {len(shared)} photos, first "
                            f"{shared[:10]}: the pair-free pools must hold different photos; "
                            "rerun `dvc repro`")
    how = ev.pairfree_inputs
    try:
        pool_img, pool_txt = item_rows(pool_img[:pool], pool_txt[:counts[:pool].sum()],
                                       counts[:pool], how)
        test_img, test_txt = ((test[1], test[2]) if how == "first-caption" else item_rows(
            test[1], test_captions[0], np.bincount(test_captions[1], minlength=len(test[0])),
            how))
        return {**score_pairfree(pool_img, pool_txt, test_img, test_txt, seed=seed,
                                 cfg=ev.pairfree), "inputs": how}
    except ValueError as e:
        raise ContractError(f"{paths[0]} against {paths[1]}: {e}") from e


def trainval_hits(image_dir: Path, text_dir: Path, img_fit: np.ndarray, txt_fit: np.ndarray,
                  ids_test: np.ndarray, img_test: np.ndarray, txt_test: np.ndarray
                  ) -> tuple[np.ndarray, dict[str, Any]]:
    """Per-test-pair R@1 hits of a map fitted on every train pair and the fit pairs (the
    paper's "all 30,000 Flickr train and validation pairs": 29,000 + 1,014 on Flickr30k), and
    what it was fitted on. A train pair is a photo and its evaluation caption (the first), as
    the fit and test pairs are, so this map differs from the main one only in its pairs.
    Scored as the main map is (prh.align.image_to_text_recall: cosine, ties against).
    ContractError when a train row is a test photo."""
    from prh.align import check_disjoint, fit_procrustes, image_to_text_recall, load_split

    img_path, txt_path = image_dir / "train.npz", text_dir / "train_texts.npz"
    ids_train, img_train, txt_train = load_split(str(img_path), str(txt_path))
    check_disjoint(ids_train, ids_test, str(img_path), str(image_dir / "test.npz"))
    pmap = fit_procrustes(np.concatenate([img_train, img_fit]),
                          np.concatenate([txt_train, txt_fit]))
    return image_to_text_recall(pmap, img_test, txt_test)[1], {
        "n_train": len(ids_train), "n_val": len(img_fit),
        "n_pairs": len(ids_train) + len(img_fit),
        "pairs": "every train photo with its first caption, then the fit (val) pairs"}


@dataclass
class Inputs:
    """What one align run reads, checked: params, the train stage's run.json, the fit (val)
    and test pairs, and the params hash its scores depend on (Params.arm_hash: next-token's
    without the keys it does not read)."""

    params: Any
    ev: Any
    run: dict[str, Any]
    fit: tuple[np.ndarray, np.ndarray, np.ndarray]  # ids, image and text embeddings
    test: tuple[np.ndarray, np.ndarray, np.ndarray]
    params_hash: str


def load_inputs(args: argparse.Namespace) -> Inputs:
    """Params, run.json (trained under these params) and the two splits, their ids disjoint and
    their sizes enough for eval's k and fit sizes, before any scoring. ContractError."""
    from prh.align import check_disjoint, check_scoring_sizes, load_split

    if args.per_query.parent.resolve() != args.out.parent.resolve():
        raise ContractError(f"--per-query {args.per_query} must sit beside --out {args.out}: "
                            "the run file names it by file name")
    params = load_params(args.params)
    ev = params.eval_config()
    run = read_json(args.text / "run.json")
    train = read_arm_train(args.config, params, args.arm)
    if run["train_hash"] != (want := params.train_hash(args.arm, train)):
        raise ContractError(f"{args.text / 'run.json'}: trained with params hash "
                            f"{run['train_hash']}, params.yaml now gives {want}; rerun the "
                            "pipeline (`harness run`)")
    fit, test = (load_split(str(args.image / f"{split}.npz"), str(args.text / f"{split}.npz"))
                 for split in ("val", "test"))
    check_disjoint(fit[0], test[0], str(args.image / "val.npz"), str(args.image / "test.npz"))
    check_scoring_sizes(ev.k, ev.fit_sizes, len(fit[0]), len(test[0]),
                        str(args.image / "val.npz"), str(args.image / "test.npz"))
    return Inputs(params, ev, run, fit, test, params.arm_hash(args.arm, train))


def score(args: argparse.Namespace, inp: Inputs) -> dict[str, Any]:
    """Every score of the run file: the main map's metrics and per-pair outcomes (with
    intervals over test pairs), against all captions and as the pool grows, the pair-free map
    and the train + val map. ContractError for inputs the metrics cannot score."""
    from harness.records import names
    from harness.stats.estimators import bootstrap_ci
    from prh.align import score_alignment
    from prh.gallery import gallery_curve, photo_index, score_captions

    ev, (_, img_fit, txt_fit), (ids_test, img_test, txt_test) = inp.ev, inp.fit, inp.test
    try:  # the metrics refuse inputs they cannot score (e.g. unbiased CKA on too few rows)
        scores = score_alignment(img_fit, txt_fit, img_test, txt_test, k=ev.k, seed=args.seed,
                                 fit_sizes=ev.fit_sizes, n_permutations=ev.n_permutations)
    except ValueError as e:
        raise ContractError(f"{args.image / 'test.npz'} against {args.text / 'test.npz'}: "
                            f"{e}") from e
    captions = args.text / "test_captions.npz"  # every caption of each test photo
    try:  # the same map against all captions, and as the pool grows (prh.gallery)
        cap_ids, txt_all, _ = load_embeddings(captions)
        photo = photo_index(cap_ids, ids_test)
        scores.per_query.update(score_captions(scores.pmap, img_test, txt_all, photo, ev.k))
        gallery = gallery_curve(scores.pmap, img_test, txt_test, txt_all, photo, k=ev.k,
                                sizes=ev.gallery_sizes, draws=ev.gallery_draws,
                                seed=ev.bootstrap_seed, whole=scores.per_query)
    except ContractError:
        raise
    except ValueError as e:
        raise ContractError(f"{captions} against {args.image / 'test.npz'}: {e}; rerun "
                            f"`dvc repro train@{args.arm}-{args.seed}`") from e
    pair_free = pair_free_scores(args.image, args.text, ev, args.params, inp.test,
                                 (txt_all, photo), args.seed)
    scores.per_query["r_at_1_trainval_hit"], trainval = trainval_hits(
        args.image, args.text, img_fit, txt_fit, ids_test, img_test, txt_test)
    metrics: dict[str, Any] = {key: {"value": float(v)} for key, v in scores.metrics.items()}
    for outcome, values in scores.per_query.items():
        ci = bootstrap_ci(values, level=ev.ci_level, n_resamples=ev.n_resamples,
                          seed=ev.bootstrap_seed)
        metrics[names.metric_of(outcome)] = {"value": float(np.mean(values)), **ci.to_dict(),
                                             "ci_method": f"{ci.method} (test pairs)"}
    return {"metrics": metrics, "calibrated": scores.calibrated,
            "fit_size_curve": scores.fit_size_curve, "gallery_curve": gallery,
            "pair_free": pair_free, "trainval_map": trainval, "per_query": scores.per_query}


def write_outputs(args: argparse.Namespace, inp: Inputs, scored: dict[str, Any]) -> None:
    """The per-query file, the run file (schema prh.metrics/2) and DVC's flat views."""
    from harness.records.flat import curve_rows, run_metrics
    from harness.records.perquery import write_per_query

    run, curve = inp.run, read_json(args.text / "curve.json")
    write_per_query(args.per_query, inp.test[0], scored["per_query"])
    write_json(args.out, {
        "schema": str(RUN),
        "run": {**{k: run[k] for k in ("arm", "seed", "profile", "mlflow_run_id", "train_hash",
                                       "data_hash", "git_commit", "git_dirty")},
                "params_hash": inp.params_hash},
        "environment": run.get("environment", {}),
        **{k: v for k, v in scored.items() if k != "per_query"}, "curve": curve,
        "effective_sigreg_weight": run.get("effective_sigreg_weight"),
        "k": inp.ev.k, "per_query": args.per_query.name})
    if args.metrics is not None:
        write_json(args.metrics, run_metrics(scored["metrics"], inp.ev.k))
    if args.plots is not None:
        write_json(args.plots / "epochs.json",
                   curve_rows(curve, ("epoch", CURVE_TEST, CURVE_FIT)))
        write_json(args.plots / "fit_size.json",
                   curve_rows(scored["fit_size_curve"], ("n_fit", "r_at_1")))


def main(argv: list[str]) -> int:
    """Align the text embeddings of --text to the image embeddings of --image; write the scores
    to --out (JSON) and the per-pair outcomes to --per-query (.npz, beside it)."""
    parser = add_run_args(stage_parser("align", main.__doc__))
    parser.add_argument("--image", type=Path, required=True, help="image stage's folder")
    parser.add_argument("--text", type=Path, required=True, help="this run's text folder")
    parser.add_argument("--config", type=Path, required=True,
                        help="the config stage's train section for --arm (runs/config/ARM.json)")
    parser.add_argument("--out", type=Path, required=True, help="scores, ARM-sSEED.json")
    parser.add_argument("--per-query", type=Path, required=True,
                        help="per-pair outcomes, ARM-sSEED.npz, beside --out")
    parser.add_argument("--metrics", type=Path, default=None,
                        help="the scores as a small flat JSON for `dvc metrics show`")
    parser.add_argument("--plots", type=Path, default=None,
                        help="folder for the epoch and fit-size curves as `dvc plots` files")
    args = parser.parse_args(argv)
    from harness.tracking import mlflow_runs as tracking  # after parsing: `--help` at once

    try:
        inp = load_inputs(args)
        scored = score(args, inp)
    except ContractError as e:
        return fail(e)
    write_outputs(args, inp, scored)
    tracking.log_final(inp.run["mlflow_run_id"], scored["metrics"], scored["calibrated"],
                       scored["pair_free"])
    r1 = scored["metrics"]["r_at_1"]
    print(f"align: {run_name(args.arm, args.seed)} R@1 {r1['value']:.3f}, {inp.ev.ci_level:.0%} "
          f"interval over test pairs [{r1['ci'][0]:.3f}, {r1['ci'][1]:.3f}]")
    return 0
