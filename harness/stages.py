"""The pipeline's stages as CLI calls (dvc.yaml runs each; paths are fixed here, knobs come
from params.yaml). Each stage reads the files of the stages before it and writes its own
outputs atomically, so an interrupted stage leaves nothing DVC or the next stage would take as
complete (docs/contracts.md lists every file).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from prh.io import (
    ContractError,
    atomic_dir,
    check_same_ids,
    load_embeddings,
    read_json,
    save_embeddings,
    write_json,
)

from .params import Params, load_params

RUNS = Path("runs")
IMAGE_DIR = RUNS / "image"
TEXT_DIR = RUNS / "text"
ALIGN_DIR = RUNS / "align"
WORK_DIR = RUNS / ".work"  # resumable checkpoints, outside DVC's outputs
TRAIN_SECTIONS = ("data", "image", "train")  # what a trained text encoder depends on
FLICKR_HELP = """\
The flickr30k profile needs your own copy of Flickr30k and of the DINOv2 weights:
  data/flickr30k/raw/dataset.json      Karpathy split (dataset_flickr30k.json from
                                       https://cs.stanford.edu/people/karpathy/deepimagesent/)
  data/flickr30k/raw/images/           the 31,783 JPEGs (flickr30k-images, from the
                                       Flickr30k authors' request form)
  data/flickr30k/raw/weights/dinov2_vitb14.pth   DINOv2 ViT-B/14 state dict for timm's
                                       vit_base_patch14_dinov2 (download on a machine with
                                       internet, e.g. timm's hub weights, and copy it here)
Then track them: `dvc add data/flickr30k/raw` and run `harness run` again."""


def raw_dir(profile: str) -> Path:
    return Path("data") / profile / "raw"


def prepared_dir(profile: str) -> Path:
    return Path("data") / profile / "prepared"


def run_name(arm: str, seed: int) -> str:
    return f"{arm}-s{seed}"


def _parser(prog: str, doc: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"harness {prog}", description=doc)
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    return parser


def _fail(err: Exception) -> int:
    print(f"error: {err}", file=sys.stderr)
    return 2


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def missing_inputs(params: Params) -> list[str]:
    """Every path the profile needs that is not there (the world profile generates its own)."""
    if params.profile == "world":
        return []
    raw = raw_dir(params.profile)
    weights = Path(params.image_config().weights or raw / "weights" / "dinov2_vitb14.pth")
    needed = [raw / "dataset.json", raw / "images", weights]
    return [str(p) for p in needed if not p.exists()]


def preflight(params_path: Path) -> Params:
    """Validate params.yaml and the profile's inputs before anything runs."""
    params = load_params(params_path)
    missing = missing_inputs(params)
    if missing:
        raise ContractError("missing input(s) for the flickr30k profile:\n  "
                            + "\n  ".join(missing) + "\n\n" + FLICKR_HELP)
    return params


# --- world and prepare -----------------------------------------------------------------------

def world_cli(argv: list[str]) -> int:
    """First stage: check params.yaml and the profile's inputs (listing every missing file),
    then generate the embedded world data set into data/world/raw."""
    from prh.world import write_world

    args = _parser("world", world_cli.__doc__).parse_args(argv)
    try:  # the pipeline's first stage: every profile's inputs are checked here, once
        params = preflight(args.params)
        world = params.world_config() if params.profile == "world" else None
    except ContractError as e:
        return _fail(e)
    if world is None:  # the stage still exists under flickr30k: build the world's default
        from prh.world import WorldConfig
        world = WorldConfig()
    with atomic_dir(raw_dir("world")) as tmp:
        summary = write_world(world, tmp)
    print(f"world: {summary}")
    return 0


def data_cli(argv: list[str]) -> int:
    """Validate the profile's caption file and train the WordPiece tokenizer on its train split."""
    from prh.data import load_karpathy
    from prh.tokenizer import train_tokenizer

    args = _parser("data", data_cli.__doc__).parse_args(argv)
    try:
        params = preflight(args.params)
        corpus = load_karpathy(raw_dir(params.profile) / "dataset.json", min_captions=1)
    except ContractError as e:
        return _fail(e)
    train = corpus.split("train")
    if not train or not corpus.split("val") or not corpus.split("test"):
        return _fail(ContractError(f"{corpus.path}: needs photos in the train, val and test "
                                   "splits (Karpathy format)"))
    tokenizer = train_tokenizer((c for p in train for c in p.captions),
                                params.sections["data"]["vocab_size"])
    try:  # views must fit the captions: checked here, before any image or text training
        check_views_fit(params, train, tokenizer, corpus.path)
    except ContractError as e:
        return _fail(e)
    with atomic_dir(prepared_dir(params.profile)) as tmp:
        tokenizer.save(tmp / "tokenizer")
        write_json(tmp / "summary.json", {
            "dataset": corpus.name, "data_hash": file_hash(corpus.path),
            "splits": {s: len(corpus.split(s)) for s in ("train", "val", "test")},
            "vocab_size": tokenizer.vocab_size})
    print(f"data: {len(train)} training photos, vocabulary {tokenizer.vocab_size}")
    return 0


def check_views_fit(params: Params, photos: list[Any], tokenizer: Any, path: Path) -> None:
    """Refuse a train.max_len that would cut more than 1% of the training captions."""
    from prh.batches import tokenize_captions
    from prh.train_config import view_config
    from prh.views import check_fits

    cfg = params.train_config(params.arms[0], params.seeds[0])
    lengths = [len(ids) for ids in tokenize_captions(photos, tokenizer).values()]
    try:
        check_fits(view_config(cfg, tokenizer), lengths, where=f"{path} (training captions)")
    except ValueError as e:
        raise ContractError(f"{e} ({params.profile}.train.max_len in {params.path})") from e


# --- image embeddings ------------------------------------------------------------------------

def image_cli(argv: list[str]) -> int:
    """Image embeddings of the fit (val) and test photos: the world's small bad-view image
    JEPA trained on the training images, or frozen DINOv2 ViT-B/14 for flickr30k."""
    from prh import image
    from prh.data import load_karpathy

    args = _parser("image", image_cli.__doc__).parse_args(argv)
    try:
        params = preflight(args.params)
        cfg = params.image_config()
        raw = raw_dir(params.profile)
        corpus = load_karpathy(raw / "dataset.json", min_captions=1)
    except ContractError as e:
        return _fail(e)
    with atomic_dir(IMAGE_DIR) as tmp:
        if cfg.encoder == "world_cnn":
            paths = [raw / "images" / p.filename for p in corpus.split("train")]
            # one frozen image encoder for every text run, as DINOv2 is (seed 0, assumed)
            model = image.train_world_image_encoder(paths, cfg, 0, tmp / "encoder.pt")
        else:
            model = image.build_dinov2(Path(cfg.weights), img_size=cfg.image_size)
        for split in ("val", "test"):
            photos = corpus.split(split)
            emb = image.embed_images(model, [raw / "images" / p.filename for p in photos],
                                     image_size=cfg.image_size, mean=cfg.mean, std=cfg.std,
                                     batch_size=cfg.embed_batch_size, progress=None)
            save_embeddings(tmp / f"{split}.npz", [p.id for p in photos], emb,
                            meta={"encoder": cfg.encoder, "config": cfg.to_dict(),
                                  "params_hash": params.hash})
    print(f"image: embedded val and test with {cfg.encoder}")
    return 0


# --- text encoders ---------------------------------------------------------------------------

def _arm_seed_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    parser = _parser(prog, doc)
    parser.add_argument("--arm", required=True, choices=["good", "bad", "ntp"])
    parser.add_argument("--seed", required=True, type=int)
    return parser


def eval_captions(photos: list[Any]) -> list[str]:
    """The evaluation caption of a photo: its first sentence (assumed by us)."""
    return [p.captions[0] for p in photos]


def make_eval_hook(photos_fit: list[Any], photos_test: list[Any]):
    """Per-epoch R@1 on the fit and test pairs (the rerun article's epoch curves)."""
    from prh.align import fit_and_recall

    ids_fit, img_fit, _ = load_embeddings(IMAGE_DIR / "val.npz")
    ids_test, img_test, _ = load_embeddings(IMAGE_DIR / "test.npz")
    check_same_ids(ids_fit, np.array([p.id for p in photos_fit]), "runs/image/val.npz",
                   "dataset.json val split")
    check_same_ids(ids_test, np.array([p.id for p in photos_test]), "runs/image/test.npz",
                   "dataset.json test split")
    fit_texts, test_texts = eval_captions(photos_fit), eval_captions(photos_test)

    def hook(epoch: int, encode) -> dict[str, float]:
        r1_test, r1_fit = fit_and_recall(img_fit, encode(fit_texts), img_test,
                                         encode(test_texts))
        return {"r_at_1_test": float(r1_test), "r_at_1_fit": float(r1_fit)}

    return hook


def train_cli(argv: list[str]) -> int:
    """Train one text arm for one seed (tracked in MLflow), then embed the fit/test captions."""
    from prh.data import load_karpathy
    from prh.encode_text import load_text_encoder
    from prh.losses import effective_sigreg_weight
    from prh.tokenizer import Tokenizer
    from prh.train import train_text_encoder
    from prh.train_config import encoder_config, resolved_lamb, run_identity

    from . import tracking
    from .fingerprint import environment_fingerprint
    from .params import flatten

    args = _arm_seed_parser("train", train_cli.__doc__).parse_args(argv)
    try:
        params = preflight(args.params)
        cfg = params.train_config(args.arm, args.seed)
        corpus = load_karpathy(raw_dir(params.profile) / "dataset.json", min_captions=1)
        tokenizer = Tokenizer.load(prepared_dir(params.profile) / "tokenizer")
    except ContractError as e:
        return _fail(e)
    name = run_name(args.arm, args.seed)
    cfg_hash = run_identity(cfg, encoder_config(cfg, tokenizer))[:12]  # speed settings aside
    work = WORK_DIR / f"{name}-{cfg_hash}"
    data_hash = file_hash(corpus.path)
    fit, test = corpus.split("val"), corpus.split("test")
    world = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun sets it; 1 otherwise
    lamb = resolved_lamb(cfg, world) if args.arm != "ntp" else None
    eff = (effective_sigreg_weight(lamb, cfg.batch_size, cfg.n_views(), world)
           if lamb is not None else None)
    env = environment_fingerprint()
    tags = {"arm": args.arm, "seed": args.seed, "profile": params.profile,
            "dvc_stage": f"train@{args.arm}-{args.seed}", "params_hash": params.hash,
            "data_hash": data_hash, "config_hash": cfg_hash,
            "lamb_used": lamb, "effective_sigreg_weight": eff, **tracking.git_state(),
            **{f"env.{k}": v for k, v in env.items()}}
    if int(os.environ.get("RANK", "0")) > 0:  # torchrun: rank 0 tracks and writes outputs
        train_text_encoder(cfg, corpus.split("train"), tokenizer, work)
        return 0
    with tracking.tracked_run(name, flatten(cfg), tags) as run:
        train_text_encoder(cfg, corpus.split("train"), tokenizer, work,
                           eval_hook=make_eval_hook(fit, test),
                           on_epoch=lambda epoch, m: tracking.log_epoch(m, epoch))
        encode = load_text_encoder(work)
        with atomic_dir(TEXT_DIR / name) as tmp:
            for split, photos in (("val", fit), ("test", test)):
                save_embeddings(tmp / f"{split}.npz", [p.id for p in photos],
                                encode(eval_captions(photos)),
                                meta={"arm": args.arm, "seed": args.seed})
            for item in ("checkpoint.pt", "curve.json", "config.json"):
                shutil.copy2(work / item, tmp / item)
            write_json(tmp / "run.json", {"arm": args.arm, "seed": args.seed,
                                          "profile": params.profile,
                                          "mlflow_run_id": run.info.run_id,
                                          "train_hash": params.section_hash(*TRAIN_SECTIONS),
                                          "data_hash": data_hash,
                                          "config_hash": cfg_hash,
                                          "effective_sigreg_weight": eff,
                                          "environment": env,
                                          **tracking.git_state()})
    shutil.rmtree(work, ignore_errors=True)
    print(f"train: {name} done (MLflow run {run.info.run_id})")
    return 0


# --- alignment and scores --------------------------------------------------------------------

def align_cli(argv: list[str]) -> int:
    """Fit Procrustes on the fit pairs, score the test pairs with bootstrap intervals, controls
    and the fit-size curve; add the final scores to the run's MLflow record."""
    from prh.align import score_alignment

    from .stats import bootstrap_ci

    args = _arm_seed_parser("align", align_cli.__doc__).parse_args(argv)
    name = run_name(args.arm, args.seed)
    try:
        params = preflight(args.params)
        ev = params.eval_config()
        run = read_json(TEXT_DIR / name / "run.json")
        if run["train_hash"] != params.section_hash(*TRAIN_SECTIONS):
            raise ContractError(f"{TEXT_DIR / name / 'run.json'}: trained with params hash "
                                f"{run['train_hash']}, params.yaml now gives "
                                f"{params.section_hash(*TRAIN_SECTIONS)}; rerun the pipeline "
                                "(`dvc repro`)")
        emb = {}
        for side, folder in (("img", IMAGE_DIR), ("txt", TEXT_DIR / name)):
            for split in ("val", "test"):
                emb[side, split] = load_embeddings(folder / f"{split}.npz")[:2]
        for split in ("val", "test"):
            check_same_ids(emb["img", split][0], emb["txt", split][0],
                           str(IMAGE_DIR / f"{split}.npz"), str(TEXT_DIR / name / f"{split}.npz"))
    except ContractError as e:
        return _fail(e)
    scores = score_alignment(emb["img", "val"][1], emb["txt", "val"][1], emb["img", "test"][1],
                             emb["txt", "test"][1], k=ev.k, seed=args.seed,
                             fit_sizes=ev.fit_sizes)
    metrics: dict[str, Any] = {name_: {"value": float(v)} for name_, v in scores.metrics.items()}
    for metric, outcomes in scores.per_query.items():
        key = metric.removesuffix("_hit")
        ci = bootstrap_ci(outcomes, level=ev.ci_level, n_resamples=ev.n_resamples,
                          seed=ev.bootstrap_seed)
        metrics[key] = {"value": float(np.mean(outcomes)), **ci.to_dict(),
                        "ci_method": f"{ci.method} (test pairs)"}
    curve = read_json(TEXT_DIR / name / "curve.json")
    out_json, out_npz = ALIGN_DIR / f"{name}.json", ALIGN_DIR / f"{name}.npz"
    save_per_query(out_npz, emb["img", "test"][0], scores.per_query)
    write_json(out_json, {
        "schema": "prh.metrics/1",
        "run": {**{k: run[k] for k in ("arm", "seed", "profile", "mlflow_run_id", "train_hash",
                                       "data_hash", "git_commit", "git_dirty")},
                "params_hash": params.hash},
        "environment": run.get("environment", {}),
        "metrics": metrics, "fit_size_curve": scores.fit_size_curve,
        "curve": curve, "effective_sigreg_weight": run.get("effective_sigreg_weight"),
        "per_query": out_npz.name})
    _log_final(run["mlflow_run_id"], metrics)
    print(f"align: {name} R@1 {metrics['r_at_1']['value']:.3f} "
          f"[{metrics['r_at_1']['ci'][0]:.3f}, {metrics['r_at_1']['ci'][1]:.3f}]")
    return 0


def save_per_query(path: Path, ids: np.ndarray, per_query: dict[str, np.ndarray]) -> None:
    from prh.io import atomic_path

    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, ids=ids, **{k: np.asarray(v, dtype=np.float64) for k, v in per_query.items()})


def _log_final(run_id: str, metrics: dict[str, Any]) -> None:
    import mlflow

    from . import tracking

    mlflow.set_tracking_uri(tracking.tracking_uri())
    client = mlflow.MlflowClient()
    for key, m in metrics.items():
        client.log_metric(run_id, f"final.{key}", m["value"])
        if "ci" in m:
            client.log_metric(run_id, f"final.{key}.ci_lo", m["ci"][0])
            client.log_metric(run_id, f"final.{key}.ci_hi", m["ci"][1])


# --- theory ----------------------------------------------------------------------------------

def theory_cli(argv: list[str]) -> int:
    """The theory checks: the good/bad-view threshold grid and the Theorem 3 bound."""
    from prh.theory import run_bound_check, run_grid

    args = _parser("theory", theory_cli.__doc__).parse_args(argv)
    try:
        cfg = load_params(args.params).theory_config()
    except ContractError as e:
        return _fail(e)
    grid = run_grid(n_worlds=cfg.n_worlds, n_states=cfg.n_states, k=cfg.k,
                    n_points=cfg.n_points, seed=cfg.seed)
    bound = run_bound_check(n_worlds=cfg.bound_worlds, seed=cfg.seed)
    write_json(RUNS / "theory.json", {"schema": "prh.theory/1", "grid": grid, "bound": bound})
    print(f"theory: grid {grid.get('n_points', '?')} points, bound on {cfg.bound_worlds} worlds")
    return 0


# --- aggregate -------------------------------------------------------------------------------

def load_per_query(name: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    path = ALIGN_DIR / f"{name}.npz"
    if not path.exists():
        raise ContractError(f"{path}: missing; run `dvc repro` (stage align@{name})")
    with np.load(path, allow_pickle=False) as z:
        return z["ids"].astype(str), {k: z[k] for k in z.files if k != "ids"}


def aggregate_cli(argv: list[str]) -> int:
    """Every run's scores: per-arm seed spread, intervals over test pairs of the seed-mean
    outcome, and paired intervals on the gaps between arms (same test pairs)."""
    from .stats import bootstrap_ci, paired_bootstrap_diff, seed_spread

    args = _parser("aggregate", aggregate_cli.__doc__).parse_args(argv)
    try:
        params = load_params(args.params)
        ev = params.eval_config()
        runs, per_query, ids_ref = {}, {}, None
        for arm, seed in itertools.product(params.arms, params.seeds):
            name = run_name(arm, seed)
            runs[arm, seed] = read_json(ALIGN_DIR / f"{name}.json")
            if runs[arm, seed]["run"]["params_hash"] != params.hash:
                raise ContractError(f"{ALIGN_DIR / name}.json: params hash "
                                    f"{runs[arm, seed]['run']['params_hash']} differs from "
                                    f"params.yaml's {params.hash}; rerun `dvc repro`")
            ids, per_query[arm, seed] = load_per_query(name)
            if ids_ref is None:
                ids_ref = ids
            check_same_ids(ids_ref, ids, "first run's test ids", f"{name}.npz test ids")
    except ContractError as e:
        return _fail(e)
    boot = {"level": ev.ci_level, "n_resamples": ev.n_resamples, "seed": ev.bootstrap_seed}
    metric_names = list(per_query[params.arms[0], params.seeds[0]])
    seed_mean = {(arm, m): np.mean([per_query[arm, s][m] for s in params.seeds], axis=0)
                 for arm in params.arms for m in metric_names}
    arms: dict[str, Any] = {}
    for arm in params.arms:
        arms[arm] = {"seeds": list(params.seeds), "metrics": {}}
        for m in metric_names:
            key = m.removesuffix("_hit")
            spread = seed_spread({str(s): float(np.mean(per_query[arm, s][m]))
                                  for s in params.seeds})
            ci = bootstrap_ci(seed_mean[arm, m], **boot)
            arms[arm]["metrics"][key] = {**spread, **ci.to_dict(),
                                         "ci_method": f"{ci.method} (test pairs; per-pair "
                                                      "outcome averaged over seeds)"}
        arms[arm]["controls"] = {}
        for extra in ("r_at_1_fit", "control_random_map_r_at_1", "control_shuffled_r_at_1",
                      "chance_r_at_1", f"chance_mknn{ev.k}"):
            values = {str(s): runs[arm, s]["metrics"].get(extra, {}).get("value")
                      for s in params.seeds}
            if all(v is not None for v in values.values()):
                block = "metrics" if extra == "r_at_1_fit" else "controls"
                arms[arm][block][extra] = seed_spread(values)
    gaps = []
    for a, b in itertools.combinations(params.arms, 2):
        for m in metric_names:
            diff, ci = paired_bootstrap_diff(seed_mean[a, m], seed_mean[b, m], **boot)
            gaps.append({"a": a, "b": b, "metric": m.removesuffix("_hit"), "diff": float(diff),
                         **ci.to_dict(), "ci_method": f"{ci.method} (per-pair outcome "
                                                     "averaged over seeds)"})
    summary = read_json(prepared_dir(params.profile) / "summary.json")
    write_json(RUNS / "results.json", {
        "schema": "prh.results/1", "profile": params.profile, "params_hash": params.hash,
        "data_hash": summary["data_hash"], "n_test": int(len(ids_ref)), "arms": arms,
        "gaps": gaps, "runs": [str(ALIGN_DIR / f"{run_name(a, s)}.json")
                               for a, s in itertools.product(params.arms, params.seeds)]})
    for arm in params.arms:
        r1 = arms[arm]["metrics"]["r_at_1"]
        print(f"aggregate: {arm:<4} R@1 mean {r1['mean']:.3f} over seeds {list(params.seeds)}")
    return 0


# --- the main job ----------------------------------------------------------------------------

def run_cli(argv: list[str]) -> int:
    """Validate params.yaml and the profile's inputs, then `dvc repro` the whole pipeline."""
    import subprocess

    parser = _parser("run", run_cli.__doc__)
    parser.add_argument("dvc_args", nargs="*", help="extra arguments for `dvc repro`")
    args = parser.parse_args(argv)
    try:
        params = preflight(args.params)
    except ContractError as e:
        return _fail(e)
    if not Path(".dvc").exists():
        subprocess.run(["dvc", "init", "-q"] + ([] if Path(".git").exists() else ["--no-scm"]),
                       check=True)
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    code = subprocess.run(["dvc", "repro", *args.dvc_args], env=env).returncode
    if code == 0:
        print(f"\nprofile {params.profile}: reports/audit.html and reports/audit.pdf are ready; "
              "`mlflow ui --backend-store-uri sqlite:///mlflow.db` shows the runs")
    return code
